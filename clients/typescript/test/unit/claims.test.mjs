// The claim bookkeeping: slots reserved by claims in flight never exceed the free ones, and the
// leader's split of a hint hands every new event to exactly one tab's claim (itself first, then
// the tabs with the most room), keeps what nobody has room for until a slot frees, and hands
// out again what a tab declined, failed or never answered.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ClaimBudget, Dispatcher } from "../../dist/claims.js";

test("claims in flight reserve their limits, so together they never exceed the free slots", () => {
  const budget = new ClaimBudget(4);
  budget.reserve(1);
  budget.reserve(2);
  assert.equal(budget.free, 1);
  assert.equal(budget.inFlight, 2);
  assert.throws(() => budget.reserve(2), RangeError, "a third claim cannot take more than is free");
  budget.answered(2, 1);
  assert.equal(budget.free, 2, "the event the claim did not get frees its slot");
  assert.equal(budget.busy, 1);
  budget.answered(1, 1);
  assert.equal(budget.free, 2);
  budget.finished();
  budget.finished();
  assert.equal(budget.free, 4);
  assert.throws(() => budget.finished(), RangeError, "a slot cannot be freed twice");
  assert.throws(() => budget.answered(1, 1), RangeError, "an answer needs a claim");
});

test("a hint's new events go to the leader's free slots first, the rest to the tabs with room", () => {
  const dispatcher = new Dispatcher(10);
  dispatcher.report("a", 1, 0, 0);
  dispatcher.report("b", 3, 0, 0);
  assert.equal(dispatcher.dispatch(10, 4, 0), null, "nothing new");
  const first = dispatcher.dispatch(12, 4, 0);
  assert.deepEqual({ own: first.own, assigned: first.assigned, through: first.dispatchedThrough }, { own: 2, assigned: {}, through: 12 });
  const second = dispatcher.dispatch(18, 1, 0);
  assert.deepEqual(second.assigned, { b: 3, a: 1 }, "the most room first");
  assert.equal(second.own, 1);
  assert.equal(second.dispatchedThrough, 17, "one event waits for a slot");
  assert.equal(dispatcher.dispatch(18, 0, 0), null, "nobody has room");
  const third = dispatcher.dispatch(18, 1, 0);
  assert.equal(third.own, 1, "a freed slot takes what waited");
  assert.equal(third.dispatchedThrough, 18);
});

test("a tab's report counts the assignments it has not seen yet; what it declined is handed out again", () => {
  const dispatcher = new Dispatcher(0);
  dispatcher.report("a", 2, 0, 0);
  const first = dispatcher.dispatch(2, 0, 0);
  assert.deepEqual(first.assigned, { a: 2 });
  // A report written before the tab saw assignment `first.id`: its free slots are spoken for.
  dispatcher.report("a", 2, first.id - 1, 0);
  assert.equal(dispatcher.dispatch(3, 0, 0), null, "no room left at a");
  // The tab saw it, had room for one only: one event is handed out again.
  dispatcher.report("a", 0, first.id, 1);
  assert.equal(dispatcher.dispatchedThrough, 1);
  dispatcher.report("a", 1, first.id, 0);
  const again = dispatcher.dispatch(3, 0, 0);
  assert.deepEqual(again.assigned, { a: 1 });
  assert.equal(again.dispatchedThrough, 2);
});

test("a tab that left or never answers has its assignments handed out again; a failed own claim too", () => {
  const dispatcher = new Dispatcher(0);
  dispatcher.report("a", 2, 0, 0);
  dispatcher.report("b", 1, 0, 0);
  const plan = dispatcher.dispatch(3, 0, 1_000);
  assert.deepEqual(plan.assigned, { a: 2, b: 1 });
  dispatcher.left("b");
  assert.equal(dispatcher.dispatchedThrough, 2);
  assert.equal(dispatcher.followers, 1);
  assert.equal(dispatcher.expire(1_500, 1_000), false, "not yet");
  assert.equal(dispatcher.expire(2_001, 1_000), true);
  assert.equal(dispatcher.followers, 0);
  assert.equal(dispatcher.dispatchedThrough, 0);
  const own = dispatcher.dispatch(3, 3, 2_001);
  assert.equal(own.own, 3);
  dispatcher.ownFailed(3);
  assert.equal(dispatcher.dispatchedThrough, 0);
});

test("a claim that came back short covers the head it was sent with", () => {
  const dispatcher = new Dispatcher(0);
  dispatcher.coveredThrough(7);
  assert.equal(dispatcher.dispatch(7, 4, 0), null);
  dispatcher.coveredThrough(3);
  assert.equal(dispatcher.dispatchedThrough, 7, "never back");
});
