/**
 * Reading the inbox after the agent's durable cursor: page by page, folded by {@link Scan}
 * into what is claimable and when something will be, persisting how far the cursor may move;
 * and, when the service no longer has the history after the cursor (`cursor_reset_required`),
 * the resync: the whole snapshot to the application's callback, then the cursor set where the
 * service says to continue.
 */

import type { InboxApi } from "./api.js";
import type { Progress, ResyncHandler } from "./contract.js";
import { InboxError, ProblemError, ResyncError, RetryLater } from "./errors.js";
import { BATCH_EVENTS_MAX } from "./limits.js";
import { Scan } from "./scan.js";
import type { LocalState } from "./state.js";
import type { ResyncResponse } from "./wire.js";

/** What reading the inbox needs from the runner. */
export interface ScannerContext {
  readonly api: InboxApi;
  readonly state: LocalState;
  /** The state's key for this agent: `tenant/agent`. */
  readonly inbox: string;
  readonly pageSize: number | undefined;
  readonly scanPagesMax: number | undefined;
  readonly resync: ResyncHandler | undefined;
  observe(progress: Progress): void;
  /** The cursor was reset: open events may sit at or below it, so claim without a scan's say-so. */
  resynced(): void;
}

export interface ScanResult {
  scan: Scan;
  /** The page limit ended the scan before the head. */
  truncated: boolean;
}

export class Scanner {
  readonly #context: ScannerContext;

  constructor(context: ScannerContext) {
    this.#context = context;
  }

  get #pageSize(): number {
    return Math.min(Math.max(this.#context.pageSize ?? 100, 1), BATCH_EVENTS_MAX);
  }

  /** Reads the inbox after the cursor, page by page; persists the cursor it may move to. */
  async scan(held: ReadonlySet<string>): Promise<ScanResult> {
    const { api, state, inbox } = this.#context;
    let cursor = await state.cursor(inbox);
    let scan = new Scan(cursor);
    let pages = 0;
    const pagesMax = Math.max(this.#context.scanPagesMax ?? 10, 1);
    let truncated = false;
    for (;;) {
      let page;
      try {
        page = await api.poll({ after_seq: Math.max(scan.seenThrough, cursor), limit: this.#pageSize });
      } catch (error) {
        if (error instanceof ProblemError && error.code === "cursor_reset_required") {
          cursor = await this.#resync();
          scan = new Scan(cursor);
          continue;
        }
        throw error;
      }
      scan.addPage(page.events, page.next_cursor, page.head_seq, Date.now(), held);
      pages += 1;
      if (!page.more_available) break;
      if (pages >= pagesMax) {
        truncated = true;
        break;
      }
    }
    if (scan.cursor > cursor) await state.advanceCursor(inbox, scan.cursor);
    this.#context.observe({ type: "scanned", cursor: scan.cursor, headSeq: scan.headSeq });
    return { scan, truncated };
  }

  /** After `cursor_reset_required`: every page of the snapshot to the callback, then continue after it. */
  async #resync(): Promise<number> {
    const snapshot = await resyncSnapshot(this.#context.api, this.#pageSize);
    this.#context.observe({ type: "resynced", snapshot });
    try {
      await this.#context.resync?.(snapshot);
    } catch (error) {
      if (error instanceof RetryLater) throw new InboxError("resync_deferred", `the resync callback asked to retry: ${error.message}`, true);
      throw new ResyncError(error instanceof Error ? error.message : String(error), { cause: error });
    }
    await this.#context.state.resetCursor(this.#context.inbox, snapshot.resume_after_seq);
    this.#context.resynced();
    return snapshot.resume_after_seq;
  }
}

/**
 * The whole resync snapshot: every page of open events up to the first page's resume point.
 * Events past it were published during the resync; the scans that follow find them as usual.
 */
export async function resyncSnapshot(api: InboxApi, pageSize: number): Promise<ResyncResponse> {
  const first = await api.resyncPage(0, pageSize);
  const snapshot: ResyncResponse = { ...first, open_events: [] };
  let page = first;
  for (;;) {
    const pastResume = page.open_events.some((e) => e.inbox_seq > snapshot.resume_after_seq);
    snapshot.open_events.push(...page.open_events.filter((e) => e.inbox_seq <= snapshot.resume_after_seq));
    snapshot.more_available = page.more_available && page.open_events.length > 0 && !pastResume;
    const last = snapshot.open_events[snapshot.open_events.length - 1];
    if (!snapshot.more_available || last === undefined) return snapshot;
    page = await api.resyncPage(last.inbox_seq, pageSize);
  }
}
