// Callback registrations of the tenant (signed webhooks to agents' URLs): state, failures,
// the next attempt, the last error, and each registration's recent deliveries.

import { api } from "./api.js";
import { el, replace } from "./dom.js";
import { ago, count, plural, time } from "./format.js";
import { agentLink, errorBox, pageHeader } from "./widgets.js";

function deliveries(list) {
  if (!list?.length) return el("p", { class: "muted" }, "No deliveries yet.");
  return el("table", { class: "grid compact" },
    el("thead", {}, el("tr", {}, ["When", "Kind", "Head", "Attempt", "Outcome", "HTTP", "Time", "Error"].map((t) => el("th", { scope: "col" }, t)))),
    el("tbody", {}, list.map((d) => el("tr", {},
      el("td", { class: "nowrap" }, time(d.created_at_utc)),
      el("td", {}, d.kind),
      el("td", { class: "num" }, d.head_seq ?? "—"),
      el("td", { class: "num" }, d.attempt),
      el("td", {}, el("span", { class: `badge outcome-${d.outcome}` }, d.outcome.replaceAll("_", " "))),
      el("td", { class: "num" }, d.http_status ?? "—"),
      el("td", { class: "num" }, `${d.duration_ms} ms`),
      el("td", { class: "reason" }, d.error ?? "")))));
}

function registration(r) {
  const failing = (r.failed_attempts ?? 0) > 0;
  return el("section", { class: "panel registration" },
    el("div", { class: "registration-head" },
      el("div", {},
        el("h2", {}, el("span", { class: "mono" }, r.callback_url)),
        el("p", { class: "subtitle" }, "for ", agentLink(r.recipient_id), " · ", el("span", { class: "mono" }, r.registration_id))),
      el("span", { class: `badge callback-${r.status}` }, r.status.replaceAll("_", " "))),
    el("div", { class: "facts" },
      fact("Delivered up to", count(r.delivered_head_seq)),
      fact("Failed attempts", count(r.failed_attempts), failing ? "bad" : ""),
      fact("Next attempt", nextAttempt(r)),
      fact("Verified", r.verified_at_utc ? ago(r.verified_at_utc) : "not yet"),
      fact("Rate limit", `${count(r.max_rate_per_minute)}/min`)),
    r.last_error ? el("div", { class: "problem" }, el("code", {}, "last error"), " ", r.last_error) : null,
    el("h3", {}, "Recent deliveries"),
    deliveries(r.recent_deliveries));
}

/** Only an active registration is delivered to; a time already past means "when there is news". */
function nextAttempt(r) {
  if (r.status !== "active" || !r.next_attempt_at_utc) return "—";
  return Date.parse(r.next_attempt_at_utc) <= Date.now() ? "on the next change" : time(r.next_attempt_at_utc);
}

function fact(label, value, kind = "") {
  return el("div", { class: `fact ${kind}`.trim() }, el("div", { class: "tile-label" }, label), el("div", {}, value));
}

export function mount(container) {
  let registrations = [];
  let failure = null;
  const render = () => {
    replace(container,
      pageHeader("Callbacks", { subtitle: `${plural(registrations.length, "registration")} of signed webhooks` }),
      failure ? errorBox(failure) : null,
      registrations.length ? registrations.map(registration) : el("div", { class: "panel" }, el("p", { class: "muted" }, "No agent has registered a callback URL.")));
  };
  async function refresh() {
    try {
      const answer = await api("callbacks");
      registrations = answer.registrations ?? [];
      failure = null;
    } catch (error) {
      if (error.status === 401) throw error;
      failure = error;
    }
    render();
  }
  render();
  return { refresh };
}
