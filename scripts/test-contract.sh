#!/usr/bin/env bash
# The API contract: Schemathesis (an independent OpenAPI fuzzer) reads the served
# /openapi.json and checks a real `agent-inbox serve` on SQLite against it, with every check
# (all of them, Schemathesis's default, which `--checks all` on the command line would also
# force on the few operations the configuration below exempts from one check, each with its
# reason: no 5xx, only documented statuses, content types and headers, bodies that
# match their schemas, invalid input refused, valid input accepted, ...), a fixed seed and a
# bounded number of examples per operation. Any failure fails the script.
#
# Creates (or reuses) the virtualenv target/venvs/contract and installs Schemathesis into it
# from the Python package index.
#
# AGENT_INBOX_BIN: the server binary (default target/debug/agent-inbox, built if missing).
# CONTRACT_MAX_EXAMPLES (default 15) and CONTRACT_SEED (default 1) bound and fix the run.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
source "$repo/scripts/lib.sh"
use_agent_inbox_bin test-contract

venv="$repo/target/venvs/contract"
if [ ! -x "$venv/bin/schemathesis" ]; then
    echo "test-contract: creating $venv with Schemathesis" >&2
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "schemathesis>=4.3,<5"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/agent-inbox-contract.XXXXXX")"
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

database="sqlite://$work/contract.db"
# Limits high enough that the fuzzer's request rate and its invalid tokens are not what is
# being measured; a short long-poll ceiling so `wait_seconds` cases end quickly.
export AGENT_INBOX_LOG=warn \
    AGENT_INBOX_TENANT_REQUESTS_PER_SECOND=100000 AGENT_INBOX_TENANT_REQUESTS_BURST=100000 \
    AGENT_INBOX_AGENT_REQUESTS_PER_SECOND=100000 AGENT_INBOX_AGENT_REQUESTS_BURST=100000 \
    AGENT_INBOX_AUTH_FAILURES_PER_MINUTE=1000000 AGENT_INBOX_WAITERS_PER_AGENT=64
unset AGENT_INBOX_DATABASE_URL AGENT_INBOX_CONFIG
"$AGENT_INBOX_BIN" serve --listen 127.0.0.1:0 --database-url "$database" --long-poll-wait-max 1s \
    >"$work/serve.out" 2>"$work/serve.log" &
server_pid=$!
base=""
for _ in $(seq 1 300); do
    base="$(sed -n 's/^agent-inbox listening on \([^ ]*\).*/\1/p' "$work/serve.log" 2>/dev/null | head -1)"
    [ -n "$base" ] && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
    sleep 0.1
done
[ -n "$base" ] || { echo "test-contract: the server did not start" >&2; cat "$work/serve.log" >&2; exit 1; }

token() { "$AGENT_INBOX_BIN" token issue --database-url "$database" --tenant contract "$@"; }
export CONTRACT_AGENT="$(token --subject agent_alpha \
    --scope "inbox.poll inbox.claim inbox.ack inbox.release inbox.heartbeat stream.subscribe callback.register callback.rotate events.handoff")"
export CONTRACT_PUBLISHER="$(token --subject contract_app --kind publisher)"
export CONTRACT_ADMIN="$(token --subject operator --kind admin)"

# Each operation is called with the token of who may call it.
cat >"$work/schemathesis.toml" <<'EOF'
headers = { Authorization = "Bearer ${CONTRACT_AGENT}" }
# Seed 000's routes name the agent in the path: the token's agent.
parameters = { agent_id = "agent_alpha" }

[[operations]]
include-path-regex = "^/v1/(events|rooms)"
headers = { Authorization = "Bearer ${CONTRACT_PUBLISHER}" }

[[operations]]
include-path-regex = "^/v1/admin/"
headers = { Authorization = "Bearer ${CONTRACT_ADMIN}" }

# Rules no JSON Schema can state, so schema-valid input the server rightly refuses: an expiry
# after the availability time (in a publish, or in an acknowledgement's follow-ups, which are
# publishes); a body naming the same agent as the path; real ed25519 key material.
[[operations]]
include-name = ["POST /v1/events", "POST /v1/inbox/acknowledge"]
checks.positive_data_acceptance.enabled = false

[[operations]]
include-name = "POST /api/v1/agents/{agent_id}/callbacks"
checks.positive_data_acceptance.enabled = false

[[operations]]
include-name = "POST /v1/agent-keys"
checks.positive_data_acceptance.enabled = false

# Callback hosts must resolve (and to public addresses): generated host names do not.
[[operations]]
include-name = ["POST /v1/callback-registrations"]
checks.positive_data_acceptance.enabled = false

# Free text limited in bytes of UTF-8 (a room's name, a release's reason): JSON Schema counts
# characters, so a schema-valid text of many multi-byte characters is refused.
[[operations]]
include-name = ["POST /v1/inbox/release", "POST /api/v1/agents/{agent_id}/inbox/{event_id}/release", "POST /v1/rooms"]
checks.positive_data_acceptance.enabled = false

# The room name's bounds (see above).
[[operations]]
include-name = "POST /v1/rooms"
checks.negative_data_rejection.enabled = false
EOF

echo "test-contract: schemathesis against $base" >&2
# Streams never end by design (SSE, WebSocket upgrades, seed 000's subscribe): their documents
# are checked by the server's own tests, not by a fuzzer that waits for a complete body. The A2A
# JSON-RPC interface answers refused input as JSON-RPC errors with HTTP 200, as A2A's binding
# says (and two of its methods stream): it is tested by the server's tests and the official A2A
# SDKs (scripts/test-a2a.sh); its public card is fuzzed like any route.
status=0
timeout --signal=INT 600 "$venv/bin/schemathesis" --config-file "$work/schemathesis.toml" run "$base/openapi.json" \
    --seed "${CONTRACT_SEED:-1}" \
    --max-examples "${CONTRACT_MAX_EXAMPLES:-15}" \
    --exclude-path-regex '^/v1/streams/(sse|ws)$|^/api/v1/agents/\{agent_id\}/subscribe$|^/a2a/\{tenant_id\}/\{agent_id\}$' \
    --request-timeout 10 \
    --workers 1 \
    --no-color \
    "$@" || status=$?
if [ "$status" -ne 0 ]; then
    echo "test-contract: schemathesis found failures (exit $status); server log:" >&2
    tail -50 "$work/serve.log" >&2
fi
exit "$status"
