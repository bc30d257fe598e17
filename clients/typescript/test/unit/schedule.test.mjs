// The time policies' decisions are the shared vectors (vectors.test.mjs); what is left here is
// this client's own: the platform's random source for jitter.
import assert from "node:assert/strict";
import { test } from "node:test";

import { schedule } from "../../dist/node.js";

test("jitter is a number in [0, 1) from the platform's random source", () => {
  const draws = Array.from({ length: 200 }, () => schedule.jitter());
  assert.ok(draws.every((j) => j >= 0 && j < 1));
  assert.ok(new Set(draws).size > 190, "not a constant");
});
