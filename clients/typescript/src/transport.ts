/**
 * How the agent hears that work may exist: a Server-Sent Events stream, falling back to long
 * polls when streams fail or are cut short, falling back to the runner's adaptive polling when
 * long polls fail too, and trying the better transport again later. A hint carries no data: it
 * only wakes the runner, which polls after its cursor. Every (re)connection wakes the runner as
 * well, since hints may have been missed while the transport was down.
 *
 * Streams authenticate as the platform says: a bearer header (Node), or in browsers a fresh
 * single-use ticket per stream or the HttpOnly stream cookie, never a bearer token in a URL.
 */

import type { InboxApi } from "./api.js";
import { InboxError, NetworkError, ProblemError } from "./errors.js";
import type { Platform, StreamTarget } from "./platform.js";
import {
  DEFAULT_BACKOFF,
  DEFAULT_TRANSPORT_POLICY,
  LongPollWait,
  backoffDelay,
  jitter,
  shouldFallBack,
  shouldUpgrade,
  streamFailed,
} from "./schedule.js";
import type { Backoff, TransportPolicy } from "./schedule.js";
import { Wakeup, timer } from "./wakeup.js";
import type { StreamSignal } from "./wire.js";

export type TransportKind = "sse" | "long-poll" | "poll";

export interface TransportStatus {
  kind: TransportKind;
  /** Hints are arriving (a stream is open, or the last long poll answered). */
  connected: boolean;
}

export interface TransportConfig {
  /** Transports to use, best first; `poll` is always the last resort. */
  allowed: TransportKind[];
  policy: TransportPolicy;
  reconnect: Backoff;
  /** Longest long-poll wait asked for (the service caps it). */
  longPollWaitSeconds: number;
  /** A stream silent this long is presumed dead; default three heartbeat intervals plus 5 s. */
  streamIdleTimeoutMs: number | null;
}

export const DEFAULT_TRANSPORT_CONFIG: TransportConfig = Object.freeze({
  allowed: ["sse", "long-poll", "poll"] as TransportKind[],
  policy: DEFAULT_TRANSPORT_POLICY,
  reconnect: DEFAULT_BACKOFF,
  longPollWaitSeconds: 25,
  streamIdleTimeoutMs: null,
});

/** What the transport needs from the runner. */
export interface TransportHost {
  readonly api: InboxApi;
  readonly platform: Platform;
  readonly sessionId: string;
  /** The session's SSE path from subscribe, when the service offers streams. */
  readonly sseUrl: string | null;
  readonly heartbeatIntervalMs: number;
  /** The highest head known: long polls wait after it, streams resume from it. */
  knownHead(): number;
  noteHead(headSeq: number): void;
  /** New work may exist (a hint, or a (re)connection that may have missed hints). */
  hint(headSeq: number | null): void;
  /** The stream hinted without moving the head: claim now, even what is behind the cursor. */
  nudged(): void;
  status(status: TransportStatus): void;
  /** The service says a newer session of this agent took over. */
  superseded(): void;
  /** The runner cannot reach the service at all: stand by instead of probing. */
  serviceDown(): boolean;
}

type StreamEnd = { kind: "reconnect" } | { kind: "superseded" } | { kind: "stopped" } | { kind: "closed"; livedMs: number };

/** Runs the transports until stopped. */
export class HintTransport {
  readonly #host: TransportHost;
  readonly #config: TransportConfig;
  readonly #reconnect = new Wakeup();
  readonly #reachable = new Wakeup();
  readonly #stop = new AbortController();
  #sseUrl: string | null;
  #current: TransportStatus = { kind: "poll", connected: false };
  #resetLadder = false;

  constructor(host: TransportHost, config: TransportConfig = DEFAULT_TRANSPORT_CONFIG) {
    this.#host = host;
    this.#config = config;
    this.#sseUrl = host.sseUrl;
  }

  start(): void {
    void this.#run().catch(() => undefined);
  }

  stop(): void {
    this.#stop.abort();
    this.#reconnect.notify();
    this.#reachable.notify();
  }

  /** Drops the connection and connects again now; `fromTop` also goes back to the best transport. */
  reconnect(fromTop = false): void {
    if (fromTop) this.#resetLadder = true;
    this.#reconnect.notify();
  }

  /** The runner reached the service again. */
  reachable(): void {
    this.#reachable.notify();
  }

  get status(): TransportStatus {
    return this.#current;
  }

