#!/usr/bin/env bash
# Tests `agent-inbox mcp` with the official Python MCP SDK as the client, against a real
# `agent-inbox serve` on SQLite (crates/agent-inbox/tests/mcp). The binary comes from
# AGENT_INBOX_BIN (default target/debug/agent-inbox, built if missing); the client lives in a
# virtualenv at target/venvs/mcp, created on first use; the published Claude Code CLI in
# target/claude-code (below). Extra arguments go to pytest.
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

# The published Claude Code CLI at the version pinned in tests/mcp/claude-code (its `claude mcp
# add/get/list` check the README's configuration line): installed into target/claude-code with
# `npm ci` when the pin changes, about 10 s and 400 MB the first time (npm's cache makes later
# ones quick). AGENT_INBOX_TEST_CLAUDE_CODE=0, no npm, or no network: its test says why it skips.
pinned=crates/agent-inbox/tests/mcp/claude-code
claude_dir=target/claude-code
if [ -z "${CLAUDE_CODE_BIN:-}" ] && [ "${AGENT_INBOX_TEST_CLAUDE_CODE:-1}" != 0 ] && command -v npm >/dev/null; then
    if ! cmp -s "$pinned/package-lock.json" "$claude_dir/installed.lock"; then
        rm -rf "$claude_dir" && mkdir -p "$claude_dir"
        cp "$pinned/package.json" "$pinned/package-lock.json" "$claude_dir/"
        if (cd "$claude_dir" && timeout 300 npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
            cp "$pinned/package-lock.json" "$claude_dir/installed.lock"
        else
            echo "test-mcp: npm ci of @anthropic-ai/claude-code failed (offline?); test_claude_code.py will skip" >&2
        fi
    fi
    export CLAUDE_CODE_BIN="$PWD/$claude_dir/node_modules/.bin/claude"
fi

export PYTHONDONTWRITEBYTECODE=1
timeout 170 "$venv/bin/python" -m pytest -q -p no:cacheprovider crates/agent-inbox/tests/mcp "$@"
