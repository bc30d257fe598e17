/**
 * The claims of one running agent: every claim request goes through here, so the slots they
 * reserve are counted in one place ({@link ClaimBudget}), and hints turn into claims at once —
 * not through the runner's loop, and not after a claim already on its way.
 *
 * A stream hint in the leader (or the only runner outside browsers) is split by the
 * {@link Dispatcher}: a claim sized to this tab's share goes out now, beside any in flight,
 * and the hint goes on to the other tabs with how many events each claims. A follower claims
 * its share as the hint arrives and reports its free slots back. What no tab had room for is
 * handed out when a slot frees. The runner's loop still scans and claims on its own schedule
 * (start, lifecycle changes, timers, at most once a second while hints flow) through
 * {@link Claimer.claim}, which catches whatever the hints missed.
 */

import type { InboxApi } from "./api.js";
import { ClaimBudget, Dispatcher } from "./claims.js";
import type { Progress } from "./contract.js";
import { InboxError, ProblemError, SessionSupersededError } from "./errors.js";
import { BATCH_EVENTS_MAX } from "./limits.js";
import type { TabGroup } from "./tabs.js";
import type { Claim } from "./wire.js";

/** Most events asked for in one claim (the service's limit). */
const CLAIM_LIMIT_MAX = BATCH_EVENTS_MAX;
/** A follower that has not answered an assignment this long is presumed gone. */
const ASSIGNMENT_TIMEOUT_MS = 1_000;
/** "As many as you have room for", in an open hint (the leader knows no other tab's slots). */
const OPEN_SHARE = CLAIM_LIMIT_MAX;

/** What claiming needs from the runner. */
export interface ClaimerHost {
  readonly api: InboxApi;
  readonly leaseSeconds: number | undefined;
  sessionId(): string | null;
  knownHead(): number;
  noteHead(headSeq: number): void;
  tabs(): TabGroup | null;
  /** The service cannot be reached: the leader leaves the work to the other tabs. */
  serviceDown(): boolean;
  /** A hint-driven claim failed: let the loop's error handling take over (backoff, fatal errors). */
  claimFailed(error: unknown): void;
  /** Starts the handler of a claimed event (its slot is counted busy already). */
  start(claim: Claim): void;
  /**
   * A claim came back with fewer events than it reserved slots for: those slots are free
   * again. The loop may be waiting for a free slot (it found none while the claim was out).
   */
  slotsReturned(): void;
  /** Hints flow: the loop scans when its once-a-second scan is due. */
  scanSoon(): void;
  /** Something may have been missed: the loop scans and claims now. */
  rescan(): void;
  observe(progress: Progress): void;
}

export class Claimer {
  readonly budget: ClaimBudget;
  readonly #host: ClaimerHost;
  /** While this tab hears the stream (leads, or runs alone). */
  #dispatcher: Dispatcher | null = null;
  /** As follower: the last assignment this tab has seen. */
  #answered = 0;
  #stopped = false;

  constructor(host: ClaimerHost, concurrency: number) {
    this.#host = host;
    this.budget = new ClaimBudget(concurrency);
  }

  /** No more claims (the agent stops or the page goes away). */
  stop(): void {
    this.#stopped = true;
  }

  /**
   * One claim of up to `limit` events (cut to the free slots), started as they come. When it
   * comes back short, every event up to the head known at sending was taken: nothing waits.
   */
  async claim(limit: number): Promise<Claim[]> {
    const size = Math.min(limit, this.budget.free, CLAIM_LIMIT_MAX);
    if (size < 1 || this.#stopped) return [];
    const headAtSend = this.#host.knownHead();
    const sentAt = Date.now();
    this.budget.reserve(size);
    let claims: Claim[] = [];
    try {
      const leaseSeconds = this.#host.leaseSeconds;
      const answer = await this.#host.api.claim({
        session_id: this.#host.sessionId(),
        limit: size,
        ...(leaseSeconds === undefined ? {} : { lease_seconds: leaseSeconds }),
      });
      claims = answer.claims;
    } catch (error) {
      if (error instanceof ProblemError && error.code === "session_superseded") throw new SessionSupersededError(this.#host.sessionId() ?? "");
      throw error;
    } finally {
      this.budget.answered(size, claims.length);
      if (claims.length < size) this.#host.slotsReturned();
    }
    this.#host.observe({ type: "claimed", limit: size, eventIds: claims.map((c) => c.event_id), elapsedMs: Date.now() - sentAt });
    if (claims.length < size) this.#dispatcher?.coveredThrough(headAtSend);
    for (const claim of claims) this.#host.start(claim);
    return claims;
  }

  /** A handler's result is recorded (or its event given back): hand out what waits for a slot. */
  slotFreed(): void {
    this.budget.finished();
    this.#slotsChanged();
  }

