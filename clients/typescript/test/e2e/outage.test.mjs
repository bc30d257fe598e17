// A service that went away is found again soon after it returns, against a real
// `agent-inbox serve`: the server is killed while a connected Agent runs, comes back 8 s later
// on the same port and database, and an event published right then is handled within 3 s,
// without a restart of the runner (GUARANTEES.md row 9). On the idle polling schedule (1 s
// doubling) the runner's next probe after 8 s away could come up to 8 s after the return.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Agent, InboxApi, MemoryState } from "../../dist/node.js";
import { publish, startServer, waitFor } from "../support/server.mjs";

let server;
let publisher;

before(async () => {
  server = await startServer();
  publisher = await server.token("app", { kind: "publisher" });
});

after(async () => {
  await server?.stop();
});

test("a service that comes back after 8 s away is found within 3 s of its return", async () => {
  const token = await server.token("outage_agent");
  const progress = [];
  const handled = new Map();
  const agent = new Agent({
    api: new InboxApi({ baseUrl: server.url, accessToken: () => token }),
    state: new MemoryState(),
    observer: (p) => progress.push({ ...p, at: Date.now() }),
    handler: async (event) => {
      handled.set(event.eventId, Date.now());
    },
  });
  const running = agent.run();
  running.catch(() => undefined);
  try {
    await waitFor(() => progress.some((p) => p.type === "transport" && p.status.kind === "sse" && p.status.connected), {
      what: "the stream is open",
    });
    await waitFor(() => progress.some((p) => p.type === "scanned"), { what: "the first scan" });
    await server.kill();
    await waitFor(() => progress.some((p) => p.type === "disconnected"), { what: "the runner to notice the outage" });
    await new Promise((r) => setTimeout(r, 8_000));
    await server.restart();
    const backAt = Date.now();
    const [event] = await publish(server, publisher, "outage_agent", 1, { prefix: "back" });
    await waitFor(() => handled.has(event.eventId), { timeoutMs: 15_000, what: "the event published after the return" });
    const afterReturnMs = handled.get(event.eventId) - backAt;
    const probes = progress.filter((p) => p.type === "disconnected").length;
    console.log(`handled ${afterReturnMs} ms after the service returned; ${probes} failed probes while away`);
    assert.ok(afterReturnMs <= 3_000, `handled ${afterReturnMs} ms after the service returned`);
    // Not hammering while away: the backoff's floor is 250 ms, so at most about 32 probes in 8 s.
    assert.ok(probes <= 32, `${probes} failed probes in 8 s`);
  } finally {
    agent.stop();
    await running.catch(() => undefined);
  }
});
