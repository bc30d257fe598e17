// Agents' request-signing keys across the tenant (key id, agent, algorithm, created, retired)
// and the tenant's signature policy. Key material is never shown: the admin API omits it.

import { api } from "./api.js";
import { el, replace } from "./dom.js";
import { plural, time } from "./format.js";
import { dataTable } from "./table.js";
import { agentLink, errorBox, pageHeader } from "./widgets.js";

function retired(k) {
  const at = k.retired_at_utc;
  if (!at) return el("span", { class: "badge state-available" }, "active");
  const past = Date.parse(at) <= Date.now();
  return el("span", { class: past ? "badge muted" : "badge state-retry_scheduled", title: time(at) }, past ? `retired ${time(at)}` : `retires ${time(at)}`);
}

const COLUMNS = [
  { key: "key_id", label: "Key id", cell: (k) => el("span", { class: "mono" }, k.key_id) },
  { key: "agent_id", label: "Agent", cell: (k) => agentLink(k.agent_id) },
  { key: "algorithm", label: "Algorithm" },
  { key: "created_at_utc", label: "Created", cell: (k) => time(k.created_at_utc) },
  { key: "retired", label: "Status", sortValue: (k) => k.retired_at_utc ?? "", cell: retired },
];

/** The tenant's quotas, as a clause of the subtitle ("" when it has none). */
function quotas(policy) {
  const limits = [];
  if (policy.pending_events_max > 0) limits.push(`${policy.pending_events_max} pending events`);
  if (policy.stored_bytes_max > 0) limits.push(`${policy.stored_bytes_max} stored payload bytes`);
  return limits.length ? `, quotas of ${limits.join(" and ")}` : "";
}

export function mount(container) {
  const sort = { key: "agent_id", descending: false };
  let keys = [];
  let policy = null;
  let failure = null;
  const render = () => {
    const rules = policy
      ? `; the tenant ${policy.signatures_required ? "requires" : "does not require"} signed claims and acknowledgements${policy.single_active_session ? ", one active session per agent" : ""}${policy.fair_claims ? ", fair claims" : ""}${quotas(policy)}`
      : "";
    replace(container,
      pageHeader("Agent keys", { subtitle: `${plural(keys.length, "request-signing key")} (RFC 9421)${rules}` }),
      failure ? errorBox(failure) : null,
      el("div", { class: "panel" }, dataTable({ columns: COLUMNS, rows: keys, sort, onChange: render, empty: "No agent has registered a signing key." })));
  };
  async function refresh() {
    try {
      const [answer, tenantPolicy] = await Promise.all([api("agent-keys"), api("tenant-policy")]);
      keys = answer.keys ?? [];
      policy = tenantPolicy;
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
