/**
 * Where the runner hears of new work: its own transport (SSE, long poll; see `transport.ts`)
 * when it leads, or the leader tab's relayed hints when another tab of the agent holds the one
 * shared stream (see `tabs.ts`). It follows the tab group's elections, starting and stopping
 * the transport, and passes each hint and each tab's report to the runner, which decides the
 * claims (see `claims.ts`).
 */

import type { InboxApi } from "./api.js";
import type { AgentOptions, Progress } from "./contract.js";
import type { Platform } from "./platform.js";
import { DEFAULT_TAB_TIMING, TabGroup } from "./tabs.js";
import { DEFAULT_TRANSPORT_CONFIG, HintTransport } from "./transport.js";
import type { SubscribeResponse } from "./wire.js";

/** What the hint sources need from the runner. */
export interface HintHost {
  readonly api: InboxApi;
  readonly platform: Platform;
  readonly options: AgentOptions;
  readonly session: SubscribeResponse;
  /** The agent's inbox, `tenant/agent`: the tab group's name. */
  readonly inbox: string;
  knownHead(): number;
  noteHead(headSeq: number): void;
  /** This tab now leads (and hears the stream), or follows. */
  leading(leader: boolean): void;
  /** The stream says new work may exist up to `headSeq` (null: hints may have been missed). */
  streamHint(headSeq: number | null): void;
  /** As follower: the leader heard of work; claim `share` events now (see `TabGroupEvents.hint`). */
  tabHint(share: number, dispatchId: number, assigned: boolean, open: boolean): void;
  /** As leader: another tab's free slots (see `Dispatcher.report`). */
  followerSlots(tabId: string, free: number, answered: number, declined: number): void;
  /** As leader: another tab stopped. */
  followerLeft(tabId: string): void;
  /** As follower: a new leader speaks; tell it this tab's slots. */
  newLeader(): void;
  /** The schedule's basis changed (connected or not): scan now and reschedule. */
  rescan(): void;
  /**
   * Another tab gave leases back: scan and claim now. Releases sent by a closing page may
   * still be on their way, so this comes again a few times shortly after (a scan that finds
   * them still leased would otherwise wait for the lease's end).
   */
  releasedElsewhere(): void;
  /** The stream hinted without moving the head: events behind the cursor are back; claim now. */
  nudged(): void;
  superseded(): void;
  serviceDown(): boolean;
  observe(progress: Progress): void;
}

/**
 * After a closing tab's releases (sent as it unloads, unanswered), the other tabs scan this
 * long after, in case the releases had not landed at the first scan; then the lease's end.
 */
const RELEASE_FOLLOW_UP_MS = [100, 1_000, 3_000];

export class HintSources {
  readonly #host: HintHost;
  readonly #followUps = new Set<ReturnType<typeof setTimeout>>();
  #transport: HintTransport | null = null;
  #tabs: TabGroup | null = null;
  #leaderConnected = false;

  constructor(host: HintHost) {
    this.#host = host;
  }

  /** The transport, while this tab leads (always, outside browsers with tabs). */
  get transport(): HintTransport | null {
    return this.#transport;
  }

  /** The tab group, when tabs share one stream. */
  get tabs(): TabGroup | null {
    return this.#tabs;
  }

  /** Whether hints flow: this tab's transport is connected, or the leader's is. */
  get connected(): boolean {
    if (this.#transport !== null) return this.#transport.status.connected;
    return this.#leaderConnected;
  }

  /** Starts the transport here, or joins the tabs of this agent that share one. */
  start(): void {
    const host = this.#host;
    const tabs = host.platform.tabs;
    if (tabs === null || host.options.shareStreamAcrossTabs === false) {
      host.leading(true);
      this.#lead();
      return;
    }
    this.#tabs = new TabGroup(
      tabs,
      host.inbox,
      {
        lead: () => {
          host.observe({ type: "role", leader: true });
          host.leading(true);
          this.#lead();
        },
        follow: () => {
          host.observe({ type: "role", leader: false });
          this.#transport?.stop();
          this.#transport = null;
          this.#leaderConnected = false;
          host.leading(false);
        },
        hint: (headSeq, share, dispatchId, assigned, open) => {
          host.noteHead(headSeq);
          host.observe({ type: "hint", headSeq, from: "tab" });
          host.tabHint(share, dispatchId, assigned, open);
        },
        slots: (tabId, free, answered, declined) => host.followerSlots(tabId, free, answered, declined),
        left: (tabId) => host.followerLeft(tabId),
        leaderChanged: () => host.newLeader(),
        leaderConnected: (connected) => {
          this.#leaderConnected = connected;
          host.rescan();
        },
        released: (_eventIds, landed) => this.#released(landed),
      },
      host.options.tabTiming ?? DEFAULT_TAB_TIMING,
    );
    this.#tabs.start();
  }

  stop(): void {
    for (const handle of this.#followUps) clearTimeout(handle);
    this.#tabs?.stop();
    this.#transport?.stop();
    this.#transport = null;
  }

  #released(landed: boolean): void {
    this.#host.releasedElsewhere();
    if (landed) return;
    for (const afterMs of RELEASE_FOLLOW_UP_MS) {
      const handle = setTimeout(() => {
        this.#followUps.delete(handle);
        this.#host.releasedElsewhere();
      }, afterMs);
      this.#followUps.add(handle);
    }
  }

  #lead(): void {
    const host = this.#host;
    const session = host.session;
    this.#transport?.stop();
    this.#transport = new HintTransport(
      {
        api: host.api,
        platform: host.platform,
        sessionId: session.session_id,
        sseUrl: session.sse_url ?? null,
        heartbeatIntervalMs: Math.max(1, session.heartbeat_interval_seconds) * 1000,
        knownHead: () => host.knownHead(),
        noteHead: (headSeq) => host.noteHead(headSeq),
        hint: (headSeq) => {
          host.observe({ type: "hint", headSeq, from: "stream" });
          host.streamHint(headSeq);
        },
        nudged: () => {
          host.observe({ type: "hint", headSeq: host.knownHead(), from: "stream" });
          host.nudged();
        },
        status: (status) => {
          this.#tabs?.setConnected(status.connected);
          host.observe({ type: "transport", status });
          host.rescan();
        },
        superseded: () => host.superseded(),
        serviceDown: () => host.serviceDown(),
      },
      { ...DEFAULT_TRANSPORT_CONFIG, ...host.options.transport },
    );
    this.#transport.start();
  }
}
