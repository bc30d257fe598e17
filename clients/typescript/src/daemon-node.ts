/**
 * The local wake daemon (`agent-inbox daemon`) from Node: ask it first whether work waits for
 * a login profile, and the service itself when it is absent, stale or refuses. The answer is
 * the same either way; when the daemon answers, this process opens no connection of its own.
 *
 * The daemon speaks JSON lines on a Unix domain socket (the Rust crate's
 * `inbox_client::local_daemon::protocol`): one request line, answered by `waiting` and then
 * `work` or `timeout`, or by an `error` line with a stable `code`.
 */

import { readFileSync } from "node:fs";
import { createConnection } from "node:net";
import { homedir } from "node:os";
import { join } from "node:path";

import type { InboxApi } from "./api.js";
import { InboxError, ProblemError } from "./errors.js";

export const DAEMON_PROTOCOL_VERSION = 1;
/** Longest line either side accepts, newline included. */
export const DAEMON_LINE_BYTES_MAX = 4096;
/** How long connecting, and the daemon's first answer, may take. */
const ANSWER_TIMEOUT_MS = 2000;
/** After a wait's own timeout, how long its last answer may still take. */
const FINAL_ANSWER_GRACE_MS = 2000;
/** Claimable events counted per look, as `agent-inbox wait` counts them. */
const COUNTED_MAX = 100;

/** Who to ask about: a login profile and what it says. */
export interface DaemonIdentity {
  profile: string;
  server_url: string;
  tenant_id: string;
  agent_id: string;
}

/** The daemon could not answer: absent, stale, refusing (`reason` names why) or broken. */
export class DaemonUnavailable extends InboxError {
  readonly reason: string | null;

  constructor(message: string, reason: string | null = null) {
    super("daemon_unavailable", message, true);
    this.reason = reason;
  }
}

/** `AGENT_INBOX_HOME`, else `$XDG_CONFIG_HOME/agent-inbox`, else `~/.config/agent-inbox`. */
export function configHome(env: NodeJS.ProcessEnv = process.env): string {
  if (env.AGENT_INBOX_HOME) return env.AGENT_INBOX_HOME;
  if (env.XDG_CONFIG_HOME) return join(env.XDG_CONFIG_HOME, "agent-inbox");
  return join(homedir(), ".config", "agent-inbox");
}

/**
 * `AGENT_INBOX_DAEMON_SOCKET`, else `$XDG_RUNTIME_DIR/agent-inbox/daemon.sock`, else
 * `daemon.sock` in the configuration directory: where the daemon listens.
 */
export function daemonSocketPath(env: NodeJS.ProcessEnv = process.env): string {
  if (env.AGENT_INBOX_DAEMON_SOCKET) return env.AGENT_INBOX_DAEMON_SOCKET;
  if (env.XDG_RUNTIME_DIR) return join(env.XDG_RUNTIME_DIR, "agent-inbox", "daemon.sock");
  return join(configHome(env), "daemon.sock");
}

/** The identity `agent-inbox login` recorded for `profile`. */
export function identityOfProfile(profile = "default", home = configHome(), serverUrl?: string): DaemonIdentity {
  const record = JSON.parse(readFileSync(join(home, `${profile}.json`), "utf8")) as Record<string, string>;
  return {
    profile,
    server_url: (serverUrl ?? record.server_url ?? "").replace(/\/+$/, ""),
    tenant_id: record.tenant_id ?? "",
    agent_id: record.agent_id ?? "",
  };
}

/** The daemon at a socket path. */
export class LocalDaemon {
  readonly path: string;

  constructor(path: string = daemonSocketPath()) {
    this.path = path;
  }

  /**
   * Claimable events once there are some (at most 100 counted), or `null` after `timeoutMs`
   * with none. Rejects with {@link DaemonUnavailable}.
   */
  wait(identity: DaemonIdentity, timeoutMs: number): Promise<number | null> {
    const request = { v: DAEMON_PROTOCOL_VERSION, op: "wait", identity, timeout_ms: Math.max(0, Math.floor(timeoutMs)) };
    return new Promise((resolve, reject) => {
      const socket = createConnection(this.path);
      let buffered = "";
      let timer: NodeJS.Timeout | undefined;
      const fail = (error: DaemonUnavailable) => {
        clearTimeout(timer);
        socket.destroy();
        reject(error);
      };
      const deadline = (ms: number) => {
        clearTimeout(timer);
        timer = setTimeout(() => fail(new DaemonUnavailable(`no answer from the local daemon within ${ms} ms`)), ms);
      };
      deadline(ANSWER_TIMEOUT_MS);
      socket.setEncoding("utf8");
      let connected = false;
      socket.on("connect", () => {
        connected = true;
        socket.write(`${JSON.stringify(request)}\n`);
      });
      socket.on("error", (err: NodeJS.ErrnoException) => {
        const broken = new DaemonUnavailable(`no local daemon answers at ${this.path}: ${err.message}`);
        if (!connected || (err.code !== "EPIPE" && err.code !== "ECONNRESET")) return fail(broken);
        // The request's write ran into a hang-up, which Node answers by dropping what the
        // daemon sent: perhaps a refusal made at once. Ask for it again.
        clearTimeout(timer);
        socket.destroy();
        void refusalAtAccept(this.path).then((refusal) => reject(refusal ?? broken));
      });
      socket.on("end", () => fail(new DaemonUnavailable("the local daemon hung up")));
      socket.on("data", (chunk: string) => {
        buffered += chunk;
        if (buffered.length > DAEMON_LINE_BYTES_MAX) return fail(new DaemonUnavailable("the local daemon sent a line too long"));
        let newline: number;
        while ((newline = buffered.indexOf("\n")) >= 0) {
          const line = buffered.slice(0, newline);
          buffered = buffered.slice(newline + 1);
          let answer: Record<string, unknown>;
          try {
            answer = JSON.parse(line) as Record<string, unknown>;
          } catch {
            return fail(new DaemonUnavailable("the local daemon sent a line that is not JSON"));
          }
          if (answer.v !== DAEMON_PROTOCOL_VERSION) return fail(new DaemonUnavailable(`the local daemon speaks another protocol version: ${line}`));
          switch (answer.type) {
            case "waiting":
              deadline(timeoutMs + FINAL_ANSWER_GRACE_MS);
              continue;
            case "work":
              clearTimeout(timer);
              socket.destroy();
              return resolve(Number(answer.claimable));
            case "timeout":
              clearTimeout(timer);
              socket.destroy();
              return resolve(null);
            case "error":
              return fail(refusal(answer));
            default:
              return fail(new DaemonUnavailable(`an answer out of place: ${line}`));
          }
        }
      });
    });
  }
}

