// The web console in real headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core) against a real `agent-inbox serve` on SQLite: signing in (and an agent
// token refused), a publish over HTTP showing in the overview within 1 s without a reload,
// requeueing a dead-lettered event and watching it become available, purge asking first, a
// change without the CSRF token and a call without the cookie refused, a callback disabled after
// failing shown with its reason and re-enabled, a publish refused by a quota counted on the
// overview, and no Content-Security-Policy violation on any view. A screenshot of each view lands in target/console-screenshots/.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { createServer } from "node:http";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { chromium } from "playwright-core";

import { REPO, deadLetter, publish, startServer } from "./server.mjs";

const CHROMIUM = process.env.CHROMIUM_BIN ?? "/usr/bin/chromium";
const SHOTS = join(REPO, "target/console-screenshots");

let server;
let browser;
let context;
let page;
let tokens;
/** Everything the page logged as an error, CSP violations included. */
const pageErrors = [];

async function shot(name) {
  // Toasts of earlier actions would cover the view.
  await page.evaluate(() => document.getElementById("toasts").replaceChildren());
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

/** Navigates inside the console (a hash route: no reload) and waits for the view's heading. */
async function openView(hash, heading) {
  await page.evaluate((h) => {
    location.hash = h;
  }, hash);
  await page.locator(".page-header h1", { hasText: heading }).waitFor();
}

before(async () => {
  await mkdir(SHOTS, { recursive: true });
  server = await startServer();
  tokens = {
    admin: await server.token("ops_ana", { kind: "admin", ttl: "8h" }),
    publisher: await server.token("planner_app", { kind: "publisher" }),
    alpha: await server.token("agent_alpha"),
    beta: await server.token("agent_beta"),
  };
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
  });
  context = await browser.newContext({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
  page = await context.newPage();
  page.on("pageerror", (error) => pageErrors.push(String(error)));
  page.on("console", (message) => {
    if (message.type() === "error") pageErrors.push(message.text());
  });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

test("an agent token cannot sign in; an admin token can", async () => {
  await page.goto(`${server.url}/console`);
  await page.locator("#sign-in-form").waitFor();
  await shot("sign-in");
  await page.fill("#token", tokens.alpha);
  await page.click("#sign-in-form button[type=submit]");
  const error = page.locator("#sign-in-error");
  await error.waitFor();
  assert.match(await error.textContent(), /needs an admin token.*this is an agent token/);
  assert.equal(await page.locator("#topbar").isHidden(), true, "still signed out");
  const cookies = await context.cookies();
  assert.equal(cookies.length, 0, "no cookie for an agent token");
  // The refusal's answer is counted as a console error by the browser; it is expected.
  pageErrors.length = 0;

  await page.fill("#token", tokens.admin);
  await page.click("#sign-in-form button[type=submit]");
  await page.locator("#topbar").waitFor();
  await page.locator("#live[data-state=live]").waitFor();
  const [cookie] = await context.cookies();
  assert.equal(cookie.name, "agent_inbox_console");
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, "Strict");
  assert.equal(cookie.path, "/console");
  assert.equal(await page.evaluate(() => document.cookie), "", "the page's scripts cannot read the cookie");
  assert.match(await page.locator("#identity").textContent(), /ops_ana · tenant demo/);
});

test("a publish over HTTP shows in the overview within 1 s, without a reload", async (t) => {
  await page.evaluate(() => {
    window.notReloaded = true;
  });
  await page.locator("table.grid td.empty").waitFor();
  await publish(server, tokens.publisher, "agent_alpha");
  const published = Date.now();
  const row = page.locator("#overview-table tbody tr", { hasText: "agent_alpha" });
  await row.waitFor({ timeout: 1000 });
  const seen = Date.now() - published;
  t.diagnostic(`a new agent's row shown ${seen} ms after the publish answered`);
  assert.ok(seen <= 1000, `shown ${seen} ms after the publish answered`);
  assert.equal(await row.locator("td").nth(1).textContent(), "1", "depth 1");

  // A second one updates the row in place.
  await publish(server, tokens.publisher, "agent_alpha");
  const second = Date.now();
  await page.waitForFunction(() => {
    const row = [...document.querySelectorAll("#overview-table tbody tr")].find((r) => r.textContent.includes("agent_alpha"));
    return row?.querySelectorAll("td")[1].textContent === "2";
  }, null, { timeout: 1000 });
  const updated = Date.now() - second;
  t.diagnostic(`its depth updated ${updated} ms after the second publish answered`);
  assert.ok(updated <= 1000, `updated ${updated} ms after the publish answered`);
  assert.equal(await page.evaluate(() => window.notReloaded), true, "the page was not reloaded");
});

test("the overview sorts by any column", async () => {
  for (let i = 0; i < 3; i++) await publish(server, tokens.publisher, "agent_gamma");
  const agents = () => page.$$eval("#overview-table tbody tr td:first-child", (cells) => cells.map((c) => c.textContent));
  await page.waitForFunction(() => {
    const row = [...document.querySelectorAll("#overview-table tbody tr")].find((r) => r.textContent.includes("agent_gamma"));
    return row?.querySelectorAll("td")[1].textContent === "3";
  });
  assert.deepEqual(await agents(), ["agent_gamma", "agent_alpha"], "deepest first by default");
  await page.click("#overview-table th:first-child button.sort");
  assert.deepEqual(await agents(), ["agent_alpha", "agent_gamma"]);
  await page.click("#overview-table th:first-child button.sort");
  assert.deepEqual(await agents(), ["agent_gamma", "agent_alpha"]);
  await shot("overview");
});

test("a dead-lettered event is requeued and becomes available", async () => {
  const eventId = await deadLetter(server, tokens.publisher, tokens.beta, "agent_beta");
  await openView("#/inbox/agent_beta", "Inbox of agent_beta");
  const row = page.locator(`tbody tr[data-key="${eventId}"]`);
  await row.locator(".badge", { hasText: "dead letter" }).waitFor();
  await row.locator("input[type=checkbox]").check();
  await page.click("button[data-action=requeue]");
  await row.locator(".badge", { hasText: "available" }).waitFor({ timeout: 2000 });
  await shot("inbox");

  await page.click(`a[title="${eventId}"]`);
  await page.locator("h2", { hasText: "History" }).waitFor();
  await page.locator(".history td", { hasText: "requeued" }).waitFor();

  // An operator sets it aside with a reason, then releases it.
  await page.click(".page-header button[data-action=quarantine]");
  await page.fill("#quarantine-reason", "asks the agent to mail the invoice to an outside address");
  await page.selectOption("#quarantine-class", "prompt_injection");
  await page.click("dialog[open] button[data-action=confirm]");
  await page.locator(".details .badge", { hasText: "quarantined" }).waitFor();
  await page.locator(".history td.reason", { hasText: "outside address" }).waitFor();
  await page.locator(".history .badge", { hasText: "prompt_injection" }).waitFor();
  await shot("event");
  await page.click(".page-header button[data-action=release]");
  await page.locator(".details .badge", { hasText: "available" }).waitFor();
  await page.locator(".history td", { hasText: "released from quarantine" }).waitFor();
});

test("purge asks for confirmation first", async () => {
  const eventId = await deadLetter(server, tokens.publisher, tokens.beta, "agent_beta");
  await openView("#/parked", "Parked events");
  const row = page.locator(`tbody tr[data-key="agent_beta/${eventId}"]`);
  await row.waitFor();
  await row.locator("input[type=checkbox]").check();
  await page.click("button[data-action=purge]");
  const dialog = page.locator("dialog[open]");
  await dialog.waitFor();
  assert.match(await dialog.textContent(), /cannot be undone/);
  await shot("purge-confirmation");
  await dialog.locator("button[data-action=cancel]").click();
  await dialog.waitFor({ state: "detached" });
  const parked = await server.call("GET", "/v1/admin/parked", tokens.admin);
  assert.ok(parked.body.events.some((e) => e.event_id === eventId), "cancelled: the event is still parked");
  await shot("parked");

  await page.click("button[data-action=purge]");
  await page.locator("dialog[open] button[data-action=confirm]").click();
  await row.waitFor({ state: "detached" });
  const after = await server.call("GET", "/v1/admin/parked", tokens.admin);
  assert.ok(!after.body.events.some((e) => e.event_id === eventId), "confirmed: purged");
});

test("a change without the CSRF token and a call without the cookie are refused", async () => {
  const eventId = await deadLetter(server, tokens.publisher, tokens.beta, "agent_beta");
  const withoutCsrf = await page.evaluate(async (id) => {
    const response = await fetch("/console/api/parked/purge", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ recipient_id: "agent_beta", event_ids: [id] }),
    });
    return { status: response.status, body: await response.json() };
  }, eventId);
  assert.equal(withoutCsrf.status, 403);
  assert.equal(withoutCsrf.body.code, "csrf_mismatch");
  const parked = await server.call("GET", "/v1/admin/parked", tokens.admin);
  assert.ok(parked.body.events.some((e) => e.event_id === eventId), "nothing was purged");

  const stranger = await browser.newContext();
  const strangerPage = await stranger.newPage();
  await strangerPage.goto(`${server.url}/console`);
  await strangerPage.locator("#sign-in-form").waitFor();
  const withoutCookie = await strangerPage.evaluate(async () => {
    const response = await fetch("/console/api/inboxes");
    return { status: response.status, body: await response.json() };
  });
  await stranger.close();
  assert.equal(withoutCookie.status, 401);
  assert.equal(withoutCookie.body.code, "unauthorized");
  pageErrors.length = 0;
});

