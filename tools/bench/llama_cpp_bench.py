#!/usr/bin/env python3
"""llama.cpp's side of `rlx bench llm`: pp512 and tg128 tokens/s on a GGUF model through
llama-cpp-python, with the same token ids, thread counts and context RLX uses, and the
process's peak RSS. Prints one JSON object on stdout.

Run with the python of tools/bench/llama_cpp_env.sh's virtualenv (llama.cpp built for
this CPU). Method (llama-bench's): pp = one batch of N prompt tokens from an empty
cache; tg = N single-token evaluations from an empty cache, no sampling; each repeated
`--reps` times after a warm-up, median reported.
"""

import argparse
import json
import statistics
import time

import llama_cpp.llama_cpp as llama_lib
from llama_cpp import Llama

# ggml's "extra buffer types" repack weights for AMX, whose tile instructions fault in
# sandboxes whose kernel does not grant AMX state (SIGILL here); the regular CPU kernels
# (AVX-512 VNNI on this machine) are what runs.
_default_model_params = llama_lib.llama_model_default_params


def _no_extra_bufts():
    p = _default_model_params()
    p.use_extra_bufts = False
    return p


llama_lib.llama_model_default_params = _no_extra_bufts


def rss_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    baseline_kib = rss_kib("VmRSS")
    results = []
    for threads in [int(t) for t in args.threads.split(",")]:
        llm = Llama(args.model, n_ctx=args.ctx, n_batch=args.pp, n_ubatch=args.pp, n_threads=threads,
                    n_threads_batch=threads, verbose=False)
        vocab = llm.n_vocab()
        # The token ids RLX's bench uses: i * 7919 mod vocab, skipping nothing.
        prompt = [(i * 7919) % vocab for i in range(args.pp)]
        gen = [(i * 104729 + 13) % vocab for i in range(args.tg)]

        def pp():
            llm.reset()
            start = time.perf_counter()
            llm.eval(prompt)
            return args.pp / (time.perf_counter() - start)

        def tg():
            llm.reset()
            start = time.perf_counter()
            for t in gen:
                llm.eval([t])
            return args.tg / (time.perf_counter() - start)

        for name, fn in [("pp", pp), ("tg", tg)]:
            fn()  # warm-up
            runs = [fn() for _ in range(args.reps)]
            results.append(dict(threads=threads, test=f"{name}{args.pp if name == 'pp' else args.tg}",
                                tokens_per_second=statistics.median(runs), runs=runs))
        del llm
    print(json.dumps(dict(engine="llama.cpp (llama-cpp-python " + __import__("llama_cpp").__version__ + ")",
                          results=results, peak_rss_kib=rss_kib("VmHWM"), baseline_rss_kib=baseline_kib)))


if __name__ == "__main__":
    main()
