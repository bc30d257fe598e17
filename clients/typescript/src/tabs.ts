/**
 * One hint stream per agent per browser, shared by every tab. Tabs elect a leader with an
 * exclusive Web Lock named after the agent; the leader runs the transport (EventSource, long
 * poll) and passes hints to the other tabs over a BroadcastChannel, with a heartbeat that says
 * whether hints flow. Every tab runs its own runner. The leader also hands out the work a hint
 * announces: it claims what its own slots take and tells each other tab how many events to
 * claim, by the free slots the tabs report (see `claims.ts`); the service's leases decide which
 * tab gets which event, so nothing runs twice.
 *
 * Takeover: a closed leader's lock is released by the browser and the next tab in the lock's
 * queue gets it at once; a leader that freezes (Page Lifecycle) or goes into the back/forward
 * cache resigns first; a leader that stops answering (hung) is detected by its silent heartbeat
 * and its lock stolen. The new leader's stream opening wakes its runner, which catches up from
 * the cursor. A tab that gives leases back (closing, or its agent stopping) says so, and the
 * others claim those events at once instead of at the lease's end.
 */

import type { HeldLock, TabChannel, TabMessage, TabPrimitives } from "./platform.js";

export interface TabGroupTiming {
  /** How often the leader says it is alive. */
  aliveIntervalMs: number;
  /** A leader silent this long is presumed hung, and its lock stolen. */
  takeoverAfterMs: number;
  /** The same for a leader in a hidden tab, whose timers browsers run about once a second. */
  takeoverAfterHiddenMs: number;
}

export const DEFAULT_TAB_TIMING: TabGroupTiming = Object.freeze({ aliveIntervalMs: 250, takeoverAfterMs: 1_000, takeoverAfterHiddenMs: 2_500 });

export interface TabGroupEvents {
  /** This tab became the leader: start the transport. */
  lead(): void;
  /** This tab stopped leading (resigned, or its lock was stolen): stop the transport. */
  follow(): void;
  /**
   * The leader heard of new work up to `headSeq` and claimed its share; `share`: how many
   * events this tab claims now (its answer names `dispatchId`); `assigned`: the leader counted
   * on this tab for them (else, in an `open` hint, as many as it has room for, if any).
   */
  hint(headSeq: number, share: number, dispatchId: number, assigned: boolean, open: boolean): void;
  /** As leader: another tab's free slots after the assignments up to `answered`. */
  slots(tabId: string, free: number, answered: number, declined: number): void;
  /** As leader: another tab stopped; it claims nothing more. */
  left(tabId: string): void;
  /** As follower: a leader not heard from before speaks; tell it this tab's slots. */
  leaderChanged(): void;
  /** Whether the leader's hints flow (false too when no leader is heard from). */
  leaderConnected(connected: boolean): void;
  /** Another tab gave these events back; `landed`: the service has them already. */
  released(eventIds: string[], landed: boolean): void;
}

export class TabGroup {
  readonly tabId: string;
  readonly #tabs: TabPrimitives;
  readonly #lockName: string;
  readonly #events: TabGroupEvents;
  readonly #timing: TabGroupTiming;
  #channel: TabChannel | null = null;
  #held: HeldLock | null = null;
  #waiting: AbortController | null = null;
  #stopped = false;
  #suspended = false;
  #lastAliveAt = 0;
  #leaderHidden = false;
  #leaderConnected = false;
  #connected = false;
  #headSeq = 0;
  /** As leader: the head up to which it has handed out the events. */
  #dispatchedThrough = 0;
  #leaderId: string | null = null;
  #ticker: ReturnType<typeof setInterval> | undefined;
  #stealing = false;

  constructor(tabs: TabPrimitives, groupName: string, events: TabGroupEvents, timing: TabGroupTiming = DEFAULT_TAB_TIMING) {
    this.tabId = randomId();
    this.#tabs = tabs;
    this.#lockName = `agent-inbox:leader:${groupName}`;
    this.#events = events;
    this.#timing = timing;
    this.#channel = tabs.channel(`agent-inbox:hints:${groupName}`);
    this.#channel.onMessage((message) => this.#receive(message));
  }

  get isLeader(): boolean {
    return this.#held !== null;
  }

  start(): void {
    this.#lastAliveAt = Date.now();
    this.#ticker = setInterval(() => this.#tick(), this.#timing.aliveIntervalMs);
    this.#compete(false);
  }