  /** This tab leads now (the dispatcher starts from the head known), or follows. */
  leading(leader: boolean): void {
    this.#dispatcher = leader ? new Dispatcher(this.#host.knownHead()) : null;
    this.#answered = 0;
  }

  /** The stream's hint: claim this tab's share now and tell the other tabs theirs. */
  streamHint(headSeq: number | null): void {
    if (headSeq === null) {
      // A (re)connection: hints may have been missed, and the head is not known.
      this.#host.rescan();
      return;
    }
    this.#host.noteHead(headSeq);
    this.#dispatch(true);
    this.#host.scanSoon();
  }

  /**
   * As follower: the leader's hint; claim this tab's share of it now. The report goes back at
   * once (the claim's reservation counted), so the leader knows the assignment arrived however
   * long the claim takes; another follows if the claim comes back short or fails.
   */
  tabHint(share: number, dispatchId: number, assigned: boolean, open: boolean): void {
    // The leader's scans find what its hints missed; a follower only claims its share.
    this.#answered = Math.max(this.#answered, dispatchId);
    if (share < 1 || this.#stopped) {
      // An open hint: the leader knows no slots of this tab (new, or it presumed this tab gone).
      if (assigned || open) this.#report(assigned ? share : 0);
      return;
    }
    const take = Math.min(share, this.budget.free, CLAIM_LIMIT_MAX);
    // Only what the leader counted on this tab for goes back to it; an open hint's rest is nobody's.
    const declined = assigned ? share - take : 0;
    if (take < 1) {
      this.#report(declined);
      return;
    }
    const claiming = this.claim(take);
    this.#report(declined);
    claiming.then(
      (claims) => {
        if (claims.length < take) this.#report(0);
      },
      (error: unknown) => {
        // The leader hands these out again; the loop deals with the failure.
        this.#report(assigned ? take : 0);
        this.#host.claimFailed(error);
      },
    );
  }

  /** As leader: another tab's report of its slots. */
  followerSlots(tabId: string, free: number, answered: number, declined: number): void {
    this.#dispatcher?.report(tabId, free, answered, declined);
    this.#dispatch(false);
  }

  /** As leader: another tab stopped; what it was given and did not take is handed out again. */
  followerLeft(tabId: string): void {
    this.#dispatcher?.left(tabId);
    this.#dispatch(false);
  }

  /** As follower: a new leader speaks; it learns this tab's slots. */
  newLeader(): void {
    this.#report(0);
  }

  /** The leader's claims fail or came back full: the other tabs claim what they have room for. */
  openToAll(): void {
    const tabs = this.#host.tabs();
    if (tabs === null || !tabs.isLeader || this.#dispatcher === null) return;
    tabs.broadcastHint(this.#host.knownHead(), {
      dispatchId: 0,
      assigned: {},
      unassigned: OPEN_SHARE,
      open: true,
      dispatchedThrough: this.#dispatcher.dispatchedThrough,
    });
  }

  /** As leader, or alone: hand out what waits, after a change of anybody's slots. */
  #slotsChanged(): void {
    if (this.#dispatcher !== null) this.#dispatch(false);
    else this.#report(0);
  }

  /**
   * Splits what is new past the dispatcher's mark: a claim for this tab's share now, the rest
   * to the other tabs in one hint. `announce`: a stream hint, passed on even when nothing is
   * handed out (every tab hears of new work).
   */
  #dispatch(announce: boolean): void {
    const dispatcher = this.#dispatcher;
    if (dispatcher === null || this.#stopped) return;
    const now = Date.now();
    dispatcher.expire(now, ASSIGNMENT_TIMEOUT_MS);
    const headSeq = this.#host.knownHead();
    const ownFree = this.#host.serviceDown() ? 0 : this.budget.free;
    const plan = dispatcher.dispatch(headSeq, ownFree, now);
    if (plan !== null && plan.own > 0) {
      const own = plan.own;
      this.claim(own).catch((error: unknown) => {
        dispatcher.ownFailed(own);
        if (error instanceof InboxError && error.retryable) this.openToAll();
        this.#host.claimFailed(error);
      });
    }
    const tabs = this.#host.tabs();
    if (tabs === null || !tabs.isLeader) return;
    const assignedAny = plan !== null && Object.keys(plan.assigned).length > 0;
    const open = dispatcher.followers === 0;
    const unassigned = headSeq - dispatcher.dispatchedThrough;
    if (!announce && !assignedAny && !(open && unassigned > 0)) return;
    tabs.broadcastHint(headSeq, {
      dispatchId: plan?.id ?? 0,
      assigned: plan?.assigned ?? {},
      unassigned: Math.max(0, unassigned),
      open,
      dispatchedThrough: dispatcher.dispatchedThrough,
    });
  }

  /** As follower: tell the leader this tab's free slots. */
  #report(declined: number): void {
    const tabs = this.#host.tabs();
    if (tabs === null || tabs.isLeader) return;
    tabs.reportSlots(this.budget.free, this.#answered, declined);
  }
}
