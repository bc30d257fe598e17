#!/usr/bin/env bash
# Runs the web console's browser tests (tests/console): headless Chromium from Debian's
# `chromium` package (installed with apt-get when missing), driven by playwright-core from
# the npm registry, against a real `agent-inbox serve` on SQLite. The binary comes from
# AGENT_INBOX_BIN (default target/debug/agent-inbox, built when missing). Screenshots of every
# view are left in target/console-screenshots/. Exits non-zero when anything fails.
# (The console's HTTP tests are Rust: cargo nextest run -p inbox-server console.)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export AGENT_INBOX_BIN="${AGENT_INBOX_BIN:-$repo/target/debug/agent-inbox}"
if [ ! -x "$AGENT_INBOX_BIN" ]; then
  echo "building $AGENT_INBOX_BIN"
  (cd "$repo" && cargo build -q -p agent-inbox)
fi

if ! command -v node >/dev/null || [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  echo "the console tests need Node 20 or newer (found: $(node --version 2>/dev/null || echo none))" >&2
  exit 1
fi
if [ ! -x "${CHROMIUM_BIN:-/usr/bin/chromium}" ]; then
  echo "installing chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

cd "$repo/tests/console"
npm ci --no-audit --no-fund --loglevel=error
timeout --kill-after=10s 300s node --test --test-concurrency=1 ./*.test.mjs
echo "screenshots: $repo/target/console-screenshots/"
