#!/usr/bin/env bash
# Builds the TypeScript client (clients/typescript) and runs all of its tests against the real
# server: a check that src/openapi.ts is what openapi.json generates, unit tests (the shared
# decision vectors among them), end-to-end runs of the Agent in Node, and headless Chromium
# tests (Debian's chromium, installed when missing). The server binary comes from AGENT_INBOX_BIN (default
# target/debug/agent-inbox, built when missing). Exits non-zero when anything fails.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/lib.sh"
use_agent_inbox_bin test-typescript
require_node_20 "the TypeScript client"
# Debian packages the tests use: the browser, openssl (a test certificate), sqlite3 (moving a
# test database's retention point, as retention would).
install_missing_packages chromium:/usr/bin/chromium openssl:openssl sqlite3:sqlite3

cd "$repo/clients/typescript"
npm ci --no-audit --no-fund --loglevel=error
# The wire types are generated from openapi.json: the committed file must be what it gives.
"$repo/scripts/generate-wire-types.sh" --check typescript
npx tsc -p tsconfig.json
# Files one after another (the browser tests count the server's streams); bounded in time.
timeout --kill-after=10s 420s node --test --test-concurrency=1 \
  test/unit/*.test.mjs test/e2e/*.test.mjs test/browser/*.test.mjs
