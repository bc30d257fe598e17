/**
 * One claimed event, from its lease to its outcome: deduplicate it against the durable record,
 * or run the handler while heartbeating the lease; record the result *before* acknowledging it
 * (so a redelivery after a crash, a reload or a lost acknowledgement is acknowledged from the
 * record instead of run twice); then acknowledge, release for a retry, dead-letter, or
 * quarantine (set aside for a person, with the handler's reason). The
 * runner (`agent.ts`) decides when events are claimed; this module only finishes them.
 */

import { retrying } from "./acks.js";
import type { AckBatcher, RetryPolicy } from "./acks.js";
import type { InboxApi } from "./api.js";
import type { HandOff, Handler, InboxEvent, Outcome, Progress } from "./contract.js";
import { Fatal, InboxError, ProblemError, QuarantineError, RetryLater, fitReason } from "./errors.js";
import { heartbeatDelay, heartbeatRetryDelay, retryAfterSeconds } from "./schedule.js";
import type { LocalState, ProcessedResult, QuarantineDetail } from "./state.js";
import type { AckEntry, Claim, JsonObject } from "./wire.js";

/** Delay before an event whose handler threw an unexpected error is tried again. */
const UNEXPECTED_ERROR_RETRY_SECONDS = 30;
/** A redelivered quarantine whose reason the local store did not keep. */
const QUARANTINED_BEFORE: QuarantineDetail = Object.freeze({ reason: "quarantined by this agent before the event was delivered again", class: "other" });

/** An event this tab holds a lease on, from its claim until its outcome. */
export interface Running {
  claim: Claim;
  controller: AbortController;
  done: Promise<void>;
  /** Recorded and being acknowledged; until then the lease is given back if the tab goes away. */
  result: ProcessedResult | null;
  /** With a `quarantined` result: the reason and class its acknowledgement carries. */
  detail?: QuarantineDetail | undefined;
  /** With a `failed` result: the handler's reason, kept with the dead letter. */
  reason?: string | undefined;
}

/**
 * The acknowledgement of a recorded result: a quarantine carries its reason and class, a failure
 * its reason (kept with the dead letter; none when the handler gave none).
 */
export function ackEntry(claim: Claim, result: ProcessedResult, detail: QuarantineDetail | undefined, reason = ""): AckEntry {
  const entry: AckEntry = { event_id: claim.event_id, lease_token: claim.lease_token, result };
  if (result === "failed") {
    const kept = fitReason(reason);
    if (kept.length > 0) entry.reason = kept;
  } else if (result === "quarantined") {
    const { reason, class: quarantineClass } = detail ?? QUARANTINED_BEFORE;
    entry.reason = reason;
    entry.class = quarantineClass;
  }
  return entry;
}

/** What finishing events needs from the runner. */
export interface DeliveryContext {
  readonly api: InboxApi;
  readonly state: LocalState;
  /** The state's key for this agent: `tenant/agent`. */
  readonly inbox: string;
  readonly handler: Handler;
  readonly leaseSeconds: number;
  readonly acks: AckBatcher;
  readonly retryPolicy: RetryPolicy;
  sessionId(): string | null;
  observe(progress: Progress): void;
  /** The event's result is recorded: its handler slot is free while the ack is on its way. */
  recorded(eventId: string): void;
}

/** Finishes claimed events for one running agent. */
export class Delivery {
  readonly #context: DeliveryContext;

  constructor(context: DeliveryContext) {
    this.#context = context;
  }

