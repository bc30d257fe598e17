// Parked events across the tenant: dead-lettered and quarantined, with their reasons, oldest
// first as the admin API lists them; select some (or all) to requeue, release or purge them.

import { api } from "./api.js";
import { el, replace } from "./dom.js";
import { APPLIES, LABELS, runAction } from "./actions.js";
import { plural, time } from "./format.js";
import { dataTable } from "./table.js";
import { agentLink, button, errorBox, eventLink, filterBar, pageHeader, stateBadge } from "./widgets.js";

const LIMIT = 500;

const STATES = [["", "All parked"], ["dead_letter", "Dead letter"], ["quarantined", "Quarantined"]];

const COLUMNS = [
  { key: "recipient_id", label: "Agent", cell: (e) => agentLink(e.recipient_id) },
  { key: "inbox_seq", label: "Seq", numeric: true },
  { key: "event_id", label: "Event", cell: (e) => eventLink(e.recipient_id, e.event_id) },
  { key: "event_type", label: "Type" },
  { key: "ack_state", label: "State", cell: (e) => stateBadge(e.ack_state) },
  {
    key: "reason",
    label: "Reason",
    class: "reason",
    sortValue: (e) => e.reason ?? e.dead_letter_state,
    cell: (e) => e.reason ?? (e.dead_letter_state !== "none" ? e.dead_letter_state?.replaceAll("_", " ") : "—"),
  },
  { key: "delivery_attempts", label: "Attempts", numeric: true },
  { key: "terminal_at_utc", label: "Parked at", cell: (e) => time(e.terminal_at_utc ?? e.created_at_utc) },
];

const key = (e) => `${e.recipient_id}/${e.event_id}`;

export function mount(container, { query, setQuery }) {
  let state = query.state ?? "";
  let agent = query.agent ?? "";
  const sort = { key: "terminal_at_utc", descending: true };
  const selection = new Set();
  let events = [];
  let failure = null;

  const selected = () => events.filter((e) => selection.has(key(e)));
  const act = async (action) => {
    const targets = selected().filter((e) => APPLIES[action](e.ack_state)).map((e) => ({ agent: e.recipient_id, eventId: e.event_id }));
    if (await runAction(action, targets)) {
      selection.clear();
      await refresh();
    }
  };

  const render = () => {
    const chosen = selected();
    replace(container,
      pageHeader("Parked events", {
        subtitle: `${plural(events.length, "dead-lettered or quarantined event")}${events.length === LIMIT ? " (the oldest; act on them to see more)" : ""}${agent ? ` of ${agent}` : " across the tenant"}`,
      }),
      el("div", { class: "toolbar" },
        filterBar("State", STATES, state, (value) => {
          state = value;
          selection.clear();
          setQuery({ state: value, agent });
          void refresh();
        }),
        agent ? button(`Agent ${agent} ✕`, () => {
          agent = "";
          setQuery({ state });
          void refresh();
        }, { kind: "subtle" }) : null,
        el("div", { class: "bulk" },
          el("span", { class: "muted" }, chosen.length ? `${chosen.length} selected` : "Select events for bulk actions"),
          ["requeue", "release", "purge"].map((action) => {
            const n = chosen.filter((e) => APPLIES[action](e.ack_state)).length;
            return button(n ? `${LABELS[action]} ${n}` : LABELS[action], () => act(action), {
              kind: action === "purge" ? "danger" : "",
              disabled: n === 0,
              action,
            });
          }))),
      failure ? errorBox(failure) : null,
      el("div", { class: "panel" },
        dataTable({ columns: COLUMNS, rows: events, sort, onChange: render, selection, rowKey: key, empty: "Nothing is parked. Good." })));
  };

  async function refresh() {
    try {
      const answer = await api("parked", { query: { state, recipient_id: agent, limit: LIMIT } });
      events = answer.events ?? [];
      for (const id of [...selection]) if (!events.some((e) => key(e) === id)) selection.delete(id);
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
