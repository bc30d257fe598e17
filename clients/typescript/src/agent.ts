/**
 * The agent runner, as the Rust SDK's `Agent`. On every hint, timer, reconnection or lifecycle
 * change it claims what it can run (scanning the inbox after its durable cursor first, or at
 * most once a second after), and calls the handler once per event while heartbeating the
 * event's lease; then it acknowledges (the handler returned), releases for a retry
 * ({@link RetryLater}, or any other error), acknowledges as `failed` ({@link Fatal}, which
 * dead-letters the event) or as `quarantined` ({@link QuarantineError}: set aside for a person). This module decides when to claim and how much; finishing one
 * event is `delivery.ts`'s, reading the inbox after the cursor `scanner.ts`'s, hearing of work
 * (the transport, or the leader tab) `hints.ts`'s, the handler contract's types `contract.ts`'s,
 * the batching of acknowledgements `acks.ts`'s.
 *
 * A handler's result is recorded in the durable local state *before* the acknowledgement is
 * sent, so an event delivered again after a crash, a reload or a lost acknowledgement is
 * acknowledged from the record instead of being run twice. In a browser the record lives in
 * IndexedDB and is shared by every tab of the origin; the tabs share one hint stream too
 * (see `tabs.ts`), and claims decide which tab runs which event.
 */

import { AckBatcher } from "./acks.js";
import type { RetryPolicy } from "./acks.js";
import type { InboxApi } from "./api.js";
import { sleep } from "./api.js";
import { Claimer } from "./claimer.js";
import type { AgentOptions, Outcome, Progress, RunSummary } from "./contract.js";
import { Delivery, ackEntry } from "./delivery.js";
import type { Running } from "./delivery.js";
import { ConfigError, InboxError, ProblemError, SessionSupersededError } from "./errors.js";
import { BATCH_EVENTS_MAX } from "./limits.js";
import type { LifecycleChange, Platform } from "./platform.js";
import { Scanner } from "./scanner.js";
import type { ScanResult } from "./scanner.js";
import { ClaimableAt, DEFAULT_POLL_SCHEDULE, OUTAGE_BACKOFF, jitter, nextCycleAfter, outageDelay, wallClockDrift } from "./schedule.js";
import type { Backoff, PollSchedule } from "./schedule.js";
import type { LocalState } from "./state.js";
import { HintSources } from "./hints.js";
import type { TabGroup } from "./tabs.js";
import type { HintTransport } from "./transport.js";
import { Wakeup, timer } from "./wakeup.js";
import type { AckEntry, Claim, SubscribeResponse } from "./wire.js";

export type { AgentOptions, Handler, HandlerContext, InboxEvent, Outcome, Progress, ResyncHandler, RunSummary } from "./contract.js";
export { resyncSnapshot } from "./scanner.js";

/** An expired lease comes back on the service's next scavenger pass: allow for it. */
const SCAVENGER_SLACK_MS = 250;
const CLOCK_CHECK_MS = 5_000;
/** While hints or finished handlers drive cycles, the inbox is scanned at most this often. */
const SCAN_INTERVAL_BUSY_MS = 1_000;
const CLOCK_TOLERANCE_MS = 5_000;

let defaultPlatform: (() => Platform) | null = null;

/** Set by the package's entry points: the browser's platform, or Node's. */
export function setDefaultPlatform(factory: () => Platform): void {
  defaultPlatform = factory;
}

