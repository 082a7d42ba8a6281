"""The Python package's overheads, each beside its anchor measured in the same run:

1. `Compiled.run` on a 1-element graph (y = x + 1): the whole per-call cost of crossing
   from Python (dict + array in, array out, GIL released) into the compiled program;
   beside it onnxruntime's `InferenceSession.run` on the same 1-element Add model.
2. `rlx.Llama` greedy decode tok/s against `rlx generate` (the release CLI) on the same
   model, prompt, token count and threads.

    ~/.cache/rlx/py-venv/bin/python tools/bench/python.py [--model M.gguf] [--cli target/release/rlx]

Prints a table and the CPU model; figures go to docs/performance.md by hand.
"""

import argparse
import os
import pathlib
import re
import statistics
import subprocess
import time

import numpy as np

import rlx

ROOT = pathlib.Path(__file__).resolve().parents[2]


def per_call_us(f, calls=20000, repeats=7):
    """Median over `repeats` batches of the mean time of one call, microseconds."""
    for _ in range(1000):
        f()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            f()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def overhead():
    g = rlx.Graph("one")
    x = g.input("x", rlx.float32, (1,))
    g.set_outputs([x + 1.0])
    c = g.compile(threads=1)
    feed = {"x": np.ones(1, np.float32)}
    assert c.run(feed)[0][0] == 2.0
    rlx_us = per_call_us(lambda: c.run(feed))

    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])],
        "one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    s = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    assert s.run(None, feed)[0][0] == 2.0
    ort_us = per_call_us(lambda: s.run(None, feed))
    return rlx_us, ort_us, onnx.__version__, ort.__version__


def decode(model, cli, threads, tokens=128, runs=5):
    prompt = "The history of the printing press"
    llama = rlx.Llama(str(model), threads=threads)
    py, cl = [], []
    for _ in range(runs):
        text = llama.generate(prompt, max_tokens=tokens)
        py.append(llama.last_stats["generate_tokens_per_second"])
        out = subprocess.run(
            [str(cli), "generate", "--model", str(model), "-p", prompt, "-n", str(tokens), "--threads", str(threads)],
            capture_output=True,
            check=True,
        )
        assert out.stdout.decode()[len(prompt) : -1] == text, "the CLI's text differs"
        rate = re.search(r"generation: \d+ tokens, ([0-9.]+) tok/s", out.stderr.decode())
        cl.append(float(rate.group(1)))
    return statistics.median(py), statistics.median(cl)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=pathlib.Path(os.environ.get("RLX_MODELS", pathlib.Path.home() / ".cache/rlx")) / "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--cli", default=ROOT / "target" / "release" / "rlx")
    args = ap.parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} cores; rlx {rlx.__version__}")
    # Decode first: onnxruntime's worker threads, once started, share the two cores.
    rows = [(threads, *decode(args.model, args.cli, threads)) for threads in (1, 2)]
    rlx_us, ort_us, _, ort_v = overhead()
    print("\n| per-call overhead, 1-element graph | us/call |\n|---|---|")
    print(f"| rlx Compiled.run | {rlx_us:.2f} |")
    print(f"| onnxruntime {ort_v} InferenceSession.run | {ort_us:.2f} |")
    print(f"| ratio rlx / onnxruntime | {rlx_us / ort_us:.2f}x |")
    print("\n| SmolLM2-135M Q4_1 decode, 128 tokens | rlx.Llama tok/s | rlx generate tok/s | Python / CLI |\n|---|---|---|---|")
    for threads, py, cl in rows:
        print(f"| {threads} thread{'s' if threads > 1 else ''} | {py:.1f} | {cl:.1f} | {py / cl:.3f} |")

if __name__ == "__main__":
    main()
