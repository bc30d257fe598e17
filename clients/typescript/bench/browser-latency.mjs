// Benchmark (not a test): publish N events at R/s to one agent served by T tabs of headless
// Chromium sharing one stream, and print publish -> handler-start latency percentiles and the
// service's request counts; then the main-thread CPU of an idle follower tab over S seconds
// (DevTools' TaskDuration), opened as a background tab.
//
//   node bench/browser-latency.mjs [--events 1000] [--rate 200] [--tabs 4] [--idle-seconds 60]
//                                  [--mysql mysql://root@127.0.0.1:3306] [--https]
//
// `--https`: the service and the page over TLS with a certificate made here, so the tabs'
// requests share one HTTP/2 connection; over plain HTTP/1.1 the browser allows six connections
// to the service for all tabs together (the stream holds one), and requests queue for them.
//
// Headless Chromium (and Playwright's defaults) keep every tab visible and unthrottled, so the
// idle figure is an upper bound for a hidden tab of a desktop browser, which throttles timers.
//
// Where the time goes, per event: publish -> the leader's stream hint -> the claim that took it
// is sent (in whichever tab) -> its answer -> the handler starts; and the hint's trip over the
// BroadcastChannel to the other tabs, the claims per tab, and how many came back empty.
import { execFile } from "node:child_process";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs, promisify } from "node:util";

import { agentContext, launch, reportsOf, servePages } from "../test/support/browser.mjs";
import { BIN, publish, startServer, waitFor } from "../test/support/server.mjs";

const run = promisify(execFile);
const { values } = parseArgs({
  options: {
    events: { type: "string", default: "1000" },
    rate: { type: "string", default: "200" },
    tabs: { type: "string", default: "4" },
    "idle-seconds": { type: "string", default: "60" },
    /** A MySQL/MariaDB server URL without a database (one is created and dropped); default SQLite. */
    mysql: { type: "string" },
    https: { type: "boolean", default: false },
  },
});
const events = Number(values.events);
const rate = Number(values.rate);
const tabCount = Number(values.tabs);
const idleSeconds = Number(values["idle-seconds"]);

