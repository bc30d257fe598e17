#!/usr/bin/env bash
# Runs every test of agent-inbox: unit, property, conformance (SQLite and MariaDB) and
# end-to-end. Starts MariaDB if it is installed but not running. The MariaDB URL comes from
# AGENT_INBOX_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test); each test creates
# and drops its own database.
set -euo pipefail
cd "$(dirname "$0")/.."

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

if ! cargo nextest --version >/dev/null 2>&1; then
    cargo install --locked cargo-nextest
fi

cargo nextest run --workspace --no-fail-fast "$@"
cargo test --workspace --doc --quiet
