#!/usr/bin/env bash
# Tests agents' A2A 1.0 faces with the official A2A SDKs as the foreign clients, both ways: the
# Python a2a-sdk and @a2a-js/sdk send a message to an agent whose runner is stopped; the runner
# (`agent-inbox listen --batch 1` with crates/agent-inbox/tests/a2a/handler.py) starts later, is
# SIGKILLed mid-task, and another run completes it; the clients see it completed through GetTask
# and SubscribeToTask, on SQLite and on MariaDB (AGENT_INBOX_TEST_MYSQL_URL, default
# mysql://root@127.0.0.1:3306/test). The binary comes from AGENT_INBOX_BIN (default
# target/debug/agent-inbox, built if missing); the Python client lives in a virtualenv at
# target/venvs/a2a, the JS client in crates/agent-inbox/tests/a2a/node_modules (package-lock.json),
# both pinned. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/lib.sh
use_agent_inbox_bin test-a2a
require_node_20 test-a2a
install_missing_packages mariadb-client:mariadb

venv=target/venvs/a2a
if [ ! -x "$venv/bin/python" ]; then
    if ! python3 -m venv "$venv"; then
        echo "python3 cannot make a virtualenv; installing python3-venv with apt-get" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        rm -rf "$venv" && python3 -m venv "$venv"
    fi
fi
"$venv/bin/python" -m pip install --disable-pip-version-check -q 'a2a-sdk==1.3.0' 'httpx>=0.28,<1' 'pytest>=8,<10'
(cd crates/agent-inbox/tests/a2a && npm ci --no-audit --no-fund --silent)

export PYTHONDONTWRITEBYTECODE=1
export AGENT_INBOX_TEST_MYSQL_URL="${AGENT_INBOX_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}"
timeout 170 "$venv/bin/python" -m pytest -q -p no:cacheprovider crates/agent-inbox/tests/a2a "$@"
