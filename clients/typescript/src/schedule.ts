/**
 * The agent's time policies as pure functions over milliseconds, ported from the Rust SDK's
 * `schedule.rs`: adaptive polling, reconnect backoff, lease heartbeats, the long-poll wait,
 * transport fallback. Time and randomness arrive as arguments (`jitter` is in `[0, 1]`), so
 * tests pin them; only the runner reads clocks.
 */

import { RETRY_AFTER_SECONDS_MAX } from "./limits.js";

/**
 * Adaptive polling: the interval drops to `intervalMinMs` right after a poll that found work
 * and grows by `growth` per idle poll up to `intervalMaxMs`. Jitter only ever shortens a wait
 * (by up to `jitterFraction`), so the ceiling is a promise and agents that went idle together
 * drift apart.
 */
export interface PollSchedule {
  intervalMinMs: number;
  intervalMaxMs: number;
  growth: number;
  jitterFraction: number;
}

export const DEFAULT_POLL_SCHEDULE: PollSchedule = Object.freeze({
  intervalMinMs: 1_000,
  intervalMaxMs: 300_000,
  growth: 2,
  jitterFraction: 0.2,
});

/** The nominal interval after a poll: the minimum after work (or at first), else grown. */
export function nextNominal(schedule: PollSchedule, previousMs: number | null, foundWork: boolean): number {
  const min = Math.min(schedule.intervalMinMs, schedule.intervalMaxMs);
  if (previousMs === null || foundWork) return min;
  const grown = Math.max(previousMs, min) * Math.max(1, schedule.growth);
  return Math.max(min, Math.min(grown, schedule.intervalMaxMs));
}

/** The wait actually slept for a nominal interval: shortened by up to `jitterFraction`. */
export function jittered(schedule: PollSchedule, nominalMs: number, jitter: number): number {
  const cut = clamp01(schedule.jitterFraction) * clamp01(jitter);
  return nominalMs * (1 - cut);
}

/** What one runner cycle found, for choosing when to run the next. */
export interface CycleFound {
  claimed: number;
  /** The claim was full: more may be claimable right away. */
  more: boolean;
  /** When an event not claimable yet may become so (a retry delay, another's lease). */
  untilChangeMs: number | null;
}

/**
 * The wait before the next cycle, and the new nominal poll interval. While hints flow
 * (`connected`) the timer is a safety net at the schedule's ceiling; otherwise it is the
 * adaptive interval. A known change comes sooner, plus `slackMs` for the service to notice it.
 */
export function nextCycleAfter(
  schedule: PollSchedule,
  nominalMs: number | null,
  found: CycleFound,
  connected: boolean,
  slackMs: number,
  jitter: number,
): { waitMs: number; nominalMs: number | null } {
  const nominal = found.claimed > 0 ? null : nominalMs;
  if (found.more) return { waitMs: 0, nominalMs: nominal };
  let base: number;
  let nextNominalMs: number | null;
  if (connected) {
    base = schedule.intervalMaxMs;
    nextNominalMs = null;
  } else {
    const next = nextNominal(schedule, nominal, found.claimed > 0);
    base = jittered(schedule, next, jitter);
    nextNominalMs = next;
  }
  const wait = found.untilChangeMs === null ? base : Math.min(found.untilChangeMs + slackMs, base);
  return { waitMs: Math.max(wait, 20), nominalMs: nextNominalMs };
}

/**
 * The earliest known time (epoch ms) an open event becomes claimable without a hint to say so:
 * a retry delay (one this runner released, or one a scan saw), another's lease, a delayed
 * delivery. Kept across cycles that skip the scan, and woken for even while a stream is
 * connected, as the Rust SDK's `ClaimableAt`.
 */
export class ClaimableAt {
  #atMs: number | null = null;

  /** Something becomes claimable at `atMs`: the earlier time is kept. */
  note(atMs: number): void {
    this.#atMs = this.#atMs === null ? atMs : Math.min(this.#atMs, atMs);
  }

