// Serves this example at http://127.0.0.1:5555/ (or --port N), with the built client package
// (clients/typescript/dist) at /client/. Nothing else: no bundler, no dependencies.
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { dirname, extname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const here = dirname(fileURLToPath(import.meta.url));
const { values } = parseArgs({ options: { port: { type: "string", default: "5555" }, host: { type: "string", default: "127.0.0.1" } } });
const mounts = [
  ["/client/", resolve(here, "../../clients/typescript/dist")],
  ["/", here],
];
const types = { ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css", ".map": "application/json" };

createServer(async (request, response) => {
  const path = decodeURIComponent(new URL(request.url, "http://x").pathname);
  const [prefix, root] = mounts.find(([p]) => path.startsWith(p));
  const file = normalize(join(root, path.slice(prefix.length) || "index.html"));
  try {
    if (!file.startsWith(root) || file.endsWith(".mjs")) throw new Error("not served");
    const body = await readFile(file);
    response.writeHead(200, { "content-type": types[extname(file)] ?? "application/octet-stream", "cache-control": "no-store" });
    response.end(body);
  } catch {
    response.writeHead(404, { "content-type": "text/plain" });
    response.end(path.startsWith("/client/") ? "not found: build the client first (cd clients/typescript && npm ci && npm run build)\n" : "not found\n");
  }
}).listen(Number(values.port), values.host, () => {
  console.log(`browser agent example on http://${values.host}:${values.port}/ (start the service with --cors-origins http://${values.host}:${values.port})`);
});
