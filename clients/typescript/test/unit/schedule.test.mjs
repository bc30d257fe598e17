// The time policies, with the same figures as the Rust SDK's schedule tests.
import assert from "node:assert/strict";
import { test } from "node:test";

import { schedule } from "../../dist/node.js";

const S = (seconds) => seconds * 1000;
const defaults = schedule.DEFAULT_POLL_SCHEDULE;

test("the poll interval drops after work and grows to five minutes while idle", () => {
  assert.equal(schedule.nextNominal(defaults, null, false), S(1));
  assert.equal(schedule.nextNominal(defaults, S(64), true), S(1));
  const seen = [S(1)];
  for (let i = 0; i < 12; i++) seen.push(schedule.nextNominal(defaults, seen.at(-1), false));
  assert.deepEqual(seen.slice(0, 6), [S(1), S(2), S(4), S(8), S(16), S(32)]);
  assert.equal(seen.at(-1), S(300), "capped at five minutes");
});

test("jitter only shortens a wait", () => {
  assert.equal(schedule.jittered(defaults, S(300), 0), S(300));
  assert.equal(schedule.jittered(defaults, S(300), 1), S(240));
  assert.equal(schedule.jittered(defaults, S(300), 7), S(240), "clamped");
  for (let i = 0; i < 100; i++) {
    const wait = schedule.jittered(defaults, S(100), schedule.jitter());
    assert.ok(wait > S(80) - 1 && wait <= S(100));
  }
});

test("the next cycle comes a second after work, and later while idle", () => {
  const found = (claimed, more) => ({ claimed, more, untilChangeMs: null });
  let next = schedule.nextCycleAfter(defaults, S(300), found(0, false), false, 250, 0);
  assert.deepEqual(next, { waitMs: S(300), nominalMs: S(300) });
  next = schedule.nextCycleAfter(defaults, next.nominalMs, found(1, true), false, 250, 0);
  assert.deepEqual(next, { waitMs: 0, nominalMs: null }, "a full claim repeats at once");
  next = schedule.nextCycleAfter(defaults, next.nominalMs, found(0, false), false, 250, 0);
  assert.deepEqual(next, { waitMs: S(1), nominalMs: S(1) });
  next = schedule.nextCycleAfter(defaults, next.nominalMs, found(0, false), false, 250, 0);
  assert.equal(next.waitMs, S(2));
});

test("while hints flow the timer is a safety net, unless a change is due", () => {
  const idle = { claimed: 0, more: false, untilChangeMs: null };
  assert.deepEqual(schedule.nextCycleAfter(defaults, S(8), idle, true, 250, 1), { waitMs: S(300), nominalMs: null });
  assert.equal(schedule.nextCycleAfter(defaults, null, { ...idle, untilChangeMs: S(2) }, true, 250, 1).waitMs, 2250);
  assert.equal(schedule.nextCycleAfter(defaults, null, { ...idle, untilChangeMs: 0 }, false, 0, 0).waitMs, 20);
});

test("backoff doubles with equal jitter up to its maximum, and Retry-After is never cut short", () => {
  const backoff = { baseMs: S(1), maxMs: S(60) };
  assert.equal(schedule.backoffDelay(backoff, 1, 1), S(1));
  assert.equal(schedule.backoffDelay(backoff, 2, 1), S(2));
  assert.equal(schedule.backoffDelay(backoff, 3, 0), S(2));
  assert.equal(schedule.backoffDelay(backoff, 7, 1), S(60));
  assert.equal(schedule.backoffDelay(backoff, 1e9, 1), S(60));
  for (let attempt = 1; attempt < 40; attempt++) {
    for (const j of [0, 0.3, 1]) {
      const delay = schedule.backoffDelay(backoff, attempt, j);
      assert.ok(delay <= S(60) && delay >= 500);
    }
  }
  assert.equal(schedule.retryDelay(backoff, 1, 0, 7), S(7));
  assert.equal(schedule.retryDelay(backoff, 7, 1, 7), S(60));
  assert.equal(schedule.retryDelay(backoff, 1, 0, undefined), 500);
});

