// The console's shell: sign-in, the hash routes (#/, #/inbox/AGENT, #/event/AGENT/ID,
// #/parked, #/sessions, #/callbacks, #/keys, #/charts), the live stream that refreshes the
// view on screen, and sign-out. Each view module exports `mount(container, route)` returning
// `{ refresh() }`; the shell calls refresh once and again after every live change.

import { loadSession, onSignedOut, signIn, signOut } from "./api.js";
import { el, replace, toast } from "./dom.js";
import { startLive } from "./live.js";
import { errorBox } from "./widgets.js";
import * as overview from "./view-overview.js";
import * as inbox from "./view-inbox.js";
import * as eventView from "./view-event.js";
import * as parked from "./view-parked.js";
import * as sessions from "./view-sessions.js";
import * as callbacks from "./view-callbacks.js";
import * as keys from "./view-keys.js";
import * as charts from "./view-charts.js";

const ROUTES = [
  { pattern: /^\/?$/, view: overview, nav: "overview" },
  { pattern: /^\/inbox\/([^/]+)$/, view: inbox, nav: "overview" },
  { pattern: /^\/event\/([^/]+)\/([^/]+)$/, view: eventView, nav: "overview" },
  { pattern: /^\/parked$/, view: parked, nav: "parked" },
  { pattern: /^\/sessions$/, view: sessions, nav: "sessions" },
  { pattern: /^\/callbacks$/, view: callbacks, nav: "callbacks" },
  { pattern: /^\/keys$/, view: keys, nav: "keys" },
  { pattern: /^\/charts$/, view: charts, nav: "charts" },
];

const main = document.getElementById("main");
let current = null;
let stopLive = null;

/** One refresh at a time per view; a change during one runs it once more afterwards. */
function refresher(mounted) {
  let running = null;
  let again = false;
  return async function refresh() {
    if (running) {
      again = true;
      return running;
    }
    running = (async () => {
      do {
        again = false;
        try {
          await mounted.refresh();
        } catch (error) {
          if (error?.status !== 401) mounted.failed?.(error);
        }
      } while (again);
    })();
    try {
      await running;
    } finally {
      running = null;
    }
  };
}

function parseHash() {
  const hash = decodeURI(location.hash.replace(/^#/, "")) || "/";
  const [path, queryText = ""] = hash.split("?");
  return { path, query: Object.fromEntries(new URLSearchParams(queryText)) };
}

/** Sets the hash's query (the view's filters) without a history entry per click. */
export function setQuery(query) {
  const { path } = parseHash();
  const text = new URLSearchParams(Object.entries(query).filter(([, v]) => v !== undefined && v !== null && v !== "")).toString();
  history.replaceState(null, "", `#${path}${text ? `?${text}` : ""}`);
}

function route() {
  const { path, query } = parseHash();
  const found = ROUTES.map((r) => ({ r, match: r.pattern.exec(path) })).find((x) => x.match);
  for (const link of document.querySelectorAll(".nav a")) {
    link.classList.toggle("active", Boolean(found) && link.dataset.view === found.r.nav);
  }
  current?.dispose?.();
  const container = el("div", { class: "view" });
  replace(main, container);
  if (!found) {
    replace(container, errorBox(new Error(`There is no view at ${path}.`)));
    current = null;
    return;
  }
  const params = found.match.slice(1).map(decodeURIComponent);
  const mounted = found.r.view.mount(container, { params, query, setQuery });
  const refresh = refresher(mounted);
  current = { ...mounted, refresh };
  void refresh();
}

function setLiveStatus(state) {
  const badge = document.getElementById("live");
  badge.dataset.state = state;
  badge.textContent = state === "live" ? "live" : state === "reconnecting" ? "reconnecting…" : "offline";
}

function showSignIn(message) {
  stopLive?.();
  stopLive = null;
  current?.dispose?.();
  current = null;
  document.getElementById("topbar").hidden = true;
  main.hidden = true;
  document.getElementById("sign-in").hidden = false;
  const error = document.getElementById("sign-in-error");
  error.hidden = !message;
  error.textContent = message ?? "";
  document.getElementById("token").focus();
}

function showConsole(session) {
  stopLive?.();
  document.getElementById("sign-in").hidden = true;
  document.getElementById("topbar").hidden = false;
  main.hidden = false;
  const identity = document.getElementById("identity");
  replace(identity, el("span", { class: "subject" }, session.subject), " · tenant ", el("strong", {}, session.tenant_id));
  identity.title = session.expires_at_utc ? `Signed in until ${new Date(session.expires_at_utc).toLocaleString()}` : "";
  stopLive = startLive({
    refresh: () => current?.refresh(),
    status: setLiveStatus,
    stillSignedIn,
  });
  route();
}

/** Whether the sign-in still holds (the sign-in form is shown when it does not). A failure to
 * ask counts as signed in: the stream is tried again later. */
async function stillSignedIn() {
  try {
    if (await loadSession()) return true;
  } catch {
    return true;
  }
  showSignIn("Your sign-in has ended; sign in again.");
  return false;
}

async function start(message) {
  try {
    const session = await loadSession();
    if (session) showConsole(session);
    else showSignIn(message);
  } catch (error) {
    replace(main, errorBox(error));
  }
}

document.getElementById("sign-in-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const input = document.getElementById("token");
  const submit = event.target.querySelector("button[type=submit]");
  submit.disabled = true;
  try {
    await signIn(input.value.trim());
    input.value = "";
    await start();
  } catch (error) {
    showSignIn(error.message);
  } finally {
    submit.disabled = false;
  }
});

document.getElementById("sign-out").addEventListener("click", async () => {
  try {
    await signOut();
  } catch (error) {
    toast(error.message, "error");
  }
  showSignIn("Signed out.");
});

onSignedOut((problem) => showSignIn(problem?.detail ?? "Your sign-in has ended; sign in again."));
window.addEventListener("hashchange", () => {
  if (!main.hidden) route();
});
void start();
