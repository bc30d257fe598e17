#!/usr/bin/env bash
# The conformance agent of `agent-inbox listen --exec` (clients/conformance/README.md): listen
# with listen_handler.py as the command, configured from the CONFORMANCE_* environment.
# AGENT_INBOX_BIN names the agent-inbox binary [default: the repository's target/debug/agent-inbox].
#
# The `ready` line is written here, just before exec: listen then runs under this pid, which
# is exported as CONFORMANCE_AGENT_PID so the handler's lines carry it too. listen exits 0 after
# SIGTERM (its documented stop), 3 when superseded, 1 with the reason on stderr otherwise.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
bin="${AGENT_INBOX_BIN:-$repo/target/debug/agent-inbox}"
python="${PYTHON:-python3}"

: "${CONFORMANCE_BASE:?CONFORMANCE_BASE is not set}"
: "${CONFORMANCE_TOKEN:?CONFORMANCE_TOKEN is not set}"
: "${CONFORMANCE_STATE:?CONFORMANCE_STATE is not set}"
: "${CONFORMANCE_LOG:?CONFORMANCE_LOG is not set}"
mkdir -p "$CONFORMANCE_STATE"

handler="$(printf '%q %q' "$python" "$here/listen_handler.py")"
args=(
  listen
  --server "$CONFORMANCE_BASE"
  --state "$CONFORMANCE_STATE/listen.db"
  --no-daemon
  --exec "$handler"
  --on-resync "$handler --resync"
  --retry-after "${CONFORMANCE_RETRY_AFTER:-30s}"
)
[[ -n "${CONFORMANCE_CONCURRENCY:-}" ]] && args+=(--concurrency "$CONFORMANCE_CONCURRENCY")
[[ -n "${CONFORMANCE_TRANSPORT:-}" ]] && args+=(--transport "$CONFORMANCE_TRANSPORT")
[[ -n "${CONFORMANCE_SHUTDOWN_GRACE:-}" ]] && args+=(--shutdown-grace "$CONFORMANCE_SHUTDOWN_GRACE")
[[ -n "${CONFORMANCE_UPGRADE_AFTER:-}" ]] && args+=(--upgrade-after "$CONFORMANCE_UPGRADE_AFTER")

# The token reaches listen's --token through its environment variable, out of the process
# list; listen keeps it out of the commands' environment.
export AGENT_INBOX_TOKEN="$CONFORMANCE_TOKEN"
unset CONFORMANCE_TOKEN
export CONFORMANCE_AGENT_PID=$$

# Unix milliseconds: bash 5's EPOCHREALTIME (microseconds), else python.
if [[ -n "${EPOCHREALTIME:-}" ]]; then
  now_us="${EPOCHREALTIME//[.,]/}"
  now_ms="${now_us:0:${#now_us}-3}"
else
  now_ms="$("$python" -c 'import time; print(int(time.time() * 1000))')"
fi
printf '{"t":%s,"pid":%s,"what":"ready"}\n' "$now_ms" "$$" >>"$CONFORMANCE_LOG"

exec "$bin" "${args[@]}"
