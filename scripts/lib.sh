# Shared by the test scripts (sourced, not run): the server binary, Node and Debian packages.

# Exports AGENT_INBOX_BIN as an absolute path (default target/debug/agent-inbox, built when
# missing); $1 names the script in messages.
use_agent_inbox_bin() {
    local repo
    repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    AGENT_INBOX_BIN="${AGENT_INBOX_BIN:-$repo/target/debug/agent-inbox}"
    if [ ! -x "$AGENT_INBOX_BIN" ]; then
        echo "$1: building $AGENT_INBOX_BIN" >&2
        (cd "$repo" && cargo build -q -p agent-inbox)
    fi
    [ -x "$AGENT_INBOX_BIN" ] || { echo "$1: AGENT_INBOX_BIN=$AGENT_INBOX_BIN is not an executable" >&2; exit 1; }
    AGENT_INBOX_BIN="$(cd "$(dirname "$AGENT_INBOX_BIN")" && pwd)/$(basename "$AGENT_INBOX_BIN")"
    export AGENT_INBOX_BIN
}

# Fails unless Node 20 or newer is on the PATH; $1 says what needs it.
require_node_20() {
    if ! command -v node >/dev/null || [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
        echo "$1 needs Node 20 or newer (found: $(node --version 2>/dev/null || echo none))" >&2
        exit 1
    fi
}

# Installs, with apt-get, those of the Debian packages named whose command is missing; each
# argument is PACKAGE or PACKAGE:COMMAND (a path or a name on the PATH).
install_missing_packages() {
    local missing=() spec package command
    for spec in "$@"; do
        package="${spec%%:*}"
        command="${spec#*:}"
        if [[ "$command" == /* ]]; then
            [ -x "$command" ] || missing+=("$package")
        else
            command -v "$command" >/dev/null || missing+=("$package")
        fi
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "installing ${missing[*]} with apt-get" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}
