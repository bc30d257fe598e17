// The network is cut for 30 s (Chromium's offline emulation, every tab) while events are
// published; when it comes back every one of them is handled, once, in cursor order.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { agentContext, launch, leaders, openTabs, reportsOf, servePages } from "../support/browser.mjs";
import { publish, startServer, waitFor } from "../support/server.mjs";

let pages;
let server;
let browser;

before(async () => {
  pages = await servePages();
  server = await startServer({ args: ["--cors-origins", pages.origin] });
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await server?.stop();
  await pages?.close();
});

test("a 30 s network cut: every event published meanwhile is handled once, in cursor order (in each tab), soon after", async (t) => {
  const publisher = await server.token("app", { kind: "publisher" });
  const token = await server.token("offline_agent");
  const harness = await agentContext(browser, { token });
  const tabs = await openTabs(harness, pages.origin, 3, { server: server.url });
  await waitFor(() => reportsOf(harness, "subscribed").length === 3 && leaders(harness).length === 1, { what: "3 tabs, one leader" });
  await waitFor(() => reportsOf(harness, "transport").some((r) => r.status.connected), { what: "hints flowing" });
  const warmup = await publish(server, publisher, "offline_agent", 3, { prefix: "before" });
  await waitFor(() => reportsOf(harness, "handled").length === 3, { what: "warm-up events handled" });

  const lifecycleHints = () => Promise.all(tabs.map((t) => t.evaluate(() => window.__stats.hints.lifecycle)));
  const lifecycleBefore = await lifecycleHints();
  const sessions = await Promise.all(tabs.map((t) => harness.context.newCDPSession(t)));
  const conditions = (offline) => ({ offline, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
  for (const cdp of sessions) {
    await cdp.send("Network.enable");
    await cdp.send("Network.emulateNetworkConditions", conditions(true));
  }
  const cutAt = Date.now();
  const during = await publish(server, publisher, "offline_agent", 30, { prefix: "during", perSecond: 1.2 });
  const sinceCut = Date.now() - cutAt;
  if (sinceCut < 30_000) await new Promise((r) => setTimeout(r, 30_000 - sinceCut));
  assert.equal(reportsOf(harness, "start").filter((r) => r.receivedAt > cutAt + 500).length, 0, "nothing reached the tabs while offline");
  const restoredAt = Date.now();
  for (const cdp of sessions) await cdp.send("Network.emulateNetworkConditions", conditions(false));

  await waitFor(() => during.every((p) => reportsOf(harness, "handled").some((r) => r.eventId === p.eventId)), {
    timeoutMs: 20_000,
    what: "every event published while offline handled",
  });
  const caughtUpMs = Math.max(...reportsOf(harness, "handled").map((r) => r.receivedAt)) - restoredAt;
  assert.ok(caughtUpMs < 10_000, `caught up ${caughtUpMs} ms after the network came back (the online event triggers a poll)`);
  t.diagnostic(`caught up ${caughtUpMs} ms after the network came back`);
  const lifecycleAfter = await lifecycleHints();
  assert.ok(lifecycleAfter.every((n, i) => n > lifecycleBefore[i]), "the online event woke every tab for a catch-up poll");
  const starts = reportsOf(harness, "start").filter((r) => r.receivedAt > restoredAt);
  assert.equal(starts.length, during.length, "each handled once");
  for (const tab of new Set(starts.map((r) => r.tab))) {
    const seqs = starts.filter((r) => r.tab === tab).sort((a, b) => a.at - b.at).map((r) => r.seq);
    assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b), `tab ${tab} took them in cursor order`);
  }
  // Across tabs the claims race (tab A may start seq 8 a moment before tab B starts seq 7):
  // the order that holds is each tab's, since a claim hands out the oldest claimable event.
  assert.deepEqual(new Set(starts.map((r) => r.seq)), new Set(during.map((p) => p.inboxSeq)));
  void warmup;
  assert.ok(harness.requests.every((u) => !u.includes(token)), "no bearer token in any URL");
});
