// A page on an origin not in cors_origins cannot read any answer of the service, with or
// without credentials; a listed origin can. (The browser enforces it from the service's CORS
// answers, so this checks those answers as a browser reads them.)
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { agentContext, launch, openTabs, reportsOf, servePages } from "../support/browser.mjs";
import { publish, startServer, waitFor } from "../support/server.mjs";

let listed;
let unlisted;
let server;
let browser;

before(async () => {
  listed = await servePages();
  unlisted = await servePages();
  server = await startServer({ args: ["--cors-origins", listed.origin] });
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await server?.stop();
  await listed?.close();
  await unlisted?.close();
});

/** Tries to read several answers from a page of `origin`; returns what each attempt got. */
async function attempts(origin, token, ticketUrl) {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${origin}/blank.html`);
  const results = await page.evaluate(async ({ base, token, ticketUrl }) => {
    const read = async (name, url, init) => {
      try {
        const response = await fetch(url, init);
        return [name, `read ${response.status}: ${(await response.text()).slice(0, 40)}`];
      } catch (error) {
        return [name, `refused: ${error.name}`];
      }
    };
    const auth = { authorization: `Bearer ${token}` };
    const json = { ...auth, "content-type": "application/json" };
    const out = await Promise.all([
      read("head", `${base}/v1/inbox/head`, { headers: auth }),
      read("poll", `${base}/v1/inbox/poll-after-cursor`, { method: "POST", headers: json, body: '{"after_seq":0}' }),
      read("ticket", `${base}/v1/streams/tickets`, { method: "POST", headers: json, body: "{}" }),
      read("cookie", `${base}/v1/streams/cookie`, { method: "POST", headers: json, body: "{}", credentials: "include" }),
      read("metrics", `${base}/metrics`),
      read("simple post", `${base}/v1/events`, { method: "POST", body: "{}" }),
    ]);
    const stream = await new Promise((resolve) => {
      const source = new EventSource(ticketUrl);
      source.addEventListener("inbox.updated", () => {
        source.close();
        resolve("read a hint");
      });
      source.onerror = () => {
        source.close();
        resolve("refused");
      };
    });
    out.push(["stream", stream]);
    // The ETag is exposed to the page, so a conditional head answers 304.
    try {
      const first = await fetch(`${base}/v1/inbox/head`, { headers: auth });
      const etag = first.headers.get("etag");
      const again = await fetch(`${base}/v1/inbox/head`, { headers: { ...auth, "if-none-match": etag ?? "" }, cache: "no-store" });
      out.push(["conditional head", `read ${again.status} (etag ${etag})`]);
    } catch (error) {
      out.push(["conditional head", `refused: ${error.name}`]);
    }
    return Object.fromEntries(out);
  }, { base: server.url, token, ticketUrl });
  await context.close();
  return results;
}

async function ticketUrl(token) {
  const answer = await server.request("POST", "/v1/streams/tickets", { token, body: {} });
  return `${server.url}${JSON.parse(answer.text).sse_url}&last_event_id=0`;
}

test("a page on an origin not in cors_origins cannot read any answer; a listed origin can", async () => {
  const token = await server.token("cors_agent");
  // One event, so a stream resuming after 0 starts with a hint.
  await publish(server, await server.token("app", { kind: "publisher" }), "cors_agent", 1, { prefix: "cors" });
  const denied = await attempts(unlisted.origin, token, await ticketUrl(token));
  for (const [name, result] of Object.entries(denied)) assert.match(result, /^refused/, `${name} from ${unlisted.origin}: ${result}`);

  const allowed = await attempts(listed.origin, token, await ticketUrl(token));
  assert.match(allowed.head, /^read 200/, allowed.head);
  assert.match(allowed.poll, /^read 200/, allowed.poll);
  assert.match(allowed.ticket, /^read 201/, allowed.ticket);
  assert.match(allowed.cookie, /^read 201/, allowed.cookie);
  assert.equal(allowed.stream, "read a hint", "the listed origin's stream opens and hints");
  assert.match(allowed["conditional head"], /^read 304 \(etag "/, allowed["conditional head"]);

  // What the service answers a preflight from each origin.
  const preflight = async (origin) =>
    fetch(`${server.url}/v1/inbox/head`, {
      method: "OPTIONS",
      headers: { origin, "access-control-request-method": "GET", "access-control-request-headers": "authorization" },
    });
  const refused = await preflight(unlisted.origin);
  assert.equal(refused.headers.get("access-control-allow-origin"), null, "no allow-origin for an unlisted origin");
  const granted = await preflight(listed.origin);
  assert.equal(granted.headers.get("access-control-allow-origin"), listed.origin);
  assert.equal(granted.headers.get("access-control-allow-credentials"), "true");
});

test("with the stream cookie, a listed origin's tab hears hints on a stream URL that carries no credential", async () => {
  const token = await server.token("cookie_agent");
  const harness = await agentContext(browser, { token });
  await openTabs(harness, listed.origin, 1, { server: server.url, streamAuth: "cookie" });
  await waitFor(() => reportsOf(harness, "transport").some((r) => r.status.kind === "sse" && r.status.connected), { what: "the stream open" });
  const [event] = await publish(server, await server.token("app", { kind: "publisher" }), "cookie_agent", 1, { prefix: "cookie" });
  await waitFor(() => reportsOf(harness, "handled").some((r) => r.eventId === event.eventId), { what: "the event handled" });
  const streams = harness.requests.filter((u) => u.includes("/v1/streams/sse"));
  assert.ok(streams.length >= 1);
  for (const url of streams) {
    assert.ok(!url.includes("ticket=") && !url.includes(token), `no credential in ${url}`);
  }
  assert.ok(harness.requests.some((u) => u.endsWith("/v1/streams/cookie")), "the cookie was set first");
  await harness.context.close();
});
