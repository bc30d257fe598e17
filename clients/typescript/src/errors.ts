/**
 * The client's errors. Every one carries a stable `code`: the service's problem code when it
 * refused a request (RFC 9457), otherwise one of the client's own codes below. `retryable`
 * says whether the same request may succeed later (network trouble, 5xx, 429, 408).
 */

import { REASON_BYTES_MAX } from "./limits.js";
import { retryAfterSeconds as wholeRetrySeconds } from "./schedule.js";
import type { Problem, QuarantineClass } from "./wire.js";

/**
 * An RFC 9457 problem document as the service sends it (openapi.json's `Problem`); extra
 * members ride along, such as `oldest_available_seq`.
 */
export type ProblemDocument = Problem;

/** The base class: catch this to catch everything the client throws. */
export class InboxError extends Error {
  readonly code: string;
  readonly retryable: boolean;

  constructor(code: string, message: string, retryable: boolean, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    this.retryable = retryable;
  }
}

/** The service answered with a problem document (or an error status without one). */
export class ProblemError extends InboxError {
  readonly status: number;
  readonly detail: string;
  readonly title: string;
  /** Seconds from `Retry-After`, when the answer carried one. */
  readonly retryAfter: number | undefined;
  readonly problem: ProblemDocument;

  constructor(problem: ProblemDocument, retryAfter?: number) {
    const status = problem.status;
    super(
      problem.code,
      `the service refused the request: ${status} ${problem.code} (${problem.detail})`,
      status >= 500 || status === 429 || status === 408,
    );
    this.status = status;
    this.detail = problem.detail;
    this.title = problem.title;
    this.retryAfter = retryAfter;
    this.problem = problem;
  }
}

/** The service could not be reached, or the connection broke before the answer. */
export class NetworkError extends InboxError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("unreachable", `cannot reach the service (${message}); it is retried with backoff`, true, options);
  }
}

/** The service answered with something that is not the expected JSON. */
export class ProtocolError extends InboxError {
  constructor(message: string) {
    super("protocol", `unexpected answer from the service: ${message}`, true);
  }
}

/** A setting or argument that cannot work. */
export class ConfigError extends InboxError {
  constructor(message: string) {
    super("config", message, false);
  }
}

/** The durable local state (cursor, processed events) could not be read or written. */
export class LocalStateError extends InboxError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("local_state", `local state: ${message}`, false, options);
  }
}

/**
 * The tenant allows one active session per agent and a newer session of this agent took over.
 * The runner stopped claiming and let running handlers finish first.
 */
export class SessionSupersededError extends InboxError {
  readonly sessionId: string;

  constructor(sessionId: string) {
    super(
      "session_superseded",
      `session ${sessionId} was superseded: another process or device started as this agent, and the tenant allows one active session per agent`,
      false,
    );
    this.sessionId = sessionId;
  }
}

/** The resync callback failed permanently after a cursor reset; the agent stops rather than skip data. */
export class ResyncError extends InboxError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("resync_failed", `the resync callback failed: ${message}`, false, options);
  }
}


/**
 * Thrown by a handler: try this event again later. The event is released and claimable again
 * after `retryAfterSeconds`: whole seconds, a fraction rounded up (never sooner than asked).
 */
export class RetryLater extends Error {
  readonly retryAfterSeconds: number;

  constructor(reason: string, retryAfterSeconds = 30) {
    super(reason);
    this.name = "RetryLater";
    this.retryAfterSeconds = wholeRetrySeconds(retryAfterSeconds);
  }
}

/**
 * Thrown by a handler: this event will never work. It is acknowledged as `failed` with the
 * message as its reason (control characters become spaces, cut to {@link QUARANTINE_REASON_BYTES_MAX} bytes), which the service
 * keeps with the dead letter for an operator.
 */
export class Fatal extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = "Fatal";
  }
}

export const QUARANTINE_CLASSES: readonly QuarantineClass[] = Object.freeze(["prompt_injection", "malformed_payload", "bad_signature", "policy", "other"]);

/** The service keeps at most this many bytes of a reason (a quarantine's, a dead letter's). */
export const QUARANTINE_REASON_BYTES_MAX = REASON_BYTES_MAX;

/**
 * Thrown by a handler: set this event aside for a person — never retried, never a dead letter.
 * For example a payload an LLM agent suspects of a prompt injection. It is acknowledged as
 * `quarantined` with `reason` (kept by the service, at most {@link QUARANTINE_REASON_BYTES_MAX} bytes: control characters
 * become spaces and a longer one is cut) and `quarantineClass` (default `other`).
 */
export class QuarantineError extends Error {
  readonly reason: string;
  readonly quarantineClass: QuarantineClass;

  constructor(reason: string, quarantineClass: QuarantineClass = "other") {
    const kept = quarantineReason(reason);
    super(kept);
    this.name = "QuarantineError";
    this.reason = kept;
    this.quarantineClass = QUARANTINE_CLASSES.includes(quarantineClass) ? quarantineClass : "other";
  }
}

/** A reason the service accepts: no control characters, 1 to {@link QUARANTINE_REASON_BYTES_MAX} bytes of UTF-8, cut at a character. */
export function quarantineReason(reason: string): string {
  const text = fitReason(reason);
  return text.length > 0 ? text : "the handler quarantined the event";
}

/**
 * A handler's reason as the service keeps it: control characters (Unicode Cc) as spaces, trimmed
 * of Unicode White_Space, at most {@link QUARANTINE_REASON_BYTES_MAX} bytes of UTF-8 cut at a character; empty when nothing is
 * left (the shared vectors' `reason.fit`).
 */
export function fitReason(reason: string): string {
  let text = trimWhiteSpace(String(reason).replace(/[\u0000-\u001f\u007f-\u009f]/g, " "));
  const encoder = new TextEncoder();
  while (encoder.encode(text).length > QUARANTINE_REASON_BYTES_MAX) text = [...text].slice(0, -1).join("");
  return trimWhiteSpace(text);
}

/**
 * Unicode's White_Space, as Rust's `str::trim` and Python's `str.strip` take it; `String.trim`
 * also strips U+FEFF, a byte order mark, which the service keeps.
 */
const WHITE_SPACE_AT_ENDS = /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/g;

function trimWhiteSpace(text: string): string {
  return text.replace(WHITE_SPACE_AT_ENDS, "");
}

/** Whether a 401 is about the access token (which a new one may fix), not about a signature. */
export function isTokenRefusal(error: unknown): boolean {
  if (!(error instanceof ProblemError) || error.status !== 401) return false;
  const code = error.code;
  return code === "unauthorized" || code === "invalid_token" || code === "token_expired" || code.startsWith("http_");
}

/**
 * A `Retry-After` value as whole seconds from `nowMs` (RFC 9110 §10.2.3): delay-seconds, or an
 * HTTP date in the IMF-fixdate form servers send, a fraction rounded up and a past date as 0;
 * anything else (a negative or fractional number, another date format) is no answer.
 */
export function parseRetryAfter(value: string | null, nowMs: number): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text);
  if (!IMF_FIXDATE.test(text)) return undefined;
  const at = Date.parse(text);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, Math.ceil((at - nowMs) / 1000));
}

const IMF_FIXDATE = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$/;