  /**
   * A scan that began at `startedMs` found `nextChangeMs`. A time at or before the scan's start
   * is settled by it; a later one is kept (the scan may have read the event before its release).
   */
  scanned(startedMs: number, nextChangeMs: number | null): void {
    if (this.#atMs !== null && this.#atMs <= startedMs) this.#atMs = null;
    if (nextChangeMs !== null) this.note(nextChangeMs);
  }

  /** How long from `nowMs` until then (0 once passed); null when nothing is due. */
  until(nowMs: number): number | null {
    return this.#atMs === null ? null : Math.max(0, this.#atMs - nowMs);
  }
}

/** Reconnect backoff: doubles from `baseMs` to `maxMs` with "equal jitter" (half fixed, half random). */
export interface Backoff {
  baseMs: number;
  maxMs: number;
}

export const DEFAULT_BACKOFF: Backoff = Object.freeze({ baseMs: 1_000, maxMs: 300_000 });

/**
 * While the service does not answer at all, the runner alone probes it (the transports stand
 * by): from 0.5 s doubling to a 2 s cap, each delay between half and all of its nominal value,
 * as the Rust SDK's `Backoff::OUTAGE`. A service that returns is found within about 2 s of its
 * return, at a cost of one request every 1.5 s on average per agent while it is away; one that
 * answers with `Retry-After` is asked again no sooner than it said (see {@link outageDelay}).
 */
export const OUTAGE_BACKOFF: Backoff = Object.freeze({ baseMs: 500, maxMs: 2_000 });

/**
 * The longest `Retry-After` the runner honours, as the Rust SDK's `RETRY_AFTER_HONOURED_MAX`:
 * a wrong header cannot park it for a day.
 */
export const RETRY_AFTER_HONOURED_MAX_MS = 300_000;

/** The longest `Retry-After` the runner obeys while the service is away ({@link RETRY_AFTER_HONOURED_MAX_MS}). */
export const OUTAGE_RETRY_AFTER_MAX_MS = RETRY_AFTER_HONOURED_MAX_MS;

/**
 * A retry the service asked to delay (429, 503) waits the longer of the runner's own `delayMs`
 * and the service's `Retry-After`, honoured up to {@link RETRY_AFTER_HONOURED_MAX_MS}.
 */
export function honourRetryAfter(delayMs: number, retryAfterSeconds: number | undefined): number {
  if (retryAfterSeconds === undefined || !(retryAfterSeconds > 0)) return delayMs;
  return Math.max(delayMs, Math.min(retryAfterSeconds * 1000, RETRY_AFTER_HONOURED_MAX_MS));
}

/** The longest retry delay the service takes (a week), as its OpenAPI document states it. */
export { RETRY_AFTER_SECONDS_MAX };

/**
 * A delay a handler asked for, in seconds, as the whole seconds a release takes: rounded up, so
 * the event never comes back sooner than asked, capped at a week; nothing (or less) is 0.
 */
export function retryAfterSeconds(afterSeconds: number): number {
  return afterSeconds > 0 ? Math.ceil(Math.min(RETRY_AFTER_SECONDS_MAX, afterSeconds)) : 0;
}

/** The delay before retry number `attempt` (1 for the first retry). */
export function backoffDelay(backoff: Backoff, attempt: number, jitter: number): number {
  const exponent = Math.min(Math.max(attempt - 1, 0), 30);
  const full = Math.min(backoff.baseMs * 2 ** exponent, backoff.maxMs);
  const half = full / 2;
  return half + (full - half) * clamp01(jitter);
}

/**
 * The delay before retrying a request the service refused with 429 or 503: the backoff, or its
 * `Retry-After` when that is longer (see {@link honourRetryAfter}).
 */
export function retryDelay(backoff: Backoff, attempt: number, jitter: number, retryAfterSeconds: number | undefined): number {
  return honourRetryAfter(backoffDelay(backoff, attempt, jitter), retryAfterSeconds);
}

/**
 * The wait before probing an unreachable service again, for failed attempt number `attempt`
 * (1 for the first): the outage backoff, or the service's `Retry-After` when it asked for
 * longer (at most {@link OUTAGE_RETRY_AFTER_MAX_MS}).
 */
export function outageDelay(backoff: Backoff, attempt: number, jitter: number, retryAfterSeconds: number | undefined): number {
  return honourRetryAfter(backoffDelay(backoff, attempt, jitter), retryAfterSeconds);
}

/** When to extend a lease `leaseMs` long: at half of it, so one lost heartbeat leaves time for another. */
export function heartbeatDelay(leaseMs: number): number {
  return Math.max(leaseMs / 2, 200);
}

/** How soon to try again after a heartbeat failed on the network. */
export function heartbeatRetryDelay(leaseMs: number): number {
  return Math.max(leaseMs / 8, 100);
}

/**
 * The long-poll wait in whole seconds, adapted to intermediaries: a proxy that cuts requests
 * sets a ceiling of three quarters of that; waits that come back normally grow by a second.
 */
export class LongPollWait {
  waitSeconds: number;
  maxSeconds: number;
  ceilingSeconds: number | null = null;