  stop(): void {
    if (!this.#stopped) this.#channel?.post({ type: "left", tabId: this.tabId });
    this.#stopped = true;
    clearInterval(this.#ticker);
    this.#resign();
    this.#waiting?.abort();
    this.#channel?.close();
    this.#channel = null;
  }

  /** The tab is frozen or cached: give leadership away now rather than be presumed hung. */
  suspend(): void {
    this.#suspended = true;
    this.#waiting?.abort();
    this.#resign();
  }

  /** The tab runs again: compete for leadership once more. */
  resume(): void {
    if (!this.#suspended || this.#stopped) return;
    this.#suspended = false;
    this.#lastAliveAt = Date.now();
    this.#compete(false);
  }

  /**
   * As leader: tell the other tabs of work up to `headSeq`, and how many events each claims
   * (one claim per event, not one per tab). See {@link TabMessage}.
   */
  broadcastHint(headSeq: number, dispatch: { dispatchId: number; assigned: Record<string, number>; unassigned: number; open: boolean; dispatchedThrough: number }): void {
    this.#headSeq = Math.max(this.#headSeq, headSeq);
    this.#dispatchedThrough = Math.max(this.#dispatchedThrough, dispatch.dispatchedThrough);
    const { dispatchId, assigned, unassigned, open } = dispatch;
    this.#channel?.post({ type: "hint", tabId: this.tabId, headSeq: this.#headSeq, dispatchId, assigned, unassigned, open });
  }

  /** As follower: this tab's free slots, after the leader's assignments up to `answered`. */
  reportSlots(free: number, answered: number, declined: number): void {
    if (this.isLeader || this.#stopped) return;
    this.#channel?.post({ type: "slots", tabId: this.tabId, free, answered, declined });
  }

  /** This tab gave leases back: the other tabs may claim those events now (or once `landed`). */
  broadcastReleased(eventIds: string[], landed: boolean): void {
    this.#channel?.post({ type: "released", tabId: this.tabId, eventIds, landed });
  }

  /** The leader's transport connected or lost its connection. */
  setConnected(connected: boolean): void {
    this.#connected = connected;
    if (this.isLeader) this.#sayAlive();
  }

  #compete(steal: boolean): void {
    if (this.#stopped || this.#suspended || this.#held !== null) return;
    this.#waiting?.abort();
    const waiting = new AbortController();
    this.#waiting = waiting;
    this.#tabs.acquire(this.#lockName, { steal, signal: waiting.signal }).then(
      (held) => {
        if (this.#waiting === waiting) this.#waiting = null;
        if (this.#stopped || this.#suspended) {
          held.release();
          return;
        }
        this.#held = held;
        this.#leaderId = null;
        this.#sayAlive();
        this.#events.lead();
        void held.lost.then(() => {
          if (this.#held !== held) return;
          this.#held = null;
          this.#leaderId = null;
          this.#lastAliveAt = Date.now();
          this.#events.follow();
          this.#compete(false);
        });
      },
      () => {
        // Aborted while waiting (a steal replaced this request, or the tab stops).
      },
    );
  }

  #resign(): void {
    const held = this.#held;
    if (held === null) return;
    this.#held = null;
    this.#channel?.post({ type: "resigned", tabId: this.tabId });
    this.#events.follow();
    held.release();
  }

  #tick(): void {
    if (this.#stopped || this.#suspended) return;
    if (this.isLeader) {
      this.#sayAlive();
      return;
    }
    const silentMs = Date.now() - this.#lastAliveAt;
    if (silentMs > this.#timing.aliveIntervalMs * 2 && this.#leaderConnected) {
      this.#leaderConnected = false;
      this.#events.leaderConnected(false);
    }
    const takeoverAfterMs = this.#leaderHidden ? this.#timing.takeoverAfterHiddenMs : this.#timing.takeoverAfterMs;
    if (silentMs > takeoverAfterMs && !this.#stealing) {
      // Spread the followers out, and let a leader that spoke meanwhile keep its place.
      this.#stealing = true;
      const seen = this.#lastAliveAt;
      setTimeout(() => {
        this.#stealing = false;
        if (this.#lastAliveAt === seen && !this.isLeader && !this.#stopped && !this.#suspended) this.#compete(true);
      }, Math.random() * 200);
    }
  }

  /** A leader speaks: if it is new to this tab, this tab tells it its slots. */
  #heardLeader(tabId: string): void {
    if (this.isLeader || this.#leaderId === tabId) return;
    this.#leaderId = tabId;
    this.#events.leaderChanged();
  }

  #sayAlive(): void {
    const hidden = typeof document !== "undefined" && document.visibilityState === "hidden";
    this.#channel?.post({ type: "alive", tabId: this.tabId, connected: this.#connected, headSeq: this.#headSeq, hidden, dispatchedThrough: this.#dispatchedThrough });
  }

  #receive(message: TabMessage): void {
    if (message.tabId === this.tabId || this.#stopped) return;
    switch (message.type) {
      case "alive":
        this.#lastAliveAt = Date.now();
        this.#leaderHidden = message.hidden;
        this.#headSeq = Math.max(this.#headSeq, message.headSeq);
        this.#heardLeader(message.tabId);
        if (message.connected !== this.#leaderConnected) {
          this.#leaderConnected = message.connected;
          this.#events.leaderConnected(message.connected);
        }
        break;
      case "hint": {
        this.#lastAliveAt = Date.now();
        this.#headSeq = Math.max(this.#headSeq, message.headSeq);
        this.#heardLeader(message.tabId);
        const mine = message.assigned[this.tabId];
        const share = mine ?? (message.open ? message.unassigned : 0);
        this.#events.hint(message.headSeq, share, message.dispatchId, mine !== undefined, message.open);
        break;
      }
      case "slots":
        if (this.isLeader) this.#events.slots(message.tabId, message.free, message.answered, message.declined);
        break;
      case "left":
        if (this.isLeader) this.#events.left(message.tabId);
        break;
      case "released":
        this.#events.released(message.eventIds, message.landed);
        break;
      case "resigned":
        // The lock queue hands leadership on; until the new leader speaks, nothing flows.
        this.#lastAliveAt = Date.now();
        this.#leaderId = null;
        if (this.#leaderConnected) {
          this.#leaderConnected = false;
          this.#events.leaderConnected(false);
        }
        break;
    }
  }
}

function randomId(): string {
  const bytes = new Uint8Array(8);
  globalThis.crypto.getRandomValues(bytes);
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}
