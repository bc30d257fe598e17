// The TypeScript runner's conformance agent, in Node: the client's `Agent` with the suite's
// handler (the event's payload says what each attempt does) and event log. The protocol is in
// ../README.md. Needs the package built: clients/typescript/dist (`npx tsc -p tsconfig.json`).

import { appendFileSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

import { Agent, Fatal, InboxApi, JsonFileState, QuarantineError, RetryLater, SessionSupersededError, schedule } from "../../typescript/dist/node.js";

const env = process.env;
const LOG = env.CONFORMANCE_LOG;
const TRANSPORTS = ["sse", "long-poll", "poll"];

/** One line, one write: lines from several processes never interleave. */
function log(what, fields = {}) {
  appendFileSync(LOG, JSON.stringify({ t: Date.now(), pid: process.pid, what, ...fields }) + "\n");
}

function attemptsSoFar(eventId) {
  let text;
  try {
    text = readFileSync(LOG, "utf8");
  } catch (error) {
    if (error.code === "ENOENT") return 0;
    throw error;
  }
  return text.split("\n").filter((line) => {
    if (line === "") return false;
    const entry = JSON.parse(line);
    return entry.what === "start" && entry.event === eventId;
  }).length;
}

async function handle(event) {
  const script = event.payload?.conformance;
  const attempt = attemptsSoFar(event.eventId);
  const action = Array.isArray(script) && script.length > 0 ? script[Math.min(attempt, script.length - 1)] : {};
  log("start", { event: event.eventId, attempt });
  const what = action.do ?? "complete";
  // Kills the process group: the driver starts each agent as the leader of its own session.
  if (what === "crash") process.kill(0, "SIGKILL");
  if (action.sleep) await new Promise((resolve) => setTimeout(resolve, Number(action.sleep) * 1000));
  log("end", { event: event.eventId, outcome: what });
  // The runner rounds a fractional delay up to whole seconds (never sooner than asked).
  if (what === "retry") throw new RetryLater("conformance: retry", Number(action.after));
  if (what === "fatal") throw new Fatal(action.reason);
  if (what === "quarantine") throw new QuarantineError(action.reason, action.class);
}

function resync(snapshot) {
  log("resync", { open: snapshot.open_events.map((e) => e.event_id), resume_after_seq: snapshot.resume_after_seq });
}

function transport() {
  const best = env.CONFORMANCE_TRANSPORT ?? "sse";
  if (!TRANSPORTS.includes(best)) throw new Error(`CONFORMANCE_TRANSPORT must be one of ${TRANSPORTS.join(", ")}, not ${best}`);
  const config = { allowed: TRANSPORTS.slice(TRANSPORTS.indexOf(best)) };
  if (env.CONFORMANCE_UPGRADE_AFTER) {
    // Only the upgrade delay differs from the runner's default policy.
    config.policy = { ...schedule.DEFAULT_TRANSPORT_POLICY, upgradeAfterMs: Number(env.CONFORMANCE_UPGRADE_AFTER) * 1000 };
  }
  return config;
}

async function main() {
  mkdirSync(env.CONFORMANCE_STATE, { recursive: true });
  const state = await JsonFileState.open(join(env.CONFORMANCE_STATE, "state.json"));
  const options = {
    api: new InboxApi({ baseUrl: env.CONFORMANCE_BASE, accessToken: () => env.CONFORMANCE_TOKEN }),
    state,
    handler: handle,
    resync,
    concurrency: Number(env.CONFORMANCE_CONCURRENCY ?? "1"),
    transport: transport(),
  };
  if (env.CONFORMANCE_SHUTDOWN_GRACE) options.shutdownGraceMs = Number(env.CONFORMANCE_SHUTDOWN_GRACE) * 1000;
  const agent = new Agent(options);
  process.on("SIGTERM", () => agent.stop());
  log("ready");
  try {
    await agent.run();
  } finally {
    await state.close();
  }
}

try {
  await main();
  process.exit(0);
} catch (error) {
  process.stderr.write(`the agent stopped: ${error?.stack ?? error}\n`);
  process.exit(error instanceof SessionSupersededError ? 3 : 1);
}
