// Runs the real `agent-inbox serve` for tests: a fresh SQLite database in a temporary
// directory, port 0, tokens issued with the binary against the same database. The binary comes
// from AGENT_INBOX_BIN (default: target/debug/agent-inbox of the repository).
import { execFile, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";

const run = promisify(execFile);
const here = dirname(fileURLToPath(import.meta.url));
export const REPO = resolve(here, "../../../..");
export const BIN = process.env.AGENT_INBOX_BIN ?? join(REPO, "target/debug/agent-inbox");

/**
 * Starts a server. `args` are extra `serve` flags. Resolves once it listens; `stop()` ends it
 * (SIGTERM, then waits for the exit) and removes its directory; `kill()` and `restart()` take
 * the service away and bring it back on the same port and database, for outages.
 */
export async function startServer({ args = [], env = {}, scheme = "http", ca, databaseUrl: givenUrl } = {}) {
  const dir = await mkdtemp(join(tmpdir(), "inbox-ts-"));
  const databaseUrl = givenUrl ?? `sqlite://${join(dir, "db.sqlite")}`;
  const logs = [];
  let serve = await spawnServe({ listen: "127.0.0.1:0", databaseUrl, args, env, logs });
  const port = serve.port;
  const url = `${scheme}://127.0.0.1:${port}`;
  return {
    url,
    port,
    databaseUrl,
    dir,
    logs,
    /** Issues a token; `kind` agent (default), publisher or admin. */
    async token(subject, { kind, tenant = "demo", refresh = false, ttl } = {}) {
      const flags = ["token", "issue", "--tenant", tenant, "--subject", subject, "--database-url", databaseUrl];
      if (kind) flags.push("--kind", kind);
      if (refresh) flags.push("--refresh");
      if (ttl) flags.push("--ttl", ttl);
      const { stdout } = await run(BIN, flags);
      const [access, refreshToken] = stdout.trim().split("\n");
      return refresh ? { access, refresh: refreshToken } : access;
    },
    /** One request to the server (trusting `ca` for HTTPS); resolves with status and text. */
    request(method, path, { token, body } = {}) {
      return new Promise((resolveRequest, reject) => {
        const send = scheme === "https" ? httpsRequest : httpRequest;
        const headers = { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body ? { "content-type": "application/json" } : {}) };
        const outgoing = send(`${url}${path}`, { method, headers, ...(ca ? { ca } : {}) }, (response) => {
          const chunks = [];
          response.on("data", (c) => chunks.push(c));
          response.on("end", () => resolveRequest({ status: response.statusCode, text: Buffer.concat(chunks).toString() }));
          response.on("error", reject);
        });
        outgoing.on("error", reject);
        outgoing.end(body ? JSON.stringify(body) : undefined);
      });
    },
    async metrics() {
      const answer = await this.request("GET", "/metrics").catch(() => null);
      return answer ? answer.text : "";
    },
    /** The service goes away at once (SIGKILL); its database stays for {@link restart}. */
    async kill() {
      await serve.end("SIGKILL");
    },
    /** Starts the service again on the same port and database, after {@link kill}. */
    async restart() {
      await serve.end("SIGKILL");
      serve = await spawnServe({ listen: `127.0.0.1:${port}`, databaseUrl, args, env, logs });
    },
    async stop() {
      await serve.end("SIGTERM");
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** One `agent-inbox serve` process; resolves once it listens, with its port and `end(signal)`. */
async function spawnServe({ listen, databaseUrl, args, env, logs }) {
  const child = spawn(BIN, ["serve", "--listen", listen, "--database-url", databaseUrl, ...args], {
    env: { ...process.env, AGENT_INBOX_LOG: process.env.AGENT_INBOX_LOG ?? "info", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const logged = logs.length;
  const exited = new Promise((resolveExit) => child.once("exit", (code, signal) => resolveExit({ code, signal })));
  const port = await new Promise((resolvePort, reject) => {
    const timeout = setTimeout(() => reject(new Error(`the server did not start within 20 s:\n${logs.join("")}`)), 20_000);
    const onData = (chunk) => {
      logs.push(chunk.toString());
      const match = /listening on https?:\/\/127\.0\.0\.1:(\d+)/.exec(logs.slice(logged).join(""));
      if (match) {
        clearTimeout(timeout);
        resolvePort(Number(match[1]));
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    void exited.then(({ code }) => {
      clearTimeout(timeout);
      reject(new Error(`the server exited with ${code} before listening:\n${logs.join("")}`));
    });
  });
  return {
    port,
    /** Ends the process with `signal` (SIGKILL after 10 s) and waits for its exit. */
    async end(signal) {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const timeout = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timeout);
    },
  };
}

/** The value of a Prometheus counter or gauge with exactly these labels (0 when absent). */
export function metricValue(text, name, labels = {}) {
  let total = 0;
  for (const line of text.split("\n")) {
    if (!line.startsWith(name)) continue;
    const match = /^([a-z_]+)(\{([^}]*)\})?\s+([0-9.eE+-]+)$/.exec(line.trim());
    if (!match || match[1] !== name) continue;
    const found = Object.fromEntries((match[3] ?? "").split(",").filter(Boolean).map((pair) => {
      const [key, value] = pair.split("=");
      return [key, value.replace(/^"|"$/g, "")];
    }));
    if (Object.entries(labels).every(([key, value]) => found[key] === value)) total += Number(match[4]);
  }
  return total;
}

/** Publishes `count` events to `recipient`, `perSecond` at most (0: as fast as it goes). */
export async function publish(server, publisherToken, recipient, count, { perSecond = 0, prefix = "ev", payload = (i) => ({ i }) } = {}) {
  const published = [];
  const started = Date.now();
  for (let i = 0; i < count; i++) {
    if (perSecond > 0) {
      const due = started + (i * 1000) / perSecond;
      const wait = due - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
    const at = Date.now();
    const answer = await server.request("POST", "/v1/events", {
      token: publisherToken,
      body: { recipients: [recipient], event_type: "test.work", deduplication_key: `${prefix}:${i}`, payload: payload(i) },
    });
    if (answer.status !== 201 && answer.status !== 200) throw new Error(`publish answered ${answer.status}: ${answer.text}`);
    const body = JSON.parse(answer.text);
    published.push({ eventId: body.deliveries[0].event_id, inboxSeq: body.deliveries[0].inbox_seq, publishedAt: at, i });
  }
  return published;
}

/** Waits until `condition()` is truthy (it may be async), or fails after `timeoutMs`. */
export async function waitFor(condition, { timeoutMs = 10_000, intervalMs = 25, what = "the condition" } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await condition();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
