#!/usr/bin/env bash
# Runs the web console's browser tests (tests/console): headless Chromium from Debian's
# `chromium` package (installed with apt-get when missing), driven by playwright-core from
# the npm registry, against a real `agent-inbox serve` on SQLite. The binary comes from
# AGENT_INBOX_BIN (default target/debug/agent-inbox, built when missing). Screenshots of every
# view are left in target/console-screenshots/. Exits non-zero when anything fails.
# (The console's HTTP tests are Rust: cargo nextest run -p inbox-server console.)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/lib.sh"
use_agent_inbox_bin test-console
require_node_20 "the console tests"
install_missing_packages "chromium:${CHROMIUM_BIN:-/usr/bin/chromium}"

cd "$repo/tests/console"
npm ci --no-audit --no-fund --loglevel=error
timeout --kill-after=10s 300s node --test --test-concurrency=1 ./*.test.mjs
echo "screenshots: $repo/target/console-screenshots/"
