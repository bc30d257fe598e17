// When a connected Agent knocks on the service without being asked, against a real
// `agent-inbox serve`: an event that becomes claimable later (a lease a crashed process held, a
// retry delay) is taken when it does, not at the 5-minute safety net; a fractional retry delay
// is never cut short, also when a claim held the free slot as the handler finished; a Fatal's
// reason reaches the operator, a release's reason on several lines is accepted; and while
// requests fail, hints that keep coming over the stream do not make it knock more often than its
// backoff says.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Agent, Fatal, InboxApi, MemoryState, RetryLater } from "../../dist/node.js";
import { publish, startServer, waitFor } from "../support/server.mjs";

let server;
let publisher;
let admin;

before(async () => {
  server = await startServer({ args: ["--lease-default", "3s"] });
  publisher = await server.token("app", { kind: "publisher" });
  admin = await server.token("ops", { kind: "admin" });
});

after(async () => {
  await server?.stop();
});

function apiFor(token, extra = {}) {
  return new InboxApi({ baseUrl: server.url, accessToken: () => token, ...extra });
}

/** Starts an agent; `stop()` stops it and resolves with its summary. */
function startAgent(options) {
  const progress = [];
  const agent = new Agent({ state: new MemoryState(), observer: (p) => progress.push(p), ...options });
  const running = agent.run();
  running.catch(() => undefined);
  const stop = async () => {
    agent.stop();
    return running;
  };
  const connected = () => progress.some((p) => p.type === "transport" && p.status.kind === "sse" && p.status.connected);
  return { agent, progress, running, stop, connected };
}

test("a lease a crashed process held is taken soon after it ends, while the stream is connected", async () => {
  const token = await server.token("crashed_agent");
  const published = await publish(server, publisher, "crashed_agent", 40, { prefix: "crash" });
  // Another process of this agent claims two with a 3 s lease, then dies without a word.
  const crashed = await apiFor(token).claim({ limit: 2, lease_seconds: 3 });
  const leaseEnds = Date.now() + 3_000;
  assert.equal(crashed.claims.length, 2);
  const handled = [];
  const run = startAgent({
    api: apiFor(token),
    concurrency: 4,
    // Handlers finish one after another, so cycles follow each other within moments of a scan.
    handler: async (event) => {
      await new Promise((resolve) => setTimeout(resolve, 30 * (event.payload.i % 4)));
      handled.push(event.eventId);
    },
  });
  try {
    await waitFor(() => handled.length === 40, { timeoutMs: 10_000, what: "all 40 handled, the two the crashed process held too" });
  } finally {
    await run.stop();
  }
  const takenAfter = Date.now() - leaseEnds;
  assert.ok(takenAfter < 3_000, `taken ${takenAfter} ms after the lease ended`);
  assert.deepEqual([...handled].sort(), published.map((p) => p.eventId).sort());
});

test("a fractional retry comes back no sooner than asked, and soon after", async () => {
  const token = await server.token("retry_agent");
  const runs = [];
  const run = startAgent({
    api: apiFor(token),
    leaseSeconds: 30,
    handler: async () => {
      runs.push(Date.now());
      if (runs.length === 1) throw new RetryLater("not yet", 1.6);
    },
  });
  try {
    await waitFor(run.connected, { what: "the stream is open" });
    await publish(server, publisher, "retry_agent", 1, { prefix: "retry" });
    await waitFor(() => runs.length === 2, { timeoutMs: 8_000, what: "the event runs again" });
  } finally {
    await run.stop();
  }
  const released = run.progress.find((p) => p.type === "finished" && p.outcome.kind === "released");
  assert.ok(released, "released first");
  assert.ok(runs[1] - runs[0] >= 1_600, `ran again ${runs[1] - runs[0]} ms after the first run, asked 1.6 s`);
  assert.ok(runs[1] - runs[0] < 2_600 + 1_000, `ran again ${runs[1] - runs[0]} ms after the first run`);
});

test("a Fatal's reason is kept with the dead letter for the operator", async () => {
  const token = await server.token("fatal_agent");
  const [published] = await publish(server, publisher, "fatal_agent", 1, { prefix: "fatal", payload: () => ({ why: "no such customer:\n4711" }) });
  const run = startAgent({
    api: apiFor(token),
    handler: async (event) => {
      throw new Fatal(event.payload.why);
    },
  });
  try {
    await waitFor(() => run.progress.some((p) => p.type === "finished"), { what: "the event is finished" });
  } finally {
    await run.stop();
  }
  const answer = await fetch(`${server.url}/v1/admin/inboxes/fatal_agent/events/${published.eventId}`, {
    headers: { authorization: `Bearer ${admin}` },
  });
  assert.equal(answer.status, 200);
  const { event } = await answer.json();
  assert.equal(event.dead_letter_state, "handler_failed");
  // Control characters become spaces: the service keeps a reason on one line.
  assert.equal(event.reason, "no such customer: 4711");
});

