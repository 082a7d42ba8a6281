#!/usr/bin/env python3
"""Embedding fixtures from llama.cpp's `llama-embedding` (the oracle for `/v1/embeddings`).

For each input: the ids `llama-tokenize` gives (with the BOS the model adds), and the
vector `llama-embedding --pooling mean --embd-normalize 2` prints for it on an all-F32 copy
of SmolLM2-135M-Instruct (make_f32_gguf.py) with an f32 KV cache and flash attention off:
the mean over the input's tokens of the last hidden state after the final norm, scaled to
unit Euclidean length, every matmul in f32. One input is longer than the server's
256-token prompt piece, so its pooling spans pieces.

    MODEL=$(tools/fetch_model.sh)
    BIN=$(tools/llm/build_llama_cpp.sh)
    PY=~/.cache/rlx/llama.cpp/venv/bin/python      # has numpy and gguf
    $PY tools/llm/make_f32_gguf.py --model "$MODEL" --out /tmp/smollm2_f32.gguf
    python3 tools/llm/make_embedding_fixtures.py --bin "$BIN" --model "$MODEL" --f32-model /tmp/smollm2_f32.gguf

Writes crates/rlx-models/tests/fixtures/llm/embeddings.json (under a minute on 2 cores).
"""
import argparse
import json
import os
import subprocess
import tempfile

OUT = "crates/rlx-models/tests/fixtures/llm/embeddings.json"

INPUTS = [
    "The capital of France is Paris.",
    "x",
    "Ünïcödé: 日本語のテキスト and emoji 🦀",
    "A cat sat on the mat, and the dog slept by the fire.",
    # > 256 tokens: pooled across two prompt pieces.
    " ".join(f"Item {i}: the {['red', 'green', 'blue'][i % 3]} box holds {i * 7} marbles." for i in range(1, 21)),
]


def tokenize(bin_dir, model, text):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write(text)
        path = f.name
    args = [f"{bin_dir}/llama-tokenize", "-m", model, "-f", path, "--ids", "--log-disable", "--no-escape",
            "--no-parse-special"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    os.unlink(path)
    return json.loads(out.strip().splitlines()[-1])


def embed(bin_dir, model, text):
    args = [f"{bin_dir}/llama-embedding", "-m", model, "-p", text, "--pooling", "mean", "--embd-normalize", "2",
            "--embd-output-format", "json", "-ctk", "f32", "-ctv", "f32", "-fa", "off", "-c", "2048",
            "-b", "2048", "-ub", "2048", "-t", "2", "--no-warmup"]
    out = subprocess.run(args, check=True, capture_output=True).stdout.decode("utf-8")
    data = json.loads(out[out.index("{"):])["data"]
    assert len(data) == 1, len(data)
    return data[0]["embedding"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--f32-model", required=True)
    args = ap.parse_args()
    cases = []
    for text in INPUTS:
        ids = tokenize(args.bin, args.model, text)
        vector = embed(args.bin, args.f32_model, text)
        print(len(ids), len(vector), sum(v * v for v in vector))
        cases.append({"text": text, "ids": ids, "embedding": vector})
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"model": os.path.basename(args.model),
                   "oracle": "llama-embedding --pooling mean --embd-normalize 2 -ctk f32 -ctv f32 -fa off "
                             "on an all-F32 copy",
                   "cases": cases}, f, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
