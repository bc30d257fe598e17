// The last hour at a glance: events published and acknowledged per minute, and the tenant's
// depth minute by minute, drawn from `/v1/admin/activity` (refreshed with every live change).

import { api } from "./api.js";
import { el, replace } from "./dom.js";
import { count } from "./format.js";
import { areaChart, barChart } from "./charts.js";
import { errorBox, pageHeader } from "./widgets.js";

const MINUTES = 60;

export function mount(container) {
  let minutes = null;
  let failure = null;
  const render = () => {
    // The panels' inner width: charts are drawn at it (and again when the window resizes).
    const width = Math.max(360, container.clientWidth - 34);
    const labels = (minutes ?? []).map((m) => m.minute_start_utc);
    const sum = (key) => (minutes ?? []).reduce((s, m) => s + (m[key] ?? 0), 0);
    replace(container,
      pageHeader("Activity", { subtitle: minutes ? `Last ${MINUTES} minutes: ${count(sum("published"))} published, ${count(sum("acked"))} acknowledged` : "Loading…" }),
      failure ? errorBox(failure) : null,
      minutes ? el("div", { class: "charts" },
        el("div", { class: "panel" }, barChart({
          title: "Events per minute",
          labels,
          width,
          series: [
            { name: "published", className: "series-published", values: minutes.map((m) => m.published ?? 0) },
            { name: "acknowledged", className: "series-acked", values: minutes.map((m) => m.acked ?? 0) },
          ],
        })),
        el("div", { class: "panel" }, areaChart({
          title: "Depth (events not yet acknowledged)",
          labels,
          width,
          series: [{ name: "depth", className: "series-depth", values: minutes.map((m) => m.depth ?? 0) }],
        }))) : null);
  };
  async function refresh() {
    try {
      const answer = await api("activity", { query: { minutes: MINUTES } });
      minutes = answer.minutes ?? [];
      failure = null;
    } catch (error) {
      if (error.status === 401) throw error;
      failure = error;
    }
    render();
  }
  let resizing = null;
  const resized = () => {
    clearTimeout(resizing);
    resizing = setTimeout(render, 100);
  };
  window.addEventListener("resize", resized);
  render();
  return { refresh, dispose: () => window.removeEventListener("resize", resized) };
}