test("while requests fail, hints that keep coming do not bypass the backoff", async () => {
  const token = await server.token("failing_agent");
  let failing = false;
  let failed = 0;
  // The stream stays up; the service's answers to scans and claims are lost on the way.
  const flaky = async (input, init) => {
    const url = String(input);
    if (failing && (url.endsWith("/v1/inbox/poll-after-cursor") || url.endsWith("/v1/inbox/claim"))) {
      failed += 1;
      throw new TypeError("fetch failed");
    }
    return fetch(input, init);
  };
  const handled = [];
  const run = startAgent({
    api: apiFor(token, { fetch: flaky }),
    handler: async (event) => {
      handled.push(event.eventId);
    },
  });
  const published = [];
  try {
    await waitFor(run.connected, { what: "the stream is open" });
    await waitFor(() => run.progress.some((p) => p.type === "scanned"), { what: "the first scan" });
    failing = true;
    // A hint every 200 ms for 5 s.
    published.push(...(await publish(server, publisher, "failing_agent", 25, { prefix: "fail", perSecond: 5 })));
    const duringOutage = failed;
    failing = false;
    // Backing off from 0.5 s to 2 s: about 5 attempts in 5 s. One per hint would be 25 or more.
    assert.ok(duringOutage <= 10, `${duringOutage} failed requests in 5 s of hints`);
    await waitFor(() => handled.length === 25, { timeoutMs: 10_000, what: "every event handled once the requests go through" });
  } finally {
    failing = false;
    await run.stop();
  }
  assert.deepEqual([...handled].sort(), published.map((p) => p.eventId).sort());
});

test("a retry comes back when due although a claim was out when its handler finished", async () => {
  const token = await server.token("busy_agent");
  const runs = [];
  let carryOn;
  const heldElsewhere = new Promise((resolve) => {
    carryOn = resolve;
  });
  const run = startAgent({
    api: apiFor(token),
    handler: async (event) => {
      runs.push({ at: Date.now(), i: event.payload.i });
      if (runs.length === 1) {
        await heldElsewhere;
        throw new RetryLater("not yet", 1);
      }
    },
  });
  try {
    await waitFor(run.connected, { what: "the stream is open" });
    await publish(server, publisher, "busy_agent", 1, { prefix: "busy-a" });
    await waitFor(() => runs.length === 1, { what: "the first event runs" });
    // A second event is announced while the only slot is busy; another process takes it first.
    await publish(server, publisher, "busy_agent", 1, { prefix: "busy-b", payload: () => ({ i: 1 }) });
    await waitFor(() => run.progress.filter((p) => p.type === "hint").length >= 2, { what: "the second hint" });
    const taken = await apiFor(token).claim({ limit: 1, lease_seconds: 30 });
    assert.equal(taken.claims.length, 1);
    // The handler finishes: its slot goes to a claim for the announced event, which comes back
    // empty. The loop, woken while that claim held the slot, must hear that it is free again.
    carryOn();
    await waitFor(() => runs.length === 2, { timeoutMs: 6_000, what: "the released event runs again" });
  } finally {
    carryOn();
    await run.stop();
  }
  assert.equal(runs[1].i, 0);
  assert.ok(runs[1].at - runs[0].at >= 1_000);
});

test("a release reason on several lines is accepted", async () => {
  const token = await server.token("lines_agent");
  const runs = [];
  const run = startAgent({
    api: apiFor(token),
    handler: async () => {
      runs.push(Date.now());
      // An error's message often spans lines (a server's answer, a wrapped error).
      if (runs.length === 1) throw new RetryLater(`upstream answered:\n  503 busy\r\n${"x".repeat(300)}`, 0.5);
    },
  });
  try {
    await publish(server, publisher, "lines_agent", 1, { prefix: "lines" });
    await waitFor(() => run.progress.filter((p) => p.type === "finished").length === 2, { timeoutMs: 15_000, what: "both outcomes" });
  } finally {
    await run.stop();
  }
  const outcomes = run.progress.filter((p) => p.type === "finished").map((p) => p.outcome.kind);
  assert.deepEqual(outcomes, ["released", "acked"], "released, not refused and left to its lease");
});
