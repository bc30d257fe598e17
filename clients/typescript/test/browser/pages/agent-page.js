// One agent tab for the browser tests: an Agent from the package, configured by the query
// string; it reports to the test through functions the test exposes (inboxToken, report).
import { Agent, InboxApi, SigningKey, browserPlatform } from "/dist/index.js";

const params = new URLSearchParams(location.search);
const tab = params.get("tab") ?? "0";
const handlerMs = Number(params.get("handlerMs") ?? "0");
// `held`: claimed and not finished (a claimed event may wait a moment before its handler runs);
// `claiming`: claims on their way (what they bring back is held once they answer).
const stats = { tab, leader: false, hints: { stream: 0, tab: 0, lifecycle: 0 }, transport: null, running: 0, held: 0, claiming: 0, subscribed: false, errors: [] };
window.__stats = stats;

const report = (kind, data) => window.report?.({ kind, tab, at: performance.timeOrigin + performance.now(), ...data });

let api = new InboxApi({
  baseUrl: params.get("server"),
  accessToken: ({ refresh }) => window.inboxToken({ refresh, tab }),
});
if (params.get("sign") === "ed25519") {
  // A key made with WebCrypto in this tab, registered, then signing every critical call.
  const key = await SigningKey.generateEd25519();
  await api.registerSigningKey(key);
  api = api.withSigningKey(key);
  report("signing", { keyId: key.keyId });
}
const claim = api.claim.bind(api);
api.claim = (...args) => {
  stats.claiming += 1;
  // Settles before the runner sees the answer and starts its events (they count as held).
  return claim(...args).finally(() => (stats.claiming -= 1));
};

const agent = new Agent({
  api,
  platform: browserPlatform({ streamAuth: params.get("streamAuth") === "cookie" ? "cookie" : "ticket" }),
  concurrency: Number(params.get("concurrency") ?? "1"),
  ...(params.has("lease") ? { leaseSeconds: Number(params.get("lease")) } : {}),
  shareStreamAcrossTabs: params.get("share") !== "0",
  handler: async (event) => {
    stats.running += 1;
    report("start", { eventId: event.eventId, seq: event.inboxSeq });
    // A test may slow one tab's handler down (`window.__handlerMs`).
    const ms = window.__handlerMs ?? handlerMs;
    if (ms > 0) await new Promise((r) => setTimeout(r, ms));
    report("handled", { eventId: event.eventId, seq: event.inboxSeq });
    stats.running -= 1;
  },
  observer: (progress) => {
    switch (progress.type) {
      case "subscribed":
        stats.subscribed = true;
        report("subscribed", { sessionId: progress.sessionId });
        break;
      case "role":
        stats.leader = progress.leader;
        report("role", { leader: progress.leader });
        break;
      case "transport":
        stats.transport = progress.status;
        report("transport", { status: progress.status });
        break;
      case "hint":
        stats.hints[progress.from] += 1;
        if (progress.from === "stream" && progress.headSeq !== null) report("hint", { headSeq: progress.headSeq });
        if (progress.from === "tab" && params.has("traceHints")) report("tabhint", { headSeq: progress.headSeq });
        break;
      case "claimed":
        if (params.has("traceClaims")) report("claim", { limit: progress.limit, eventIds: progress.eventIds, elapsedMs: progress.elapsedMs });
        break;
      case "started":
        stats.held += 1;
        break;
      case "finished":
        stats.held -= 1;
        report("finished", { eventId: progress.event.event_id, outcome: progress.outcome.kind });
        break;
      case "disconnected":
        stats.errors.push(progress.error.code);
        break;
    }
  },
});
window.__agent = agent;
agent.run().then(
  () => (document.getElementById("status").textContent = "stopped"),
  (error) => {
    stats.errors.push(`fatal:${error.code ?? error}`);
    report("fatal", { message: String(error) });
  },
);
document.getElementById("status").textContent = "running";
