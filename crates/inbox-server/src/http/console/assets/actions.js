// The operator's actions on events, shared by the inbox, parked and event views: requeue and
// purge (parked events), quarantine (available or claimed events, with a reason) and release
// (quarantined events). Purge asks for confirmation; each call reports per event, and refusals
// are shown with the server's words.

import { perAgent } from "./api.js";
import { toast } from "./dom.js";
import { askQuarantine, confirmAction } from "./dialogs.js";

/** Which actions apply to an event in `state`. */
export const APPLIES = {
  requeue: (state) => state === "dead_letter" || state === "quarantined",
  purge: (state) => state === "dead_letter" || state === "quarantined",
  quarantine: (state) => state === "available" || state === "retry_scheduled" || state === "claimed",
  release: (state) => state === "quarantined",
};

export const LABELS = { requeue: "Requeue", purge: "Purge", quarantine: "Quarantine", release: "Release" };

const PATHS = {
  requeue: "parked/requeue",
  purge: "parked/purge",
  quarantine: "quarantine",
  release: "quarantine/release",
};

const DONE = { requeue: "requeued", purge: "purged", quarantine: "quarantined", release: "released" };

/**
 * Runs `action` on `selection` ([{ agent, eventId }]); resolves true when anything was sent
 * (so the view refreshes), false when the operator cancelled.
 */
export async function runAction(action, selection) {
  if (selection.length === 0) return false;
  const n = selection.length;
  const what = n === 1 ? "this event" : `these ${n} events`;
  let extra = {};
  if (action === "purge") {
    const sure = await confirmAction({
      title: `Purge ${n === 1 ? "1 event" : `${n} events`}?`,
      message: `Purging deletes ${what} for good, with ${n === 1 ? "its" : "their"} payload and history. This cannot be undone.`,
      confirm: "Purge for good",
      danger: true,
    });
    if (!sure) return false;
  } else if (action === "quarantine") {
    const answer = await askQuarantine(n);
    if (!answer) return false;
    extra = answer;
  }
  try {
    const results = await perAgent(PATHS[action], selection, extra);
    const refused = results.filter((r) => !r.ok);
    const done = results.length - refused.length;
    if (done > 0) toast(`${done} ${done === 1 ? "event" : "events"} ${DONE[action]}.`, "ok");
    for (const r of refused.slice(0, 3)) {
      toast(`${r.event_id.slice(0, 8)}…: ${r.error?.detail ?? r.error?.code ?? "refused"}`, "error");
    }
    if (refused.length > 3) toast(`${refused.length - 3} more refused.`, "error");
  } catch (error) {
    toast(error.message, "error");
  }
  return true;
}
