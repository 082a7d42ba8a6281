#!/usr/bin/env python3
"""onnxruntime's side of the MLP row of `rlx bench kernels`: the forward pass of
x[B, D] -> MatMul W1[D, H] + b1 -> Gelu (erf) -> MatMul W2[H, D] + b2, f32, built with
onnx.helper (opset 20, whose Gelu is the erf form RLX's Unary::Gelu computes). Prints one
JSON object: milliseconds per run at each thread count, measured as RLX's
`bench::seconds_per_call` measures (the best of 5 runs of at least 30 ms each, after a
warm-up).

Must match the graph in crates/backends/rlx-cpu/src/bench.rs (mlp_program_ms).
Needs `pip install onnx onnxruntime numpy`.
"""
import argparse
import json
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--dim", type=int, default=768)
ap.add_argument("--hidden", type=int, default=3072)
ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
args = ap.parse_args()

rng = np.random.default_rng(0)
b, d, h = args.batch, args.dim, args.hidden
w1 = (rng.random((d, h), dtype=np.float32) - 0.5) * (2 / d**0.5)
b1 = (rng.random(h, dtype=np.float32) - 0.5) * 0.1
w2 = (rng.random((h, d), dtype=np.float32) - 0.5) * (2 / h**0.5)
b2 = (rng.random(d, dtype=np.float32) - 0.5) * 0.1
nodes = [
    helper.make_node("MatMul", ["x", "w1"], ["h0"]),
    helper.make_node("Add", ["h0", "b1"], ["h1"]),
    helper.make_node("Gelu", ["h1"], ["h2"]),
    helper.make_node("MatMul", ["h2", "w2"], ["y0"]),
    helper.make_node("Add", ["y0", "b2"], ["y"]),
]
graph = helper.make_graph(
    nodes,
    "mlp",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, d])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, d])],
    [numpy_helper.from_array(a, n) for a, n in [(w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2")]],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
onnx.checker.check_model(model)
x = rng.random((b, d), dtype=np.float32) - 0.5

result = {}
for threads in args.threads:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    session.run(None, {"x": x})
    best = float("inf")
    for _ in range(5):
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < 0.03:
            session.run(None, {"x": x})
            calls += 1
        best = min(best, (time.perf_counter() - start) / calls)
    result[str(threads)] = best * 1e3
print(json.dumps({"onnxruntime": ort.__version__, "ms": result}))
