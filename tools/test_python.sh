#!/usr/bin/env bash
# The Python package's tests: a virtualenv with crates/rlx-py/requirements-test.txt
# (${RLX_MODELS:-~/.cache/rlx}/py-venv, reinstalled when the requirements change),
# `pip install ./crates/rlx-py` (a release build of the extension through maturin), then
# pytest over crates/rlx-py/tests and crates/rlx-serve/tests (`rlx serve` driven by the
# openai client). tools/test.sh runs it after the Rust suites, whose debug `rlx` binary
# the LLM and server tests run. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null || { echo "tools/test_python.sh needs python3 (>= 3.9) with venv" >&2; exit 1; }
# Debian's own python3 ships venv / ensurepip separately.
if ! python3 -c "import ensurepip, venv" 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    else
        echo "tools/test_python.sh needs python3's venv module (apt-get install python3-venv)" >&2
        exit 1
    fi
fi
cache="${RLX_MODELS:-$HOME/.cache/rlx}"
venv="$cache/py-venv"
req=crates/rlx-py/requirements-test.txt
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$req" "$venv/.requirements"; then
    mkdir -p "$cache"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    cp "$req" "$venv/.requirements"
fi
start=$(date +%s)
"$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps ./crates/rlx-py
echo "tools/test_python.sh: wheel built and installed in $(( $(date +%s) - start )) s"
"$venv/bin/python" -m pytest -q crates/rlx-py/tests crates/rlx-serve/tests "$@"
