#!/usr/bin/env bash
# The whole test suite: formatting, lints, every crate's tests and doc tests.
# README.md's test command and CI (.ci/run) both run exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# The suite needs only the Rust toolchain (cargo, rustfmt, clippy) for now; later
# capabilities install their tools here (apt-get update first).
command -v cargo >/dev/null || { echo "cargo not found: install Rust from https://rustup.rs" >&2; exit 1; }

start=$(date +%s)
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
echo "tools/test.sh: all green in $(( $(date +%s) - start )) s"