/** An agent: one identity, one durable state, one handler. */
export class Agent {
  readonly #options: AgentOptions;
  readonly #api: InboxApi;
  readonly #platform: Platform;
  readonly #concurrency: number;
  readonly #poll: PollSchedule;
  readonly #outage: Backoff;
  readonly #wake = new Wakeup();
  readonly #stopController = new AbortController();
  readonly #running = new Map<string, Running>();
  readonly #summary: RunSummary = { acked: 0, failed: 0, quarantined: 0, released: 0, deduplicated: 0, unconfirmed: 0, resyncs: 0 };
  #started = false;
  #state: LocalState | null = null;
  #inbox = "";
  #session: SubscribeResponse | null = null;
  #leaseSeconds = 120;
  #knownHead = 0;
  #hints: HintSources | null = null;
  #forced = true;
  #nextCycleAt = 0;
  #pollNominalMs: number | null = null;
  #lastScanAt: number | null = null;
  readonly #claimableAt = new ClaimableAt();
  #claimBacklog = false;
  #serviceDown = false;
  /** Requests failed in a row because the service could not be reached; 0 once one works. */
  #outageAttempts = 0;
  #superseded = false;
  readonly #acks: AckBatcher;
  readonly #retryPolicy: RetryPolicy;
  readonly #claimer: Claimer;
  /** Events whose handler slot is taken: claimed, result not recorded yet. */
  readonly #slotHeld = new Set<string>();
  /** Hints flow: the next cycle (at most once a second) scans, for what they did not cover. */
  #hintScan = false;
  /** The events the last scan found claimable. */
  #lastClaimable = new Set<string>();
  #unloading = false;
  #delivery: Delivery | null = null;
  #scanner: Scanner | null = null;

  constructor(options: AgentOptions) {
    const platform = options.platform ?? defaultPlatform?.();
    if (platform === undefined) throw new ConfigError("no platform: pass `platform` (browserPlatform() or nodePlatform())");
    if (options.concurrency !== undefined && (!Number.isInteger(options.concurrency) || options.concurrency < 1)) {
      throw new ConfigError(`concurrency must be a whole number of at least 1, not ${options.concurrency}`);
    }
    if (options.leaseSeconds !== undefined && !(options.leaseSeconds >= 1)) {
      throw new ConfigError(`leaseSeconds must be at least 1, not ${options.leaseSeconds}`);
    }
    this.#options = options;
    this.#api = options.api;
    this.#platform = platform;
    this.#concurrency = options.concurrency ?? 1;
    this.#poll = options.poll ?? DEFAULT_POLL_SCHEDULE;
    this.#outage = options.outage ?? OUTAGE_BACKOFF;
    this.#retryPolicy = { attemptsMax: options.ackAttemptsMax ?? 30, backoff: options.ackRetry ?? { baseMs: 200, maxMs: 30_000 } };
    this.#acks = new AckBatcher(options.api, () => this.sessionId, this.#retryPolicy);
    this.#claimer = this.#newClaimer();
  }

  /** The session from subscribe, once the agent runs. */
  get sessionId(): string | null {
    return this.#session?.session_id ?? null;
  }

  /** Whether this tab holds the agent's stream (always true outside browsers with tabs). */
  get isLeader(): boolean {
    return this.#tabs === null ? this.#transport !== null : this.#tabs.isLeader;
  }

  get summary(): Readonly<RunSummary> {
    return this.#summary;
  }

  /** Asks the agent to stop: running handlers finish within the grace period, then `run` resolves. */
  stop(): void {
    this.#claimer.stop();
    this.#stopController.abort();
    this.#wake.notify();
  }