test("a service that went away is probed at most two seconds apart, and its Retry-After is obeyed", () => {
  const backoff = schedule.OUTAGE_BACKOFF;
  assert.equal(schedule.outageDelay(backoff, 1, 1, undefined), 500);
  for (let attempt = 1; attempt < 100; attempt++) {
    for (const j of [0, 0.5, 1]) {
      const delay = schedule.outageDelay(backoff, attempt, j, undefined);
      assert.ok(delay <= S(2), `a return noticed within 2 s: ${delay}`);
      assert.ok(delay >= 250, `no hammering: ${delay}`);
    }
  }
  // Fifteen seconds away, with the mean jitter: about a dozen probes.
  let elapsed = 0;
  let probes = 0;
  while (elapsed < S(15)) {
    probes += 1;
    elapsed += schedule.outageDelay(backoff, probes, 0.5, undefined);
  }
  assert.ok(probes >= 10 && probes <= 13, `${probes}`);
  // The service's Retry-After is never cut short, up to five minutes.
  assert.equal(schedule.outageDelay(backoff, 1, 0, 7), S(7));
  assert.equal(schedule.outageDelay(backoff, 1, 0, 86_400), S(300));
});

test("heartbeats come at half the lease", () => {
  assert.equal(schedule.heartbeatDelay(S(120)), S(60));
  assert.equal(schedule.heartbeatDelay(0), 200);
  assert.equal(schedule.heartbeatRetryDelay(S(2)), 250);
});

test("the long-poll wait learns a proxy's cut and recovers only to that ceiling", () => {
  const wait = new schedule.LongPollWait(25);
  wait.onAnswer();
  assert.equal(wait.waitSeconds, 25);
  wait.onCut(4_100);
  assert.deepEqual([wait.waitSeconds, wait.ceilingSeconds], [3, 3]);
  wait.onAnswer();
  assert.equal(wait.waitSeconds, 3);
  wait.onCut(900);
  assert.equal(wait.waitSeconds, 1);
  wait.onCut(S(20));
  assert.equal(wait.ceilingSeconds, 1, "a later, longer cut does not raise it");
  const refused = new schedule.LongPollWait(25);
  refused.onRefused();
  assert.deepEqual([refused.waitSeconds, refused.maxSeconds], [12, 12]);
});

test("transports fall back after repeated failures and try again later", () => {
  const policy = schedule.DEFAULT_TRANSPORT_POLICY;
  assert.ok(schedule.streamFailed(policy, S(3)));
  assert.ok(!schedule.streamFailed(policy, S(600)));
  assert.ok(!schedule.shouldFallBack(policy, 2));
  assert.ok(schedule.shouldFallBack(policy, 3));
  assert.ok(!schedule.shouldUpgrade(policy, S(299)));
  assert.ok(schedule.shouldUpgrade(policy, S(300)));
});

test("a wall clock that jumped apart from the monotonic one is told from an ordinary tick", () => {
  const start = { monotonicMs: 10_000, wallMs: 1_700_000_000_000 };
  assert.equal(schedule.wallClockDrift(start, { monotonicMs: 11_000, wallMs: 1_700_000_001_020 }, S(5)), null);
  assert.equal(schedule.wallClockDrift(start, { monotonicMs: 11_000, wallMs: 1_700_003_601_000 }, S(5)), 3_600_000, "an hour of suspend");
  assert.equal(schedule.wallClockDrift(start, { monotonicMs: 11_000, wallMs: 1_699_999_941_000 }, S(5)), -60_000, "set back");
  assert.equal(schedule.wallClockDrift(start, { monotonicMs: 41_000, wallMs: 1_700_000_031_000 }, S(5)), null, "a throttled timer is no jump");
});
