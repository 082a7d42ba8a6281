#!/usr/bin/env python3
"""Fixtures for `rlx quantize` from llama.cpp's `llama-quantize` (the oracle).

From an all-F32 copy of SmolLM2-135M-Instruct (make_f32_gguf.py of the Q4_1 file), for
each type: `llama-quantize F32 OUT TYPE`, the tensor types it chose (read with the gguf
package), and `llama-perplexity -c 512 -b 512 --chunks 8` of its file on Botchan
(tools/fetch_text.sh), and per quantized scheme the relative RMS error of its values against
the F32 copy's. With --rlx, also `rlx quantize` of the same copy, and
llama-perplexity on RLX's file: llama.cpp must load it. With --rlx and --gemma (the
Gemma 3 270M Q4_K_M file of tools/fetch_model.sh gemma3), `rlx quantize` of it to q2_k
(its ffn_down and attn_output Q3_K: the 2- and 3-bit kernels in a real model) and
llama-perplexity of that file, which RLX's perplexity of the same bytes must match.

    PY=~/.cache/rlx/llama.cpp/venv/bin/python   # numpy + gguf
    $PY tools/llm/make_f32_gguf.py --model ~/.cache/rlx/SmolLM2-135M-Instruct.Q4_1.gguf --out /tmp/smollm2_f32.gguf
    $PY tools/llm/make_quantize_fixtures.py --bin "$(tools/llm/build_llama_cpp.sh)" \\
        --f32-model /tmp/smollm2_f32.gguf --text "$(tools/fetch_text.sh)" --rlx target/release/rlx \\
        --gemma ~/.cache/rlx/gemma-3-270m-q4_k_m.gguf

About 4 minutes on 2 cores. Writes crates/rlx-models/tests/fixtures/quantize.json.
"""
import argparse
import json
import os
import re
import subprocess

import gguf

TYPES = {"q4_k": "Q4_K_M", "q8_0": "Q8_0", "q4_0": "Q4_0", "q5_1": "Q5_1", "q2_k": "Q2_K", "q3_k": "Q3_K_M",
         "q5_k": "Q5_K_M"}
CHUNKS = 8


def tensor_types(path):
    r = gguf.GGUFReader(path)
    return {t.name: t.tensor_type.name for t in r.tensors}


def relative_errors(path, source):
    """Per quantized scheme in `path`, sqrt(sum (y - x)^2 / sum x^2) over its tensors, `x`
    the F32 source's values and `y` the file's, decoded by the gguf package."""
    import numpy as np
    ref = {t.name: t for t in gguf.GGUFReader(source).tensors}
    sums = {}
    for t in gguf.GGUFReader(path).tensors:
        if t.tensor_type.name in ("F32", "F16", "BF16"):
            continue
        x = np.asarray(ref[t.name].data, dtype=np.float64).reshape(-1)
        y = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64).reshape(-1)
        e, n = sums.get(t.tensor_type.name, (0.0, 0.0))
        sums[t.tensor_type.name] = (e + ((y - x) ** 2).sum(), n + (x * x).sum())
    return {k: float(np.sqrt(e / n)) for k, (e, n) in sorted(sums.items())}


def perplexity(bin_dir, model, text):
    out = subprocess.run([f"{bin_dir}/llama-perplexity", "-m", model, "-f", text, "-c", "512", "-b", "512",
                          "--chunks", str(CHUNKS), "-t", "2"], check=True, capture_output=True, text=True)
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out.stdout + out.stderr)
    return float(m.group(1)), float(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--f32-model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--rlx")
    ap.add_argument("--gemma")
    args = ap.parse_args()
    out = {"source": "all-F32 copy of SmolLM2-135M-Instruct.Q4_1.gguf (make_f32_gguf.py)",
           "text": os.path.basename(args.text), "n_ctx": 512, "chunks": CHUNKS, "types": {}}
    for ours, theirs in TYPES.items():
        path = f"/tmp/quantize_llama_{ours}.gguf"
        subprocess.run([f"{args.bin}/llama-quantize", args.f32_model, path, theirs], check=True,
                       capture_output=True)
        entry = {"llama_quantize": theirs, "tensor_types": tensor_types(path),
                 "llama_cpp_ppl": perplexity(args.bin, path, args.text),
                 "llama_quantize_relative_error": relative_errors(path, args.f32_model)}
        if args.rlx:
            mine = f"/tmp/quantize_rlx_{ours}.gguf"
            subprocess.run([args.rlx, "quantize", args.f32_model, mine, "--type", ours], check=True,
                           capture_output=True)
            entry["llama_cpp_ppl_of_rlx_file"] = perplexity(args.bin, mine, args.text)
        out["types"][ours] = entry
        print(ours, entry["llama_cpp_ppl"], entry.get("llama_cpp_ppl_of_rlx_file"))
    if args.rlx and args.gemma:
        mine = "/tmp/quantize_rlx_gemma_q2_k.gguf"
        subprocess.run([args.rlx, "quantize", args.gemma, mine, "--type", "q2_k"], check=True, capture_output=True)
        out["gemma_q2_k"] = {"source": os.path.basename(args.gemma), "type": "q2_k",
                             "tensor_types": tensor_types(mine),
                             "llama_cpp_ppl_of_rlx_file": perplexity(args.bin, mine, args.text)}
        print("gemma q2_k", out["gemma_q2_k"]["llama_cpp_ppl_of_rlx_file"])
    with open("crates/rlx-models/tests/fixtures/quantize.json", "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
