// Which redeliveries the durable record answers without running the handler: only a completed
// event's. One that failed or was quarantined here comes back when an operator requeued or
// released it (or its acknowledgement was lost), and then it runs again.
import assert from "node:assert/strict";
import { test } from "node:test";

import { MemoryState } from "../../dist/node.js";
import { Delivery } from "../../dist/delivery.js";

/** A redelivered claim (second attempt) and a Delivery whose acks and handler runs are kept. */
function redelivery(state) {
  const acks = [];
  let runs = 0;
  const delivery = new Delivery({
    api: {},
    state,
    inbox: "t/a",
    handler: async () => {
      runs += 1;
    },
    leaseSeconds: 30,
    acks: { acknowledge: async (entry) => void acks.push(entry) },
    retryPolicy: {},
    sessionId: () => null,
    observe: () => {},
    recorded: () => {},
  });
  const claim = {
    event_id: "evt_1",
    lease_token: "lt_2",
    visibility_lease_until_utc: new Date(Date.now() + 30_000).toISOString(),
    event: { event_id: "evt_1", event_type: "task", inbox_seq: 1, delivery_attempts: 2, payload: {} },
  };
  const finish = () => delivery.finish({ claim, controller: new AbortController() });
  return { finish, acks, runs: () => runs };
}

test("a completed event is acknowledged from the record without running again", async () => {
  const state = new MemoryState();
  await state.recordProcessed("t/a", "evt_1", 1, "completed");
  const { finish, acks, runs } = redelivery(state);
  const outcome = await finish();
  assert.equal(outcome.kind, "deduplicated");
  assert.equal(runs(), 0);
  assert.deepEqual(acks.map((a) => a.result), ["completed"]);
});

for (const earlier of ["failed", "quarantined"]) {
  test(`an event ${earlier} here before runs again when it comes back (a requeue or a release)`, async () => {
    const state = new MemoryState();
    await state.recordProcessed("t/a", "evt_1", 1, earlier, earlier === "quarantined" ? { reason: "odd", class: "other" } : undefined);
    const { finish, acks, runs } = redelivery(state);
    await finish();
    assert.equal(runs(), 1, "the handler ran");
    assert.deepEqual(acks.map((a) => a.result), ["completed"]);
  });
}
