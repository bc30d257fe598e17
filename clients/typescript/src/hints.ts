/**
 * Where the runner hears of new work: its own transport (SSE, long poll; see `transport.ts`)
 * when it leads, or the leader tab's relayed hints when another tab of the agent holds the one
 * shared stream (see `tabs.ts`). It follows the tab group's elections, starting and stopping
 * the transport, and tells the runner what to do with each hint; the runner decides the claims.
 */

import type { InboxApi } from "./api.js";
import type { AgentOptions, Progress } from "./contract.js";
import type { Platform } from "./platform.js";
import { DEFAULT_TAB_TIMING, TabGroup } from "./tabs.js";
import { DEFAULT_TRANSPORT_CONFIG, HintTransport } from "./transport.js";
import type { SubscribeResponse } from "./wire.js";

/**
 * After a hint the leader claims itself; the other tabs check this many of the leader's
 * heartbeats later that it did (its heartbeat says how far it has claimed), and claim if not.
 */
const LEADER_CHECK_HEARTBEATS = 2;

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
  /** Handler slots this tab has free now. */
  freeSlots(): number;
  /** New work may exist: claim. `observe`: report the hint (a tab hint is reported on arrival). */
  hinted(headSeq: number | null, from: "stream" | "tab", observe: boolean): void;
  /** The schedule's basis changed (connected or not): scan now and reschedule. */
  rescan(): void;
  /** Another tab gave these leases back; `landed`: the service has them already. */
  releasedElsewhere(landed: boolean): void;
  superseded(): void;
  serviceDown(): boolean;
  observe(progress: Progress): void;
}

export class HintSources {
  readonly #host: HintHost;
  #transport: HintTransport | null = null;
  #tabs: TabGroup | null = null;
  #leaderConnected = false;
  #leaderCheck: ReturnType<typeof setTimeout> | undefined;

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
      this.#lead();
      return;
    }
    this.#tabs = new TabGroup(
      tabs,
      host.inbox,
      {
        lead: () => {
          host.observe({ type: "role", leader: true });
          this.#lead();
        },
        follow: () => {
          host.observe({ type: "role", leader: false });
          this.#transport?.stop();
          this.#transport = null;
          this.#leaderConnected = false;
        },
        hint: (headSeq, leaderFree) => {
          host.noteHead(headSeq);
          host.observe({ type: "hint", headSeq, from: "tab" });
          // The leader takes what it has room for; the others claim when it has none left, and
          // a moment later if its heartbeat does not show it claimed (gone, stuck, failing).
          if (leaderFree === 0) {
            host.hinted(headSeq, "tab", false);
          } else if (this.#leaderCheck === undefined) {
            const timing = host.options.tabTiming ?? DEFAULT_TAB_TIMING;
            this.#leaderCheck = setTimeout(() => {
              this.#leaderCheck = undefined;
              if (this.#tabs !== null && !this.#tabs.isLeader && this.#tabs.leaderClaimedThrough >= headSeq) return;
              host.hinted(headSeq, "tab", false);
            }, LEADER_CHECK_HEARTBEATS * timing.aliveIntervalMs);
          }
        },
        leaderConnected: (connected) => {
          this.#leaderConnected = connected;
          host.rescan();
        },
        released: (_eventIds, landed) => host.releasedElsewhere(landed),
      },
      host.options.tabTiming ?? DEFAULT_TAB_TIMING,
    );
    this.#tabs.start();
  }

  stop(): void {
    clearTimeout(this.#leaderCheck);
    this.#tabs?.stop();
    this.#transport?.stop();
    this.#transport = null;
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
          this.#tabs?.broadcastHint(headSeq ?? host.knownHead(), host.freeSlots());
          host.hinted(headSeq, "stream", true);
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
