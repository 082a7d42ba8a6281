#!/usr/bin/env bash
# Builds llama.cpp (through the llama-cpp-python package, for this machine's CPU) into a
# cached virtualenv and prints the path of its python. `rlx bench llm` calls this when
# asked to compare; the build takes ~9 minutes on 2 cores, so it is cached.
#   cache: ${RLX_MODELS:-~/.cache/rlx}/llama-cpp-venv
set -euo pipefail
cache="${RLX_MODELS:-$HOME/.cache/rlx}"
venv="$cache/llama-cpp-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
    mkdir -p "$cache"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q --upgrade pip >&2
    # GGML_NATIVE: compiled for this CPU (AVX-512 here), as a llama.cpp user would build it.
    CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_OPENMP=OFF" "$venv/bin/pip" install -q --no-cache-dir llama-cpp-python >&2
fi
echo "$venv/bin/python"
