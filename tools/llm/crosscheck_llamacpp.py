#!/usr/bin/env python3
"""Optional cross-check of the reference fixtures against llama.cpp (llama-cpp-python).

Why: reference.py is our own NumPy code; this compares it with a third, widely used
implementation so a shared misunderstanding (RoPE pairing, GQA mapping, tokenizer
pre-split) would show up.  It is not needed to regenerate fixtures and writes nothing.

Expectations: tokenization must match exactly.  On the quantized file, logits only
approximately: llama.cpp's CPU path quantizes activations to Q8 for every matmul (prefill
too, with an fp16 block scale and ties-to-even rounding in its SIMD path), while our
prefill is f32, so prefill logits differ by up to ~0.8 and greedy text agrees until a
low-margin step.  With --f32-model (an all-F32 copy from make_f32_gguf.py) llama.cpp does
plain f32 matmuls and its prefill logits must match ours to ~1e-4.

Run with a Python that has llama_cpp installed, e.g.
    ~/.cache/rlx/llama-cpp-venv/bin/python tools/llm/crosscheck_llamacpp.py \
        --model ~/.cache/rlx/SmolLM2-135M-Instruct.Q4_1.gguf \
        --fixtures crates/rlx-models/tests/fixtures/llm [--f32-model /tmp/model_f32.gguf]
"""

import argparse
import json
import os

import numpy as np
import llama_cpp.llama_cpp as llama_lib
from llama_cpp import Llama

# Disable ggml's "extra buffer types" (weight repacking for AMX etc.): AMX tile
# instructions raise SIGILL in sandboxes whose kernel does not grant AMX state, and the
# plain CPU kernels are what we want to compare against anyway.
_default_model_params = llama_lib.llama_model_default_params


def _model_params_no_extra_bufts():
    p = _default_model_params()
    p.use_extra_bufts = False
    return p


llama_lib.llama_model_default_params = _model_params_no_extra_bufts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/rlx/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--fixtures", default="crates/rlx-models/tests/fixtures/llm")
    ap.add_argument("--f32-model", help="all-F32 copy (make_f32_gguf.py) for the exact check")
    args = ap.parse_args()
    ref = json.load(open(os.path.join(args.fixtures, "reference.json")))
    tokfx = json.load(open(os.path.join(args.fixtures, "tokenizer.json")))

    # f32 KV cache (type 0) so attention is not rounded to f16.
    llm = Llama(args.model, n_ctx=512, n_batch=512, logits_all=True, n_threads=2,
                type_k=0, type_v=0, verbose=False)

    bad = 0
    for c in tokfx["cases"]:
        ids = llm.tokenize(c["text"].encode(), add_bos=False, special=True)
        if ids != c["ids"]:
            bad += 1
            print(f"TOKENIZE MISMATCH {c['text']!r}: hf={c['ids']} llama.cpp={ids}")
        dec = llm.detokenize(c["ids"], special=True).decode("utf-8", errors="replace")
        if dec != c["decoded"]:
            print(f"detokenize differs {c['text']!r}: hf={c['decoded']!r} llama.cpp={dec!r}")
    print(f"tokenizer: {len(tokfx['cases']) - bad}/{len(tokfx['cases'])} cases match")

    for i, p in enumerate(ref["prompts"]):
        ids = llm.tokenize(p["text"].encode(), add_bos=ref["add_bos"], special=True)
        assert ids == p["ids"], (ids, p["ids"])
        llm.reset()
        llm.eval(ids)
        lg = np.array(llm.scores[len(ids) - 1], dtype=np.float32)
        ours = np.load(os.path.join(args.fixtures, f"prompt{i}_logits.npy"))
        gen = [int(np.argmax(lg))]
        for _ in range(len(p["generated"]) - 1):
            llm.eval([gen[-1]])
            gen.append(int(np.argmax(np.array(llm.scores[llm.n_tokens - 1]))))
        agree = next((j for j, (a, b) in enumerate(zip(gen, p["generated"])) if a != b),
                     len(gen))
        print(f"prompt {i}: prefill logits max|diff|={np.abs(lg - ours).max():.4f} "
              f"corr={np.corrcoef(lg, ours)[0, 1]:.6f} argmax {int(np.argmax(lg))} vs "
              f"{int(np.argmax(ours))}; greedy agrees for {agree}/{len(gen)} tokens"
              + ("" if agree == len(gen) else
                 f" (our margin at divergence {p['margins'][agree]:.4f})"))
        if agree < len(gen):
            print("   llama.cpp:", repr(llm.detokenize(gen, special=True).decode("utf-8", "replace")))

    if args.f32_model:
        del llm
        f32 = Llama(args.f32_model, n_ctx=512, n_batch=512, logits_all=True, n_threads=2,
                    type_k=0, type_v=0, flash_attn=False, verbose=False)
        worst = 0.0
        for i, p in enumerate(ref["prompts"]):
            f32.reset()
            f32.eval(p["ids"])
            lg = np.array(f32.scores[len(p["ids"]) - 1], dtype=np.float32)
            d = float(np.abs(lg - np.load(os.path.join(args.fixtures, f"prompt{i}_logits.npy"))).max())
            worst = max(worst, d)
            print(f"f32 model, prompt {i}: prefill logits max|diff|={d:.2e}")
        print("f32 prefill check", "OK" if worst < 1e-3 else "FAILED", f"(worst {worst:.2e})")


if __name__ == "__main__":
    main()
