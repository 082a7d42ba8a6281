#!/usr/bin/env python3
"""Times onnxruntime (CPUExecutionProvider, default graph optimizations) on one model.

    /tmp/ortvenv/bin/python tools/onnx/bench_ort.py MODEL.onnx --shape input_ids=1x128 \
        --shape attention_mask=1x128 --threads 1 --runs 20

Inputs are deterministic (seed 0): int64 inputs whose name contains "mask" are ones, other int64
inputs are ids in [1000, 2000); float inputs are standard normal. Every graph input must get a
--shape unless its shape is fully static in the model (or it is a scalar). Warm-up runs first,
then prints one JSON line with the median wall time of --runs runs.

With --serve the session stays open: after the warm-up it prints {"ready": true}, then for
each line "N MS" read from stdin runs untimed for MS milliseconds, then times N runs and prints
{"times_ms": [...]}, until stdin closes.
`rlx bench onnx` drives it so that its rounds and onnxruntime's alternate (this VM's speed
moves by 30% from one 60 ms stretch to the next: figures measured apart do not compare).
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort

DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
          "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}


def parse_shape(text):
    name, _, dims = text.partition("=")
    if not name or not dims:
        raise argparse.ArgumentTypeError(f"expected name=AxBxC, got {text!r}")
    return name, [int(d) for d in dims.lower().split("x")] if dims != "scalar" else []


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--shape", type=parse_shape, action="append", default=[], metavar="NAME=AxB")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--serve", action="store_true", help="time N runs per line of stdin (see above)")
    args = ap.parse_args()

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(args.model, sess_options=opts, providers=["CPUExecutionProvider"])
    shapes = dict(args.shape)
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in sess.get_inputs():
        shape = shapes.pop(inp.name, None)
        if shape is None:
            if not all(isinstance(d, int) and d > 0 for d in inp.shape):
                ap.error(f"input {inp.name!r} has shape {inp.shape}; pass --shape {inp.name}=...")
            shape = list(inp.shape)
        dtype = DTYPES[inp.type]
        if np.issubdtype(dtype, np.integer):
            x = (np.ones(shape, dtype) if "mask" in inp.name.lower()
                 else rng.integers(1000, 2000, size=shape).astype(dtype))
        elif dtype == np.bool_:
            x = np.ones(shape, dtype)
        else:
            x = rng.standard_normal(shape).astype(dtype)
        feeds[inp.name] = x
    if shapes:
        ap.error(f"unknown inputs {sorted(shapes)}; model inputs are {[i.name for i in sess.get_inputs()]}")

    for _ in range(args.warmup):
        sess.run(None, feeds)
    if args.serve:
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            runs, settle_ms = (int(word) for word in line.split())
            settle_end = time.perf_counter() + settle_ms / 1e3
            while time.perf_counter() < settle_end:
                sess.run(None, feeds)
            times = timed_runs(sess, feeds, runs)
            print(json.dumps({"times_ms": [round(t, 4) for t in times]}), flush=True)
        return
    times = timed_runs(sess, feeds, args.runs)
    print(json.dumps({
        "model": os.path.basename(args.model),
        "threads": args.threads,
        "median_ms": round(statistics.median(times), 3),
        "min_ms": round(min(times), 3),
        "runs": args.runs,
        "shapes": {k: "x".join(map(str, v.shape)) for k, v in feeds.items()},
        "onnxruntime": ort.__version__,
    }))


def timed_runs(sess, feeds, runs):
    """Wall milliseconds of each of `runs` runs."""
    times = []
    for _ in range(max(runs, 1)):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


if __name__ == "__main__":
    main()
