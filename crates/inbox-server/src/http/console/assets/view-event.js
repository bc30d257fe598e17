// One event: its envelope, its payload (pretty JSON, as text), and its history (every claim,
// acknowledgement, release, lease expiry, dead-lettering, quarantine and requeue, with who and
// why), with the actions its state allows.

import { api } from "./api.js";
import { el, replace } from "./dom.js";
import { APPLIES, LABELS, runAction } from "./actions.js";
import { time } from "./format.js";
import { agentLink, button, details, errorBox, pageHeader, stateBadge } from "./widgets.js";

const HISTORY_ACTIONS = {
  claimed: "claimed",
  acknowledged: "acknowledged",
  released: "released",
  lease_expired: "lease expired",
  dead_lettered: "dead-lettered",
  quarantined: "quarantined",
  requeued: "requeued",
  released_from_quarantine: "released from quarantine",
  expired: "expired",
};

/** The envelope's fields that have a value (an event has many optional ones). */
function envelope(e, archived) {
  const correlation = Object.entries(e.correlation ?? {}).filter(([, v]) => v !== null && v !== undefined);
  const rows = [
    ["Event id", el("span", { class: "mono" }, e.event_id)],
    ["Agent", agentLink(e.recipient_id)],
    ["Sequence", String(e.inbox_seq)],
    ["Type", e.event_type],
    ["Priority", e.priority],
    ["State", el("span", {}, stateBadge(e.ack_state), archived ? el("span", { class: "badge muted" }, "archived") : null)],
    ["Delivery attempts", String(e.delivery_attempts)],
    ["Reason", e.reason],
    ["Dead-letter state", e.dead_letter_state?.replaceAll("_", " ")],
    ["Session", e.session_id ? el("span", { class: "mono" }, e.session_id) : null],
    ["Created", time(e.created_at_utc)],
    ["Available at", time(e.availability_at_utc)],
    ["Lease until", e.visibility_lease_until_utc ? time(e.visibility_lease_until_utc) : null],
    ["Next retry", e.next_retry_at_utc ? time(e.next_retry_at_utc) : null],
    ["Expires", e.expires_at_utc ? time(e.expires_at_utc) : null],
    ["Finished", e.terminal_at_utc ? time(e.terminal_at_utc) : null],
    ["Deduplication key", e.deduplication_key ? el("span", { class: "mono" }, e.deduplication_key) : null],
    ["Correlation", correlation.length ? el("span", { class: "mono" }, correlation.map(([k, v]) => `${k}=${v}`).join("  ")) : null],
    ["Payload ref", e.payload_ref ? el("span", { class: "mono" }, `${e.payload_ref.kind}:${e.payload_ref.id}`) : null],
  ];
  return details(rows.filter(([, value]) => value !== null && value !== undefined && value !== "none"));
}

function payload(e) {
  if (e.payload === undefined || e.payload === null) {
    return el("p", { class: "muted" }, e.ack_state === "acked" ? "The payload was cleared when the event was acknowledged." : "No inline payload.");
  }
  return el("pre", { class: "payload" }, JSON.stringify(e.payload, null, 2));
}

function history(entries) {
  if (!entries.length) return el("p", { class: "muted" }, "Nothing recorded yet (history may be turned off on this server).");
  const rows = entries.map((h) =>
    el("tr", {},
      el("td", { class: "nowrap" }, time(h.at_utc ?? h.at)),
      el("td", {}, HISTORY_ACTIONS[h.action] ?? h.action),
      el("td", {}, h.state ? stateBadge(h.state) : "—"),
      el("td", { class: "num" }, h.attempt ?? "—"),
      el("td", { class: "mono" }, h.session_id ?? "—"),
      el("td", {}, h.actor ?? "—"),
      el("td", { class: "reason" }, [h.class ? el("span", { class: "badge muted" }, h.class) : null, h.reason].filter(Boolean))));
  return el("table", { class: "grid history" },
    el("thead", {}, el("tr", {}, ["When", "What", "State after", "Attempt", "Session", "By", "Reason"].map((t) => el("th", { scope: "col" }, t)))),
    el("tbody", {}, rows));
}

export function mount(container, { params: [agent, eventId] }) {
  let answer = null;
  let failure = null;
  const render = () => {
    const e = answer?.event;
    const actions = e
      ? ["requeue", "release", "quarantine", "purge"]
          .filter((action) => APPLIES[action](e.ack_state) && !answer.archived)
          .map((action) => button(LABELS[action], () => act(action), { kind: action === "purge" ? "danger" : "", action }))
      : [];
    replace(container,
      pageHeader(`Event ${eventId}`, { subtitle: el("span", {}, "In the inbox of ", agentLink(agent)), actions }),
      failure ? errorBox(failure) : null,
      e ? el("div", { class: "columns" },
        el("section", { class: "panel" }, el("h2", {}, "Envelope"), envelope(e, answer.archived)),
        el("section", { class: "panel" }, el("h2", {}, "Payload"), payload(e))) : null,
      e ? el("section", { class: "panel" }, el("h2", {}, "History"), history(answer.history ?? [])) : null);
  };
  const act = async (action) => {
    if (await runAction(action, [{ agent, eventId }])) {
      if (action === "purge") location.hash = `#/inbox/${encodeURIComponent(agent)}`;
      else await refresh();
    }
  };
  async function refresh() {
    try {
      answer = await api(`inboxes/${encodeURIComponent(agent)}/events/${encodeURIComponent(eventId)}`);
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
