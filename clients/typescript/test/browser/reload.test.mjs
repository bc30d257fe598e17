// A tab is reloaded while its event is in flight (the handler's work done, the acknowledgement
// not yet through): the lease expires, the event is delivered again, and the result recorded in
// IndexedDB before the acknowledgement keeps the handler from running a second time.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { agentContext, launch, openTabs, reportsOf, servePages } from "../support/browser.mjs";
import { InboxApi } from "../../dist/node.js";
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

test("a tab reloaded mid-event: the lease expires, the event is redelivered, the durable record keeps it from running twice", async (t) => {
  const publisher = await server.token("app", { kind: "publisher" });
  const token = await server.token("reload_agent");
  const harness = await agentContext(browser, { token });
  const tabs = await openTabs(harness, pages.origin, 2, { server: server.url, lease: "3", handlerMs: "300" });
  await waitFor(() => reportsOf(harness, "subscribed").length === 2, { what: "2 tabs subscribed" });
  await waitFor(() => reportsOf(harness, "transport").some((r) => r.status.connected), { what: "hints flowing" });

  // Acknowledgements of the marked event are held in whichever tab runs it, as if the tab were
  // going away at that moment.
  let marked = null;
  let holding = true;
  let heldIn = null;
  for (const [index, page] of tabs.entries()) {
    await page.route("**/v1/inbox/acknowledge", (route) => {
      if (holding && marked !== null && route.request().postData()?.includes(marked)) {
        heldIn ??= index;
        return; // never answered
      }
      return route.continue();
    });
  }
  const [event] = await publish(server, publisher, "reload_agent", 1, { prefix: "reload" });
  marked = event.eventId;
  await waitFor(() => heldIn !== null, { what: "the acknowledgement on its way (so the result is recorded)" });
  const ranIn = reportsOf(harness, "handled").find((r) => r.eventId === marked).tab;
  assert.equal(String(heldIn), ranIn);
  const reloadedAt = Date.now();
  // The held request dies with the page; acknowledgements after the reload go through.
  await tabs[heldIn].reload();
  holding = false;

  const api = new InboxApi({ baseUrl: server.url, accessToken: () => token });
  const acked = await waitFor(async () => {
    const [e] = (await api.poll({ after_seq: 0 })).events;
    return e.ack_state === "acked" ? e : null;
  }, { timeoutMs: 15_000, what: "the event acknowledged after its redelivery" });
  t.diagnostic(`acknowledged from the record ${Date.now() - reloadedAt} ms after the reload`);
  assert.equal(acked.delivery_attempts, 2, "delivered a second time, after the lease expired");
  assert.equal(reportsOf(harness, "start").filter((r) => r.eventId === marked).length, 1, "the handler ran once");
  await waitFor(() => reportsOf(harness, "finished").some((r) => r.eventId === marked && r.outcome === "deduplicated"), {
    what: "the redelivery acknowledged from the record",
  });
  assert.equal(reportsOf(harness, "start").filter((r) => r.eventId === marked).length, 1, "the handler still ran once");
});
