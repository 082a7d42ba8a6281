#!/usr/bin/env bash
# The GPU check and benchmark for a machine with a hardware GPU (e.g. the lent H200):
# the adapter wgpu picks, the GPU test suite against the CPU and the op oracles on that
# driver, then GEMM GFLOP/s and SmolLM2 tokens/s on the GPU. Writes everything to
# ${OUT:-.}/gpu-bench.txt as it goes.
# Usage: tools/bench/gpu.sh   (from the repository root; the model is fetched if missing)
set -uo pipefail
cd "$(dirname "$0")/../.."
log="${OUT:-.}/gpu-bench.txt"
: > "$log"
say() { echo "== $*" | tee -a "$log"; }
run() { say "$*"; "$@" 2>&1 | grep -v XDG_RUNTIME_DIR | tee -a "$log"; }

run nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
ls /usr/share/vulkan/icd.d /etc/vulkan/icd.d 2>&1 | tee -a "$log"
run cargo build --release -p rlx-cli
run ./target/release/rlx info
export RLX_REQUIRE_DEVICE=1
run cargo test --release -p rlx --test gpu
RLX_TEST_DEVICE=gpu run cargo test --release -p rlx --test ops
run ./target/release/rlx bench kernels --device gpu
model="$(./tools/fetch_model.sh)"
run ./target/release/rlx bench llm --device gpu --model "$model"
RLX_GPU_PROFILE=1 run ./target/release/rlx generate --model "$model" -p "The capital of France is" -n 64 --device gpu
say "done"