  /**
   * Runs until {@link stop} (resolving with the counts) or a fatal error: credentials refused, a
   * permanent resync failure, local state unusable, or {@link SessionSupersededError}. Network
   * trouble is never fatal: the agent waits and tries again.
   */
  async run(): Promise<RunSummary> {
    if (this.#started) throw new ConfigError("an Agent runs once; make a new one");
    this.#started = true;
    const stopWatching: (() => void)[] = [];
    try {
      const session = await this.#subscribe();
      if (session === null) return this.#summary;
      this.#session = session;
      this.#inbox = `${session.recipient.tenant_id}/${session.recipient.recipient_id}`;
      this.#state = this.#options.state ?? (await this.#platform.openState(this.#options.stateName ?? this.#inbox));
      this.#leaseSeconds = this.#options.leaseSeconds ?? Math.max(1, session.lease_default_seconds);
      this.#knownHead = session.current_head_seq;
      this.#delivery = this.#newDelivery(this.#state);
      this.#scanner = this.#newScanner(this.#state);
      this.#observe({
        type: "subscribed",
        sessionId: session.session_id,
        recipientId: session.recipient.recipient_id,
        cursor: await this.#state.cursor(this.#inbox),
        headSeq: session.current_head_seq,
      });
      this.#hints = this.#newHintSources(session);
      this.#hints.start();
      stopWatching.push(this.#platform.watch((change) => this.#lifecycle(change)));
      stopWatching.push(this.#watchClock());
      await this.#loop();
      return this.#summary;
    } finally {
      for (const stop of stopWatching) stop();
      this.#hints?.stop();
      if (this.#options.state === undefined) await this.#state?.close();
    }
  }

  async #subscribe(): Promise<SubscribeResponse | null> {
    let attempt = 0;
    for (;;) {
      try {
        return await this.#api.subscribe(
          {
            device_id: this.#options.deviceId ?? null,
            supported_transports: ["sse", "long-poll", "poll"],
            wants_claims: true,
          },
          { signal: this.#stopController.signal },
        );
      } catch (error) {
        if (this.#stopController.signal.aborted) return null;
        if (!(error instanceof InboxError) || !error.retryable) throw error;
        attempt += 1;
        const delay = outageDelay(this.#outage, attempt, jitter(), retryAfterOf(error));
        this.#observe({ type: "disconnected", error, retryInMs: delay });
        await sleep(delay, this.#stopController.signal).catch(() => undefined);
        if (this.#stopController.signal.aborted) return null;
      }
    }
  }

  /**
   * A lifecycle change (online, visible, resumed, a clock jump): hints may have been missed,
   * so scan and claim at once. (Hints from a stream or another tab claim directly: `claimer.ts`.)
   */
  #catchUp(): void {
    this.#observe({ type: "hint", headSeq: null, from: "lifecycle" });
    this.#rescan();
  }

  #rescan(): void {
    this.#forced = true;
    this.#nextCycleAt = Date.now();
    this.#wake.notify();
  }

  /**
   * While hints flow, a scan at most once a second finds what they did not cover. Not while the
   * service cannot be reached: the loop's backoff says when to try again, and a hint (the stream
   * may live on while requests fail) must not pull that attempt forward.
   */
  #scanSoon(): void {
    if (this.#serviceDown) return;
    const dueAt = (this.#lastScanAt ?? 0) + SCAN_INTERVAL_BUSY_MS;
    if (dueAt >= this.#nextCycleAt) return;
    this.#nextCycleAt = dueAt;
    this.#hintScan = true;
    this.#wake.notify();
  }

  /**
   * Events behind the cursor are claimable again — another tab gave them back
   * (`HintHost.releasedElsewhere`), or an operator requeued or released them (`HintHost.nudged`):
   * scan and claim now, even if the scan finds nothing new.
   */
  #claimBehindCursor(): void {
    this.#claimBacklog = true;
    this.#rescan();
  }

  /**
   * The page goes away for good: claim nothing more, give back at once (no retry delay) every
   * lease whose handler has not finished and recorded its result, and send again the
   * acknowledgements of those that have, all as `keepalive` requests that outlive the page;
   * tell the other tabs; give up the lead. The handlers' signals abort.
   */
  #unload(): void {
    if (this.#unloading || !this.#started) return;
    this.#unloading = true;
    this.#claimer.stop();
    const released: string[] = [];
    const acks: AckEntry[] = [];
    for (const running of this.#running.values()) {
      const { event_id, lease_token } = running.claim;
      if (running.result !== null) {
        acks.push(ackEntry(running.claim, running.result, running.detail, running.reason));
      } else {
        released.push(event_id);
        this.#api
          .release({ event_id, lease_token, reason: "tab_closed", retry_after_seconds: 0 }, { keepalive: true })
          .catch(() => undefined);
      }
      running.controller.abort(new ConfigError("the page is closing"));
    }
    this.#running.clear();
    if (acks.length > 0) this.#api.acknowledge({ session_id: this.sessionId, acks }, { keepalive: true }).catch(() => undefined);
    if (released.length > 0) this.#tabs?.broadcastReleased(released, false);
    this.stop();
    this.#hints?.stop();
  }

  #lifecycle(change: LifecycleChange): void {
    switch (change) {
      case "online":
        // The network came back: catch up now, and try the best transport again.
        this.#transport?.reconnect(true);
        this.#catchUp();
        break;
      case "visible":
        this.#catchUp();
        break;
      case "frozen":
        this.#tabs?.suspend();
        break;
      case "resumed":
        this.#tabs?.resume();
        this.#transport?.reconnect(true);
        this.#catchUp();
        break;
      case "unloading":
        this.#unload();
        break;
      case "offline":
      case "hidden":
        break;
    }
  }

  /** A sleep/resume or a clock change: connections are likely dead, the head likely moved. */
  #watchClock(): () => void {
    let previous = { monotonicMs: performance.now(), wallMs: Date.now() };
    const handle = setInterval(() => {
      const now = { monotonicMs: performance.now(), wallMs: Date.now() };
      const drift = wallClockDrift(previous, now, CLOCK_TOLERANCE_MS);
      previous = now;
      if (drift !== null) {
        this.#observe({ type: "clock_jumped", driftMs: drift });
        this.#transport?.reconnect(true);
        this.#catchUp();
      }
    }, CLOCK_CHECK_MS);
    return () => clearInterval(handle);
  }

  get #connected(): boolean {
    return this.#hints?.connected ?? false;
  }

  get #transport(): HintTransport | null {
    return this.#hints?.transport ?? null;
  }

