/**
 * The browser's platform: state in IndexedDB (one database per store name, shared by every tab
 * of the origin), hint streams with EventSource (authenticated by a stream ticket or the stream
 * cookie, never a bearer token), leader election with Web Locks, hints between tabs over
 * BroadcastChannel, and `online`/`offline`, `visibilitychange`, `freeze`/`resume` as
 * lifecycle changes.
 */

import { LocalStateError, NetworkError } from "./errors.js";
import type { HeldLock, HintStream, LifecycleChange, Platform, StreamHandlers, StreamTarget, TabChannel, TabMessage, TabPrimitives } from "./platform.js";
import { PROCESSED_CAPACITY_DEFAULT } from "./state.js";
import type { LocalState, ProcessedResult, QuarantineDetail } from "./state.js";

const CURSORS = "cursors";
const PROCESSED = "processed";
/** Inserts between two prunings of the processed record. */
const PRUNE_EVERY = 64;

interface ProcessedRow {
  inbox: string;
  event_id: string;
  inbox_seq: number;
  result: ProcessedResult;
  processed_at_ms: number;
  /** With a `quarantined` result. */
  quarantine?: QuarantineDetail;
}

/**
 * State in IndexedDB, seen by every tab of the origin. A write is committed when its promise
 * resolves, so a recorded result survives the tab being closed, reloaded or crashing right
 * after. Writes are `relaxed`: committed to the operating system without waiting for the disk
 * (as the Rust SDK's SQLite file uses `synchronous = NORMAL`), so a power cut may lose the last
 * few records, and then an event runs twice, which at-least-once delivery allows anyway; an
 * fsync per event would instead queue every tab's reads behind it.
 */
export class IndexedDbState implements LocalState {
  readonly #db: IDBDatabase;
  readonly #capacity: number;
  #inserts = 0;

  private constructor(db: IDBDatabase, capacity: number) {
    this.#db = db;
    this.#capacity = Math.max(1, capacity);
  }

  static async open(name: string, capacity: number = PROCESSED_CAPACITY_DEFAULT): Promise<IndexedDbState> {
    if (typeof indexedDB === "undefined") throw new LocalStateError("this browser has no IndexedDB");
    const request = indexedDB.open(`agent-inbox:${name}`, 1);
    request.onupgradeneeded = () => {
      const db = request.result;
      db.createObjectStore(CURSORS);
      const processed = db.createObjectStore(PROCESSED, { keyPath: ["inbox", "event_id"] });
      processed.createIndex("age", ["inbox", "processed_at_ms"]);
    };
    const db = await settle(request, "open the state database");
    // Another tab upgrading the schema later: let it, this tab reopens on reload.
    db.onversionchange = () => db.close();
    return new IndexedDbState(db, capacity);
  }

  async cursor(inbox: string): Promise<number> {
    const tx = this.#db.transaction(CURSORS, "readonly");
    const value: unknown = await settle(tx.objectStore(CURSORS).get(inbox), "read the cursor");
    return typeof value === "number" ? value : 0;
  }

  async advanceCursor(inbox: string, afterSeq: number): Promise<void> {
    const tx = this.#db.transaction(CURSORS, "readwrite", { durability: "relaxed" });
    const store = tx.objectStore(CURSORS);
    const value: unknown = await settle(store.get(inbox), "read the cursor");
    if (typeof value !== "number" || afterSeq > value) store.put(afterSeq, inbox);
    await done(tx, "advance the cursor");
  }

  async resetCursor(inbox: string, afterSeq: number): Promise<void> {
    const tx = this.#db.transaction(CURSORS, "readwrite", { durability: "relaxed" });
    tx.objectStore(CURSORS).put(afterSeq, inbox);
    await done(tx, "reset the cursor");
  }

  async processed(inbox: string, eventId: string): Promise<ProcessedResult | null> {
    const tx = this.#db.transaction(PROCESSED, "readonly");
    const row = (await settle(tx.objectStore(PROCESSED).get([inbox, eventId]), "read the processed record")) as ProcessedRow | undefined;
    return row?.result ?? null;
  }

  async quarantineDetail(inbox: string, eventId: string): Promise<QuarantineDetail | null> {
    const tx = this.#db.transaction(PROCESSED, "readonly");
    const row = (await settle(tx.objectStore(PROCESSED).get([inbox, eventId]), "read the processed record")) as ProcessedRow | undefined;
    return row?.quarantine ?? null;
  }

  async recordProcessed(inbox: string, eventId: string, inboxSeq: number, result: ProcessedResult, detail?: QuarantineDetail): Promise<void> {
    const tx = this.#db.transaction(PROCESSED, "readwrite", { durability: "relaxed" });
    const row: ProcessedRow = { inbox, event_id: eventId, inbox_seq: inboxSeq, result, processed_at_ms: Date.now() };
    if (detail !== undefined) row.quarantine = { reason: detail.reason, class: detail.class };
    tx.objectStore(PROCESSED).put(row);
    await done(tx, "record a processed event");
    this.#inserts += 1;
    if (this.#inserts % PRUNE_EVERY === 0) await this.#prune(inbox);
  }

  async close(): Promise<void> {
    this.#db.close();
  }

  /** Drops the oldest records beyond the capacity. */
  async #prune(inbox: string): Promise<void> {
    const tx = this.#db.transaction(PROCESSED, "readwrite");
    const index = tx.objectStore(PROCESSED).index("age");
    const range = IDBKeyRange.bound([inbox, -Infinity], [inbox, Infinity]);
    const count = await settle(index.count(range), "count processed records");
    let excess = count - this.#capacity;
    if (excess > 0) {
      const cursorRequest = index.openCursor(range);
      cursorRequest.onsuccess = () => {
        const cursor = cursorRequest.result;
        if (cursor === null || excess <= 0) return;
        cursor.delete();
        excess -= 1;
        cursor.continue();
      };
    }
    await done(tx, "prune processed records");
  }
}