  get #stopped(): boolean {
    return this.#stop.signal.aborted;
  }

  async #run(): Promise<void> {
    const ladder = this.#ladder();
    let rung = 0;
    let failures = 0;
    let fallbackSince: number | null = null;
    const longPoll = new LongPollWait(this.#config.longPollWaitSeconds);
    this.#setStatus(ladder[0]!, false);
    while (!this.#stopped) {
      if (this.#resetLadder || (rung > 0 && fallbackSince !== null && shouldUpgrade(this.#config.policy, Date.now() - fallbackSince))) {
        this.#resetLadder = false;
        rung = 0;
        failures = 0;
        fallbackSince = null;
      }
      const kind = ladder[rung]!;
      let failed: InboxError | null = null;
      if (kind === "sse") {
        try {
          const end = await this.#stream();
          if (end.kind === "stopped") return;
          if (end.kind === "reconnect") {
            failures = 0;
            continue;
          }
          if (end.kind === "superseded") {
            this.#setStatus(kind, false);
            this.#host.superseded();
            return;
          }
          this.#setStatus(kind, false);
          if (streamFailed(this.#config.policy, end.livedMs)) {
            failed = new NetworkError(`the event stream was cut after ${Math.round(end.livedMs)} ms`);
          }
        } catch (error) {
          this.#setStatus(kind, false);
          if (error instanceof ProblemError && error.code === "session_superseded") {
            this.#host.superseded();
            return;
          }
          failed = error instanceof InboxError ? error : new NetworkError(String(error));
        }
      } else if (kind === "long-poll") {
        const upgradeAt = rung > 0 && fallbackSince !== null ? fallbackSince + this.#config.policy.upgradeAfterMs : null;
        failed = await this.#longPoll(longPoll, upgradeAt);
      } else {
        this.#setStatus(kind, false);
        const upgradeAt = (fallbackSince ?? Date.now()) + this.#config.policy.upgradeAfterMs;
        await this.#pause(upgradeAt - Date.now());
        continue;
      }
      if (this.#stopped) return;
      if (failed === null) {
        failures = 0;
        // A stream that ended normally is reopened after a short random pause.
        if (kind === "sse") await this.#pause(250 * jitter());
      } else if (this.#host.serviceDown()) {
        // The service itself is down, not this transport: stand by until the runner reaches it.
        failures = 0;
        const reachable = this.#reachable.next();
        const reconnect = this.#reconnect.next();
        await Promise.race([reachable.promise, reconnect.promise]);
        reachable.cancel();
        reconnect.cancel();
      } else {
        failures += 1;
        this.#host.hint(null);
        if (shouldFallBack(this.#config.policy, failures) && rung + 1 < ladder.length) {
          rung += 1;
          failures = 0;
          fallbackSince = Date.now();
          this.#setStatus(ladder[rung]!, false);
        } else {
          await this.#pause(backoffDelay(this.#config.reconnect, failures, jitter()));
        }
      }
    }
  }

  #ladder(): TransportKind[] {
    const ladder: TransportKind[] = [];
    for (const kind of this.#config.allowed) {
      if (kind === "sse" && this.#sseUrl === null) continue;
      if (!ladder.includes(kind)) ladder.push(kind);
    }
    if (ladder.length === 0) ladder.push("poll");
    return ladder;
  }

  #setStatus(kind: TransportKind, connected: boolean): void {
    if (this.#current.kind === kind && this.#current.connected === connected) return;
    this.#current = { kind, connected };
    this.#host.status(this.#current);
  }

  /** Sleeps, unless asked to reconnect or stop first. */
  async #pause(ms: number): Promise<void> {
    const wait = timer(ms);
    const reconnect = this.#reconnect.next();
    await Promise.race([wait.promise, reconnect.promise]);
    wait.cancel();
    reconnect.cancel();
  }

  /** Where and how the next stream connects. */
  async #target(resume: number): Promise<StreamTarget> {
    const api = this.#host.api;
    const auth = this.#host.platform.streamAuth;
    if (auth === "ticket") {
      const ticket = await api.streamTicket({ session_id: this.#host.sessionId }, { signal: this.#stop.signal });
      const url = new URL(api.url(ticket.sse_url));
      url.searchParams.set("last_event_id", String(resume));
      return { url: url.toString(), headers: {}, withCredentials: false };
    }
    const url = new URL(api.url(this.#sseUrl ?? "/v1/streams/sse"));
    if (!url.searchParams.has("session_id")) url.searchParams.set("session_id", this.#host.sessionId);
    if (auth === "cookie") {
      await api.streamCookie({ session_id: this.#host.sessionId }, { signal: this.#stop.signal });
      url.searchParams.set("last_event_id", String(resume));
      return { url: url.toString(), headers: {}, withCredentials: true };
    }
    return { url: url.toString(), headers: { authorization: await api.authorization(), "last-event-id": String(resume) }, withCredentials: false };
  }

  /** One SSE stream, from opening to its end. */
  async #stream(): Promise<StreamEnd> {
    const target = await this.#target(this.#host.knownHead());
    if (this.#stopped) return { kind: "stopped" };
    const idleLimit = this.#config.streamIdleTimeoutMs ?? this.#host.heartbeatIntervalMs * 3 + 5_000;
    return new Promise<StreamEnd>((resolve, reject) => {
      let openedAt: number | null = null;
      let finished = false;
      let idle: ReturnType<typeof setTimeout> | undefined;
      const finish = (end: StreamEnd | InboxError): void => {
        if (finished) return;
        finished = true;
        clearTimeout(idle);
        stream.close();
        reconnect.cancel();
        this.#stop.signal.removeEventListener("abort", onStop);
        if (end instanceof InboxError) reject(end);
        else resolve(end);
      };
      const closedOrFailed = (error: InboxError | null): void => {
        if (openedAt === null) {
          if (error instanceof ProblemError && error.status === 401 && target.headers.authorization) {
            this.#host.api.tokenRejected(target.headers.authorization);
          }
          finish(error ?? new NetworkError("the event stream closed before it opened"));
        } else {
          finish({ kind: "closed", livedMs: Date.now() - openedAt });
        }
      };
      const armIdle = (): void => {
        clearTimeout(idle);
        idle = setTimeout(() => closedOrFailed(null), idleLimit);
      };
      const onStop = (): void => finish({ kind: "stopped" });
      this.#stop.signal.addEventListener("abort", onStop, { once: true });
      const reconnect = this.#reconnect.next();
      void reconnect.promise.then(() => finish({ kind: "reconnect" }));
      const stream = this.#host.platform.openStream(target, {
        onOpen: () => {
          openedAt = Date.now();
          armIdle();
          this.#setStatus("sse", true);
          // Hints sent while no stream was open are lost: catch up now.
          this.#host.hint(null);
        },
        onEvent: (event) => {
          if (openedAt === null) openedAt = Date.now();
          armIdle();
          if (event.event === "session.superseded") {
            finish({ kind: "superseded" });
            return;
          }
          if (event.event !== "inbox.updated") return;
          let head: number | null = null;
          try {
            head = (JSON.parse(event.data) as StreamSignal).head_seq;
          } catch {
            head = event.id !== null && /^\d+$/.test(event.id) ? Number(event.id) : null;
          }
          const known = this.#host.knownHead();
          if (head !== null) this.#host.noteHead(head);
          // A hint that moves no head is a nudge: events behind it went back to the inbox (an
          // operator's requeue or release from quarantine), which only a claim finds.
          if (head !== null && head <= known) this.#host.nudged();
          else this.#host.hint(head);
        },
        onClose: closedOrFailed,
      });
    });
  }

  /**
   * One long poll after the known head. Until a poll has answered, the first one does not wait,
   * so the runner learns quickly that hints flow again. Returns a failure, or null.
   */
  async #longPoll(wait: LongPollWait, upgradeAt: number | null): Promise<InboxError | null> {
    const connected = this.#current.kind === "long-poll" && this.#current.connected;
    const afterSeq = this.#host.knownHead();
    const controller = new AbortController();
    const onStop = (): void => controller.abort();
    this.#stop.signal.addEventListener("abort", onStop, { once: true });
    let upgradeTimer: ReturnType<typeof setTimeout> | undefined;
    if (upgradeAt !== null) upgradeTimer = setTimeout(onStop, Math.max(0, upgradeAt - Date.now()));
    const reconnect = this.#reconnect.next();
    void reconnect.promise.then(onStop);
    const started = Date.now();
    try {
      const page = await this.#host.api.poll(
        { after_seq: afterSeq, limit: 1, ...(connected ? { wait_seconds: wait.waitSeconds } : {}) },
        { signal: controller.signal },
      );
      if (connected) wait.onAnswer();
      this.#setStatus("long-poll", true);
      const previous = this.#host.knownHead();
      this.#host.noteHead(page.head_seq);
      if (page.head_seq > previous || page.events.length > 0) this.#host.hint(page.head_seq);
      else if (page.nudged === true) this.#host.nudged();
      return null;
    } catch (error) {
      if (controller.signal.aborted) return null;
      if (error instanceof ProblemError && error.code === "cursor_reset_required") {
        // The runner resyncs; wait a moment so this loop does not spin meanwhile.
        this.#host.hint(null);
        await this.#pause(1_000);
        return null;
      }
      if (error instanceof ProblemError && error.code === "invalid_field") {
        wait.onRefused();
        return error;
      }
      this.#setStatus("long-poll", false);
      const elapsed = Date.now() - started;
      if (error instanceof NetworkError && elapsed >= 500 && elapsed < wait.waitSeconds * 1000) wait.onCut(elapsed);
      return error instanceof InboxError ? error : new NetworkError(String(error));
    } finally {
      clearTimeout(upgradeTimer);
      reconnect.cancel();
      this.#stop.signal.removeEventListener("abort", onStop);
    }
  }
}