  constructor(maxSeconds: number) {
    this.maxSeconds = Math.max(1, Math.floor(maxSeconds));
    this.waitSeconds = this.maxSeconds;
  }

  /** A long poll was cut (connection closed, no answer) after `elapsedMs`. */
  onCut(elapsedMs: number): void {
    const ceiling = Math.max(1, Math.floor((elapsedMs / 1000) * 0.75));
    this.ceilingSeconds = this.ceilingSeconds === null ? ceiling : Math.min(this.ceilingSeconds, ceiling);
    this.waitSeconds = Math.min(this.waitSeconds, this.ceilingSeconds);
  }

  onAnswer(): void {
    const limit = Math.min(this.ceilingSeconds ?? this.maxSeconds, this.maxSeconds);
    this.waitSeconds = Math.min(this.waitSeconds + 1, limit);
  }

  /** The server refused the wait as too long: use half. */
  onRefused(): void {
    this.maxSeconds = Math.max(1, Math.floor(this.waitSeconds / 2));
    this.waitSeconds = this.maxSeconds;
  }
}

/** When a transport counts as failing, and when to try a better one again. */
export interface TransportPolicy {
  failuresBeforeFallback: number;
  /** A stream that ends sooner than this was cut and counts as a failure. */
  streamLifeMinMs: number;
  /** How long to stay on a fallback before trying the better transport again. */
  upgradeAfterMs: number;
}

export const DEFAULT_TRANSPORT_POLICY: TransportPolicy = Object.freeze({
  failuresBeforeFallback: 3,
  streamLifeMinMs: 20_000,
  upgradeAfterMs: 300_000,
});

export function streamFailed(policy: TransportPolicy, livedMs: number): boolean {
  return livedMs < policy.streamLifeMinMs;
}

export function shouldFallBack(policy: TransportPolicy, consecutiveFailures: number): boolean {
  return consecutiveFailures >= Math.max(1, policy.failuresBeforeFallback);
}

export function shouldUpgrade(policy: TransportPolicy, onFallbackForMs: number): boolean {
  return onFallbackForMs >= policy.upgradeAfterMs;
}

/**
 * Whether the wall clock moved apart from the monotonic one by more than `toleranceMs` between
 * two samples: a sleep/resume or a clock that was set. Returns the drift, or null. (A late
 * timer alone is no sign: browsers throttle timers in hidden tabs.)
 */
export function wallClockDrift(
  previous: { monotonicMs: number; wallMs: number },
  now: { monotonicMs: number; wallMs: number },
  toleranceMs: number,
): number | null {
  const drift = now.wallMs - previous.wallMs - (now.monotonicMs - previous.monotonicMs);
  return Math.abs(drift) > toleranceMs ? drift : null;
}

/** A number in `[0, 1)` from the platform's random source, for jitter. */
export function jitter(): number {
  const words = new Uint32Array(1);
  globalThis.crypto.getRandomValues(words);
  return words[0]! / 2 ** 32;
}

function clamp01(value: number): number {
  return Math.min(1, Math.max(0, value));
}