function settle<T>(request: IDBRequest<T>, what: string): Promise<T> {
  return new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(new LocalStateError(`cannot ${what}: ${request.error?.message ?? "unknown error"}`));
  });
}

function done(tx: IDBTransaction, what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(new LocalStateError(`cannot ${what}: ${tx.error?.message ?? "unknown error"}`));
    tx.onabort = () => reject(new LocalStateError(`cannot ${what}: the transaction was aborted`));
  });
}

/**
 * An EventSource, closed by us on its first error: the ticket in its URL works once, so the
 * transport opens the next stream itself (with a fresh ticket and `last_event_id`).
 */
export function openEventSource(target: StreamTarget, handlers: StreamHandlers): HintStream {
  const source = new EventSource(target.url, { withCredentials: target.withCredentials });
  let closed = false;
  const forward = (event: Event): void => {
    if (closed) return;
    const message = event as MessageEvent<string>;
    handlers.onEvent({ event: event.type, data: typeof message.data === "string" ? message.data : "", id: message.lastEventId || null });
  };
  source.onopen = () => {
    if (!closed) handlers.onOpen();
  };
  for (const name of ["inbox.updated", "heartbeat", "session.superseded", "message"]) {
    source.addEventListener(name, forward);
  }
  source.onerror = () => {
    if (closed) return;
    closed = true;
    source.close();
    handlers.onClose(new NetworkError("the event stream failed or was refused"));
  };
  return {
    close(): void {
      closed = true;
      source.close();
    },
  };
}

/** Web Locks and BroadcastChannel, or null when either is missing. */
export function browserTabs(): TabPrimitives | null {
  if (typeof navigator === "undefined" || !navigator.locks || typeof BroadcastChannel === "undefined") return null;
  const locks = navigator.locks;
  return {
    acquire(name: string, options: { steal: boolean; signal: AbortSignal }): Promise<HeldLock> {
      return new Promise((granted, refused) => {
        let release: () => void = () => undefined;
        const held = new Promise<void>((resolve) => {
          release = resolve;
        });
        let markLost: () => void = () => undefined;
        const lost = new Promise<void>((resolve) => {
          markLost = resolve;
        });
        let wasGranted = false;
        const lockOptions: LockOptions = options.steal ? { mode: "exclusive", steal: true } : { mode: "exclusive", signal: options.signal };
        locks
          .request(name, lockOptions, async () => {
            wasGranted = true;
            granted({ lost, release });
            await held;
          })
          .then(
            () => markLost(),
            (error: unknown) => {
              // Stolen by another tab (AbortError on the held request), or aborted while waiting.
              markLost();
              if (!wasGranted) refused(error);
            },
          );
      });
    },
    channel(name: string): TabChannel {
      const channel = new BroadcastChannel(name);
      return {
        post: (message: TabMessage) => channel.postMessage(message),
        onMessage(listener: (message: TabMessage) => void): void {
          channel.onmessage = (event: MessageEvent<TabMessage>) => listener(event.data);
        },
        close: () => channel.close(),
      };
    },
  };
}

/**
 * `online`/`offline`, visibility, the Page Lifecycle's `freeze`/`resume`, and `pagehide`: into
 * the back/forward cache (frozen), or for good (unloading).
 */
export function watchBrowserLifecycle(listener: (change: LifecycleChange) => void): () => void {
  if (typeof window === "undefined") return () => undefined;
  const onOnline = (): void => listener("online");
  const onOffline = (): void => listener("offline");
  const onVisibility = (): void => listener(document.visibilityState === "visible" ? "visible" : "hidden");
  const onFreeze = (): void => listener("frozen");
  const onResume = (): void => listener("resumed");
  const onPageHide = (event: PageTransitionEvent): void => {
    listener(event.persisted ? "frozen" : "unloading");
  };
  const onPageShow = (event: PageTransitionEvent): void => {
    if (event.persisted) listener("resumed");
  };
  window.addEventListener("online", onOnline);
  window.addEventListener("offline", onOffline);
  document.addEventListener("visibilitychange", onVisibility);
  document.addEventListener("freeze", onFreeze);
  document.addEventListener("resume", onResume);
  window.addEventListener("pagehide", onPageHide);
  window.addEventListener("pageshow", onPageShow);
  return () => {
    window.removeEventListener("online", onOnline);
    window.removeEventListener("offline", onOffline);
    document.removeEventListener("visibilitychange", onVisibility);
    document.removeEventListener("freeze", onFreeze);
    document.removeEventListener("resume", onResume);
    window.removeEventListener("pagehide", onPageHide);
    window.removeEventListener("pageshow", onPageShow);
  };
}

/**
 * The platform for browsers. `streamAuth` is `ticket` (a single-use ticket per stream) unless
 * `cookie` is asked for (the HttpOnly stream cookie; needs a same-site service).
 */
export function browserPlatform(options: { streamAuth?: "ticket" | "cookie"; processedCapacity?: number } = {}): Platform {
  return {
    name: "browser",
    streamAuth: options.streamAuth ?? "ticket",
    openState: (name: string) => IndexedDbState.open(name, options.processedCapacity),
    openStream: openEventSource,
    tabs: browserTabs(),
    watch: watchBrowserLifecycle,
  };
}
