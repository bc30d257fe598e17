// The live stream (`/console/api/live`): the server says `changed` whenever its hints report a
// change in the tenant's inboxes, and the page refetches what it shows, at most once per
// DEBOUNCE_MS. A slow refresh every FALLBACK_MS catches what no hint reports (claims and
// acknowledgements handled by another node, leases the scavenger expires).
//
// The browser reconnects a dropped stream by itself; a refused one (the sign-in ended, or too
// many streams open: 429) is reopened here, later and later, while the sign-in holds.

const DEBOUNCE_MS = 100;
const FALLBACK_MS = 15_000;
const REOPEN_MS_MIN = 2_000;
const REOPEN_MS_MAX = 60_000;

/**
 * Starts listening; `refresh()` is called after changes, `status(state)` with "live",
 * "reconnecting" or "off", and `stillSignedIn()` (resolving a boolean) before a refused
 * stream is reopened. Returns a function that stops everything.
 */
export function startLive({ refresh, status, stillSignedIn }) {
  let timer = null;
  let reopenTimer = null;
  let reopenMs = REOPEN_MS_MIN;
  let source = null;
  let stopped = false;
  const soon = () => {
    if (timer !== null || stopped) return;
    timer = setTimeout(() => {
      timer = null;
      if (!document.hidden) refresh();
    }, DEBOUNCE_MS);
  };
  const open = () => {
    source = new EventSource("/console/api/live");
    source.addEventListener("ready", () => {
      reopenMs = REOPEN_MS_MIN;
      status("live");
      soon();
    });
    source.addEventListener("changed", soon);
    source.addEventListener("error", async () => {
      if (source.readyState !== EventSource.CLOSED) {
        status("reconnecting");
        return;
      }
      status("off");
      if (stopped || !(await stillSignedIn()) || stopped) return;
      reopenTimer = setTimeout(open, reopenMs);
      reopenMs = Math.min(reopenMs * 2, REOPEN_MS_MAX);
    });
  };
  open();
  const fallback = setInterval(soon, FALLBACK_MS);
  const visible = () => {
    if (!document.hidden) soon();
  };
  document.addEventListener("visibilitychange", visible);
  return () => {
    stopped = true;
    source?.close();
    clearInterval(fallback);
    clearTimeout(timer);
    clearTimeout(reopenTimer);
    document.removeEventListener("visibilitychange", visible);
    status("off");
  };
}
