/**
 * The one seam between the client and its host: durable state, hint streams, cross-tab
 * coordination and lifecycle events. Browsers implement it with IndexedDB, EventSource, Web
 * Locks, BroadcastChannel and `online`/`visibilitychange`; Node with a JSON file, a fetch-read
 * event stream, no tabs, and no lifecycle events.
 */

import type { InboxError } from "./errors.js";
import type { SseEvent } from "./sse.js";
import type { LocalState } from "./state.js";

export interface Platform {
  readonly name: string;
  /**
   * How hint streams authenticate here: `bearer` sends the access token in a header (Node);
   * `ticket` puts a single-use stream ticket in the URL and `cookie` uses the HttpOnly stream
   * cookie (browsers, whose EventSource cannot send headers). A bearer token never goes in a URL.
   */
  readonly streamAuth: "bearer" | "ticket" | "cookie";
  /** Durable state for the store called `name` (one per agent identity, or shared). */
  openState(name: string): Promise<LocalState>;
  /** Opens a hint stream. Handlers are called until `onClose`, which is called once. */
  openStream(target: StreamTarget, handlers: StreamHandlers): HintStream;
  /** Cross-tab coordination, or null where this host has no tabs (Node) or lacks Web Locks or BroadcastChannel. */
  readonly tabs: TabPrimitives | null;
  /** Network and visibility changes; returns a function that stops the listening. */
  watch(listener: (change: LifecycleChange) => void): () => void;
}

/** `unloading`: the page goes away for good (`pagehide` not into the back/forward cache). */
export type LifecycleChange = "online" | "offline" | "visible" | "hidden" | "frozen" | "resumed" | "unloading";

export interface StreamTarget {
  url: string;
  /** Only for `bearer` streams. */
  headers: Record<string, string>;
  /** Send cookies (the stream cookie). */
  withCredentials: boolean;
}

export interface StreamHandlers {
  onOpen(): void;
  onEvent(event: SseEvent): void;
  /** The stream ended (`error` null) or failed; `status` when the server refused it. */
  onClose(error: InboxError | null): void;
}

export interface HintStream {
  close(): void;
}

/** A held exclusive lock. */
export interface HeldLock {
  /** Resolves when the lock is gone: released here, or stolen by another tab. */
  readonly lost: Promise<void>;
  release(): void;
}

export interface TabPrimitives {
  /**
   * Waits for the exclusive lock `name` (Web Locks). With `steal`, takes it from its holder at
   * once. Rejects when `signal` aborts first.
   */
  acquire(name: string, options: { steal: boolean; signal: AbortSignal }): Promise<HeldLock>;
  /** A BroadcastChannel to the other tabs of this origin. */
  channel(name: string): TabChannel;
}

export interface TabChannel {
  post(message: TabMessage): void;
  onMessage(listener: (message: TabMessage) => void): void;
  close(): void;
}

/** What tabs of one agent tell each other. */
export type TabMessage =
  /**
   * `hidden`: the leader's timers are throttled (a background tab), so it speaks less often.
   * `dispatchedThrough`: the head up to which it has handed out the events (see `claims.ts`).
   */
  | { type: "alive"; tabId: string; connected: boolean; headSeq: number; hidden: boolean; dispatchedThrough: number }
  /**
   * New work up to `headSeq`. The leader claimed its share already; `assigned` says how many
   * events each other tab claims now (numbered `dispatchId`, which the tab's report names).
   * `open`: the leader knows of no other tab's slots yet, so each claims up to `unassigned`
   * events (what nobody was given) as far as its slots allow.
   */
  | { type: "hint"; tabId: string; headSeq: number; dispatchId: number; assigned: Record<string, number>; unassigned: number; open: boolean }
  /**
   * A follower's free handler slots, after every assignment up to `answered`; `declined`:
   * events of those it had no room for after all (the leader hands them out again).
   */
  | { type: "slots"; tabId: string; free: number; answered: number; declined: number }
  | { type: "resigned"; tabId: string }
  /** The tab stops (closing, or its agent stopped): it claims nothing more. */
  | { type: "left"; tabId: string }
  /**
   * A tab gave these events' leases back (closing, or its agent stopped). `landed`: the
   * releases were answered; otherwise they are still on their way (sent as the page unloads).
   */
  | { type: "released"; tabId: string; eventIds: string[]; landed: boolean };
