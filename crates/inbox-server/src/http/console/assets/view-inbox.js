// One agent's inbox: its events by state (filter buttons), in pages of PAGE (shown newest
// first), with bulk requeue, purge, quarantine and release of the selected events. An event's
// id opens its envelope, payload and history.

import { api } from "./api.js";
import { el, replace } from "./dom.js";
import { APPLIES, LABELS, runAction } from "./actions.js";
import { plural, time } from "./format.js";
import { dataTable } from "./table.js";
import { button, errorBox, eventLink, filterBar, pageHeader, stateBadge } from "./widgets.js";

const PAGE = 200;

export const STATES = [
  ["", "All"],
  ["available", "Available"],
  ["retry_scheduled", "Retry scheduled"],
  ["claimed", "Claimed"],
  ["acked", "Acked"],
  ["dead_letter", "Dead letter"],
  ["quarantined", "Quarantined"],
  ["expired", "Expired"],
];

export function mount(container, { params: [agent], query, setQuery }) {
  let state = query.state ?? "";
  const sort = { key: "inbox_seq", descending: true };
  const selection = new Set();
  let events = [];
  let more = false;
  let failure = null;

  const columns = [
    { key: "inbox_seq", label: "Seq", numeric: true },
    { key: "event_id", label: "Event", cell: (e) => eventLink(agent, e.event_id) },
    { key: "event_type", label: "Type" },
    { key: "priority", label: "Priority" },
    { key: "ack_state", label: "State", cell: (e) => stateBadge(e.ack_state) },
    { key: "delivery_attempts", label: "Attempts", numeric: true },
    { key: "created_at_utc", label: "Created", cell: (e) => time(e.created_at_utc) },
    { key: "reason", label: "Reason", class: "reason", cell: (e) => e.reason ?? "" },
  ];

  const selected = () => events.filter((e) => selection.has(e.event_id));
  const act = async (action) => {
    const targets = selected().filter((e) => APPLIES[action](e.ack_state)).map((e) => ({ agent, eventId: e.event_id }));
    if (await runAction(action, targets)) {
      selection.clear();
      await load();
    }
  };

  const render = () => {
    const chosen = selected();
    const toolbar = el("div", { class: "toolbar" },
      filterBar("State", STATES, state, (value) => {
        state = value;
        selection.clear();
        setQuery({ state: value });
        void load();
      }),
      el("div", { class: "bulk" },
        el("span", { class: "muted" }, chosen.length ? `${chosen.length} selected` : "Select events for bulk actions"),
        ["requeue", "release", "quarantine", "purge"].map((action) => {
          const n = chosen.filter((e) => APPLIES[action](e.ack_state)).length;
          return button(n ? `${LABELS[action]} ${n}` : LABELS[action], () => act(action), {
            kind: action === "purge" ? "danger" : "",
            disabled: n === 0,
            action,
          });
        })));
    replace(container,
      pageHeader(`Inbox of ${agent}`, { subtitle: `${plural(events.length, state ? `${state.replace("_", " ")} event` : "event")} loaded` }),
      toolbar,
      failure ? errorBox(failure) : null,
      el("div", { class: "panel" },
        dataTable({
          columns,
          rows: events,
          sort,
          onChange: render,
          selection,
          rowKey: (e) => e.event_id,
          empty: state ? "No events in this state." : "This inbox has no events.",
        })),
      more ? el("p", { class: "more" }, button("Load older events", () => void load(true))) : null);
  };

  /** Pages newest first: the newest PAGE events, then the next before the lowest sequence
   * loaded, so a long inbox opens on its latest work. A refresh reloads as many as are shown. */
  async function load(next = false) {
    try {
      let page;
      if (next && events.length) {
        const before = Math.min(...events.map((e) => e.inbox_seq));
        page = await fetchPage(before, PAGE);
        events = [...events, ...page];
      } else {
        page = await fetchPage(undefined, Math.min(Math.max(events.length, PAGE), 500));
        events = page;
      }
      more = page.length > 0 && page.length % PAGE === 0;
      for (const id of [...selection]) if (!events.some((e) => e.event_id === id)) selection.delete(id);
      failure = null;
    } catch (error) {
      if (error.status === 401) throw error;
      failure = error;
    }
    render();
  }

  async function fetchPage(beforeSeq, limit) {
    const query = { state, order: "newest_first", before_seq: beforeSeq, limit };
    const answer = await api(`inboxes/${encodeURIComponent(agent)}/events`, { query });
    return answer.events ?? [];
  }

  render();
  return { refresh: () => load(), failed: (error) => { failure = error; render(); } };
}
