// The Agent and the API against a real `agent-inbox serve` (Node platform: JSON state file,
// fetch-read SSE with a bearer header).
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";

import { Agent, Fatal, InboxApi, JsonFileState, MemoryState, ProblemError, RetryLater, SigningKey, resyncSnapshot } from "../../dist/node.js";
import { metricValue, publish, startServer, waitFor } from "../support/server.mjs";

const sqlite = promisify(execFile);
let server;
let publisher;
let admin;
let stateDir;

before(async () => {
  server = await startServer({ args: ["--lease-default", "3s"] });
  publisher = await server.token("app", { kind: "publisher" });
  admin = await server.token("ops", { kind: "admin" });
  stateDir = await mkdtemp(join(tmpdir(), "inbox-ts-state-"));
});

after(async () => {
  await server?.stop();
  if (stateDir) await rm(stateDir, { recursive: true, force: true });
});

function apiFor(token, extra = {}) {
  return new InboxApi({ baseUrl: server.url, accessToken: () => token, ...extra });
}

/** Runs an agent until `until()` holds, then stops it and returns its summary and progress. */
async function runAgent(options, until, what) {
  const progress = [];
  const agent = new Agent({ observer: (p) => progress.push(p), ...options });
  const running = agent.run();
  running.catch(() => undefined);
  await Promise.race([waitFor(() => until(progress), { timeoutMs: 20_000, what }), running.then(() => Promise.reject(new Error("the agent stopped early")))]);
  agent.stop();
  const summary = await running;
  return { summary, progress, agent };
}

async function events(token) {
  const page = await apiFor(token).poll({ after_seq: 0, limit: 500 });
  return page.events;
}

test("an agent handles every event once over SSE, and records them before acknowledging", async () => {
  const token = await server.token("sse_agent");
  const connectsBefore = metricValue(await server.metrics(), "agent_inbox_stream_connects_total", { transport: "sse" });
  const published = await publish(server, publisher, "sse_agent", 5, { prefix: "sse-a" });
  const handled = [];
  const statePath = join(stateDir, "sse.json");
  const state = await JsonFileState.open(statePath);
  const later = [];
  const { summary, progress } = await runAgent(
    {
      api: apiFor(token),
      state,
      concurrency: 2,
      handler: async (event) => {
        handled.push(event.eventId);
        assert.equal(event.eventType, "test.work");
      },
    },
    async () => {
      if (handled.length === 5 && later.length === 0) later.push(...(await publish(server, publisher, "sse_agent", 3, { prefix: "sse-b" })));
      return handled.length === 8;
    },
    "8 events handled",
  );
  assert.deepEqual([...handled].sort(), [...published, ...later].map((p) => p.eventId).sort(), "each event once");
  assert.equal(summary.acked, 8);
  assert.ok(progress.some((p) => p.type === "transport" && p.status.kind === "sse" && p.status.connected), "hints came over SSE");
  assert.ok(metricValue(await server.metrics(), "agent_inbox_stream_connects_total", { transport: "sse" }) > connectsBefore);
  const onDisk = JSON.parse(await readFile(statePath, "utf8"));
  const inbox = Object.keys(onDisk.processed)[0];
  assert.equal(Object.keys(onDisk.processed[inbox]).length, 8, "every result is in the state file");
  assert.ok((await events(token)).every((e) => e.ack_state === "acked"));
  // A restarted agent on the same file runs nothing again, and its scan moves the cursor past
  // the finished events (the cursor moves lazily, on the scan after they finished).
  const again = await runAgent(
    { api: apiFor(token), state: await JsonFileState.open(statePath), handler: () => assert.fail("nothing to run") },
    (progress) => progress.some((p) => p.type === "scanned"),
    "a first scan",
  );
  assert.equal(again.summary.acked, 0);
  const rescanned = JSON.parse(await readFile(statePath, "utf8"));
  assert.equal(rescanned.cursors[inbox], 8, "the cursor is past every finished event");
});

