#!/usr/bin/env python3
"""Write an all-F32 copy of a GGUF model (same metadata, weights dequantized).

Why: llama.cpp quantizes activations to Q8 whenever the weights are quantized, so its
logits on the original file differ from our f32 prefill by a few tenths.  On an F32 copy
llama.cpp does plain f32 matmuls, which makes it an exact-ish (1e-5) oracle for the
reference's prefill path.  Used by crosscheck_llamacpp.py --f32-model.

    python3 tools/llm/make_f32_gguf.py --model M.gguf --out /tmp/model_f32.gguf
"""
import argparse
import os

import numpy as np

import gguf
from gguf.quants import dequantize


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/rlx/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default="/tmp/model_f32.gguf")
    args = ap.parse_args()
    r = gguf.GGUFReader(args.model)
    w = gguf.GGUFWriter(args.out, arch=r.fields["general.architecture"].contents())
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue  # written by GGUFWriter itself
        v = 0 if k == "general.file_type" else f.contents()  # 0 = ALL_F32
        w.add_key_value(k, v, f.types[0], sub_type=f.types[1] if len(f.types) > 1 else None)
    for t in r.tensors:
        a = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        w.add_tensor(t.name, a.reshape(tuple(reversed(t.shape.tolist()))))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(args.out)


if __name__ == "__main__":
    main()
