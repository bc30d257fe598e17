#!/usr/bin/env bash
# The runners' conformance suite (clients/conformance): every scenario against the Rust SDK's
# Agent, `agent-inbox listen --exec`, the TypeScript Agent in Node and the Python Agent, each as
# a child process against a real `agent-inbox serve` (SQLite; MariaDB where a scenario says so)
# behind a fault proxy. Builds what is missing: the server (AGENT_INBOX_BIN, default
# target/debug/agent-inbox), the Rust conformance agent, the TypeScript package, the Python
# SDK's virtualenv (target/venvs/python). Extra arguments go to pytest (-k python, -k outage).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
source scripts/lib.sh
use_agent_inbox_bin test-conformance
require_node_20 "the TypeScript runner"

cargo build -q -p inbox-client --example conformance_agent

if [ ! -f clients/typescript/dist/node.js ]; then
    (cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && npx tsc -p tsconfig.json)
fi

venv="$repo/target/venvs/python"
if [ ! -x "$venv/bin/python" ]; then
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$repo/clients/python[test]"
fi
# This tree's SDK, not an earlier build of the same version.
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$repo/clients/python"

cd clients/conformance/driver
echo "test-conformance: mypy --strict" >&2
MYPYPATH="$repo/clients/python/tests" "$venv/bin/python" -m mypy --strict --no-incremental . ../agents/python_agent.py
echo "test-conformance: pytest" >&2
export PYTHONDONTWRITEBYTECODE=1
timeout --signal=INT 900 "$venv/bin/python" -m pytest -p no:cacheprovider -q -rs --timeout 120 "$@" .
