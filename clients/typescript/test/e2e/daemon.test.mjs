// waitForWork asks the local wake daemon first: a real `agent-inbox daemon` for a profile
// `agent-inbox login` made answers it (the daemon counts the wait); without a daemon, or with
// one that refuses, the service answers the same.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";

import { DaemonUnavailable, InboxApi, LocalDaemon, daemonSocketPath, identityOfProfile, waitForWork } from "../../dist/node.js";
import { BIN, publish, startServer, waitFor } from "../support/server.mjs";

const run = promisify(execFile);
let server;
let publisher;
let dir;
let env;
let identity;
let access;
let daemonProcess;

before(async () => {
  server = await startServer();
  publisher = await server.token("app", { kind: "publisher" });
  dir = await mkdtemp(join(tmpdir(), "inbox-ts-daemon-"));
  env = {
    ...process.env,
    AGENT_INBOX_HOME: join(dir, "home"),
    AGENT_INBOX_SECRET_STORE: "file",
    AGENT_INBOX_DAEMON_SOCKET: join(dir, "run", "daemon.sock"),
  };
  const { refresh } = await server.token("ts_daemon", { refresh: true });
  const login = run(BIN, ["login", "--server", server.url], { env });
  login.child.stdin.end(`${refresh}\n`);
  await login;
  identity = identityOfProfile("default", env.AGENT_INBOX_HOME);
  access = await server.token("ts_daemon");
});

after(async () => {
  daemonProcess?.kill("SIGKILL");
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function status() {
  try {
    const { stdout } = await run(BIN, ["daemon", "status"], { env });
    return JSON.parse(stdout);
  } catch {
    return null;
  }
}

test("the socket path follows the override, then the runtime directory, then the config directory", () => {
  assert.equal(daemonSocketPath({ AGENT_INBOX_DAEMON_SOCKET: "/tmp/d.sock", XDG_RUNTIME_DIR: "/run/user/1" }), "/tmp/d.sock");
  assert.equal(daemonSocketPath({ XDG_RUNTIME_DIR: "/run/user/1" }), "/run/user/1/agent-inbox/daemon.sock");
  assert.equal(daemonSocketPath({ AGENT_INBOX_HOME: "/h" }), "/h/daemon.sock");
});

test("without a daemon the service answers, and with one the daemon does", async () => {
  const api = new InboxApi({ baseUrl: server.url, accessToken: () => access });
  const daemon = new LocalDaemon(env.AGENT_INBOX_DAEMON_SOCKET);
  await assert.rejects(daemon.wait(identity, 1000), DaemonUnavailable);
  const started = Date.now();
  assert.equal(await waitForWork(api, 1000, { identity, daemon }), null);
  assert.ok(Date.now() - started >= 900, "it waited its time at the service");

  daemonProcess = spawn(BIN, ["daemon"], { env, stdio: "ignore" });
  await waitFor(async () => (await status())?.identities?.some((i) => i.fresh), { timeoutMs: 20_000, what: "the daemon follows the profile, live" });
  const waiting = waitForWork(api, 30_000, { identity, daemon });
  await waitFor(async () => (await status())?.identities?.[0]?.waiters === 1, { timeoutMs: 20_000, what: "the daemon holds the wait" });
  await publish(server, publisher, "ts_daemon", 1);
  assert.equal(await waiting, 1);
  assert.equal((await status()).waits_answered, 1, "answered by the daemon");

  // A daemon that knows the profile as another agent refuses; the service answers the same.
  const other = { ...identity, agent_id: "someone_else" };
  await assert.rejects(daemon.wait(other, 1000), (err) => err instanceof DaemonUnavailable && err.reason === "identity_mismatch");
  assert.equal(await waitForWork(api, 10_000, { identity: other, daemon }), 1);
});
