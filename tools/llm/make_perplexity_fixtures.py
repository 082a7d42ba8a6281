#!/usr/bin/env python3
"""Perplexity fixtures from llama.cpp's `llama-perplexity` (the oracle for `rlx perplexity`).

Runs `llama-perplexity -c 512 -b 512 --chunks 20 -t 2` on a public-domain text
(tools/fetch_text.sh: Project Gutenberg's "Botchan", from the sentencepiece 0.2.0 sdist)
for SmolLM2-135M-Instruct (Q4_1) and Gemma 3 270M (Q4_K_M), each in two modes:

* `default`: llama.cpp's defaults (flash attention `auto`, which is on for CPU; f16 KV
  cache);
* `f32_kv`:  `-fa off -ctk f32 -ctv f32` (plain attention, f32 KV cache).

`-b 512` equal to `-c 512` makes llama-perplexity decode one 512-token sequence per batch
(n_seq = 1), as `rlx perplexity --ctx 512` does. What llama-perplexity computes: the
text is tokenized once (BOS prepended if the model adds one; special tokens not parsed;
a single trailing '\\n' of the file dropped; no escape processing), cut into
`n_tokens // n_ctx` chunks of n_ctx tokens (at most --chunks of them). Each chunk is
decoded from an empty KV cache; if the model adds BOS, the chunk's first token is
*replaced* by BOS. Only the second half is scored: the logits at positions
n_ctx/2 .. n_ctx-2 predict tokens n_ctx/2+1 .. n_ctx-1 (255 tokens per chunk at 512).
The running value printed after chunk i is exp(mean NLL over all scored tokens so far);
the final estimate is the last of them, with error `ppl * sqrt(var(nll) / (count - 1))`.

Writes crates/rlx-models/tests/fixtures/perplexity.json: the text (name, sha256, source
package), n_ctx, chunks, the token count of the text per model (by `llama-tokenize` on
the same bytes, as llama-perplexity tokenizes them) with a sha256 of the evaluated ids,
and per model and mode the final PPL, its +/- error, the per-chunk running values and
the exact command line.

    TEXT=$(tools/fetch_text.sh)
    tools/fetch_model.sh >/dev/null; tools/fetch_model.sh gemma3 >/dev/null
    BIN=$(tools/llm/build_llama_cpp.sh)
    python3 tools/llm/make_perplexity_fixtures.py --bin "$BIN" --text "$TEXT"

About 2 minutes on 2 cores (4 runs of 20 chunks at ~1.2 s each, plus model loads).
"""
import argparse
import ast
import hashlib
import json
import os
import re
import shlex
import struct
import subprocess
import time

OUT = "crates/rlx-models/tests/fixtures/perplexity.json"
CACHE = os.environ.get("RLX_MODELS", os.path.expanduser("~/.cache/rlx"))

TEXT_SOURCE = {
    "package": "sentencepiece",
    "version": "0.2.0",
    "distribution": "sdist (sentencepiece-0.2.0.tar.gz)",
    "member": "sentencepiece-0.2.0/test/botchan.txt",
    "title": "Botchan (Master Darling), by Kin-nosuke Natsume (Natsume Soseki), "
             "translated by Yasotaro Morri, revised by J. R. Kennedy (1919)",
    "gutenberg_ebook": 8868,
    "license": "Public domain in the U.S.; the file carries the Project Gutenberg "
               "header and full license",
    "fetch": "tools/fetch_text.sh",
}

MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
}

MODES = {
    "default": [],
    "f32_kv": ["-fa", "off", "-ctk", "f32", "-ctv", "f32"],
}

CHUNK_RE = re.compile(r"\[(\d+)\](\d+\.\d+),")
FINAL_RE = re.compile(r"Final estimate: PPL = (\d+\.\d+) \+/- (\d+\.\d+)")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tokenize(bin_dir, model, text_bytes):
    """The ids llama-perplexity evaluates: common's -f drops one trailing '\\n'; no escape
    processing, special tokens not parsed, BOS as the model says."""
    if text_bytes.endswith(b"\n"):
        text_bytes = text_bytes[:-1]
    cmd = [os.path.join(bin_dir, "llama-tokenize"), "-m", model, "--stdin", "--no-escape",
           "--no-parse-special", "--ids", "--log-disable"]
    out = subprocess.run(cmd, input=text_bytes, capture_output=True, check=True).stdout
    return ast.literal_eval(out.decode().strip())