let tls = null;
if (values.https) {
  const dir = await mkdtemp(join(tmpdir(), "inbox-bench-tls-"));
  const [cert, key] = [join(dir, "cert.pem"), join(dir, "key.pem")];
  await run("openssl", [
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
    "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
  ]);
  tls = { dir, cert, key, pem: { cert: await readFile(cert), key: await readFile(key) } };
}
const pages = await servePages(tls?.pem);
let databaseUrl;
let dropDatabase = async () => {};
if (values.mysql) {
  const name = `inbox_bench_${process.pid}_${Date.now()}`;
  const admin = new URL(values.mysql);
  const mysql = (sql) => run("mysql", ["-h", admin.hostname, "-P", admin.port || "3306", "-u", decodeURIComponent(admin.username || "root"), ...(admin.password ? [`-p${decodeURIComponent(admin.password)}`] : []), "-e", sql]);
  await mysql(`CREATE DATABASE ${name}`);
  dropDatabase = () => mysql(`DROP DATABASE IF EXISTS ${name}`);
  databaseUrl = `${values.mysql.replace(/\/+$/, "")}/${name}`;
  // MariaDB needs a secrets key file named, for the server and `token issue` alike.
  const keyFile = join(await mkdtemp(join(tmpdir(), "inbox-bench-key-")), "secrets.key");
  const { stdout: key } = await run(BIN, ["keys", "new-secrets-key"]);
  await writeFile(keyFile, key);
  await chmod(keyFile, 0o600);
  process.env.AGENT_INBOX_SECRETS_KEY_FILE = keyFile;
}
const server = await startServer({
  args: ["--cors-origins", pages.origin, ...(tls ? ["--tls-cert", tls.cert, "--tls-key", tls.key] : [])],
  databaseUrl,
  ...(tls ? { scheme: "https", ca: tls.pem.cert } : {}),
});
const browser = await launch(tls ? ["--ignore-certificate-errors"] : []);
try {
  const publisher = await server.token("bench_app", { kind: "publisher" });
  const token = await server.token("bench_agent");
  const harness = await agentContext(browser, { token });
  const query = (tab) =>
    `${pages.origin}/agent.html?${new URLSearchParams({ server: server.url, tab: String(tab), concurrency: "4", traceHints: "1", traceClaims: "1" })}`;
  const tabs = [await harness.context.newPage()];
  await tabs[0].goto(query(0));
  const cdp = await browser.newBrowserCDPSession();
  const { targetInfos } = await cdp.send("Target.getTargets");
  const browserContextId = targetInfos.find((t) => t.type === "page")?.browserContextId;
  for (let tab = 1; tab < tabCount; tab++) {
    // Background tabs of the first tab's window, as a person opens them.
    const opened = harness.context.waitForEvent("page");
    await cdp.send("Target.createTarget", { url: query(tab), browserContextId, newWindow: false, background: true });
    tabs.push(await opened);
  }
  await waitFor(() => reportsOf(harness, "subscribed").length === tabCount, { what: "every tab subscribed", timeoutMs: 20_000 });
  await waitFor(() => reportsOf(harness, "transport").some((r) => r.status.connected), { what: "the stream open" });

  const warmup = await publish(server, publisher, "bench_agent", 50, { prefix: "warmup", perSecond: 100 });
  await waitFor(() => warmup.every((p) => reportsOf(harness, "start").some((r) => r.eventId === p.eventId)), { what: "warm-up handled" });
  const startedBefore = reportsOf(harness, "start").length;

  const published = await publish(server, publisher, "bench_agent", events, { prefix: "bench", perSecond: rate });
  await waitFor(() => reportsOf(harness, "start").length >= startedBefore + events, { what: "every event started", timeoutMs: 60_000 });
  const metrics = await server.metrics();
  const routes = new Map();
  for (const line of metrics.split("\n")) {
    const m = /^agent_inbox_http_request_duration_seconds_(sum|count)\{route="([^"]+)"\} ([0-9.e+-]+)$/.exec(line);
    if (m) routes.set(m[2], { ...routes.get(m[2]), [m[1]]: Number(m[3]) });
  }
  const startOf = new Map(reportsOf(harness, "start").map((r) => [r.eventId, r]));
  const latencies = published.map((p) => startOf.get(p.eventId).at - p.publishedAt).sort((a, b) => a - b);
  const pct = (q) => latencies[Math.min(latencies.length - 1, Math.ceil(q * latencies.length) - 1)];
  // Where the time goes: publish -> the leader's stream hint (first with head_seq >= the event's
  // sequence) -> the handler start in whichever tab claimed it.
  const hints = reportsOf(harness, "hint").sort((a, b) => a.at - b.at);
  const split = published.map((p) => {
    const hint = hints.find((h) => h.headSeq >= p.inboxSeq && h.at >= p.publishedAt - 5);
    return hint ? [hint.at - p.publishedAt, startOf.get(p.eventId).at - hint.at] : null;
  }).filter(Boolean);
  const median = (values) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)];
  const stages = stageTimes(harness, published, startOf, startedBefore);
  const byTab = new Map();
  for (const p of published) byTab.set(startOf.get(p.eventId).tab, (byTab.get(startOf.get(p.eventId).tab) ?? 0) + 1);
  const visibility = await Promise.all(tabs.map((t) => t.evaluate(() => document.visibilityState)));

  console.log(`\n${events} events at ${rate}/s to one agent, ${tabCount} tabs (headless Chromium, one shared SSE stream, ${values.mysql ? "MariaDB" : "SQLite"}, ${tls ? "HTTPS, HTTP/2" : "HTTP/1.1"})`);
  console.log("| publish -> handler start | ms |");
  console.log("|---|---|");
  for (const [name, q] of [["p50", 0.5], ["p90", 0.9], ["p99", 0.99]]) console.log(`| ${name} | ${pct(q).toFixed(1)} |`);
  console.log(`| max | ${latencies.at(-1).toFixed(1)} |`);
  console.log(`median split: publish -> stream hint ${median(split.map((x) => x[0])).toFixed(1)} ms, hint -> handler start ${median(split.map((x) => x[1])).toFixed(1)} ms`);
  console.log(`events per tab: ${[...byTab].sort().map(([t, n]) => `tab ${t}: ${n}`).join(", ")}; visibility: ${visibility.join(", ")}`);
  console.log(`load average at the end: ${(await readFile("/proc/loadavg", "utf8").catch(() => "?")).split(" ").slice(0, 3).join(" ")}`);
  printStages(stages);

  console.log("| route | requests | mean ms |");
  console.log("|---|---|---|");
  for (const [route, { sum, count }] of [...routes].sort((a, b) => b[1].count - a[1].count)) {
    if (route !== "/metrics") console.log(`| ${route} | ${count} | ${((sum / count) * 1000).toFixed(2)} |`);
  }

  // Idle: the stream stays open, nothing is published.
  const stats = await Promise.all(tabs.map((t) => t.evaluate(() => window.__stats)));
  const index = stats.findIndex((s) => !s.leader);
  const idleTab = tabs[index >= 0 ? index : tabs.length - 1];
  const session = await harness.context.newCDPSession(idleTab);
  await session.send("Performance.enable");
  const metric = async () => Object.fromEntries((await session.send("Performance.getMetrics")).metrics.map((m) => [m.name, m.value]));
  const requests = [];
  idleTab.on("request", (r) => requests.push(r.url()));
  const before = await metric();
  await new Promise((r) => setTimeout(r, idleSeconds * 1000));
  const afterIdle = await metric();
  const taskMs = (afterIdle.TaskDuration - before.TaskDuration) * 1000;
  const scriptMs = (afterIdle.ScriptDuration - before.ScriptDuration) * 1000;
  console.log(`\nidle ${visibility[tabs.indexOf(idleTab)]} follower tab over ${idleSeconds} s`);
  console.log("| main-thread task time | script time | CPU | requests |");
  console.log("|---|---|---|---|");
  console.log(`| ${taskMs.toFixed(1)} ms | ${scriptMs.toFixed(1)} ms | ${((taskMs / (idleSeconds * 1000)) * 100).toFixed(3)} % | ${requests.length} |`);
} finally {
  await browser.close();
  await server.stop();
  await pages.close();
  await dropDatabase();
  if (tls) await rm(tls.dir, { recursive: true, force: true });
}

