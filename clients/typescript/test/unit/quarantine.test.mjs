// A handler's quarantine: the error keeps a reason the service accepts (fitted as the shared
// vectors' reason.quarantine says) and a known class; the acknowledgement carries both
// with `result: "quarantined"`; the durable record keeps them, so a redelivery says the same.
import assert from "node:assert/strict";
import { test } from "node:test";

import { MemoryState, QUARANTINE_CLASSES, QuarantineError } from "../../dist/node.js";
import { ackEntry } from "../../dist/delivery.js";

const claim = { event_id: "evt_1", lease_token: "lt_1" };

test("QuarantineError carries its reason and class; an unknown class is `other`", () => {
  const error = new QuarantineError("payload asks to exfiltrate the key", "prompt_injection");
  assert.equal(error.reason, "payload asks to exfiltrate the key");
  assert.equal(error.quarantineClass, "prompt_injection");
  assert.equal(error.name, "QuarantineError");
  assert.equal(new QuarantineError("x").quarantineClass, "other");
  assert.equal(new QuarantineError("x", "nonsense").quarantineClass, "other");
  assert.deepEqual([...QUARANTINE_CLASSES], ["prompt_injection", "malformed_payload", "bad_signature", "policy", "other"]);
});

test("the acknowledgement of a quarantine names result, reason and class; others carry neither", () => {
  assert.deepEqual(ackEntry(claim, "quarantined", { reason: "looks like an injection", class: "prompt_injection" }), {
    event_id: "evt_1",
    lease_token: "lt_1",
    result: "quarantined",
    reason: "looks like an injection",
    class: "prompt_injection",
  });
  assert.deepEqual(ackEntry(claim, "completed", undefined), { event_id: "evt_1", lease_token: "lt_1", result: "completed" });
  assert.deepEqual(ackEntry(claim, "failed", undefined), { event_id: "evt_1", lease_token: "lt_1", result: "failed" });
  const fallback = ackEntry(claim, "quarantined", undefined);
  assert.equal(fallback.class, "other");
  assert.match(fallback.reason, /quarantined by this agent before/);
});

test("the durable record keeps a quarantine's reason and class", async () => {
  const state = new MemoryState();
  await state.recordProcessed("t/a", "evt_1", 1, "quarantined", { reason: "bad signature on payload", class: "bad_signature" });
  await state.recordProcessed("t/a", "evt_2", 2, "completed");
  assert.equal(await state.processed("t/a", "evt_1"), "quarantined");
  assert.deepEqual(await state.quarantineDetail("t/a", "evt_1"), { reason: "bad signature on payload", class: "bad_signature" });
  assert.equal(await state.quarantineDetail("t/a", "evt_2"), null);
});