test("a lost acknowledgement: the event comes back after its lease and is acknowledged from the record", async () => {
  const token = await server.token("lossy_agent");
  const [published] = await publish(server, publisher, "lossy_agent", 1, { prefix: "lossy" });
  let dropped = 0;
  // The first acknowledgement is lost on the way (the service never sees it).
  const lossyFetch = async (url, init) => {
    if (String(url).endsWith("/v1/inbox/acknowledge") && dropped === 0) {
      dropped += 1;
      throw new TypeError("network connection lost");
    }
    return fetch(url, init);
  };
  let runs = 0;
  const { summary } = await runAgent(
    {
      api: apiFor(token, { fetch: lossyFetch }),
      state: new MemoryState(),
      leaseSeconds: 2,
      ackAttemptsMax: 1,
      handler: async () => {
        runs += 1;
      },
    },
    async () => (await events(token)).every((e) => e.ack_state === "acked"),
    "the event acknowledged",
  );
  assert.equal(runs, 1, "the handler ran once");
  assert.equal(summary.unconfirmed, 1);
  assert.equal(summary.deduplicated, 1, "the redelivery was acknowledged from the record");
  const [event] = await events(token);
  assert.equal(event.event_id, published.eventId);
  assert.equal(event.delivery_attempts, 2);
});

test("a retryable error releases with retry-after; a fatal one dead-letters", async () => {
  const token = await server.token("picky_agent");
  const [retry, fatal] = await publish(server, publisher, "picky_agent", 2, { prefix: "picky" });
  const starts = [];
  const { summary } = await runAgent(
    {
      api: apiFor(token),
      state: new MemoryState(),
      handler: async (event) => {
        starts.push({ id: event.eventId, at: Date.now() });
        if (event.eventId === fatal.eventId) throw new Fatal("cannot ever work");
        if (starts.filter((s) => s.id === retry.eventId).length === 1) throw new RetryLater("busy", 1);
      },
    },
    async () => {
      const all = await events(token);
      return all.find((e) => e.event_id === retry.eventId)?.ack_state === "acked" && all.find((e) => e.event_id === fatal.eventId)?.ack_state === "dead_letter";
    },
    "one acked after a retry, one dead-lettered",
  );
  const retries = starts.filter((s) => s.id === retry.eventId);
  assert.equal(retries.length, 2);
  assert.ok(retries[1].at - retries[0].at >= 900, `claimable again only after retry_after (${retries[1].at - retries[0].at} ms)`);
  assert.deepEqual([summary.released, summary.acked, summary.failed], [1, 1, 1]);
  assert.equal((await events(token)).find((e) => e.event_id === fatal.eventId).dead_letter_state, "handler_failed");
});

test("the access token callback is asked again after a 401, and the new token is used", async () => {
  const good = await server.token("refresh_agent");
  const asked = [];
  const api = new InboxApi({
    baseUrl: server.url,
    accessToken: ({ refresh }) => {
      asked.push(refresh);
      return refresh ? good : "not-a-valid-token";
    },
  });
  const head = await api.head();
  assert.equal(head.modified, true);
  assert.equal(head.head.recipient_id, "refresh_agent");
  await api.poll({ after_seq: 0 });
  assert.deepEqual(asked, [false, true], "called once more, with refresh: true, then the token is kept");
  const refused = new InboxApi({ baseUrl: server.url, accessToken: () => "still-bad" });
  await assert.rejects(refused.head(), (error) => error instanceof ProblemError && error.status === 401 && error.code === "invalid_token" && error.detail.length > 0);
});

