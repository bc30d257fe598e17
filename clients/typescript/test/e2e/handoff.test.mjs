// A handler hands its work on against a real `agent-inbox serve`: it returns handOff(followUps),
// the acknowledgement carries them, the next agent gets exactly one event whose deduplication key
// names the acknowledged event, and the acknowledged event is recorded only after that commit.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Agent, InboxApi, MemoryState, handOff } from "../../dist/node.js";
import { publish, startServer, waitFor } from "../support/server.mjs";

let server;
let publisher;

before(async () => {
  server = await startServer({ args: ["--lease-default", "3s"] });
  publisher = await server.token("app", { kind: "publisher" });
});

after(async () => {
  await server?.stop();
});

test("a handler's handOff publishes the follow-ups with the acknowledgement, once", async () => {
  const token = await server.token("ts_writer");
  const [written] = await publish(server, publisher, "ts_writer", 1, { prefix: "draft" });
  const state = new MemoryState();
  const outcomes = [];
  const agent = new Agent({
    api: new InboxApi({ baseUrl: server.url, accessToken: () => token }),
    state,
    handler: async (event) =>
      handOff([{ recipients: ["ts_reviewer"], event_type: "draft.review", payload: { draft: event.eventId } }]),
    observer: (p) => p.type === "finished" && outcomes.push(p.outcome),
  });
  const running = agent.run();
  await waitFor(() => outcomes.length === 1, { timeoutMs: 20_000, what: "the event finished" });
  agent.stop();
  await running;
  assert.deepEqual(outcomes, [{ kind: "acked" }]);

  const reviewer = await server.token("ts_reviewer");
  const answer = await server.request("POST", "/v1/inbox/poll-after-cursor", { token: reviewer, body: { after_seq: 0 } });
  const events = JSON.parse(answer.text).events;
  assert.equal(events.length, 1);
  assert.deepEqual(events[0].payload, { draft: written.eventId });
  assert.equal(events[0].deduplication_key, `handoff:${written.eventId}:0`);
});
