// The live stream (`/console/api/live`): the server says `changed` whenever its hints report a
// change in the tenant's inboxes, and the page refetches what it shows, at most once per
// DEBOUNCE_MS. A slow refresh every FALLBACK_MS catches what no hint reports (claims and
// acknowledgements handled by another node, leases the scavenger expires).

const DEBOUNCE_MS = 150;
const FALLBACK_MS = 15_000;

/**
 * Starts listening; `refresh()` is called after changes, `status(state)` with "live",
 * "reconnecting" or "off". Returns a function that stops everything.
 */
export function startLive({ refresh, status, onClosed }) {
  let timer = null;
  let stopped = false;
  const soon = () => {
    if (timer !== null || stopped) return;
    timer = setTimeout(() => {
      timer = null;
      if (!document.hidden) refresh();
    }, DEBOUNCE_MS);
  };
  const source = new EventSource("/console/api/live");
  source.addEventListener("ready", () => {
    status("live");
    soon();
  });
  source.addEventListener("changed", soon);
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) {
      // The browser gave up (an answer that is not a stream: the sign-in expired).
      status("off");
      onClosed();
    } else {
      status("reconnecting");
    }
  });
  const fallback = setInterval(soon, FALLBACK_MS);
  const visible = () => {
    if (!document.hidden) soon();
  };
  document.addEventListener("visibilitychange", visible);
  return () => {
    stopped = true;
    source.close();
    clearInterval(fallback);
    clearTimeout(timer);
    document.removeEventListener("visibilitychange", visible);
    status("off");
  };
}
