// HTTPS with a certificate made here: requests negotiate HTTP/2, so twelve tabs with a stream
// each share one connection and all get hints; no bearer token appears in any URL.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";

import { agentContext, launch, openTabs, reportsOf, servePages } from "../support/browser.mjs";
import { metricValue, publish, startServer, waitFor } from "../support/server.mjs";

const run = promisify(execFile);
let dir;
let pages;
let server;
let browser;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "inbox-tls-"));
  const [cert, key] = [join(dir, "cert.pem"), join(dir, "key.pem")];
  await run("openssl", [
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
    "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
  ]);
  const pem = { cert: await readFile(cert), key: await readFile(key) };
  pages = await servePages(pem);
  // Twelve streams of one agent: above the default of 8 waiters per agent.
  server = await startServer({ scheme: "https", ca: pem.cert, env: { AGENT_INBOX_WAITERS_PER_AGENT: "16" }, args: ["--cors-origins", pages.origin, "--tls-cert", cert, "--tls-key", key] });
  browser = await launch(["--ignore-certificate-errors"]);
});

after(async () => {
  await browser?.close();
  await server?.stop();
  await pages?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

test("over HTTPS requests negotiate h2, and 12 tabs with a stream each all receive hints", async (t) => {
  const publisher = await server.token("app", { kind: "publisher" });
  const token = await server.token("tls_agent");
  const harness = await agentContext(browser, { token });
  const tabs = await openTabs(harness, pages.origin, 12, { server: server.url, share: "0" });
  await waitFor(
    () => new Set(reportsOf(harness, "transport").filter((r) => r.status.kind === "sse" && r.status.connected).map((r) => r.tab)).size === 12,
    { timeoutMs: 20_000, what: "12 streams open" },
  );
  assert.equal(metricValue(await server.metrics(), "agent_inbox_connected_streams", { transport: "sse" }), 12);
  const hintsBefore = await Promise.all(tabs.map((p) => p.evaluate(() => window.__stats.hints.stream)));
  await publish(server, publisher, "tls_agent", 3, { prefix: "tls" });
  await waitFor(async () => {
    const now = await Promise.all(tabs.map((p) => p.evaluate(() => window.__stats.hints.stream)));
    return now.every((n, i) => n > hintsBefore[i]);
  }, { what: "a hint in every tab" });
  await waitFor(() => new Set(reportsOf(harness, "handled").map((r) => r.eventId)).size === 3, { what: "3 events handled" });

  // Every response to the agents' requests, as the browser's network layer saw it.
  const toService = harness.protocols.filter((r) => r.url.startsWith(server.url));
  const seen = [...new Set(toService.map((r) => r.protocol))];
  t.diagnostic(`protocols of ${toService.length} responses from the service: ${seen.join(", ")}`);
  assert.ok(toService.length >= 48, "every tab made requests to the service");
  assert.deepEqual(seen, ["h2"], "every request negotiated HTTP/2");
  // And as a page of the service's own origin reads it from performance.getEntries().
  const own = await harness.context.newPage();
  await own.goto(`${server.url}/openapi.json`);
  const navigation = await own.evaluate(() => performance.getEntries().filter((e) => e.entryType === "navigation").map((e) => e.nextHopProtocol));
  assert.deepEqual(navigation, ["h2"], "nextHopProtocol of a page from the service");
  await own.close();
  assert.ok(harness.requests.filter((u) => u.includes("/v1/streams/sse")).length >= 12);
  assert.ok(harness.requests.every((u) => !u.includes(token)), "no bearer token in any URL the browser asked for");
  assert.ok(!server.logs.join("").includes(token), "no bearer token in the server's logs");
});