/** Per-event stage times (ms) and claim counts from the tabs' trace reports. */
function stageTimes(harness, published, startOf, startedBefore) {
  const seqOf = new Map(published.map((p) => [p.eventId, p.inboxSeq]));
  const hints = reportsOf(harness, "hint").sort((a, b) => a.at - b.at);
  const tabHints = reportsOf(harness, "tabhint").sort((a, b) => a.at - b.at);
  const claims = reportsOf(harness, "claim");
  const claimOf = new Map();
  for (const c of claims) for (const id of c.eventIds) if (seqOf.has(id)) claimOf.set(id, c);
  const rows = [];
  for (const p of published) {
    const hint = hints.find((h) => h.headSeq >= p.inboxSeq && h.at >= p.publishedAt - 5);
    const claim = claimOf.get(p.eventId);
    const start = startOf.get(p.eventId);
    if (!hint || !claim || !start) continue;
    const claimSent = claim.at - claim.elapsedMs;
    const relay = tabHints.filter((h) => h.headSeq === hint.headSeq && h.at >= hint.at - 1).map((h) => h.at - hint.at);
    rows.push({
      hint: hint.at - p.publishedAt,
      // Negative when a claim already on its way took the event before its own hint came.
      toClaim: claimSent - hint.at,
      claimRtt: claim.elapsedMs,
      toStart: start.at - claim.at,
      total: start.at - p.publishedAt,
      relay: relay.length > 0 ? Math.max(...relay) : null,
      leaderClaimed: claim.tab === hint.tab,
    });
  }
  const measured = claims.filter((c) => c.at >= (reportsOf(harness, "start")[startedBefore]?.at ?? 0) - 1000);
  const perTab = new Map();
  for (const c of measured) {
    const t = perTab.get(c.tab) ?? { claims: 0, empty: 0, events: 0 };
    t.claims += 1;
    t.empty += c.eventIds.length === 0 ? 1 : 0;
    t.events += c.eventIds.length;
    perTab.set(c.tab, t);
  }
  return { rows, perTab };
}

function printStages({ rows, perTab }) {
  const q = (values, quantile) => {
    const sorted = values.filter((v) => v !== null).sort((a, b) => a - b);
    return sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(quantile * sorted.length) - 1))];
  };
  console.log(`\nstages (${rows.length} events traced; ms)`);
  console.log("| stage | p50 | p90 | p99 | max |");
  console.log("|---|---|---|---|---|");
  for (const [name, key] of [
    ["publish -> leader's stream hint", "hint"],
    ["hint -> the claim that took it sent", "toClaim"],
    ["claim round trip", "claimRtt"],
    ["claim answer -> handler start", "toStart"],
    ["hint -> other tabs (BroadcastChannel, slowest tab)", "relay"],
  ]) {
    const values = rows.map((r) => r[key]);
    console.log(`| ${name} | ${[0.5, 0.9, 0.99, 1].map((x) => q(values, x).toFixed(1)).join(" | ")} |`);
  }
  const slow = rows.filter((r) => r.total >= q(rows.map((x) => x.total), 0.99));
  const mean = (key, list) => list.reduce((a, r) => a + r[key], 0) / Math.max(1, list.length);
  console.log(`slowest 1 %: mean hint ${mean("hint", slow).toFixed(1)}, to claim ${mean("toClaim", slow).toFixed(1)}, claim ${mean("claimRtt", slow).toFixed(1)}, to start ${mean("toStart", slow).toFixed(1)}`);
  console.log(`claimed by the hint's own tab (the leader): ${rows.filter((r) => r.leaderClaimed).length} of ${rows.length}`);
  console.log(`claims per tab: ${[...perTab].sort().map(([t, c]) => `tab ${t}: ${c.claims} (${c.empty} empty, ${c.events} events)`).join("; ")}`);
}
