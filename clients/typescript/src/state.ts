/**
 * The agent's durable memory: the cursor it polls after, and a bounded record of event ids it
 * already processed (with the result), so an event delivered again after a crash, a reload or
 * a lost acknowledgement is acknowledged without running the handler a second time. Records
 * are keyed by inbox (`tenant/agent`), so one store may serve several identities.
 *
 * Implementations: {@link MemoryState} here, `IndexedDbState` in browsers (shared by every
 * tab of the origin), `JsonFileState` in Node.
 */

import type { QuarantineClass } from "./wire.js";

export type ProcessedResult = "completed" | "failed" | "quarantined";

/** Why the handler quarantined an event, kept with its record so a redelivery says the same. */
export interface QuarantineDetail {
  reason: string;
  class: QuarantineClass;
}

export interface LocalState {
  /** The cursor to poll after (0 when none was stored). */
  cursor(inbox: string): Promise<number>;
  /** Moves the cursor forward to `afterSeq`; never back (another tab may be ahead). */
  advanceCursor(inbox: string, afterSeq: number): Promise<void>;
  /** Sets the cursor exactly: after a resync, where the service says to continue. */
  resetCursor(inbox: string, afterSeq: number): Promise<void>;
  /** How `eventId` ended here before, if it did. */
  processed(inbox: string, eventId: string): Promise<ProcessedResult | null>;
  /**
   * Records a handler's result; durable when the promise resolves (before the ack is sent).
   * `detail`: with `quarantined`, the reason and class.
   */
  recordProcessed(inbox: string, eventId: string, inboxSeq: number, result: ProcessedResult, detail?: QuarantineDetail): Promise<void>;
  /**
   * The reason and class recorded with a `quarantined` result. Optional: a store without it
   * acknowledges a redelivered quarantine with a reason that says it was recorded earlier.
   */
  quarantineDetail?(inbox: string, eventId: string): Promise<QuarantineDetail | null>;
  close(): Promise<void>;
}

/** Processed ids remembered per inbox by default. */
export const PROCESSED_CAPACITY_DEFAULT = 10_000;

/** The plain data a state keeps; the file store writes exactly this as JSON. */
export interface StateSnapshot {
  version: 1;
  cursors: Record<string, number>;
  /** Per inbox: event id -> [inbox_seq, result, processed_at_ms, quarantine detail?], oldest first. */
  processed: Record<string, Record<string, [number, ProcessedResult, number] | [number, ProcessedResult, number, QuarantineDetail]>>;
}

/**
 * State in memory, lost with the process: for tests and agents that need no durability.
 * Also the in-memory half of the JSON file store.
 */
export class MemoryState implements LocalState {
  protected snapshot: StateSnapshot;
  readonly #capacity: number;

  constructor(capacity: number = PROCESSED_CAPACITY_DEFAULT, snapshot?: StateSnapshot) {
    this.#capacity = Math.max(1, capacity);
    this.snapshot = snapshot ?? { version: 1, cursors: {}, processed: {} };
  }

  async cursor(inbox: string): Promise<number> {
    return this.snapshot.cursors[inbox] ?? 0;
  }

  async advanceCursor(inbox: string, afterSeq: number): Promise<void> {
    const current = this.snapshot.cursors[inbox] ?? 0;
    if (afterSeq > current) {
      this.snapshot.cursors[inbox] = afterSeq;
      await this.persist();
    }
  }

  async resetCursor(inbox: string, afterSeq: number): Promise<void> {
    this.snapshot.cursors[inbox] = afterSeq;
    await this.persist();
  }

  async processed(inbox: string, eventId: string): Promise<ProcessedResult | null> {
    return this.snapshot.processed[inbox]?.[eventId]?.[1] ?? null;
  }

  async quarantineDetail(inbox: string, eventId: string): Promise<QuarantineDetail | null> {
    return this.snapshot.processed[inbox]?.[eventId]?.[3] ?? null;
  }

  async recordProcessed(inbox: string, eventId: string, inboxSeq: number, result: ProcessedResult, detail?: QuarantineDetail): Promise<void> {
    const records = (this.snapshot.processed[inbox] ??= {});
    delete records[eventId];
    records[eventId] = detail === undefined ? [inboxSeq, result, Date.now()] : [inboxSeq, result, Date.now(), { reason: detail.reason, class: detail.class }];
    const ids = Object.keys(records);
    for (let excess = ids.length - this.#capacity, i = 0; i < excess; i++) {
      delete records[ids[i]!];
    }
    await this.persist();
  }

  async close(): Promise<void> {}

  /** Called after every change; durable stores write here. */
  protected async persist(): Promise<void> {}
}
