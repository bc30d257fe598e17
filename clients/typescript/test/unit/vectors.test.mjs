// The runners' shared decision vectors (clients/conformance/vectors/decisions.json) replayed
// against this client's pure rules. The Rust and Python unit suites replay the same file, so the
// three runners decide alike by construction. A rule the file has and RULES lacks fails, as does
// a rule RULES replays that the file lacks or excepts for TypeScript.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { ProblemError, Scan, quarantineReason, schedule } from "../../dist/node.js";
import { fitReason, parseRetryAfter } from "../../dist/errors.js";

const file = JSON.parse(readFileSync(new URL("../../../conformance/vectors/decisions.json", import.meta.url), "utf8"));
const RUNNER = "typescript";
const RUNNERS = ["rust", "typescript", "python"];

const pollSchedule = (i) =>
  i.schedule === undefined
    ? schedule.DEFAULT_POLL_SCHEDULE
    : { intervalMinMs: i.schedule.interval_min_ms, intervalMaxMs: i.schedule.interval_max_ms, growth: i.schedule.growth, jitterFraction: i.schedule.jitter_fraction };
const backoff = (b) => ({ baseMs: b.base_ms, maxMs: b.max_ms });
const seconds = (value) => (value === null ? undefined : value);
const sample = (s) => ({ monotonicMs: s.monotonic_ms, wallMs: s.wall_ms });
const eventId = (seq) => `00000000-0000-0000-0000-${seq.toString(16).padStart(12, "0")}`;
/** An available event of its `inbox_seq`, with what the vector names instead. */
const envelope = (differs) => ({
  event_id: eventId(differs.inbox_seq),
  tenant_id: "t",
  recipient_kind: "agent",
  recipient_id: "a",
  event_type: "task",
  priority: "normal",
  availability_at_utc: "2020-01-01T00:00:00.000Z",
  delivery_attempts: 0,
  dead_letter_state: "none",
  correlation: {},
  created_at_utc: "2020-01-01T00:00:00.000Z",
  ack_state: "available",
  ...differs,
});

/** Every rule this runner has, by its name in the file. */
const RULES = {
  "poll.next_nominal": (i) => schedule.nextNominal(pollSchedule(i), i.previous_ms, i.found_work),
  "poll.jittered": (i) => schedule.jittered(pollSchedule(i), i.nominal_ms, i.jitter),
  "poll.next_cycle": (i) =>
    renamed(
      schedule.nextCycleAfter(pollSchedule(i), i.nominal_ms, { claimed: i.claimed, more: i.more, untilChangeMs: i.until_change_ms }, i.connected, i.slack_ms, i.jitter),
      { waitMs: "wait_ms", nominalMs: "nominal_ms" },
    ),
  claimable_at: (i) => {
    const claimable = new schedule.ClaimableAt();
    const answers = [];
    for (const step of i.steps) {
      if ("note" in step) claimable.note(step.note);
      else if ("scanned" in step) claimable.scanned(step.scanned.started_ms, step.scanned.next_change_ms);
      else if ("until" in step) answers.push(claimable.until(step.until));
      else throw new Error(`claimable_at: unknown step ${JSON.stringify(step)}`);
    }
    return answers;
  },
  "backoff.delay": (i) => schedule.backoffDelay(backoff(i.backoff), i.attempt, i.jitter),
  "outage.probe_delay": (i) => schedule.outageDelay(schedule.OUTAGE_BACKOFF, i.attempt, i.jitter, seconds(i.retry_after_seconds)),
  "retry_after.parse": (i) => parseRetryAfter(i.header, i.now_ms) ?? null,
  "retry_after.honour": (i) => schedule.honourRetryAfter(i.delay_ms, seconds(i.retry_after_seconds)),
  "release.retry_after_seconds": (i) => schedule.retryAfterSeconds(i.after_seconds),
  "reason.fit": (i) => fitReason(i.reason),
  "reason.quarantine": (i) => quarantineReason(i.reason),
  "cursor.scan": (i) => {
    const held = new Set(i.held_seqs.map(eventId));
    const scan = new Scan(i.cursor);
    for (const page of i.pages) scan.addPage(page.events.map(envelope), page.next_cursor, page.head_seq, i.now_ms, held);
    return {
      cursor: scan.cursor,
      blocked: scan.blocked,
      claimable: scan.claimable,
      next_change_ms: scan.nextChangeMs,
      head_seq: scan.headSeq,
      seen_through: scan.seenThrough,
    };
  },
  "heartbeat.delay": (i) => schedule.heartbeatDelay(i.lease_ms),
  "heartbeat.retry_delay": (i) => schedule.heartbeatRetryDelay(i.lease_ms),
  "long_poll.wait": (i) => {
    let wait;
    if (i.state === undefined) wait = new schedule.LongPollWait(i.max_seconds);
    else {
      wait = new schedule.LongPollWait(i.state.max_seconds);
      wait.waitSeconds = i.state.wait_seconds;
      wait.ceilingSeconds = i.state.ceiling_seconds;
    }
    const state = () => ({ wait_seconds: wait.waitSeconds, max_seconds: wait.maxSeconds, ceiling_seconds: wait.ceilingSeconds });
    const states = [state()];
    for (const step of i.steps) {
      if (step === "answer") wait.onAnswer();
      else if (step === "refused") wait.onRefused();
      else if (typeof step === "object" && "cut_ms" in step) wait.onCut(step.cut_ms);
      else throw new Error(`long_poll.wait: unknown step ${JSON.stringify(step)}`);
      states.push(state());
    }
    return states;
  },
  "transport.stream_failed": (i) => schedule.streamFailed(schedule.DEFAULT_TRANSPORT_POLICY, i.lived_ms),
  "transport.should_fall_back": (i) => schedule.shouldFallBack(schedule.DEFAULT_TRANSPORT_POLICY, i.consecutive_failures),
  "transport.should_upgrade": (i) => schedule.shouldUpgrade(schedule.DEFAULT_TRANSPORT_POLICY, i.on_fallback_for_ms),
  "clock.wall_drift": (i) => schedule.wallClockDrift(sample(i.previous), sample(i.now), i.tolerance_ms),
  "problem.transient": (i) => new ProblemError({ type: "urn:agent-inbox:problem:refused", title: "refused", status: i.status, code: "refused", detail: "" }).retryable,
};