  /** One event: deduplicate, or run the handler under heartbeats; then acknowledge or release. */
  async finish(running: Running): Promise<Outcome> {
    const { claim, controller } = running;
    const signal = controller.signal;
    const { state, inbox } = this.#context;
    let prior: ProcessedResult | null = null;
    try {
      // A first delivery cannot have been processed: a result is only recorded under a lease,
      // and every lease counts a delivery.
      if (claim.event.delivery_attempts > 1) prior = await state.processed(inbox, claim.event_id);
      // Only a completed event is answered from the record. One that failed or was quarantined
      // here comes back only when its acknowledgement was lost or an operator requeued or
      // released it, and an operator is asking for exactly that: to run it again.
      if (prior !== "completed") prior = null;
    } catch {
      // Without the record we cannot tell whether this ran before; give it back.
      return this.#release(claim, 5, "local_state_unavailable");
    }
    if (prior !== null) {
      running.result = prior;
      this.#context.recorded(claim.event_id);
      try {
        await this.#acknowledge(claim, prior, undefined);
        return { kind: "deduplicated", result: prior };
      } catch (error) {
        return { kind: "unconfirmed", error: String(error) };
      }
    }
    const event: InboxEvent = {
      eventId: claim.event_id,
      eventType: claim.event.event_type,
      inboxSeq: claim.event.inbox_seq,
      // The schema says "an object"; what JSON.parse made of it holds JSON values only.
      payload: (claim.event.payload ?? null) as JsonObject | null,
      leaseUntilUtc: claim.visibility_lease_until_utc,
      envelope: claim.event,
    };
    let result: ProcessedResult;
    let reason = "";
    let detail: QuarantineDetail | undefined;
    let done: void | HandOff = undefined;
    try {
      done = await this.#withHeartbeats(claim, async () => this.#context.handler(event, { signal }));
      result = "completed";
    } catch (error) {
      if (error instanceof Fatal) {
        result = "failed";
        reason = error.message;
      } else if (error instanceof QuarantineError) {
        result = "quarantined";
        detail = { reason: error.reason, class: error.quarantineClass };
      } else {
        // RetryLater says when; a refusal the handler met passes on its Retry-After.
        const after =
          error instanceof RetryLater
            ? error.retryAfterSeconds
            : error instanceof ProblemError && error.retryAfter !== undefined
              ? retryAfterSeconds(error.retryAfter)
              : UNEXPECTED_ERROR_RETRY_SECONDS;
        return this.#release(claim, after, error instanceof Error ? error.message : String(error));
      }
    }
    if (result === "completed" && done && done.followUps.length > 0) return this.#handOff(claim, done);
    try {
      await state.recordProcessed(inbox, claim.event_id, claim.event.inbox_seq, result, detail);
    } catch {
      // The ack still goes out; a redelivery (rare) would then run again.
    }
    running.result = result;
    running.detail = detail;
    running.reason = reason;
    this.#context.recorded(claim.event_id);
    try {
      await this.#acknowledge(claim, result, detail, reason);
    } catch (error) {
      return { kind: "unconfirmed", error: String(error) };
    }
    if (detail !== undefined) return { kind: "quarantined", reason: detail.reason, class: detail.class };
    return result === "completed" ? { kind: "acked" } : { kind: "failed", reason };
  }

  /**
   * Acknowledges with the follow-ups and records the event only once that committed: until then
   * nothing was handed on, and a redelivery must run again to make them. The running event keeps
   * no result, so a tab that goes away meanwhile gives the lease back rather than resend a plain
   * acknowledgement without them.
   */
  async #handOff(claim: Claim, done: HandOff): Promise<Outcome> {
    const { state, inbox } = this.#context;
    this.#context.recorded(claim.event_id);
    const entry: AckEntry = { ...ackEntry(claim, "completed", undefined), follow_ups: [...done.followUps] };
    try {
      await this.#context.acks.acknowledge(entry);
    } catch (error) {
      return { kind: "unconfirmed", error: String(error) };
    }
    try {
      await state.recordProcessed(inbox, claim.event_id, claim.event.inbox_seq, "completed", undefined);
    } catch {
      // Committed: a redelivery (rare) runs again and its hand-off finds the first publishes.
    }
    return { kind: "acked" };
  }

  async #release(claim: Claim, retryAfterSeconds: number, reason: string): Promise<Outcome> {
    const { api, retryPolicy } = this.#context;
    try {
      await retrying(retryPolicy, () =>
        // The service refuses control characters (an error's message often has lines).
        api.release({ event_id: claim.event_id, lease_token: claim.lease_token, reason: fitReason(reason), retry_after_seconds: retryAfterSeconds }),
      );
      return { kind: "released", retryAfterSeconds, reason };
    } catch (error) {
      return { kind: "unconfirmed", error: String(error) };
    }
  }

  /** Runs `work` while extending the lease at half its length. A lost lease is not won back. */
  async #withHeartbeats<T>(claim: Claim, work: () => Promise<T>): Promise<T> {
    const { api, leaseSeconds } = this.#context;
    const leaseMs = leaseSeconds * 1000;
    let handle: ReturnType<typeof setTimeout> | undefined;
    let finished = false;
    const beat = async (): Promise<void> => {
      let nextMs = heartbeatDelay(leaseMs);
      try {
        const answer = await api.heartbeat({
          session_id: this.#context.sessionId(),
          leases: [{ event_id: claim.event_id, lease_token: claim.lease_token, extend_by_seconds: leaseSeconds }],
        });
        if (answer.leases[0]?.error) {
          this.#context.observe({ type: "lease_lost", eventId: claim.event_id });
          return;
        }
      } catch (error) {
        if (!(error instanceof InboxError) || !error.retryable) return;
        nextMs = heartbeatRetryDelay(leaseMs);
      }
      if (!finished) handle = setTimeout(() => void beat(), nextMs);
    };
    handle = setTimeout(() => void beat(), heartbeatDelay(leaseMs));
    try {
      return await work();
    } finally {
      finished = true;
      clearTimeout(handle);
    }
  }

  /** Acknowledges one event (batched with others on their way; repeated on network failure). */
  #acknowledge(claim: Claim, result: ProcessedResult, detail: QuarantineDetail | undefined, reason = ""): Promise<void> {
    return this.#context.acks.acknowledge(ackEntry(claim, result, detail, reason));
  }
}
