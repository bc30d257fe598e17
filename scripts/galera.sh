#!/usr/bin/env bash
# A 3-member MariaDB Galera cluster for tests, on loopback ports with private data directories.
#
#   scripts/galera.sh start [DIR]    start it (DIR defaults to target/galera), wait until every
#                                    member is Synced, print AGENT_INBOX_TEST_GALERA_URLS=...
#   scripts/galera.sh status [DIR]   each member's wsrep_local_state_comment
#   scripts/galera.sh stop [DIR]     stop the members this script started (their pid files)
#   scripts/galera.sh kill|pause|resume|restart N [DIR]
#                                    SIGKILL, SIGSTOP or SIGCONT member N, or start it again
#                                    (it rejoins by state transfer; waits until it is Synced)
#
# DIR/urls holds the members' URLs, comma-separated (what AGENT_INBOX_TEST_GALERA_URLS takes);
# each member's folder (data, temporary files, socket, pid file, error log and ports) is
# DIR/member<N>/, or, when the user mariadbd runs as cannot enter DIR (a clone under root's 0700
# home), a private folder under /var/tmp that DIR/members names and stop removes. Every member
# has its own temporary directory, so servers sharing /tmp cannot trip over each other's files.
# Installs galera-4 and rsync with apt-get when they are missing. Member 1 installs the system
# tables (retried once when that fails) and starts a new cluster; members 2 and 3 join with an
# rsync state transfer (which needs their folders owned by the user mariadbd runs as). Every wait
# is bounded: start gives up after GALERA_START_SECONDS (default 120) and says which member did
# not sync.
set -euo pipefail
cd "$(dirname "$0")/.."

command_name="${1:-}"
case "$command_name" in
    kill|pause|resume|restart) member_arg="${2:-}"; shift ;;
esac
dir="${2:-target/galera}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
start_seconds="${GALERA_START_SECONDS:-120}"
members=(1 2 3)

die() { echo "galera.sh: $*" >&2; exit 1; }

client() { # member, then mariadb client arguments
    local member="$1"; shift
    mariadb --no-defaults --protocol=tcp -h127.0.0.1 -P"$(port_of "$member" sql)" -uroot \
        --connect-timeout=2 "$@"
}

# Where the members' folders are: DIR itself, or the folder DIR/members names.
members_root() { if [ -s "$dir/members" ]; then cat "$dir/members"; else echo "$dir"; fi; }

home_of() { echo "$(members_root)/member$1"; }

port_of() { sed -n "s/^$2=//p" "$(home_of "$1")/ports" 2>/dev/null; }

state_of() {
    client "$1" -N -e "SHOW STATUS LIKE 'wsrep_local_state_comment'" 2>/dev/null | cut -f2
}