/** How long {@link refusalAtAccept} listens. */
const REFUSAL_READ_TIMEOUT_MS = 200;

function refusal(answer: Record<string, unknown>): DaemonUnavailable {
  return new DaemonUnavailable(`the local daemon refused: ${String(answer.message)}`, String(answer.code));
}

/**
 * The refusal a daemon makes as it accepts a connection (a peer of another user, one client
 * too many), if it makes one: listens on a new connection, sending nothing, for a moment. Such
 * a daemon writes its answer and hangs up before reading, so a request written a moment later
 * fails (EPIPE), and Node drops the answer with the failed socket; the refusal is the same on
 * every connection, so it is heard on this one. A daemon that waits for a request instead
 * says nothing, and is left at once.
 */
function refusalAtAccept(path: string): Promise<DaemonUnavailable | null> {
  return new Promise((resolve) => {
    const socket = createConnection(path);
    let buffered = "";
    const done = (found: DaemonUnavailable | null) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(found);
    };
    const timer = setTimeout(() => done(null), REFUSAL_READ_TIMEOUT_MS);
    socket.setEncoding("utf8");
    socket.on("error", () => done(null));
    socket.on("end", () => done(null));
    socket.on("data", (chunk: string) => {
      buffered += chunk;
      const newline = buffered.indexOf("\n");
      if (newline < 0) return buffered.length > DAEMON_LINE_BYTES_MAX ? done(null) : undefined;
      try {
        const answer = JSON.parse(buffered.slice(0, newline)) as Record<string, unknown>;
        done(answer.v === DAEMON_PROTOCOL_VERSION && answer.type === "error" ? refusal(answer) : null);
      } catch {
        done(null);
      }
    });
  });
}

/** Options of {@link waitForWork}. */
export interface WaitForWorkOptions {
  /** Ask the local daemon about this identity first. */
  identity?: DaemonIdentity;
  /** The daemon to ask [default: the one at {@link daemonSocketPath}]. */
  daemon?: LocalDaemon;
}

/**
 * Resolves once claimable work waits (how many, at most 100 counted) or `timeoutMs` passes
 * (`null`). With an `identity`, the local daemon is asked first; when it cannot answer, the
 * service is long-polled for the rest of the time, from the start of the inbox (a requeued
 * event sits behind any cursor).
 */
export async function waitForWork(api: InboxApi, timeoutMs: number, options: WaitForWorkOptions = {}): Promise<number | null> {
  const deadline = Date.now() + timeoutMs;
  if (options.identity) {
    try {
      return await (options.daemon ?? new LocalDaemon()).wait(options.identity, timeoutMs);
    } catch (err) {
      if (!(err instanceof DaemonUnavailable)) throw err;
    }
  }
  let afterSeq = 0;
  let failures = 0;
  for (;;) {
    const remaining = deadline - Date.now();
    if (remaining <= 0) return null;
    const waitSeconds = Math.min(25, Math.max(1, Math.ceil(remaining / 1000)));
    try {
      const page = await api.poll({ after_seq: afterSeq, limit: COUNTED_MAX, wait_seconds: waitSeconds, include_claimable_only: true });
      failures = 0;
      if (page.events.length > 0) return page.events.length;
      if (page.more_available) afterSeq = page.next_cursor;
    } catch (err) {
      if (err instanceof ProblemError && err.code === "cursor_reset_required") {
        afterSeq = Math.max(0, Number(err.problem.oldest_available_seq ?? 1) - 1);
        continue;
      }
      if (!(err instanceof InboxError) || !err.retryable) throw err;
      failures += 1;
      let delay = Math.min(60_000, 1000 * 2 ** (failures - 1));
      if (err instanceof ProblemError && err.retryAfter !== undefined) delay = Math.max(delay, err.retryAfter * 1000);
      await new Promise((r) => setTimeout(r, Math.min(delay, Math.max(0, deadline - Date.now()))));
    }
  }
}