/** A webhook receiver on 127.0.0.1: answers challenges with `secret`, and hints 500 while `failing`. */
async function startReceiver(secret) {
  const receiver = { failing: true, hints: [] };
  const http = createServer((request, response) => {
    const chunks = [];
    request.on("data", (c) => chunks.push(c));
    request.on("end", () => {
      const signal = JSON.parse(Buffer.concat(chunks).toString());
      if (signal.signal_type === "callback.challenge") {
        const answer = createHmac("sha256", secret).update(signal.challenge).digest("base64");
        response.writeHead(200, { "content-type": "application/json" });
        response.end(JSON.stringify({ challenge_response: answer }));
        return;
      }
      receiver.hints.push(signal);
      response.writeHead(receiver.failing ? 500 : 204);
      response.end();
    });
  });
  await new Promise((resolve) => http.listen(0, "127.0.0.1", resolve));
  receiver.url = `http://127.0.0.1:${http.address().port}/hook`;
  receiver.close = () => http.close();
  return receiver;
}

test("a callback disabled after failing shows why and is re-enabled", async () => {
  const secret = Buffer.alloc(32, 7);
  const receiver = await startReceiver(secret);
  try {
    const registered = await server.call("POST", "/v1/callback-registrations", tokens.admin, {
      recipient_id: "agent_beta",
      callback_url: receiver.url,
      secret: secret.toString("base64url"),
    });
    assert.equal(registered.status, 201, JSON.stringify(registered.body));
    assert.equal(registered.body.status, "active", JSON.stringify(registered.body));
    const id = registered.body.registration_id;
    const published = await server.call("POST", "/v1/events", tokens.publisher, {
      recipients: ["agent_beta"],
      event_type: "task.assigned",
      payload: { task: "ping the failing hook" },
    });
    assert.equal(published.status, 201, JSON.stringify(published.body));
    const head = published.body.deliveries[0].inbox_seq;

    // The worker disables it after two failed deliveries (the server's settings, server.mjs).
    let view;
    for (let i = 0; i < 200 && !view?.disabled_at_utc; i++) {
      if (i) await new Promise((r) => setTimeout(r, 50));
      const listed = await server.call("GET", "/v1/admin/callbacks", tokens.admin);
      view = listed.body.registrations.find((r) => r.registration_id === id);
    }
    assert.ok(view?.disabled_at_utc, `disabled within 10 s: ${JSON.stringify(view)}`);

    await openView("#/", "Inboxes");
    await openView("#/callbacks", "Callbacks");
    const panel = page.locator(`section.registration[data-registration="${id}"]`);
    await panel.locator(".badge.callback-disabled").waitFor();
    assert.match(await panel.locator(".disabled-reason").innerText(), /2 failed deliveries in a row/);
    assert.match(await panel.locator(".disabled-reason").innerText(), /answered 500/);
    assert.equal(
      await page.locator("section.registration").first().getAttribute("data-registration"),
      id,
      "disabled registrations come first",
    );
    await shot("callbacks-disabled");

    receiver.failing = false;
    const hintsBefore = receiver.hints.length;
    await panel.locator("[data-action=enable-callback]").click();
    await page.locator("dialog [data-action=confirm]").click();
    await panel.locator(".badge.callback-active").waitFor();
    assert.equal(await panel.locator(".disabled-reason").count(), 0);
    // Re-enabled: the agent's current head is delivered at once.
    for (let i = 0; i < 200 && receiver.hints.length === hintsBefore; i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(receiver.hints.length > hintsBefore, "a hint after re-enabling");
    assert.equal(receiver.hints.at(-1).head_seq, head);
  } finally {
    receiver.close();
  }
});

test("a publish refused by the tenant's quota shows on the overview, and the policy on the keys page", async () => {
  const policy = await server.call("POST", "/v1/admin/tenant-policy", tokens.admin, { stored_bytes_max: 64, fair_claims: true });
  assert.equal(policy.status, 200, JSON.stringify(policy.body));
  try {
    const refused = await server.call("POST", "/v1/events", tokens.publisher, {
      recipients: ["agent_alpha"],
      event_type: "task.assigned",
      payload: { text: "x".repeat(200) },
    });
    assert.equal(refused.status, 507, JSON.stringify(refused.body));
    assert.equal(refused.body.code, "tenant_storage_limit");
    await openView("#/keys", "Agent keys");
    await page.locator(".page-header", { hasText: "fair claims, quotas of 64 stored payload bytes" }).waitFor();
    await openView("#/", "Inboxes");
    const tile = page.locator('[data-tile="Quota refusals"]');
    await page.waitForFunction(() => document.querySelector('[data-tile="Quota refusals"]')?.textContent === "1");
    const title = await tile.locator("xpath=..").getAttribute("title");
    assert.match(title, /stored_bytes_max/, "the latest refusal's sentence is the tile's tooltip");
    await shot("overview-quota-refusal");
  } finally {
    await server.call("POST", "/v1/admin/tenant-policy", tokens.admin, { stored_bytes_max: 0, fair_claims: false });
  }
});

test("the other views render from the admin API", async () => {
  // Data for them: a subscribed session and a signing key of agent_alpha.
  const subscribed = await server.call("POST", "/v1/agent-sessions/subscribe", tokens.alpha, {
    device_id: "laptop-7",
    supported_transports: ["sse"],
  });
  assert.equal(subscribed.status, 200, JSON.stringify(subscribed.body));
  const key = await server.call("POST", "/v1/agent-keys", tokens.alpha, { algorithm: "hmac-sha256" });
  assert.equal(key.status, 201, JSON.stringify(key.body));
  // A public address literal needs no DNS; without a secret no challenge is sent (nothing
  // leaves the machine), so it stays pending verification.
  const callback = await server.call("POST", "/v1/callback-registrations", tokens.admin, {
    recipient_id: "agent_alpha",
    callback_url: "https://93.184.215.14/agent-inbox/hook",
  });
  assert.equal(callback.status, 201, JSON.stringify(callback.body));

  await openView("#/sessions", "Sessions");
  await page.locator("td", { hasText: "laptop-7" }).waitFor();
  await shot("sessions");
  await openView("#/keys", "Agent keys");
  await page.locator("td", { hasText: key.body.key_id }).waitFor();
  await shot("keys");
  await openView("#/callbacks", "Callbacks");
  await page.locator(".registration h2", { hasText: "93.184.215.14" }).waitFor();
  await shot("callbacks");
  await openView("#/charts", "Activity");
  await page.locator("svg.chart rect.bar").first().waitFor();
  await shot("charts");
  // A fuller tenant for the overview's picture: agents with backlogs, some claimed.
  for (const [agent, n, claim] of [["planner", 12, 3], ["researcher", 5, 1], ["summarizer", 27, 4], ["browser_tab_7", 2, 0]]) {
    for (let i = 0; i < n; i++) await publish(server, tokens.publisher, agent, { step: i });
    if (claim) await server.call("POST", "/v1/inbox/claim", await server.token(agent), { limit: claim });
  }
  await openView("#/", "Inboxes");
  await page.locator("#overview-table tbody tr", { hasText: "summarizer" }).waitFor();
  await page.waitForFunction(() => document.querySelectorAll("#overview-table tbody tr").length === 7);
  await shot("overview");
  // The README's picture (docs/console-overview.png): the same view, cut below the table.
  const bottom = await page.evaluate(() => document.getElementById("overview-table").getBoundingClientRect().bottom);
  const clip = { x: 0, y: 0, width: 1440, height: Math.ceil(bottom + 20) };
  await page.screenshot({ path: join(SHOTS, "overview-readme.png"), clip });
});

test("an inbox longer than a page opens on its newest events and loads older ones", async () => {
  for (let n = 1; n <= 205; n++) await publish(server, tokens.publisher, "agent_backlog", { n });
  await openView("#/inbox/agent_backlog", "Inbox of agent_backlog");
  // The sequence numbers shown, top to bottom, once the table holds `rows` rows (a live
  // refresh may redraw it meanwhile).
  const shownWhen = async (rows) => {
    const handle = await page.waitForFunction((n) => {
      const cells = [...document.querySelectorAll("tbody tr td:nth-child(2)")].map((td) => Number(td.textContent));
      return cells.length === n ? cells : null;
    }, rows);
    return handle.jsonValue();
  };
  let shown = await shownWhen(200);
  assert.equal(shown[0], 205, "one page, the newest first");
  await page.click("text=Load older events");
  shown = await shownWhen(205);
  assert.deepEqual([shown[0], shown.at(-1)], [205, 1], "then the older ones");
});

test("no view broke the Content-Security-Policy or threw", () => {
  assert.deepEqual(pageErrors, []);
});

test("signing out forgets the cookie and ends the sign-in", async () => {
  const signedIn = await context.cookies();
  await page.click("#sign-out");
  await page.locator("#sign-in-form").waitFor();
  assert.deepEqual(await context.cookies(), []);
  const status = await page.evaluate(async () => (await fetch("/console/api/session")).status);
  assert.equal(status, 401);
  // A copy of the cookie taken before signing out is worth nothing now.
  await context.addCookies(signedIn);
  const copied = await page.evaluate(async () => {
    const answer = await fetch("/console/api/session");
    return { status: answer.status, detail: (await answer.json()).detail };
  });
  assert.equal(copied.status, 401);
  assert.match(copied.detail, /signed out/);
  await context.clearCookies();
  pageErrors.length = 0;
});