running_pid() { # the pid of a member this script started, if that process is still ours
    local home; home="$(home_of "$1")"
    local pid_file="$home/mariadbd.pid"
    [ -s "$pid_file" ] || return 1
    local pid; pid="$(cat "$pid_file")"
    [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "--datadir=$home/data" \
        && echo "$pid"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Twelve free loopback ports (SQL, group communication, IST and SST for each member), from a
# random base so that two clusters on one machine do not collide, and below the kernel's
# ephemeral range (32768 and up), where a test's outgoing connection could take a port between
# this check and the member's bind.
choose_ports() {
    for _ in $(seq 1 50); do
        local base=$(( 20000 + (RANDOM % 127) * 100 )) ok=1
        for offset in $(seq 0 11); do port_free $((base + offset)) || { ok=0; break; }; done
        if [ "$ok" = 1 ]; then echo "$base"; return; fi
    done
    die "found no 12 free loopback ports"
}

ensure_packages() {
    if [ ! -e /usr/lib/galera/libgalera_smm.so ] || ! command -v rsync >/dev/null; then
        echo "galera.sh: installing galera-4 and rsync with apt-get" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq galera-4 rsync >/dev/null
    fi
    command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || die "mariadbd is not installed (apt-get install mariadb-server)"
}

# The user mariadbd runs as: mysql when started by root (as the packaged service does), else us.
run_user() { if [ "$(id -u)" = 0 ] && id mysql >/dev/null 2>&1; then echo mysql; else id -un; fi; }

# Chooses where the members' folders go: DIR when the user mariadbd runs as can enter it and
# write there, else a new private folder under /var/tmp (recorded in DIR/members).
choose_members_root() {
    rm -f "$dir/members"
    local user; user="$(run_user)"
    [ "$user" = "$(id -un)" ] && return
    if runuser -u "$user" -- test -x "$dir" 2>/dev/null; then return; fi
    local root; root="$(mktemp -d /var/tmp/agent-inbox-galera.XXXXXX)"
    chmod 0755 "$root"
    echo "$root" >"$dir/members"
    echo "galera.sh: $user cannot enter $dir; the members live in $root" >&2
}

# mariadb-install-db for member 1, tried twice: a first failure (a clash over a temporary
# table, a slow disk) is logged with its reason and tried once more on a clean folder.
install_system_tables() {
    local home; home="$(home_of 1)"
    local attempt
    for attempt in 1 2; do
        rm -rf "$home/data" "$home/tmp"
        mkdir -p "$home/data" "$home/tmp"
        chown -R "$(run_user)" "$home"
        if mariadb-install-db --no-defaults --datadir="$home/data" --tmpdir="$home/tmp" \
            --user="$(run_user)" --skip-test-db --auth-root-authentication-method=normal \
            >"$home/install.log" 2>&1; then
            return 0
        fi
        echo "galera.sh: mariadb-install-db failed (attempt $attempt of 2):" >&2
        grep -iE 'error|warning|fatal|denied|cannot|can.t' "$home/install.log" | tail -n 15 >&2 \
            || tail -n 15 "$home/install.log" >&2
    done
    return 1
}

start_member() { # member, then extra mariadbd arguments
    local member="$1"; shift
    local home; home="$(home_of "$member")"
    local cluster="gcomm://127.0.0.1:$(port_of 1 gcomm),127.0.0.1:$(port_of 2 gcomm),127.0.0.1:$(port_of 3 gcomm)"
    local user; user="$(run_user)"
    mkdir -p "$home/tmp"
    chown -R "$user" "$home"
    nohup /usr/sbin/mariadbd --no-defaults \
        --datadir="$home/data" --tmpdir="$home/tmp" --socket="$home/mariadbd.sock" --pid-file="$home/mariadbd.pid" \
        --log-error="$home/mariadbd.err" --port="$(port_of "$member" sql)" --bind-address=127.0.0.1 \
        --user="$user" --skip-grant-tables --skip-name-resolve \
        --innodb-buffer-pool-size=64M --innodb-log-file-size=32M --max-connections=300 \
        --binlog-format=ROW --default-storage-engine=InnoDB --innodb-autoinc-lock-mode=2 \
        --innodb-flush-log-at-trx-commit=2 \
        --wsrep-on=ON --wsrep-provider=/usr/lib/galera/libgalera_smm.so \
        --wsrep-cluster-name=agent_inbox_test --wsrep-node-name="member$member" \
        --wsrep-cluster-address="$cluster" --wsrep-node-address="127.0.0.1:$(port_of "$member" gcomm)" \
        --wsrep-provider-options="base_port=$(port_of "$member" gcomm);gmcast.listen_addr=tcp://127.0.0.1:$(port_of "$member" gcomm);ist.recv_addr=127.0.0.1:$(port_of "$member" ist);gcache.size=64M;evs.suspect_timeout=PT3S;evs.inactive_timeout=PT6S;evs.install_timeout=PT6S;pc.wait_prim_timeout=PT10S" \
        --wsrep-sst-method=rsync --wsrep-sst-receive-address="127.0.0.1:$(port_of "$member" sst)" \
        --wsrep-slave-threads=2 \
        "$@" >/dev/null 2>&1 &
}

wait_synced() { # member, deadline (epoch seconds)
    local member="$1" deadline="$2"
    until [ "$(state_of "$member")" = Synced ]; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            echo "galera.sh: member $member is not Synced after ${start_seconds}s; its log ends:" >&2
            tail -n 30 "$(home_of "$member")/mariadbd.err" >&2 || true
            return 1
        fi
        sleep 0.2
    done
}

urls() {
    local out=()
    for m in "${members[@]}"; do out+=("mysql://root@127.0.0.1:$(port_of "$m" sql)/"); done
    (IFS=,; echo "${out[*]}")
}

start() {
    for m in "${members[@]}"; do
        running_pid "$m" >/dev/null && die "member $m is already running (scripts/galera.sh stop $dir)"
    done
    ensure_packages
    local began; began="$(date +%s)"
    local deadline=$((began + start_seconds))
    local base; base="$(choose_ports)"
    remove_private_root
    choose_members_root
    for m in "${members[@]}"; do
        local home offset=$(( (m - 1) * 4 ))
        home="$(home_of "$m")"
        rm -rf "$home"
        mkdir -p "$home/data" "$home/tmp"
        printf 'sql=%s\ngcomm=%s\nist=%s\nsst=%s\n' \
            $((base + offset)) $((base + offset + 1)) $((base + offset + 2)) $((base + offset + 3)) >"$home/ports"
    done
    install_system_tables || { remove_private_root; die "mariadb-install-db failed twice (its log: see above)"; }
    start_member 1 --wsrep-new-cluster
    wait_synced 1 "$deadline" || { stop; exit 1; }
    # One joiner at a time: a donor serves one rsync state transfer at once.
    for m in 2 3; do
        start_member "$m"
        wait_synced "$m" "$deadline" || { stop; exit 1; }
    done
    local size; size="$(client 1 -N -e "SHOW STATUS LIKE 'wsrep_cluster_size'" | cut -f2)"
    [ "$size" = 3 ] || { stop; die "the cluster has $size members, not 3"; }
    urls >"$dir/urls"
    echo "galera.sh: 3 members Synced in $(( $(date +%s) - began ))s; URLs in $dir/urls" >&2
    echo "AGENT_INBOX_TEST_GALERA_URLS=$(urls)"
}

status() {
    for m in "${members[@]}"; do
        local pid; pid="$(running_pid "$m" || true)"
        echo "member$m port=$(port_of "$m" sql) pid=${pid:-none} state=$(state_of "$m" || true)"
    done
}

stop() {
    local pids=()
    for m in "${members[@]}"; do
        local pid; pid="$(running_pid "$m" || true)"
        if [ -n "$pid" ]; then kill -CONT "$pid" 2>/dev/null || true; kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid"); fi
    done
    local deadline=$(( $(date +%s) + 30 ))
    for pid in "${pids[@]}"; do
        while kill -0 "$pid" 2>/dev/null; do
            if [ "$(date +%s)" -ge "$deadline" ]; then kill -KILL "$pid" 2>/dev/null || true; fi
            sleep 0.2
        done
    done
    rm -f "$dir/urls"
    remove_private_root
}

# Removes the private folder under /var/tmp that DIR/members names, if any.
remove_private_root() {
    [ -s "$dir/members" ] || return 0
    local root; root="$(cat "$dir/members")"
    case "$root" in /var/tmp/agent-inbox-galera.*) rm -rf "$root" ;; esac
    rm -f "$dir/members"
}

signal_member() { # member, signal
    local pid; pid="$(running_pid "$1")" || die "member $1 is not running"
    kill "-$2" "$pid"
    if [ "$2" = KILL ]; then while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done; fi
}

restart_member() {
    running_pid "$1" >/dev/null && die "member $1 is still running"
    start_member "$1"
    wait_synced "$1" $(( $(date +%s) + start_seconds ))
}

case "$command_name" in
    start) start ;;
    kill) signal_member "$member_arg" KILL ;;
    pause) signal_member "$member_arg" STOP ;;
    resume) signal_member "$member_arg" CONT ;;
    restart) restart_member "$member_arg" ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: scripts/galera.sh start|stop|status [DIR], or kill|pause|resume|restart N [DIR]" ;;
esac