  get #tabs(): TabGroup | null {
    return this.#hints?.tabs ?? null;
  }

  #newHintSources(session: SubscribeResponse): HintSources {
    return new HintSources({
      api: this.#api,
      platform: this.#platform,
      options: this.#options,
      session,
      inbox: this.#inbox,
      knownHead: () => this.#knownHead,
      noteHead: (headSeq) => {
        this.#knownHead = Math.max(this.#knownHead, headSeq);
      },
      leading: (leader) => this.#claimer.leading(leader),
      streamHint: (headSeq) => this.#claimer.streamHint(headSeq),
      tabHint: (share, dispatchId, assigned, open) => this.#claimer.tabHint(share, dispatchId, assigned, open),
      followerSlots: (tabId, free, answered, declined) => this.#claimer.followerSlots(tabId, free, answered, declined),
      followerLeft: (tabId) => this.#claimer.followerLeft(tabId),
      newLeader: () => this.#claimer.newLeader(),
      rescan: () => this.#rescan(),
      releasedElsewhere: () => this.#claimBehindCursor(),
      nudged: () => this.#claimBehindCursor(),
      superseded: () => {
        this.#superseded = true;
        this.#wake.notify();
      },
      serviceDown: () => this.#serviceDown,
      observe: (progress) => this.#observe(progress),
    });
  }

  async #loop(): Promise<void> {
    this.#nextCycleAt = Date.now();
    this.#forced = true;
    for (;;) {
      if (this.#stopController.signal.aborted) break;
      if (this.#superseded) {
        await this.#drain();
        throw new SessionSupersededError(this.sessionId ?? "");
      }
      const free = this.#claimer.budget.free;
      if (free > 0 && Date.now() >= this.#nextCycleAt) {
        const forced = this.#forced;
        const hintScan = this.#hintScan && !forced;
        this.#forced = false;
        this.#hintScan = false;
        try {
          const cycle = await this.#cycle(forced, hintScan);
          let next = this.#afterCycle(cycle);
          // Asked for meanwhile: a scan and claim now, or the scan while hints flow.
          if (this.#forced) next = Date.now();
          if (this.#hintScan) next = Math.min(next, (this.#lastScanAt ?? 0) + SCAN_INTERVAL_BUSY_MS);
          this.#nextCycleAt = next;
        } catch (error) {
          if (error instanceof SessionSupersededError || !(error instanceof InboxError) || !error.retryable) {
            await this.#drain();
            throw error;
          }
          // Unreachable: the transports stand by, and only this loop knocks, on the outage
          // backoff (capped at a few seconds, so a returning service is found soon after it is
          // back; a `Retry-After` from the service is obeyed).
          this.#serviceDown = true;
          // A leader that cannot claim leaves the work to the other tabs.
          this.#claimer.openToAll();
          this.#outageAttempts += 1;
          const delay = outageDelay(this.#outage, this.#outageAttempts, jitter(), retryAfterOf(error));
          this.#observe({ type: "disconnected", error, retryInMs: delay });
          this.#nextCycleAt = Date.now() + delay;
        }
        continue;
      }
      const waitMs = free > 0 ? this.#nextCycleAt - Date.now() : 3_600_000;
      const wait = timer(waitMs);
      const wake = this.#wake.next();
      const woken = await Promise.race([wait.promise.then(() => "timer" as const), wake.promise.then(() => "wake" as const)]);
      wait.cancel();
      wake.cancel();
      // The schedule's own timer (a poll, the safety net, a change coming due) always scans.
      if (woken === "timer" && free > 0) this.#forced = true;
    }
    await this.#drain();
  }

  #afterCycle(cycle: { claimed: number; more: boolean }): number {
    if (this.#serviceDown) {
      this.#serviceDown = false;
      this.#transport?.reachable();
    }
    this.#outageAttempts = 0;
    const { waitMs, nominalMs } = nextCycleAfter(
      this.#poll,
      this.#pollNominalMs,
      { claimed: cycle.claimed, more: cycle.more, untilChangeMs: this.#claimableAt.until(Date.now()) },
      this.#connected,
      SCAVENGER_SLACK_MS,
      jitter(),
    );
    this.#pollNominalMs = nominalMs;
    return Date.now() + waitMs;
  }

  /**
   * One cycle of the loop. A forced cycle (start, a lifecycle change, the schedule's own timer)
   * scans after the cursor first, since hints may have been missed and the scan says whether
   * anything is claimable; then it claims what the free slots take. The scan while hints flow
   * (`hintScan`, at most once a second) claims only what the hints missed: events claimable at
   * the scan before too (the others are the hints' claims still on their way). Another cycle (a
   * claim that came back full, work done while polling) claims without scanning.
   */
  async #cycle(forced: boolean, hintScan: boolean): Promise<{ claimed: number; more: boolean }> {
    const scanStartedMs = Date.now();
    const before = forced || hintScan ? await this.#scan() : null;
    // A cycle that did not scan keeps what is known of when something becomes claimable.
    if (before !== null) this.#claimableAt.scanned(scanStartedMs, before.scan.nextChangeMs);
    let worthClaiming = this.#claimBacklog || before === null || before.scan.claimable > 0 || before.truncated;
    let limit = Math.min(this.#claimer.budget.free, BATCH_EVENTS_MAX);
    let missed = 0;
    if (before !== null) {
      const seenBefore = this.#lastClaimable;
      missed = before.scan.claimableIds.filter((id) => seenBefore.has(id)).length;
      this.#lastClaimable = new Set(before.scan.claimableIds);
      if (hintScan && !this.#claimBacklog) {
        worthClaiming = missed > 0;
        limit = Math.min(limit, missed);
      }
    }
    const claimed = worthClaiming && limit > 0 ? (await this.#claimer.claim(limit)).length : 0;
    if (claimed < limit) this.#claimBacklog = false;
    const more = claimed === limit && claimed > 0 && (!hintScan || missed > limit);
    // A leader whose claim came back full leaves the rest to the other tabs too.
    if (more) this.#claimer.openToAll();
    return { claimed, more };
  }

  /** Reads the inbox after the cursor (see `scanner.ts`), and learns the head from it. */
  async #scan(): Promise<ScanResult> {
    if (this.#scanner === null) throw new ConfigError("the agent is not running");
    const result = await this.#scanner.scan(new Set(this.#running.keys()));
    this.#lastScanAt = Date.now();
    this.#knownHead = Math.max(this.#knownHead, result.scan.headSeq);
    return result;
  }

  #newScanner(state: LocalState): Scanner {
    return new Scanner({
      api: this.#api,
      state,
      inbox: this.#inbox,
      pageSize: this.#options.pageSize,
      scanPagesMax: this.#options.scanPagesMax,
      resync: this.#options.resync,
      observe: (progress) => this.#observe(progress),
      resynced: () => {
        this.#summary.resyncs += 1;
        this.#claimBacklog = true;
      },
    });
  }

  #newDelivery(state: LocalState): Delivery {
    return new Delivery({
      api: this.#api,
      state,
      inbox: this.#inbox,
      handler: this.#options.handler,
      leaseSeconds: this.#leaseSeconds,
      acks: this.#acks,
      retryPolicy: this.#retryPolicy,
      sessionId: () => this.sessionId,
      observe: (progress) => this.#observe(progress),
      recorded: (eventId) => this.#freeSlot(eventId),
    });
  }

  #start(claim: Claim): void {
    const started = Date.now();
    const running: Running = { claim, controller: new AbortController(), done: Promise.resolve(), result: null };
    // In the map before the work starts: a page unloading meanwhile gives the lease back.
    this.#running.set(claim.event_id, running);
    this.#slotHeld.add(claim.event_id);
    this.#observe({ type: "started", event: claim.event });
    const delivery = this.#delivery;
    if (delivery === null) throw new ConfigError("the agent is not running");
    running.done = delivery.finish(running).then((outcome) => {
      this.#running.delete(claim.event_id);
      this.#freeSlot(claim.event_id);
      this.#count(outcome);
      if (outcome.kind === "released") this.#claimableAt.note(Date.now() + outcome.retryAfterSeconds * 1000);
      this.#observe({ type: "finished", event: claim.event, outcome, elapsedMs: Date.now() - started });
      // Still open (released for a retry, or its lease left to expire): scan now, so the wait
      // follows when it becomes claimable again rather than an older scan's view. Otherwise,
      // while hints flow they say when to claim; without them, work done means poll soon.
      const open = outcome.kind === "released" || outcome.kind === "unconfirmed";
      if (open) this.#forced = true;
      if (open || !this.#connected) this.#nextCycleAt = Math.min(this.#nextCycleAt, Date.now());
      this.#wake.notify();
    });
  }

  /** The event's handler slot frees once its result is recorded (its ack may be on its way). */
  #freeSlot(eventId: string): void {
    if (this.#slotHeld.delete(eventId)) this.#claimer.slotFreed();
  }

  #newClaimer(): Claimer {
    return new Claimer(
      {
        api: this.#api,
        leaseSeconds: this.#options.leaseSeconds,
        sessionId: () => this.sessionId,
        knownHead: () => this.#knownHead,
        noteHead: (headSeq) => {
          this.#knownHead = Math.max(this.#knownHead, headSeq);
        },
        tabs: () => this.#tabs,
        serviceDown: () => this.#serviceDown,
        claimFailed: (error) => {
          if (error instanceof SessionSupersededError) {
            this.#superseded = true;
            this.#wake.notify();
          } else if (!(error instanceof InboxError) || !error.retryable) {
            // The loop meets it too, and stops with it.
            this.#rescan();
          } else if (!this.#serviceDown) {
            // The loop's next cycle finds out whether the service is back, then backs off.
            this.#serviceDown = true;
            this.#rescan();
          }
        },
        start: (claim) => this.#start(claim),
        slotsReturned: () => this.#wake.notify(),
        scanSoon: () => this.#scanSoon(),
        rescan: () => this.#rescan(),
        observe: (progress) => this.#observe(progress),
      },
      this.#concurrency,
    );
  }

  #count(outcome: Outcome): void {
    const key = outcome.kind;
    this.#summary[key === "acked" ? "acked" : key] += 1;
  }

  /** Lets running handlers finish within the grace period, then releases what still runs. */
  async #drain(): Promise<void> {
    if (this.#running.size === 0) return;
    const grace = timer(this.#options.shutdownGraceMs ?? 30_000);
    const all = Promise.all([...this.#running.values()].map((r) => r.done));
    await Promise.race([all, grace.promise]);
    grace.cancel();
    const unfinished = [...this.#running.values()];
    const released: string[] = [];
    for (const running of unfinished) {
      running.controller.abort(new ConfigError("the agent stopped"));
      if (running.result !== null) continue;
      try {
        await this.#api.release({ event_id: running.claim.event_id, lease_token: running.claim.lease_token, reason: "agent_shutdown", retry_after_seconds: 0 });
        released.push(running.claim.event_id);
      } catch {
        // The lease will expire instead.
      }
    }
    // The other tabs of this agent may take them now.
    if (released.length > 0) this.#tabs?.broadcastReleased(released, true);
  }

  #observe(progress: Progress): void {
    try {
      this.#options.observer?.(progress);
    } catch {
      // An observer's failure is not the agent's.
    }
  }
}

/** The service's `Retry-After` in seconds, when the failed request's answer carried one. */
function retryAfterOf(error: InboxError): number | undefined {
  return error instanceof ProblemError ? error.retryAfter : undefined;
}