def run_perplexity(bin_dir, model, text, n_ctx, chunks, threads, extra):
    cmd = [os.path.join(bin_dir, "llama-perplexity"), "-m", model, "-f", text,
           "-c", str(n_ctx), "-b", str(n_ctx), "--chunks", str(chunks), "-t", str(threads),
           *extra]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    log = p.stdout + p.stderr
    if p.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed ({p.returncode}):\n{log[-4000:]}")
    running = [(int(i), float(v)) for i, v in CHUNK_RE.findall(log)]
    if [i for i, _ in running] != list(range(1, chunks + 1)):
        raise SystemExit(f"unexpected chunk values {running} in:\n{log[-4000:]}")
    m = FINAL_RE.search(log)
    if not m:
        raise SystemExit(f"no final estimate in:\n{log[-4000:]}")
    warnings = [l for l in log.splitlines() if re.search(r"\b[WE] ", l) or "warn" in l.lower()]
    return {
        "ppl": float(m.group(1)),
        "ppl_err": float(m.group(2)),
        "running": [v for _, v in running],
        "command": shlex.join(cmd),
        "args": cmd[1:],
    }, wall, warnings


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(CACHE, "llama.cpp/build/bin"))
    ap.add_argument("--text", default=os.path.join(CACHE, "botchan.txt"))
    ap.add_argument("--models-dir", default=CACHE)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()

    with open(args.text, "rb") as f:
        text_bytes = f.read()
    version = subprocess.run([os.path.join(args.bin, "llama-perplexity"), "--version"],
                             capture_output=True, text=True)
    version = " | ".join(l.strip() for l in (version.stdout + version.stderr).splitlines()
                         if l.strip())

    fixture = {
        "about": "llama.cpp llama-perplexity on a public-domain text; generated by "
                 "tools/llm/make_perplexity_fixtures.py",
        "llama_cpp": version,
        "text": {
            "file": os.path.basename(args.text),
            "bytes": len(text_bytes),
            "sha256": hashlib.sha256(text_bytes).hexdigest(),
            "source": TEXT_SOURCE,
        },
        "n_ctx": args.ctx,
        "n_batch": args.ctx,
        "chunks": args.chunks,
        "threads": args.threads,
        "scored_tokens_per_chunk": args.ctx - 1 - args.ctx // 2,
        "modes": {k: " ".join(v) or "(llama.cpp defaults: -fa auto (on), KV f16)"
                  for k, v in MODES.items()},
        "models": {},
    }

    total = time.monotonic()
    for key, name in MODELS.items():
        model = os.path.join(args.models_dir, name)
        ids = tokenize(args.bin, model, text_bytes)
        used = ids[: args.chunks * args.ctx]
        entry = {
            "file": name,
            "bytes": os.path.getsize(model),
            "sha256": sha256_file(model),
            "n_tokens": len(ids),
            "n_chunks_max": len(ids) // args.ctx,
            "first_ids": ids[:16],
            # sha256 of the first chunks*n_ctx ids as little-endian i32, before the
            # per-chunk BOS substitution.
            "evaluated_ids_sha256": hashlib.sha256(struct.pack(f"<{len(used)}i", *used)).hexdigest(),
            "runs": {},
        }
        for mode, extra in MODES.items():
            res, wall, warnings = run_perplexity(args.bin, model, args.text, args.ctx,
                                                 args.chunks, args.threads, extra)
            entry["runs"][mode] = res
            print(f"{key:8s} {mode:8s} PPL = {res['ppl']:.4f} +/- {res['ppl_err']:.5f}  "
                  f"({wall:.1f} s)  n_tokens={len(ids)}")
            for w in warnings:
                print(f"    {w}")
        fixture["models"][key] = entry

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out} ({time.monotonic() - total:.0f} s)")


if __name__ == "__main__":
    main()
