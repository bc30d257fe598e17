// Without Web Locks each tab keeps its own stream; and a tab signs its calls with a WebCrypto
// Ed25519 key the service verifies under a signatures-required policy.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { agentContext, launch, openTabs, reportsOf, servePages } from "../support/browser.mjs";
import { metricValue, publish, startServer, waitFor } from "../support/server.mjs";

let pages;
let server;
let browser;
let publisher;

before(async () => {
  pages = await servePages();
  server = await startServer({ args: ["--cors-origins", pages.origin] });
  browser = await launch();
  publisher = await server.token("app", { kind: "publisher" });
});

after(async () => {
  await browser?.close();
  await server?.stop();
  await pages?.close();
});

test("without Web Locks every tab falls back to a stream of its own, and claims still share the work", async () => {
  const token = await server.token("lockless_agent");
  const harness = await agentContext(browser, { token });
  await harness.context.addInitScript(() => Object.defineProperty(Navigator.prototype, "locks", { get: () => undefined }));
  const tabs = await openTabs(harness, pages.origin, 3, { server: server.url, handlerMs: "5" });
  await waitFor(() => new Set(reportsOf(harness, "transport").filter((r) => r.status.connected).map((r) => r.tab)).size === 3, { what: "3 streams open" });
  assert.equal(metricValue(await server.metrics(), "agent_inbox_connected_streams", { transport: "sse" }), 3);
  const published = await publish(server, publisher, "lockless_agent", 30, { prefix: "lockless" });
  await waitFor(() => new Set(reportsOf(harness, "handled").map((r) => r.eventId)).size === 30, { what: "30 events handled" });
  assert.equal(reportsOf(harness, "start").length, 30, "each event ran once");
  const stats = await Promise.all(tabs.map((t) => t.evaluate(() => window.__stats)));
  for (const s of stats) assert.ok(s.hints.stream > 0 && s.hints.tab === 0, `tab ${s.tab} heard its own stream`);
  void published;
  await harness.context.close();
});

test("a tab signs claim, heartbeat and acknowledge with a WebCrypto Ed25519 key, as the service requires", async () => {
  const admin = await server.token("ops", { kind: "admin" });
  const policy = await server.request("POST", "/v1/admin/tenant-policy", { token: admin, body: { signatures_required: true } });
  assert.equal(policy.status, 200, policy.text);
  try {
    const token = await server.token("signing_tab");
    // Unsigned calls are refused once the policy reaches the node (within 5 s).
    await waitFor(async () => (await server.request("POST", "/v1/inbox/claim", { token, body: { limit: 1 } })).status === 401, {
      timeoutMs: 10_000,
      intervalMs: 250,
      what: "unsigned claims refused",
    });
    const harness = await agentContext(browser, { token });
    const signedHeaders = [];
    harness.context.on("request", (request) => {
      if (/\/v1\/inbox\/(claim|acknowledge|heartbeat)$/.test(request.url())) signedHeaders.push(request.headers()["signature-input"] ?? null);
    });
    await openTabs(harness, pages.origin, 1, { server: server.url, sign: "ed25519", lease: "1", handlerMs: "1200" });
    await waitFor(() => reportsOf(harness, "signing").length === 1, { what: "the key registered" });
    const published = await publish(server, publisher, "signing_tab", 3, { prefix: "signed-tab" });
    await waitFor(() => published.every((p) => reportsOf(harness, "finished").some((r) => r.eventId === p.eventId && r.outcome === "acked")), {
      timeoutMs: 20_000,
      what: "3 signed events acknowledged",
    });
    assert.ok(signedHeaders.length >= 7, "claims, heartbeats (the handler outlives half its lease) and acknowledgements");
    for (const header of signedHeaders) assert.match(header ?? "", /^sig1=\("@method" "@path" "@authority" "content-digest"\);created=\d+;expires=\d+;keyid="ak_[0-9a-f]{16}";nonce="[A-Za-z0-9_-]{22}";alg="ed25519"$/);
    await harness.context.close();
  } finally {
    await server.request("POST", "/v1/admin/tenant-policy", { token: admin, body: { signatures_required: false } });
  }
});