function renamed(object, names) {
  return Object.fromEntries(Object.entries(object).map(([key, value]) => [names[key] ?? key, value]));
}

/** Numbers compare to within a microsecond: the runners count in nanoseconds, milliseconds and float seconds. */
function same(got, want) {
  if (typeof got === "number" && typeof want === "number") return Math.abs(got - want) <= 0.001;
  if (Array.isArray(got) && Array.isArray(want)) return got.length === want.length && got.every((g, k) => same(g, want[k]));
  if (got !== null && want !== null && typeof got === "object" && typeof want === "object") {
    const keys = Object.keys(want);
    return Object.keys(got).length === keys.length && keys.every((key) => key in got && same(got[key], want[key]));
  }
  return got === want;
}

test("every vector of every rule is replayed", () => {
  const failures = [];
  let replayed = 0;
  for (const [name, rule] of Object.entries(file.rules)) {
    const excepted = Object.keys(rule.except ?? {});
    for (const runner of excepted) if (!RUNNERS.includes(runner)) failures.push(`${name}: \`except\` names ${runner}, which is no runner`);
    if (RUNNERS.every((runner) => excepted.includes(runner))) failures.push(`${name}: no runner replays it`);
    if (!Array.isArray(rule.vectors) || rule.vectors.length === 0 || rule.vectors.some((v) => typeof v.why !== "string")) {
      failures.push(`${name}: every rule needs vectors, each with a \`why\``);
    }
    const replay = RULES[name];
    const exceptedHere = excepted.includes(RUNNER);
    if (exceptedHere) {
      if (replay !== undefined) failures.push(`${name}: \`except\` says TypeScript has no such rule, yet RULES replays it`);
      continue;
    }
    if (replay === undefined) {
      failures.push(`${name}: a rule this runner does not replay (add it to RULES, or say why in \`except\`)`);
      continue;
    }
    for (const vector of rule.vectors) {
      const got = replay(vector.in);
      if (!same(got, vector.out)) failures.push(`${name} (${vector.why}): got ${JSON.stringify(got)}, want ${JSON.stringify(vector.out)}`);
      replayed += 1;
    }
  }
  for (const name of Object.keys(RULES)) {
    if (!(name in file.rules)) failures.push(`${name}: replayed here, but decisions.json has no such rule`);
  }
  assert.deepEqual(failures, [], `${failures.length} of the decision vectors fail`);
  assert.ok(replayed > 0);
});
