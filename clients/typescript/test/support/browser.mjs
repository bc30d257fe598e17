// Headless Chromium (Debian's /usr/bin/chromium) driven by playwright-core, and the harness the
// agent test page reports to: every tab's reports land in one list, with the tab and a time.
import { chromium } from "playwright-core";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { startStatic } from "./static.mjs";

const here = dirname(fileURLToPath(import.meta.url));
export const PACKAGE = join(here, "../..");
export const CHROMIUM = process.env.CHROMIUM_BIN ?? "/usr/bin/chromium";
const ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** Launches Chromium; `headless: false` needs a display (the benchmark's hidden tabs). */
export async function launch(extraArgs = [], { headless = true, desktopThrottling = false } = {}) {
  const args = [...ARGS.filter((a) => headless || a !== "--headless"), ...extraArgs];
  // Playwright turns off the throttling of background tabs; a desktop browser has it.
  const ignoreDefaultArgs = desktopThrottling
    ? ["--disable-background-timer-throttling", "--disable-backgrounding-occluded-windows", "--disable-renderer-backgrounding"]
    : [];
  return chromium.launch({ executablePath: CHROMIUM, args, headless, ignoreDefaultArgs });
}

/** Serves the package's dist/ and the test pages. */
export function servePages(options) {
  return startStatic({ "/dist/": join(PACKAGE, "dist"), "/": join(PACKAGE, "test/browser/pages") }, options);
}

/**
 * A browser context whose tabs run the agent page: `token` answers the page's access-token
 * callback; `reports` collects what tabs report; `requests` every URL the browser asked for.
 */
export async function agentContext(browser, { token }) {
  const context = await browser.newContext({ ignoreHTTPSErrors: true });
  const reports = [];
  const requests = [];
  const tokenCalls = [];
  await context.exposeFunction("report", (report) => void reports.push({ ...report, receivedAt: Date.now() }));
  await context.exposeFunction("inboxToken", (request) => {
    tokenCalls.push(request);
    return token;
  });
  context.on("request", (request) => requests.push(request.url()));
  /** The protocol of every response the tabs got (from the DevTools protocol), by URL. */
  const protocols = [];
  return { context, reports, requests, tokenCalls, protocols };
}

/** Opens `count` tabs of the agent page; resolves once each has subscribed. */
export async function openTabs(harness, origin, count, query, { firstTab = 0 } = {}) {
  const pages = [];
  for (let i = 0; i < count; i++) {
    const tab = String(firstTab + i);
    const page = await harness.context.newPage();
    page.on("pageerror", (error) => harness.reports.push({ kind: "pageerror", tab, message: String(error) }));
    const cdp = await harness.context.newCDPSession(page);
    cdp.on("Network.responseReceived", ({ response }) => harness.protocols.push({ url: response.url, protocol: response.protocol }));
    await cdp.send("Network.enable");
    await page.goto(`${origin}/agent.html?${new URLSearchParams({ ...query, tab })}`);
    pages.push(page);
  }
  return pages;
}

/** Reports of `kind`, optionally from one tab. */
export function reportsOf(harness, kind, tab) {
  return harness.reports.filter((r) => r.kind === kind && (tab === undefined || r.tab === tab));
}

/** The tab ids whose latest role report says they lead. */
export function leaders(harness) {
  const latest = new Map();
  for (const r of harness.reports) if (r.kind === "role") latest.set(r.tab, r.leader);
  return [...latest].filter(([, leader]) => leader).map(([tab]) => tab);
}
