#!/usr/bin/env bash
# Creates (once) a virtualenv with onnxruntime, onnx and numpy pinned by
# tools/onnx/requirements.txt and prints the path of its python. `rlx bench onnx` runs
# tools/onnx/bench_ort.py with it; the fixture generator uses the same versions.
#   cache: ${RLX_MODELS:-~/.cache/rlx}/ort-venv
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${RLX_MODELS:-$HOME/.cache/rlx}"
venv="$cache/ort-venv"
stamp="$venv/.requirements"
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$here/requirements.txt" "$stamp"; then
    mkdir -p "$cache"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt" >&2
    cp "$here/requirements.txt" "$stamp"
fi
echo "$venv/bin/python"
