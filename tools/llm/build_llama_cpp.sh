#!/usr/bin/env bash
# Builds llama.cpp's command-line tools (llama-cli, llama-bench, llama-perplexity,
# llama-quantize, llama-tokenize, llama-server, llama-embedding) from the source vendored in the
# llama_cpp_python sdist on PyPI, for this machine's CPU, and prints their folder.
# Used only to make fixtures and to measure against; tests never need it.
#   cache: ${RLX_MODELS:-~/.cache/rlx}/llama.cpp  (~10 minutes on 2 cores the first time)
set -euo pipefail
cache="${RLX_MODELS:-$HOME/.cache/rlx}"
root="$cache/llama.cpp"
bin="$root/build/bin"
tools=(llama-cli llama-bench llama-perplexity llama-quantize llama-tokenize llama-server llama-embedding)
if [ ! -x "$bin/llama-tokenize" ] || [ ! -x "$bin/llama-perplexity" ] || [ ! -x "$bin/llama-server" ] \
    || [ ! -x "$bin/llama-embedding" ]; then
    mkdir -p "$root"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    python3 -m venv "$root/venv" >&2
    "$root/venv/bin/pip" install -q cmake ninja >&2
    # The sdist itself (pip download would build its build-dependencies from source).
    "$root/venv/bin/python" - "$tmp" <<'PY'
import json, sys, urllib.parse, urllib.request
index = "https://pypi.org/pypi/llama-cpp-python/json"
info = json.load(urllib.request.urlopen(index))
(url,) = [u["url"] for u in info["urls"] if u["packagetype"] == "sdist"]
name = url.rsplit("/", 1)[1]
urllib.request.urlretrieve(urllib.parse.urljoin(index, url), f"{sys.argv[1]}/{name}")
PY
    tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
    rm -rf "$root/src"
    mv "$tmp"/llama_cpp_python-*/vendor/llama.cpp "$root/src"
    export PATH="$root/venv/bin:$PATH"
    # GGML_NATIVE: built for this CPU, as a llama.cpp user would build it.
    cmake -S "$root/src" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=ON -DGGML_OPENMP=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >&2
    cmake --build "$root/build" --target "${tools[@]}" -j "$(nproc)" >&2
fi
echo "$bin"
