#!/usr/bin/env bash
# The Python SDK's checks: the generated wire types against openapi.json, mypy --strict on the
# package, then pytest against the real `agent-inbox serve` on SQLite and MariaDB (the shared
# decision vectors among the tests). Creates (or reuses) the virtualenv target/venvs/python and
# installs the package with its test extras from PyPI, and the pinned generator into
# target/venvs/codegen.
#
# AGENT_INBOX_BIN: the server binary (default target/debug/agent-inbox, built if missing).
# AGENT_INBOX_TEST_MYSQL_URL: MariaDB for the tests (default mysql://root@127.0.0.1:3306/test).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"

source "$repo/scripts/lib.sh"
use_agent_inbox_bin test-python

venv="$repo/target/venvs/python"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    echo "test-python: creating $venv" >&2
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$repo/clients/python[test]"
# The same version number as last time is still a new build: install this tree's code.
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$repo/clients/python"

# The wire types are generated from openapi.json: the committed file must be what it gives.
echo "test-python: the wire types are what openapi.json generates" >&2
"$repo/scripts/generate-wire-types.sh" --check python

cd "$repo/clients/python"
echo "test-python: mypy --strict" >&2
"$venv/bin/python" -m mypy --strict --no-incremental -p agent_inbox \
    --python-executable "$venv/bin/python"
# The tests, the benchmark and the example are held to the same standard.
"$venv/bin/python" -m mypy --strict --no-incremental tests bench
"$venv/bin/python" -m mypy --strict --no-incremental examples
echo "test-python: pytest" >&2
# Every test has its own time limit (pytest-timeout); the whole run is bounded as well.
timeout --signal=INT 270 "$venv/bin/python" -m pytest -p no:cacheprovider -q --timeout 90 tests