test("the API: head with ETag answers 304, problems are typed, tickets and cookies are issued", async () => {
  const token = await server.token("api_agent");
  const api = apiFor(token);
  const first = await api.head();
  assert.equal(first.modified, true);
  assert.ok(first.etag, "the head has an ETag");
  assert.deepEqual(await api.head({ etag: first.etag }), { modified: false, etag: first.etag });
  await publish(server, publisher, "api_agent", 1, { prefix: "api" });
  const moved = await api.head({ etag: first.etag });
  assert.equal(moved.modified, true);
  assert.equal(moved.head.head_seq, 1);

  await assert.rejects(api.claim({ limit: 501 }), (error) => error instanceof ProblemError && error.status === 400 && error.code === "invalid_field" && !error.retryable);
  await assert.rejects(apiFor(publisher).claim({ limit: 1 }), (error) => error instanceof ProblemError && error.status === 403);

  const subscribed = await api.subscribe({ supported_transports: ["sse"], wants_claims: true });
  const ticket = await api.streamTicket({ session_id: subscribed.session_id, ttl_seconds: 30 });
  assert.match(ticket.ticket, /^st_[0-9a-f]{64}$/);
  assert.ok(ticket.sse_url.includes(`ticket=${ticket.ticket}`));
  const cookie = await api.streamCookie({ session_id: subscribed.session_id });
  assert.equal(cookie.sse_url, "/v1/streams/sse");

  const claimed = await api.claim({ limit: 1, lease_seconds: 30, session_id: subscribed.session_id });
  assert.equal(claimed.claims.length, 1);
  const [claim] = claimed.claims;
  const beat = await api.heartbeat({ leases: [{ event_id: claim.event_id, lease_token: claim.lease_token, extend_by_seconds: 30 }] });
  assert.equal(beat.leases[0].error ?? null, null);
  const released = await api.release({ event_id: claim.event_id, lease_token: claim.lease_token, retry_after_seconds: 0, reason: "test" });
  assert.equal(released.event_id, claim.event_id);
  const again = await api.claim({ event_ids: [claim.event_id], lease_seconds: 30 });
  const acked = await api.acknowledge({ acks: [{ event_id: claim.event_id, lease_token: again.claims[0].lease_token }] });
  assert.equal(acked.results[0].ack_state, "acked");
  const repeat = await api.acknowledge({ acks: [{ event_id: claim.event_id, lease_token: again.claims[0].lease_token }] });
  assert.equal(repeat.results[0].ack_state, "acked", "repeating an acknowledgement is harmless");
});

test("long poll waits for the next event; without streams the agent long-polls", async () => {
  const token = await server.token("lp_agent");
  const api = apiFor(token);
  const waiting = api.poll({ after_seq: 0, wait_seconds: 10 });
  const publishedAt = Date.now();
  await publish(server, publisher, "lp_agent", 1, { prefix: "lp" });
  const page = await waiting;
  assert.equal(page.events.length, 1);
  assert.ok(Date.now() - publishedAt < 5_000);

  const handled = [];
  let later = false;
  const { progress } = await runAgent(
    { api, state: new MemoryState(), transport: { allowed: ["long-poll", "poll"] }, handler: (e) => void handled.push(e.inboxSeq) },
    async () => {
      if (handled.length === 1 && !later) {
        later = true;
        await publish(server, publisher, "lp_agent", 2, { prefix: "lp-later" });
      }
      return handled.length === 3;
    },
    "3 events over long poll",
  );
  assert.deepEqual(handled, [1, 2, 3]);
  assert.ok(progress.some((p) => p.type === "transport" && p.status.kind === "long-poll" && p.status.connected));
});

test("after 410 cursor_reset_required the resync callback gets every open event, then the agent carries on", async () => {
  const token = await server.token("reset_agent");
  const api = apiFor(token);
  await publish(server, publisher, "reset_agent", 7, { prefix: "reset" });
  const snapshot = await resyncSnapshot(api, 3);
  assert.deepEqual(snapshot.open_events.map((e) => e.inbox_seq), [1, 2, 3, 4, 5, 6, 7], "every page joined");
  assert.equal(snapshot.more_available, false);

  // What retention does to an agent away too long: the terminal events at the front of its inbox
  // (here 1-4, acknowledged by another session) are archived, and the oldest retained sequence
  // passes its cursor. Retention archives only terminal events, so the claims that follow start
  // from that sequence.
  const { claims } = await api.claim({ limit: 4 });
  assert.deepEqual(claims.map((c) => c.event.inbox_seq), [1, 2, 3, 4]);
  await api.acknowledge({ acks: claims.map((c) => ({ event_id: c.event_id, lease_token: c.lease_token })) });
  const database = server.databaseUrl.replace("sqlite://", "");
  await sqlite("sqlite3", [database, "UPDATE inbox_head SET oldest_available_seq = 5 WHERE recipient_id = 'reset_agent';"]);
  await assert.rejects(api.poll({ after_seq: 0 }), (error) => error instanceof ProblemError && error.status === 410 && error.code === "cursor_reset_required");
  const resyncs = [];
  const handled = [];
  const { summary } = await runAgent(
    { api, state: new MemoryState(), resync: (s) => void resyncs.push(s), handler: (e) => void handled.push(e.inboxSeq) },
    () => handled.length === 3,
    "every open event handled after the reset",
  );
  assert.equal(resyncs.length, 1);
  assert.deepEqual(resyncs[0].open_events.map((e) => e.inbox_seq), [5, 6, 7]);
  assert.equal(summary.resyncs, 1);
  assert.deepEqual([...handled].sort((a, b) => a - b), [5, 6, 7]);
});

