#!/usr/bin/env bash
# Runs the README's walk-through, word for word, so the README cannot drift from the product:
# the shell blocks marked `<!-- readme-test: serve | walkthrough | agent | llm -->` are taken out of
# README.md and run in order in a fresh directory, with `agent-inbox` on the PATH as the README
# sets it up. The only change made to them is the port (a free one instead of 8080, which may
# be taken). Fails on any command that fails or any answer of 400 or more.
#
# AGENT_INBOX_BIN: the binary (default target/debug/agent-inbox, built if missing).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
source "$repo/scripts/lib.sh"
use_agent_inbox_bin test-readme
for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "test-readme: the README's commands need $tool" >&2; exit 1; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/agent-inbox-readme.XXXXXX")"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# `agent-inbox` on the PATH, as `cargo install` would put it.
mkdir -p "$work/bin" "$work/run"
ln -s "$AGENT_INBOX_BIN" "$work/bin/agent-inbox"
export PATH="$work/bin:$PATH"
export AGENT_INBOX_HOME="$work/home" AGENT_INBOX_SECRET_STORE=file AGENT_INBOX_LOG=warn
unset AGENT_INBOX_DATABASE_URL AGENT_INBOX_CONFIG AGENT_INBOX_TOKEN AGENT_INBOX_SERVER AGENT_INBOX_PROFILE

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

# The shell block after `<!-- readme-test: NAME -->`, on port $port.
block() {
    awk -v name="$1" '
        $0 == "<!-- readme-test: " name " -->" { marked = 1; next }
        marked && /^```sh$/ { inside = 1; next }
        inside && /^```$/ { exit }
        inside { print }
    ' "$repo/README.md" | sed "s/:8080/:$port/g"
}
for name in serve walkthrough agent llm; do
    [ -n "$(block "$name")" ] || { echo "test-readme: README.md has no '$name' block" >&2; exit 1; }
done

wait_for() { # description, seconds, command...
    local what="$1" seconds="$2"; shift 2
    local deadline=$((SECONDS + seconds))
    until "$@"; do
        if [ "$SECONDS" -ge "$deadline" ]; then echo "test-readme: $what within ${seconds}s" >&2; return 1; fi
        sleep 0.2
    done
}

cd "$work/run"
echo "test-readme: serve" >&2
AGENT_INBOX_LISTEN="127.0.0.1:$port" bash -c "$(block serve)" >"$work/serve.log" 2>&1 &
pids+=($!)
wait_for "the server says it listens" 60 grep -qs "agent-inbox listening on" "$work/serve.log" \
    || { cat "$work/serve.log" >&2; exit 1; }

# The walk-through and the agent, in one shell as a person would paste them. Every request
# must succeed; the long-running `listen` goes to the background.
echo "test-readme: walk-through and agent" >&2
{
    echo 'set -euo pipefail'
    echo 'curl() { command curl --fail-with-body "$@"; }'
    block walkthrough
    block agent | sed 's/^\(agent-inbox listen .*\)$/\1 >"$LISTEN_LOG" 2>\&1 \& echo $! >"$LISTEN_PID_FILE"/'
    block llm | sed 's/^\(agent-inbox listen .*\)$/\1 >"$LLM_LOG" 2>\&1 \& echo $! >"$LLM_PID_FILE"/'
    # Checks of what the commands left behind, not part of the README.
    echo 'command curl -sf "localhost:'"$port"'/v1/events" -H "authorization: Bearer $APP" -H "content-type: application/json" -d "{\"recipients\":[\"agent_alpha\"],\"event_type\":\"readme.check\",\"payload\":{\"n\":1}}" >/dev/null'
    echo 'command curl -sf "localhost:'"$port"'/v1/events" -H "authorization: Bearer $APP" -H "content-type: application/json" -d "{\"recipients\":[\"agent_llm\"],\"event_type\":\"readme.llm\",\"payload\":{\"n\":1}}" >/dev/null'
} >"$work/walkthrough.sh"
# The LLM recipe's model: a stand-in that keeps the events it was given and acknowledges each.
cat >"$work/bin/stand-in-llm" <<'EOF'
#!/bin/sh
grep '^{"event_id":"' | tee -a llm-events.jsonl | jq -c '{event_id, outcome: "ack"}'
EOF
chmod +x "$work/bin/stand-in-llm"
LISTEN_LOG="$work/listen.log" LISTEN_PID_FILE="$work/listen.pid" \
LLM_LOG="$work/llm.log" LLM_PID_FILE="$work/llm.pid" LLM_CLI=stand-in-llm \
    bash "$work/walkthrough.sh" >"$work/walkthrough.out" 2>&1 || {
        echo "test-readme: the walk-through failed:" >&2
        cat "$work/walkthrough.out" "$work/serve.log" >&2
        exit 1
    }
[ -f "$work/listen.pid" ] && pids+=("$(cat "$work/listen.pid")")
[ -f "$work/llm.pid" ] && pids+=("$(cat "$work/llm.pid")")
# curl prints answers without a final newline: the status code ends a line of its own output.
grep -qE '(^|[]}])304$' "$work/walkthrough.out" \
    || { echo "test-readme: the If-None-Match request did not answer 304:" >&2; cat "$work/walkthrough.out" >&2; exit 1; }
grep -q '"deduplication_key":"msg:room_7:1"' "$work/walkthrough.out" \
    || { echo "test-readme: the poll did not show the published event" >&2; cat "$work/walkthrough.out" >&2; exit 1; }
grep -q '"ack_state":"acked","follow_ups":\[{"deliveries":\[{"recipient_kind":"agent","recipient_id":"agent_beta"' "$work/walkthrough.out" \
    || { echo "test-readme: the acknowledgement did not hand off to agent_beta" >&2; cat "$work/walkthrough.out" >&2; exit 1; }
wait_for "listen ran handle-event.sh for the published event" 60 \
    grep -qs '"event_type":"readme.check"' "$work/run/handled-events.jsonl" \
    || { cat "$work/listen.log" >&2; exit 1; }
wait_for "the LLM recipe's batch command got the published event" 60 \
    grep -qs '"event_type":"readme.llm"' "$work/run/llm-events.jsonl" \
    || { cat "$work/llm.log" >&2; exit 1; }
echo "test-readme: ok (the README's serve, walk-through and agent commands work as written)" >&2
