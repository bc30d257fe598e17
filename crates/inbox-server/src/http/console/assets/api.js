// The console's calls: `/console/api/...` (answered by the admin API with the session cookie as
// the caller), the session and the sign-in. Problems arrive as ProblemError with their `code`
// and the server's sentence; a 401 means the sign-in is over and shows the sign-in form.

let csrfToken = null;
let signedOutHandler = () => {};

/** A refused call: the RFC 9457 problem the server answered with. */
export class ProblemError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.code = problem.code || "http_error";
    this.problem = problem;
  }
}

/** What to do when a call finds the sign-in gone (expired, or signed out in another tab). */
export function onSignedOut(handler) {
  signedOutHandler = handler;
}

async function problemOf(response) {
  const text = await response.text();
  try {
    return JSON.parse(text);
  } catch {
    return { detail: text || `the server answered HTTP ${response.status}` };
  }
}

/** GET (or `method`) `/console/api/${path}` with an optional JSON body; resolves with the JSON. */
export async function api(path, { method = "GET", body, query } = {}) {
  const url = new URL(`/console/api/${path}`, location.origin);
  for (const [key, value] of Object.entries(query ?? {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, String(value));
  }
  const headers = { accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (method !== "GET" && csrfToken) headers["x-csrf-token"] = csrfToken;
  const response = await fetch(url, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
    cache: "no-store",
  });
  if (response.status === 401) {
    const problem = await problemOf(response);
    signedOutHandler(problem);
    throw new ProblemError(401, problem);
  }
  if (!response.ok) throw new ProblemError(response.status, await problemOf(response));
  return response.status === 204 ? null : response.json();
}

/** Who is signed in (and the CSRF token for changes), or null when nobody is. */
export async function loadSession() {
  const response = await fetch("/console/api/session", { credentials: "same-origin", cache: "no-store" });
  if (response.status === 401) return null;
  if (!response.ok) throw new ProblemError(response.status, await problemOf(response));
  const session = await response.json();
  csrfToken = session.csrf_token;
  return session;
}

/** Posts the sign-in form; resolves once the cookie is set, throws the refusal otherwise. */
export async function signIn(token) {
  const response = await fetch("/console/sign-in", {
    method: "POST",
    body: new URLSearchParams({ token }),
    credentials: "same-origin",
    redirect: "manual",
  });
  // Success is a 303 to the console, which a manual redirect reports as opaque.
  if (response.type === "opaqueredirect" || response.ok) return;
  throw new ProblemError(response.status, await problemOf(response));
}

export async function signOut() {
  const response = await fetch("/console/sign-out", {
    method: "POST",
    headers: { "x-csrf-token": csrfToken ?? "" },
    credentials: "same-origin",
  });
  csrfToken = null;
  if (!response.ok && response.status !== 401) throw new ProblemError(response.status, await problemOf(response));
}

/** The most events one admin call takes. */
const BATCH_MAX = 500;

/** Posts to `path` for each agent's events, one call per agent and batch (the admin routes
 * take one recipient per call); resolves with every item result, each with its agent. */
export async function perAgent(path, selection, extra = {}) {
  const byAgent = new Map();
  for (const { agent, eventId } of selection) {
    if (!byAgent.has(agent)) byAgent.set(agent, []);
    byAgent.get(agent).push(eventId);
  }
  const results = [];
  for (const [agent, eventIds] of byAgent) {
    for (let i = 0; i < eventIds.length; i += BATCH_MAX) {
      const body = { recipient_id: agent, event_ids: eventIds.slice(i, i + BATCH_MAX), ...extra };
      const answer = await api(path, { method: "POST", body });
      for (const result of answer.results ?? []) results.push({ agent, ...result });
    }
  }
  return results;
}
