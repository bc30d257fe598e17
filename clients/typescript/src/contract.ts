/**
 * The agent's contract with the application: the event a handler gets, the handler and resync
 * callbacks, how an event ended, what the runner reports as it goes, and the runner's options.
 * Types only, so the runner (`agent.ts`) and the package's entry points share them without
 * importing the runner's code.
 */

import type { InboxApi } from "./api.js";
import type { InboxError } from "./errors.js";
import type { Platform } from "./platform.js";
import type { Backoff, PollSchedule } from "./schedule.js";
import type { LocalState, ProcessedResult } from "./state.js";
import type { TabGroupTiming } from "./tabs.js";
import type { TransportConfig, TransportStatus } from "./transport.js";
import type { EventEnvelope, JsonObject, PublishRequest, QuarantineClass, ResyncResponse } from "./wire.js";

/** One claimed event, as the handler gets it. */
export interface InboxEvent {
  readonly eventId: string;
  readonly eventType: string;
  readonly inboxSeq: number;
  readonly payload: JsonObject | null;
  /** When the lease ends unless heartbeats extend it (the runner does that). */
  readonly leaseUntilUtc: string;
  /** Seed 001's whole envelope. */
  readonly envelope: EventEnvelope;
}

export interface HandlerContext {
  /** Aborted when the agent stops and the shutdown grace period has run out. */
  readonly signal: AbortSignal;
}

/**
 * Runs one event. Return to acknowledge; throw {@link RetryLater} to release it for a retry,
 * {@link Fatal} to dead-letter it, {@link QuarantineError} to set it aside for a person (never
 * retried, never a dead letter: say why); any other error releases it for a retry after 30 s
 * (the event's `max_attempts` bounds the retries). Side effects should be idempotent where they can
 * be: a lease can be lost (a partition longer than the lease), and then another tab or process
 * may run the event too.
 */
export type Handler = (event: InboxEvent, context: HandlerContext) => Promise<void | HandOff> | void | HandOff;

/**
 * What a handler returns to hand its work on: the follow-up publishes are committed with the
 * event's acknowledgement, in one transaction and only while the lease holds, so the next agent
 * of a chain gets each exactly once (a retried acknowledgement finds the first publishes).
 */
export interface HandOff {
  readonly followUps: readonly PublishRequest[];
}

/** Finished: acknowledge the event and publish `followUps` with it (a hand-off). */
export function handOff(followUps: readonly PublishRequest[]): HandOff {
  return { followUps };
}

/**
 * Rebuilds the agent's view after `410 cursor_reset_required` (away longer than the service
 * keeps history): gets the head and every open event up to `resume_after_seq`, all pages in one
 * snapshot. Throw {@link RetryLater} to be called again on the next wake, anything else to stop
 * the agent rather than skip data silently.
 */
export type ResyncHandler = (snapshot: ResyncResponse) => Promise<void> | void;

/** How an event ended for this agent. */
export type Outcome =
  | { kind: "acked" }
  | { kind: "failed"; reason: string }
  | { kind: "quarantined"; reason: string; class: QuarantineClass }
  | { kind: "released"; retryAfterSeconds: number; reason: string }
  | { kind: "deduplicated"; result: ProcessedResult }
  | { kind: "unconfirmed"; error: string };

/** What the runner reports as it goes. Called inline: keep the observer quick. */
export type Progress =
  | { type: "subscribed"; sessionId: string; recipientId: string; cursor: number; headSeq: number }
  | { type: "role"; leader: boolean }
  | { type: "transport"; status: TransportStatus }
  | { type: "hint"; headSeq: number | null; from: "stream" | "tab" | "lifecycle" }
  | { type: "disconnected"; error: InboxError; retryInMs: number }
  | { type: "scanned"; cursor: number; headSeq: number }
  /** One claim: asked for `limit`, got `eventIds`, in `elapsedMs`. */
  | { type: "claimed"; limit: number; eventIds: string[]; elapsedMs: number }
  | { type: "started"; event: EventEnvelope }
  | { type: "finished"; event: EventEnvelope; outcome: Outcome; elapsedMs: number }
  | { type: "lease_lost"; eventId: string }
  | { type: "resynced"; snapshot: ResyncResponse }
  | { type: "clock_jumped"; driftMs: number };

export interface AgentOptions {
  api: InboxApi;
  handler: Handler;
  /** After a cursor reset; default: carry on (open events are still claimed as usual). */
  resync?: ResyncHandler;
  /** Default: the browser's (IndexedDB, EventSource, Web Locks) or Node's (JSON file). */
  platform?: Platform;
  /** Default: the platform's store named `stateName`. */
  state?: LocalState;
  /** Default: the inbox, `tenant/agent`. */
  stateName?: string;
  deviceId?: string;
  /** Events handled at once by this tab or process; default 1. */
  concurrency?: number;
  /** Lease asked for per claim; default the service's. */
  leaseSeconds?: number;
  transport?: Partial<TransportConfig>;
  /** Polling while no stream or long poll is connected. */
  poll?: PollSchedule;
  /**
   * Probing while the service cannot be reached (refused or broken connections, timeouts, 5xx):
   * default `OUTAGE_BACKOFF`, 0.5 s doubling to 2 s, so a returning service is found within
   * about 2 s; a `Retry-After` from the service is obeyed. Reset by the first request that works.
   */
  outage?: Backoff;
  ackRetry?: Backoff;
  ackAttemptsMax?: number;
  pageSize?: number;
  scanPagesMax?: number;
  /** On stop, how long running handlers get before their events are released; default 30 s. */
  shutdownGraceMs?: number;
  /** In a browser, share one stream among the agent's tabs (default true). */
  shareStreamAcrossTabs?: boolean;
  tabTiming?: TabGroupTiming;
  observer?: (progress: Progress) => void;
}

export interface RunSummary {
  acked: number;
  failed: number;
  quarantined: number;
  released: number;
  deduplicated: number;
  unconfirmed: number;
  resyncs: number;
}