test("signed calls: ed25519 and hmac-sha256 keys sign claim, heartbeat, acknowledge and release as the service verifies", async () => {
  const token = await server.token("signing_agent");
  const api = apiFor(token);
  const key = await SigningKey.generateEd25519();
  const registered = await api.registerSigningKey(key);
  assert.equal(registered.key_id, key.keyId);
  const adminApi = apiFor(admin);
  const policy = await fetch(`${server.url}/v1/admin/tenant-policy`, {
    method: "POST",
    headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
    body: JSON.stringify({ signatures_required: true }),
  });
  assert.equal(policy.status, 200, await policy.text());
  try {
    await publish(server, publisher, "signing_agent", 3, { prefix: "signed" });
    await waitFor(async () => {
      try {
        await api.claim({ limit: 1 });
        return false;
      } catch (error) {
        return error instanceof ProblemError && error.status === 401;
      }
    }, { what: "unsigned claims refused (the policy reaches the node within 5 s)", timeoutMs: 10_000, intervalMs: 250 });
    const signed = api.withSigningKey(key);
    const handled = [];
    const { summary } = await runAgent(
      {
        api: signed,
        state: new MemoryState(),
        leaseSeconds: 1,
        handler: async (e) => {
          handled.push(e.inboxSeq);
          // Long enough for a signed heartbeat (at half the lease).
          await new Promise((r) => setTimeout(r, 1_200));
        },
      },
      () => handled.length === 3,
      "3 signed events handled",
    );
    assert.equal(summary.acked, 3, "every signed acknowledgement verified");

    const hmacAnswer = await signed.registerSigningKey(await SigningKey.generateEd25519()).catch((e) => e);
    assert.ok(!(hmacAnswer instanceof Error), `a second key, signed by the first: ${hmacAnswer}`);
    const issued = await fetch(`${server.url}/v1/agent-keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...(await signedHeaders(key, "/v1/agent-keys", { algorithm: "hmac-sha256" })) },
      body: JSON.stringify({ algorithm: "hmac-sha256" }),
    });
    assert.equal(issued.status, 201, await issued.clone().text());
    const { key_id, secret } = await issued.json();
    const hmac = await SigningKey.hmacSha256(key_id, secret);
    const [published] = await publish(server, publisher, "signing_agent", 1, { prefix: "hmac" });
    const claimed = await api.withSigningKey(hmac).claim({ limit: 1, lease_seconds: 30 });
    assert.equal(claimed.claims[0].event_id, published.eventId);
    const done = await api.withSigningKey(hmac).release({ event_id: published.eventId, lease_token: claimed.claims[0].lease_token, retry_after_seconds: 0 });
    assert.equal(done.event_id, published.eventId);
    void adminApi;
  } finally {
    await fetch(`${server.url}/v1/admin/tenant-policy`, {
      method: "POST",
      headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
      body: JSON.stringify({ signatures_required: false }),
    });
  }
});

async function signedHeaders(key, path, body) {
  const { signInboxRequest } = await import("../../dist/node.js");
  return signInboxRequest(key, { method: "POST", authority: new URL(server.url).host, path, body: new TextEncoder().encode(JSON.stringify(body)) });
}
