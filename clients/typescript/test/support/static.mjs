// A small static file server for the browser tests and the benchmark: the package's dist/ at
// /dist/, the test pages at /. HTTP or, with a certificate, HTTPS (HTTP/1.1).
import { createServer as createHttp } from "node:http";
import { createServer as createHttps } from "node:https";
import { readFile } from "node:fs/promises";
import { extname, join, normalize, resolve } from "node:path";

const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8", ".map": "application/json", ".css": "text/css" };

/** Serves `mounts` ({ "/dist/": dir, "/": dir }) on a free loopback port. */
export async function startStatic(mounts, { cert, key } = {}) {
  const prefixes = Object.keys(mounts).sort((a, b) => b.length - a.length);
  const handler = async (request, response) => {
    const path = decodeURIComponent(new URL(request.url, "http://x").pathname);
    const prefix = prefixes.find((p) => path.startsWith(p));
    if (!prefix) return notFound(response);
    const root = resolve(mounts[prefix]);
    const file = normalize(join(root, path.slice(prefix.length) || "index.html"));
    if (!file.startsWith(root)) return notFound(response);
    try {
      const body = await readFile(file);
      response.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream", "cache-control": "no-store" });
      response.end(body);
    } catch {
      notFound(response);
    }
  };
  const server = cert ? createHttps({ cert, key }, handler) : createHttp(handler);
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address();
  return {
    origin: `${cert ? "https" : "http"}://127.0.0.1:${port}`,
    port,
    close: () => new Promise((r) => { server.closeAllConnections?.(); server.close(r); }),
  };
}

function notFound(response) {
  response.writeHead(404, { "content-type": "text/plain" });
  response.end("not found");
}
