#!/usr/bin/env bash
# Fetches the onnx==1.22.0 wheel from PyPI and unpacks its backend node test suite
# (onnx/backend/test/data/node/**) into ${RLX_MODELS:-~/.cache/rlx}/onnx-1.22.0/node/
# and the schema (onnx.proto3 or onnx.proto, onnx-data.proto3 or onnx-data.proto) into
# .../onnx-1.22.0/proto/. Prints the node dir. Idempotent: a `.complete` marker is written
# last, so a half-unpacked tree is removed and redone.
set -euo pipefail
ver="1.22.0"
root="${RLX_MODELS:-$HOME/.cache/rlx}/onnx-$ver"
node="$root/node"
if [ ! -f "$root/.complete" ]; then
    rm -rf "$node" "$root/proto"
    mkdir -p "$root"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download --no-deps --quiet --disable-pip-version-check \
        --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64 \
        "onnx==$ver" -d "$tmp" >&2
    python3 - "$tmp" "$root" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, root = sys.argv[1:]
wheel = glob.glob(f"{tmp}/onnx-*.whl")[0]
prefix = "onnx/backend/test/data/node/"
with zipfile.ZipFile(wheel) as z:
    names = set(z.namelist())
    def extract(member, dest):
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with z.open(member) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out)
    n = 0
    for member in sorted(names):
        if member.startswith(prefix) and not member.endswith("/"):
            rel = member[len(prefix):]
            if ".." in rel.split("/"):
                sys.exit(f"refusing suspicious path {member}")
            extract(member, os.path.join(root, "node", rel))
            n += 1
    if n == 0:
        sys.exit(f"no {prefix} files in {wheel}")
    for base in ("onnx", "onnx-data"):
        for ext in (".proto3", ".proto"):
            member = f"onnx/{base}{ext}"
            if member in names:
                extract(member, os.path.join(root, "proto", base + ext))
                break
        else:
            sys.exit(f"no onnx/{base}.proto3 or .proto in {wheel}")
PY
    touch "$root/.complete"
fi
echo "$node"
