#!/usr/bin/env bash
# Tests `agent-inbox mcp` with the official Python MCP SDK as the client, against a real
# `agent-inbox serve` on SQLite (crates/agent-inbox/tests/mcp). The binary comes from
# AGENT_INBOX_BIN (default target/debug/agent-inbox, built if missing); the client lives in a
# virtualenv at target/venvs/mcp, created on first use. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/lib.sh
use_agent_inbox_bin test-mcp

venv=target/venvs/mcp
if [ ! -x "$venv/bin/python" ]; then
    if ! python3 -m venv "$venv"; then
        echo "python3 cannot make a virtualenv; installing python3-venv with apt-get" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        rm -rf "$venv" && python3 -m venv "$venv"
    fi
fi
"$venv/bin/python" -m pip install --disable-pip-version-check -q 'mcp>=2.3,<3' 'pytest>=8,<10'

export PYTHONDONTWRITEBYTECODE=1
timeout 170 "$venv/bin/python" -m pytest -q -p no:cacheprovider crates/agent-inbox/tests/mcp "$@"
