#!/usr/bin/env bash
# Generates the TypeScript and Python clients' wire types from the server's OpenAPI document
# (openapi.json at the repository root), so they cannot drift from it:
#   clients/typescript/src/openapi.ts           by openapi-typescript (pinned in package.json),
#                                               from the document's schemas
#   clients/python/src/agent_inbox/_openapi.py  by datamodel-code-generator (pinned in
#                                               clients/python/requirements-codegen.txt)
#   clients/typescript/src/limits.ts,           the service's bounds the SDKs' own code uses
#   clients/python/src/agent_inbox/_limits.py   (LIMITS below), read from the schemas that state them
# The SDKs' own modules (src/wire.ts, _models.py) name what they use from these files.
#
#   scripts/generate-wire-types.sh [--check] [typescript|python]...
#
# With --check nothing is written: it fails, naming the file, when regenerating would change a
# committed file by a byte (the test scripts run this). Without a language, both. The
# generators are installed when missing: the TypeScript one by `npm ci` in clients/typescript,
# the Python one into the virtualenv target/venvs/codegen.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
check=false
languages=()
for arg in "$@"; do
    case "$arg" in
        --check) check=true ;;
        typescript | python) languages+=("$arg") ;;
        *) echo "generate-wire-types: unknown argument $arg (--check, typescript, python)" >&2; exit 2 ;;
    esac
done
[ ${#languages[@]} -gt 0 ] || languages=(typescript python)

# The bounds the SDKs' own code needs as numbers (fitting a reason, capping a retry delay, sizing
# a claim), each the name it gets and where openapi.json states it; the server's types state
# them there (inbox_core::limits), so no SDK writes one itself.
LIMITS=(
    "REASON_BYTES_MAX components.schemas.AckEntry.properties.reason.maxLength"
    "RETRY_AFTER_SECONDS_MAX components.schemas.ReleaseRequest.properties.retry_after_seconds.maximum"
    "BATCH_EVENTS_MAX components.schemas.ClaimRequest.properties.limit.maximum"
)

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
failed=0

# Writes $2 (a generated file in $scratch) to $1, or with --check compares them.
settle() {
    local committed="$1" generated="$2"
    if $check; then
        if ! cmp -s "$committed" "$generated"; then
            echo "generate-wire-types: ${committed#"$repo"/} is not what openapi.json generates;" \
                "run scripts/generate-wire-types.sh and commit the result" >&2
            diff -u "$committed" "$generated" | head -40 >&2 || true
            failed=1
        fi
    else
        cp "$generated" "$committed"
        echo "generate-wire-types: wrote ${committed#"$repo"/}" >&2
    fi
}

typescript() {
    local dir="$repo/clients/typescript"
    [ -x "$dir/node_modules/.bin/openapi-typescript" ] ||
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    local out="$scratch/openapi.ts"
    # Only the document's schemas: the client calls its routes by hand, and the operations'
    # types would add thousands of lines it does not use (and collide where two routes share an
    # operationId, as the seed 000 aliases do).
    node -e 'const fs = require("node:fs"); const d = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
        fs.writeFileSync(process.argv[2], JSON.stringify({ openapi: d.openapi, info: d.info, paths: {}, components: { schemas: d.components.schemas } }));' \
        "$repo/openapi.json" "$scratch/schemas.json"
    {
        echo "// Generated from openapi.json's components.schemas by scripts/generate-wire-types.sh"
        echo "// (openapi-typescript --root-types --root-types-no-schema-prefix --empty-objects-unknown):"
        echo "// do not edit. src/wire.ts names the types the client uses."
        (cd "$dir" && ./node_modules/.bin/openapi-typescript "$scratch/schemas.json" \
            --root-types --root-types-no-schema-prefix --empty-objects-unknown --output "$scratch/raw.ts" >/dev/null 2>&1) ||
            { echo "generate-wire-types: openapi-typescript failed" >&2; exit 1; }
        cat "$scratch/raw.ts"
    } >"$out"
    settle "$dir/src/openapi.ts" "$out"
    node -e 'const fs = require("node:fs"); const d = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
        const lines = ["// Generated from openapi.json by scripts/generate-wire-types.sh: do not edit. The service'"'"'s",
            "// bounds the client'"'"'s own code uses, each read from the schema that states it."];
        for (const entry of process.argv.slice(3)) {
            const [name, path] = entry.split(" ");
            const value = path.split(".").reduce((at, key) => at?.[key], d);
            if (!Number.isInteger(value)) throw new Error(`openapi.json states no whole number at ${path}`);
            lines.push("", `/** \`${path}\` */`, `export const ${name} = ${value};`);
        }
        fs.writeFileSync(process.argv[2], lines.join("\n") + "\n");' \
        "$repo/openapi.json" "$scratch/limits.ts" "${LIMITS[@]}"
    settle "$dir/src/limits.ts" "$scratch/limits.ts"
}

python() {
    local venv="$repo/target/venvs/codegen"
    local requirements="$repo/clients/python/requirements-codegen.txt"
    if [ ! -x "$venv/bin/python" ]; then
        "${PYTHON:-python3}" -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
    local out="$scratch/_openapi.py"
    # The header names the command, not the input's path (datamodel-codegen's own header would).
    "$venv/bin/datamodel-codegen" --input "$repo/openapi.json" --input-file-type openapi \
        --output-model-type dataclasses.dataclass --keyword-only --target-python-version 3.10 \
        --enum-field-as-literal all --use-union-operator --use-standard-collections \
        --use-schema-description --use-field-description --disable-timestamp --formatters builtin \
        --custom-file-header '"""Generated from openapi.json by scripts/generate-wire-types.sh (datamodel-codegen,
dataclasses, keyword-only): do not edit. _models.py names the types the SDK uses."""' \
        --output "$out"
    settle "$repo/clients/python/src/agent_inbox/_openapi.py" "$out"
    "$venv/bin/python" - "$repo/openapi.json" "$scratch/_limits.py" "${LIMITS[@]}" <<'PY'
import json, sys
document = json.load(open(sys.argv[1]))
lines = ['"""Generated from openapi.json by scripts/generate-wire-types.sh: do not edit. The service\'s',
         'bounds the SDK\'s own code uses, each read from the schema that states it."""']
for entry in sys.argv[3:]:
    name, path = entry.split(" ")
    value = document
    for key in path.split("."):
        value = value[key]
    if not isinstance(value, int):
        sys.exit(f"openapi.json states no whole number at {path}")
    lines += ["", f"#: ``{path}``", f"{name} = {value}"]
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
PY
    settle "$repo/clients/python/src/agent_inbox/_limits.py" "$scratch/_limits.py"
}

for language in "${languages[@]}"; do
    "$language"
done
exit "$failed"
