#!/usr/bin/env python3
"""Counts the ONNX backend node-test dirs per op type and writes tools/onnx/node_suite_ops.txt.

    NODE=$(tools/fetch_onnx_tests.sh)
    /tmp/ortvenv/bin/python tools/onnx/node_suite_stats.py "$NODE"

A test's op type is the op type of the single node in its model.onnx (domain-qualified when not
the default domain); test dirs ending in `_expanded` or `_expanded_verNN` (the op written out as a function body of
several nodes) all count under "expanded". Sorted by count (descending), then name.
"""
import collections
import os
import sys

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    default = os.path.join(os.environ.get("RLX_MODELS", os.path.expanduser("~/.cache/rlx")), "onnx-1.22.0", "node")
    node_dir = sys.argv[1] if len(sys.argv) > 1 else default
    out_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "node_suite_ops.txt")
    counts = collections.Counter()
    multi = []
    tests = sorted(d for d in os.listdir(node_dir) if os.path.isfile(os.path.join(node_dir, d, "model.onnx")))
    for test in tests:
        if test.endswith("_expanded") or "_expanded_" in test:
            counts["expanded"] += 1
            continue
        g = onnx.load(os.path.join(node_dir, test, "model.onnx"), load_external_data=False).graph
        ops = sorted({n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}" for n in g.node})
        if len(g.node) != 1:
            multi.append((test, len(g.node), ops))
        counts["+".join(ops)] += 1
    lines = [f"# onnx 1.22.0 backend node tests: {len(tests)} test dirs, {len(counts)} op types",
             "# count  op_type  (tests ending in _expanded or _expanded_verNN count under 'expanded')"]
    lines += [f"{c:5d}  {op}" for op, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    if multi:
        lines.append(f"# {len(multi)} non-expanded tests with more than one node (counted under the '+'-joined ops):")
        lines += [f"#   {t}: {n} nodes {ops}" for t, n, ops in multi]
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(tests)} test dirs, {len(counts)} op types ({counts['expanded']} expanded) -> {out_path}")


if __name__ == "__main__":
    main()
