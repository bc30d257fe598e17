// The real `agent-inbox serve` for the console tests: a fresh SQLite database in a temporary
// directory, port 0, tokens issued by the binary's `token issue` against the same database,
// and the few API calls the tests make as agents and publishers. The binary comes from
// AGENT_INBOX_BIN (default: the repository's target/debug/agent-inbox).
import { execFile, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const here = dirname(fileURLToPath(import.meta.url));
export const REPO = resolve(here, "../..");
export const BIN = process.env.AGENT_INBOX_BIN ?? join(REPO, "target/debug/agent-inbox");

/** Starts a server; resolves once it listens. `stop()` ends it and removes its directory. */
export async function startServer() {
  const dir = await mkdtemp(join(tmpdir(), "inbox-console-"));
  const databaseUrl = `sqlite://${join(dir, "db.sqlite")}`;
  const child = spawn(BIN, ["serve", "--listen", "127.0.0.1:0", "--database-url", databaseUrl], {
    env: { ...process.env, AGENT_INBOX_LOG: process.env.AGENT_INBOX_LOG ?? "warn,agent_inbox=info,inbox_server=info" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const logs = [];
  const exited = new Promise((done) => child.once("exit", (code, signal) => done({ code, signal })));
  const port = await new Promise((found, reject) => {
    const timeout = setTimeout(() => reject(new Error(`the server did not start within 20 s:\n${logs.join("")}`)), 20_000);
    const onData = (chunk) => {
      logs.push(chunk.toString());
      const match = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(logs.join(""));
      if (match) {
        clearTimeout(timeout);
        found(Number(match[1]));
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    void exited.then(({ code }) => {
      clearTimeout(timeout);
      reject(new Error(`the server exited with ${code} before listening:\n${logs.join("")}`));
    });
  });
  const url = `http://127.0.0.1:${port}`;
  await waitReady(url);
  return {
    url,
    logs,
    /** `agent-inbox token issue`: kind agent (default), publisher or admin. */
    async token(subject, { kind, tenant = "demo", ttl } = {}) {
      const flags = ["token", "issue", "--tenant", tenant, "--subject", subject, "--database-url", databaseUrl];
      if (kind) flags.push("--kind", kind);
      if (ttl) flags.push("--ttl", ttl);
      const { stdout } = await run(BIN, flags);
      return stdout.trim().split("\n")[0];
    },
    /** One JSON call as a bearer; resolves { status, body }. */
    async call(method, path, token, body) {
      const response = await fetch(`${url}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
        body: body ? JSON.stringify(body) : undefined,
      });
      const text = await response.text();
      return { status: response.status, body: text ? JSON.parse(text) : null };
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      const timeout = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timeout);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

async function waitReady(url) {
  for (let i = 0; i < 400; i++) {
    const ok = await fetch(`${url}/readyz`).then((r) => r.ok, () => false);
    if (ok) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error("the server did not become ready");
}

/** Publishes one event to `agent`; resolves its event id. */
export async function publish(server, publisher, agent, payload = { task: "summarize the meeting" }) {
  const answer = await server.call("POST", "/v1/events", publisher, { recipients: [agent], event_type: "task.assigned", payload });
  if (answer.status !== 201) throw new Error(`publish answered ${answer.status}: ${JSON.stringify(answer.body)}`);
  return answer.body.deliveries[0].event_id;
}

/** Publishes to `agent`, claims and acknowledges as failed: a dead-lettered event's id. */
export async function deadLetter(server, publisher, agentToken, agent) {
  const eventId = await publish(server, publisher, agent, { task: "parse the invoice", attempt: "doomed" });
  const claimed = await server.call("POST", "/v1/inbox/claim", agentToken, { event_ids: [eventId] });
  const claim = claimed.body.claims?.[0];
  if (!claim) throw new Error(`claim answered ${claimed.status}: ${JSON.stringify(claimed.body)}`);
  const acked = await server.call("POST", "/v1/inbox/acknowledge", agentToken, {
    acks: [{ event_id: eventId, lease_token: claim.lease_token, result: "failed" }],
  });
  if (acked.body.results?.[0]?.ack_state !== "dead_letter") throw new Error(`ack answered ${JSON.stringify(acked.body)}`);
  return eventId;
}
