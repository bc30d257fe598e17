// Callback registrations of the tenant (signed webhooks to agents' URLs): state, failures,
// the next attempt, the last error, and each registration's recent deliveries. Registrations
// the delivery worker disabled (failing past the server's bound) come first, with the reason
// and a re-enable action.

import { api } from "./api.js";
import { el, replace, toast } from "./dom.js";
import { ago, count, plural, time } from "./format.js";
import { confirmAction } from "./dialogs.js";
import { agentLink, button, errorBox, pageHeader } from "./widgets.js";

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

function registration(r, onEnable) {
  const failing = (r.consecutive_failures ?? 0) > 0;
  const disabled = Boolean(r.disabled_at_utc);
  const status = disabled ? "disabled" : r.status;
  return el("section", { class: `panel registration${disabled ? " disabled" : ""}`, "data-registration": r.registration_id },
    el("div", { class: "registration-head" },
      el("div", {},
        el("h2", {}, el("span", { class: "mono" }, r.callback_url)),
        el("p", { class: "subtitle" }, "for ", agentLink(r.recipient_id), " · ", el("span", { class: "mono" }, r.registration_id))),
      el("div", { class: "registration-actions" },
        el("span", { class: `badge callback-${status}` }, status.replaceAll("_", " ")),
        disabled ? button("Re-enable", () => onEnable(r), { kind: "primary", action: "enable-callback" }) : null)),
    disabled
      ? el("div", { class: "problem disabled-reason" },
        el("code", {}, "disabled"), ` ${ago(r.disabled_at_utc)}: `, r.disabled_reason ?? "",
        el("p", { class: "muted" }, "Nothing is delivered until it is re-enabled; the agent still finds its events by polling."))
      : null,
    el("div", { class: "facts" },
      fact("Delivered up to", count(r.delivered_head_seq)),
      fact("Failed in a row", count(r.consecutive_failures ?? 0), failing ? "bad" : ""),
      fact("Failing since", r.failing_since_utc ? ago(r.failing_since_utc) : "—", failing ? "bad" : ""),
      fact("Next attempt", nextAttempt(r)),
      fact("Verified", r.verified_at_utc ? ago(r.verified_at_utc) : "not yet"),
      fact("Rate limit", `${count(r.max_rate_per_minute)}/min`)),
    r.last_error ? el("div", { class: "problem" }, el("code", {}, "last error"), " ", r.last_error) : null,
    el("h3", {}, "Recent deliveries"),
    deliveries(r.recent_deliveries));
}

/** Only an active, enabled registration is delivered to; a time already past means "when there is news". */
function nextAttempt(r) {
  if (r.status !== "active" || r.disabled_at_utc || !r.next_attempt_at_utc) return "—";
  return Date.parse(r.next_attempt_at_utc) <= Date.now() ? "on the next change" : time(r.next_attempt_at_utc);
}

function fact(label, value, kind = "") {
  return el("div", { class: `fact ${kind}`.trim() }, el("div", { class: "tile-label" }, label), el("div", {}, value));
}

/** Asks, then re-enables a disabled registration; its agent's current head is sent at once. */
async function enable(r, refresh) {
  const sure = await confirmAction({
    title: "Re-enable this callback?",
    message: `Deliveries to ${r.callback_url} start again with the agent's current head; its failure count starts over. If the receiver still fails, it is disabled again past the bound.`,
    confirm: "Re-enable",
  });
  if (!sure) return;
  try {
    await api(`callbacks/${encodeURIComponent(r.registration_id)}/enable`, { method: "POST", body: {} });
    toast("Callback re-enabled.", "ok");
  } catch (error) {
    if (error.status === 401) throw error;
    toast(error.message, "error");
  }
  await refresh();
}

export function mount(container) {
  let registrations = [];
  let failure = null;
  const render = () => {
    const disabled = registrations.filter((r) => r.disabled_at_utc);
    // Disabled first: they are what an operator has to act on.
    const ordered = [...disabled, ...registrations.filter((r) => !r.disabled_at_utc)];
    const subtitle = `${plural(registrations.length, "registration")} of signed webhooks`
      + (disabled.length ? ` · ${disabled.length} disabled` : "");
    replace(container,
      pageHeader("Callbacks", { subtitle }),
      failure ? errorBox(failure) : null,
      ordered.length
        ? ordered.map((r) => registration(r, (chosen) => enable(chosen, refresh)))
        : el("div", { class: "panel" }, el("p", { class: "muted" }, "No agent has registered a callback URL.")));
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
