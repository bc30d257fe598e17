#!/usr/bin/env bash
# Runs every test of agent-inbox: formatting and clippy (warnings are errors), unit, property, conformance (SQLite, MariaDB and a Galera
# cluster), end-to-end, database outages on a private mariadbd, the README's walk-through, the
# OpenAPI contract (Schemathesis), the MCP server with the Python MCP SDK, agents' A2A faces with
# the official A2A SDKs (Python and JS), the Python SDK
# (pytest), the TypeScript client (Node and headless Chromium), the runners' conformance suite
# and the web console (headless Chromium). Starts MariaDB if it is
# installed but not running. The MariaDB URL comes from
# AGENT_INBOX_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test); each test creates
# and drops its own database. The Galera cases run on a cluster scripts/galera.sh starts (or the
# one AGENT_INBOX_TEST_GALERA_URLS names).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

mysql_url="${AGENT_INBOX_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}"
export AGENT_INBOX_TEST_MYSQL_URL="$mysql_url"

mariadb_up() { mysqladmin --protocol=tcp -h127.0.0.1 -P3306 -uroot ping >/dev/null 2>&1; }

if ! mariadb_up; then
    if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
        echo "MariaDB is not installed; installing it with apt-get" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >/dev/null
    fi
    echo "starting MariaDB" >&2
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
    for _ in $(seq 1 60); do mariadb_up && break; sleep 1; done
    mariadb_up || { echo "MariaDB did not start within 60 s" >&2; exit 1; }
fi

# systemd-analyze checks the shipped systemd unit and the daemon's units; the daemon's tests run
# it under systemd-socket-activate, and a process as another user with setpriv; mariadb-dump and
# the mariadb client copy a database in the secrets tests; the partition tests make network
# namespaces with ip and cut them with nft.
install_missing_packages systemd:systemd-analyze systemd:systemd-socket-activate util-linux:setpriv \
    mariadb-client:mariadb-dump iproute2:ip nftables:nft

if ! cargo nextest --version >/dev/null 2>&1; then
    cargo install --locked cargo-nextest
fi

# A 3-member MariaDB Galera cluster for the Galera cases (about 20 s to start), unless the
# caller names one in AGENT_INBOX_TEST_GALERA_URLS; stopped when this script ends.
if [ -z "${AGENT_INBOX_TEST_GALERA_URLS:-}" ]; then
    trap './scripts/galera.sh stop target/galera-test >/dev/null 2>&1 || true' EXIT
    galera_line="$(./scripts/galera.sh start target/galera-test)"
    export "${galera_line?}"
fi

# Lints first: they are the quickest to fail, and what they find a reviewer would.
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

cargo nextest run --workspace --no-fail-fast "$@"
cargo test --workspace --doc --quiet

# The clients in other languages and the MCP server, against the binary just built.
cargo build -p agent-inbox --quiet
export AGENT_INBOX_BIN="$PWD/target/debug/agent-inbox"
./scripts/test-readme.sh
./scripts/test-contract.sh
./scripts/test-mcp.sh
./scripts/test-a2a.sh
./scripts/test-python.sh
./scripts/test-typescript.sh
./scripts/test-conformance.sh
./scripts/test-console.sh
