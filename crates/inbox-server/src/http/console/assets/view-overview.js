// The tenant at a glance: every agent's inbox with its depth, oldest unacknowledged age, head,
// claimed, retry-scheduled and parked counts, online sessions and last contact, and the
// publishes this node refused by the tenant's quotas. Sortable; kept current by the live stream.

import { api } from "./api.js";
import { el, replace } from "./dom.js";
import { ago, count, duration, secondsSince, time } from "./format.js";
import { dataTable } from "./table.js";
import { agentLink, errorBox, pageHeader } from "./widgets.js";

/** An oldest unacknowledged event older than this is marked. */
const STALE_SECONDS = 300;

const COLUMNS = [
  { key: "recipient_id", label: "Agent", cell: (r) => agentLink(r.recipient_id) },
  { key: "depth", label: "Depth", numeric: true, title: "Events not yet acknowledged or parked", cell: (r) => count(r.depth) },
  {
    key: "oldest_unacked_age_seconds",
    label: "Oldest unacked",
    numeric: true,
    cell: (r) => el("span", { class: r.oldest_unacked_age_seconds >= STALE_SECONDS ? "warn" : undefined }, duration(r.oldest_unacked_age_seconds)),
  },
  { key: "head_seq", label: "Head", numeric: true, cell: (r) => count(r.head_seq) },
  { key: "claimed", label: "Claimed", numeric: true, cell: (r) => count(r.claimed) },
  { key: "retry_scheduled", label: "Retry scheduled", numeric: true, cell: (r) => count(r.retry_scheduled) },
  {
    key: "parked",
    label: "Parked",
    numeric: true,
    title: "Dead-lettered and quarantined events",
    cell: (r) => (r.parked > 0 ? el("a", { href: `#/parked?agent=${encodeURIComponent(r.recipient_id)}`, class: "bad" }, count(r.parked)) : count(r.parked)),
  },
  {
    key: "online_sessions",
    label: "Online",
    numeric: true,
    title: "Sessions of the agent not gone or superseded",
    cell: (r) => (r.online_sessions === undefined ? "—" : el("span", { class: r.online_sessions > 0 ? "online" : "offline" }, count(r.online_sessions))),
  },
  {
    key: "last_seen_at_utc",
    label: "Last seen",
    numeric: true,
    sortValue: (r) => (r.last_seen_at_utc ? -secondsSince(r.last_seen_at_utc) : null),
    cell: (r) => el("span", { title: time(r.last_seen_at_utc) }, ago(r.last_seen_at_utc)),
  },
];

/** This node's quota refusals as a tile: the count, the latest sentence as its tooltip. */
function refusedTile(refusals) {
  const refused = refusals ? refusals.pending_events_refused + refusals.stored_bytes_refused : 0;
  const latest = refusals?.recent?.[0];
  return ["Quota refusals", count(refused), refused > 0 ? "bad" : "", latest ? `${time(latest.refused_at_utc)}: ${latest.detail}` : "Publishes this node refused by the tenant's quotas"];
}

function summary(inboxes, refusals) {
  const total = (key) => inboxes.reduce((sum, r) => sum + (r[key] ?? 0), 0);
  const oldest = Math.max(0, ...inboxes.map((r) => r.oldest_unacked_age_seconds ?? 0));
  const tiles = [
    ["Agents", count(inboxes.length)],
    ["Depth", count(total("depth"))],
    ["Claimed", count(total("claimed"))],
    ["Retry scheduled", count(total("retry_scheduled"))],
    ["Parked", count(total("parked")), total("parked") > 0 ? "bad" : ""],
    ["Oldest unacked", duration(oldest), oldest >= STALE_SECONDS ? "warn" : ""],
    ["Online sessions", count(total("online_sessions"))],
    refusedTile(refusals),
  ];
  return el("div", { class: "tiles" },
    tiles.map(([label, value, kind, title]) => el("div", { class: `tile ${kind ?? ""}`.trim(), title },
      el("div", { class: "tile-label" }, label), el("div", { class: "tile-value", "data-tile": label }, value))));
}

export function mount(container) {
  const sort = { key: "depth", descending: true };
  let inboxes = [];
  let refusals = null;
  let updated = null;
  let failure = null;
  const render = () => {
    replace(container,
      pageHeader("Inboxes", { subtitle: updated ? `Updated ${time(updated.toISOString())}` : "Loading…" }),
      failure ? errorBox(failure) : null,
      summary(inboxes, refusals),
      el("div", { class: "panel", id: "overview-table" },
        dataTable({ columns: COLUMNS, rows: inboxes, sort, onChange: render, empty: "No agent has an inbox yet: publish an event to one." })));
  };
  render();
  return {
    async refresh() {
      const [answer, refused] = await Promise.all([api("inboxes", { query: { limit: 500 } }), api("quota-refusals")]);
      inboxes = answer.inboxes;
      refusals = refused;
      updated = new Date();
      failure = null;
      render();
    },
    failed(error) {
      failure = error;
      render();
    },
  };
}
