/**
 * What a scan of the inbox after the cursor means for the agent, as a pure fold over poll
 * pages: how far the cursor may move, whether anything is claimable now, and when something
 * not claimable yet (a retry delay, another tab's lease, a delayed delivery) will be.
 *
 * The cursor only moves over a prefix of terminal events (acknowledged, dead-lettered,
 * quarantined, expired): an event another tab or process holds stays after the cursor until
 * it is finished, so if that holder dies this agent sees it again.
 */

import type { EventEnvelope } from "./wire.js";

export class Scan {
  /** The cursor the scan may persist: every event up to it is terminal. */
  cursor: number;
  blocked = false;
  /** Events a claim could take now. */
  claimable = 0;
  /** Their ids (a scan that finds one claimable again knows the hints did not cover it). */
  readonly claimableIds: string[] = [];
  /** The earliest time (epoch ms) an open event that is not claimable yet may become so. */
  nextChangeMs: number | null = null;
  headSeq = 0;
  /** The highest sequence the pages contained. */
  seenThrough: number;

  constructor(cursor: number) {
    this.cursor = cursor;
    this.seenThrough = cursor;
  }

  /** Adds one page. `held` are events this agent works on: their leases are its own. */
  addPage(events: readonly EventEnvelope[], nextCursor: number, headSeq: number, nowMs: number, held: ReadonlySet<string>): void {
    this.headSeq = Math.max(this.headSeq, headSeq);
    for (const event of events) {
      this.seenThrough = Math.max(this.seenThrough, event.inbox_seq);
      const state = classify(event, nowMs);
      if (state.kind === "terminal") {
        if (!this.blocked) this.cursor = Math.max(this.cursor, event.inbox_seq);
        continue;
      }
      if (state.kind === "claimable") {
        this.claimable += 1;
        this.claimableIds.push(event.event_id);
      } else if (state.kind === "later" && !held.has(event.event_id)) {
        this.nextChangeMs = this.nextChangeMs === null ? state.atMs : Math.min(this.nextChangeMs, state.atMs);
      }
      this.blocked = true;
    }
    if (!this.blocked) this.cursor = Math.max(this.cursor, nextCursor);
    this.seenThrough = Math.max(this.seenThrough, nextCursor);
  }
}

type EventState = { kind: "terminal" } | { kind: "claimable" } | { kind: "later"; atMs: number } | { kind: "unknown" };

function classify(event: EventEnvelope, nowMs: number): EventState {
  const time = (text: string | null | undefined): number | null => {
    if (text === null || text === undefined) return null;
    const ms = Date.parse(text);
    return Number.isNaN(ms) ? null : ms;
  };
  switch (event.ack_state) {
    case "acked":
    case "dead_letter":
    case "quarantined":
    case "expired":
      return { kind: "terminal" };
    case "claimed": {
      const until = time(event.visibility_lease_until_utc);
      return until === null ? { kind: "unknown" } : { kind: "later", atMs: until };
    }
    case "available":
    case "retry_scheduled": {
      const from = Math.max(time(event.availability_at_utc) ?? 0, time(event.next_retry_at_utc) ?? 0);
      return from <= nowMs && event.ack_state === "available" ? { kind: "claimable" } : { kind: "later", atMs: from };
    }
    default:
      return { kind: "unknown" };
  }
}
