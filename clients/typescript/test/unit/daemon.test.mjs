// A daemon that refuses at once (another user, one client too many) writes its answer and hangs
// up without reading the request: the request's write fails (EPIPE), and the refusal is still
// named, not lost with the socket.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { DaemonUnavailable, LocalDaemon } from "../../dist/node.js";

async function refusingDaemon(answer) {
  const dir = await mkdtemp(join(tmpdir(), "inbox-ts-refusing-"));
  const path = join(dir, "daemon.sock");
  const server = createServer((connection) => {
    connection.end(`${JSON.stringify(answer)}\n`);
    connection.destroy();
  });
  await new Promise((resolve) => server.listen(path, resolve));
  return {
    path,
    close: async () => {
      await new Promise((resolve) => server.close(resolve));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

test("a refusal sent before the request is read is named", async () => {
  const daemon = await refusingDaemon({ v: 1, type: "error", code: "peer_refused", message: "not for you" });
  try {
    // A short request, and one longer than the socket's buffer, still being written at the hang-up.
    for (const profile of ["default", "p".repeat(4 << 20)]) {
      for (let run = 0; run < 5; run++) {
        const identity = { profile, server_url: "http://127.0.0.1:1", tenant_id: "t", agent_id: "a" };
        await assert.rejects(new LocalDaemon(daemon.path).wait(identity, 1000), (err) => {
          assert.ok(err instanceof DaemonUnavailable, String(err));
          assert.equal(err.reason, "peer_refused", err.message);
          assert.match(err.message, /not for you/);
          return true;
        });
      }
    }
  } finally {
    await daemon.close();
  }
});

test("a daemon that hangs up without a word is reported at once", async () => {
  const dir = await mkdtemp(join(tmpdir(), "inbox-ts-silent-"));
  const path = join(dir, "daemon.sock");
  const server = createServer((connection) => connection.destroy());
  await new Promise((resolve) => server.listen(path, resolve));
  try {
    const started = Date.now();
    const identity = { profile: "default", server_url: "http://127.0.0.1:1", tenant_id: "t", agent_id: "a" };
    await assert.rejects(new LocalDaemon(path).wait(identity, 1000), (err) => err instanceof DaemonUnavailable && err.reason === null);
    assert.ok(Date.now() - started < 1000, `${Date.now() - started} ms`);
  } finally {
    await new Promise((resolve) => server.close(resolve));
    await rm(dir, { recursive: true, force: true });
  }
});
