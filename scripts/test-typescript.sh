#!/usr/bin/env bash
# Builds the TypeScript client (clients/typescript) and runs all of its tests against the real
# server: unit tests, end-to-end runs of the Agent in Node, and headless Chromium tests (Debian's
# chromium, installed when missing). The server binary comes from AGENT_INBOX_BIN (default
# target/debug/agent-inbox, built when missing). Exits non-zero when anything fails.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export AGENT_INBOX_BIN="${AGENT_INBOX_BIN:-$repo/target/debug/agent-inbox}"
if [ ! -x "$AGENT_INBOX_BIN" ]; then
  echo "building $AGENT_INBOX_BIN"
  (cd "$repo" && cargo build -q -p agent-inbox)
fi

if ! command -v node >/dev/null || [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  echo "the TypeScript client needs Node 20 or newer (found: $(node --version 2>/dev/null || echo none))" >&2
  exit 1
fi

# Debian packages the tests use: the browser, openssl (a test certificate), sqlite3 (moving a
# test database's retention point, as retention would).
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v openssl >/dev/null || missing+=(openssl)
command -v sqlite3 >/dev/null || missing+=(sqlite3)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

cd "$repo/clients/typescript"
npm ci --no-audit --no-fund --loglevel=error
npx tsc -p tsconfig.json
# Files one after another (the browser tests count the server's streams); bounded in time.
timeout --kill-after=10s 420s node --test --test-concurrency=1 \
  test/unit/*.test.mjs test/e2e/*.test.mjs test/browser/*.test.mjs
