/**
 * How many events a tab may claim, and — in the leader tab — which tab claims what a hint
 * announced. Pure bookkeeping, no I/O, so the rules are tested on their own:
 *
 * - {@link ClaimBudget}: a tab's handler slots. A claim reserves its `limit` while it is on its
 *   way, so several claims can be in flight at once and together never exceed the free slots;
 *   its answer turns the events it got into busy slots and frees the rest; a handler's slot
 *   frees once its result is recorded (its acknowledgement may still be on the way).
 * - {@link Dispatcher}: the leader's split of the new events a hint reports (its head past
 *   what was already handed out): first to its own free slots, the rest to the other tabs by
 *   the free slots they last reported, so one claim goes out per event and none waits for a
 *   claim already running. What no tab has room for waits until a slot frees anywhere. An
 *   assignment a tab does not answer in time (the tab went away) is handed out again.
 *
 * The service's leases, not this accounting, guarantee that an event is held by one tab at a
 * time: a claim sized from stale numbers only comes back short.
 */

export class ClaimBudget {
  readonly concurrency: number;
  #busy = 0;
  #reserved = 0;
  #inFlight = 0;

  constructor(concurrency: number) {
    this.concurrency = concurrency;
  }

  /** Slots neither running a handler nor reserved by a claim in flight. */
  get free(): number {
    return this.concurrency - this.#busy - this.#reserved;
  }

  /** Handlers running (their results not recorded yet). */
  get busy(): number {
    return this.#busy;
  }

  /** Claims on their way. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** A claim of `limit` goes out: at most the free slots. */
  reserve(limit: number): void {
    if (!Number.isInteger(limit) || limit < 1 || limit > this.free) {
      throw new RangeError(`a claim of ${limit} with ${this.free} free slots`);
    }
    this.#reserved += limit;
    this.#inFlight += 1;
  }

  /** The claim of `limit` came back with `got` events (0 when it failed). */
  answered(limit: number, got: number): void {
    if (got > limit || this.#reserved < limit || this.#inFlight < 1) throw new RangeError(`an answer of ${got} to a claim of ${limit}`);
    this.#reserved -= limit;
    this.#inFlight -= 1;
    this.#busy += got;
  }

  /** A handler's result is recorded (or its event given back): its slot is free. */
  finished(): void {
    if (this.#busy < 1) throw new RangeError("a slot freed twice");
    this.#busy -= 1;
  }
}

/** What a follower last said about its slots, and what the leader assigned it since. */
interface FollowerSlots {
  free: number;
  /** Assignments not answered yet, by dispatch number: how many events, and when. */
  outstanding: Map<number, { events: number; atMs: number }>;
}

/** The leader's plan for one hint: claim `own` now, and tell the tabs `assigned`. */
export interface Dispatch {
  /** Numbers the assignments, so a tab's answer says which ones it has seen. */
  id: number;
  own: number;
  assigned: Record<string, number>;
  /** The head every event up to which has been handed out (or is left waiting). */
  dispatchedThrough: number;
}

export class Dispatcher {
  readonly #followers = new Map<string, FollowerSlots>();
  #dispatchedThrough: number;
  #nextId = 1;

  /** `headSeq`: the head when this tab took the lead; what is before it the first scan finds. */
  constructor(headSeq: number) {
    this.#dispatchedThrough = headSeq;
  }

  get dispatchedThrough(): number {
    return this.#dispatchedThrough;
  }

  /** Every event up to `headSeq` was there for a claim that came back short: nothing waits. */
  coveredThrough(headSeq: number): void {
    this.#dispatchedThrough = Math.max(this.#dispatchedThrough, headSeq);
  }

  /**
   * Splits the events past what was handed out, up to `headSeq`: `ownFree` to this tab, the
   * rest to the other tabs with room, the most room first. Returns null when nothing is new
   * or nobody has room (the events wait for {@link dispatch} after a slot frees).
   */
  dispatch(headSeq: number, ownFree: number, nowMs: number): Dispatch | null {
    let pending = headSeq - this.#dispatchedThrough;
    if (pending <= 0) return null;
    const own = Math.max(0, Math.min(pending, ownFree));
    pending -= own;
    const id = this.#nextId++;
    const assigned: Record<string, number> = {};
    const withRoom = [...this.#followers].filter(([, f]) => f.free > 0).sort((a, b) => b[1].free - a[1].free);
    for (const [tabId, follower] of withRoom) {
      if (pending === 0) break;
      const events = Math.min(pending, follower.free);
      assigned[tabId] = events;
      follower.free -= events;
      follower.outstanding.set(id, { events, atMs: nowMs });
      pending -= events;
    }
    const handedOut = headSeq - this.#dispatchedThrough - pending;
    if (handedOut === 0) return null;
    this.#dispatchedThrough += handedOut;
    return { id, own, assigned, dispatchedThrough: this.#dispatchedThrough };
  }

  /**
   * A follower's report: `free` slots after every assignment up to `answered`, of which it
   * could not take `declined` events (those are handed out again).
   */
  report(tabId: string, free: number, answered: number, declined: number): void {
    const follower = this.#followers.get(tabId) ?? { free: 0, outstanding: new Map() };
    this.#followers.set(tabId, follower);
    let stillOut = 0;
    for (const [id, assignment] of follower.outstanding) {
      if (id <= answered) follower.outstanding.delete(id);
      else stillOut += assignment.events;
    }
    follower.free = Math.max(0, free - stillOut);
    this.#undispatch(declined);
  }

  /** A follower went away: what it was assigned and did not answer is handed out again. */
  left(tabId: string): void {
    const follower = this.#followers.get(tabId);
    if (follower === undefined) return;
    this.#followers.delete(tabId);
    this.#undispatch([...follower.outstanding.values()].reduce((n, a) => n + a.events, 0));
  }

  /** This tab's own claim of `events` failed: hand them out again. */
  ownFailed(events: number): void {
    this.#undispatch(events);
  }

  /**
   * Followers with an assignment older than `timeoutMs` are presumed gone (closed without
   * saying so): forgotten, their assignments handed out again. Returns whether any was.
   */
  expire(nowMs: number, timeoutMs: number): boolean {
    let expired = false;
    for (const [tabId, follower] of [...this.#followers]) {
      const oldest = Math.min(...[...follower.outstanding.values()].map((a) => a.atMs));
      if (follower.outstanding.size > 0 && nowMs - oldest > timeoutMs) {
        this.left(tabId);
        expired = true;
      }
    }
    return expired;
  }

  /** Followers that reported and are not presumed gone. */
  get followers(): number {
    return this.#followers.size;
  }

  #undispatch(events: number): void {
    if (events > 0) this.#dispatchedThrough -= events;
  }
}
