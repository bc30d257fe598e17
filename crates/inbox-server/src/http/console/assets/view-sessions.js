// Agent sessions of the tenant, newest first: which device each is, how it is connected, when
// it connected and last beat, and whether it is gone or was superseded by a newer one.

import { api } from "./api.js";
import { el, replace } from "./dom.js";
import { ago, count, plural, secondsSince, time } from "./format.js";
import { dataTable } from "./table.js";
import { agentLink, button, errorBox, pageHeader } from "./widgets.js";

const LIMIT = 500;

function sessionState(s) {
  return el("span", { class: `badge session-${s.status}` }, s.status);
}

const COLUMNS = [
  { key: "session_id", label: "Session", cell: (s) => el("span", { class: "mono", title: s.session_id }, s.session_id) },
  { key: "agent_id", label: "Agent", cell: (s) => agentLink(s.agent_id) },
  { key: "device_id", label: "Device", cell: (s) => (s.device_id ? el("span", { class: "mono" }, s.device_id) : "—") },
  { key: "transport", label: "Transport" },
  { key: "status", label: "State", cell: sessionState },
  {
    key: "connected_at_utc",
    label: "Connected",
    numeric: true,
    sortValue: (s) => -(secondsSince(s.connected_at_utc) ?? Infinity),
    cell: (s) => el("span", { title: time(s.connected_at_utc) }, ago(s.connected_at_utc)),
  },
  {
    key: "last_heartbeat_at_utc",
    label: "Last heartbeat",
    numeric: true,
    sortValue: (s) => -(secondsSince(s.last_heartbeat_at_utc) ?? Infinity),
    cell: (s) => el("span", { title: time(s.last_heartbeat_at_utc) }, ago(s.last_heartbeat_at_utc)),
  },
  { key: "last_seen_seq", label: "Seen up to", numeric: true, title: "The highest sequence the session reported reading", cell: (s) => count(s.last_seen_seq) },
  {
    key: "superseded_at_utc",
    label: "Superseded",
    cell: (s) => (s.superseded_at_utc || s.superseded_by_session_id
      ? el("span", { title: time(s.superseded_at_utc) },
        s.superseded_by_session_id ? ["by ", el("span", { class: "mono" }, s.superseded_by_session_id)] : "",
        s.superseded_at_utc ? ` ${ago(s.superseded_at_utc)}` : "")
      : "—"),
  },
];

export function mount(container, { query, setQuery }) {
  let agent = query.agent ?? "";
  const sort = { key: "last_heartbeat_at_utc", descending: true };
  let sessions = [];
  let failure = null;
  const render = () => {
    const online = sessions.filter((s) => s.status === "active").length;
    replace(container,
      pageHeader("Sessions", { subtitle: `${plural(sessions.length, "session")}${agent ? ` of ${agent}` : ""}, ${count(online)} active` }),
      agent ? el("div", { class: "toolbar" }, button(`Agent ${agent} ✕`, () => {
        agent = "";
        setQuery({});
        void refresh();
      }, { kind: "subtle" })) : null,
      failure ? errorBox(failure) : null,
      el("div", { class: "panel" }, dataTable({ columns: COLUMNS, rows: sessions, sort, onChange: render, empty: "No agent has subscribed yet." })));
  };
  async function refresh() {
    try {
      const answer = await api("sessions", { query: { recipient_id: agent, limit: LIMIT } });
      sessions = answer.sessions ?? [];
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
