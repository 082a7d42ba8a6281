#!/usr/bin/env python3
"""Fixtures for Gemma 3 from llama.cpp itself (the oracle for this family).

* tokenizer.json: ~40 strings (unicode, digits, whitespace runs, HTML tags and control
  tokens) with the ids of `llama-tokenize --ids --no-bos`, once with control tokens parsed
  (`special`) and once without (`plain`).
* greedy.json: prompts with the greedy continuation of `llama-completion` on an all-F32
  copy of the model (make_f32_gguf.py), f32 KV cache and flash attention off, so every
  matmul and the attention run in f32: the model's own function. One prompt is longer than
  the 512-token sliding window.

    MODEL=$(tools/fetch_model.sh gemma3)
    BIN=$(tools/llm/build_llama_cpp.sh)
    PY=~/.cache/rlx/llama.cpp/venv/bin/python      # has numpy and gguf
    $PY tools/llm/make_f32_gguf.py --model "$MODEL" --out /tmp/gemma3_f32.gguf
    $PY tools/llm/make_gemma3_fixtures.py --bin "$BIN" --model "$MODEL" --f32-model /tmp/gemma3_f32.gguf

About 3 minutes on 2 cores. Writes crates/rlx-models/tests/fixtures/gemma3/.
"""
import argparse
import json
import os
import subprocess
import tempfile

OUT = "crates/rlx-models/tests/fixtures/gemma3"

STRINGS = [
    "Hello world",
    "Hello  world",
    " leading space",
    "trailing space ",
    "   three leading",
    "tabs\there\t\tand\t\t\tthere",
    "line one\nline two\n\nline four\n\n\n",
    "\n",
    "x",
    "The year 2024 had 366 days; 3.14159 is pi.",
    "1234567890 0000 99",
    "naïve café résumé",
    "Ünïcödé: 日本語のテキスト、中文文本，한국어 텍스트",
    "emoji: 🦀🐍👍🏽 and 🇫🇷",
    "Zürich → München ⇒ Wien",
    "math: ∑ x² ≤ ∞, √2 ≈ 1.414",
    "code: fn main() { println!(\"hi\"); }",
    "def f(x):\n    return x * 2\n",
    "<b>bold</b> and <i>italic</i> in <table><tr><td>x</td></tr></table>",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text after bos",
    "a<eos>b",
    "<s>tag</s> and </s><end_of_turn>",
    "<unused0> and <unused99>",
    "<start_of_image>",
    "mixed<start_of_turn>in the middle",
    "I'm can't won't they'll we've",
    "UPPER lower MiXeD",
    "hyphen-ated and under_scored and dot.ted",
    "url: https://example.com/path?q=1&r=2#frag",
    "email: someone@example.org",
    "    indented with four spaces",
    "ends with newline\n",
    "\t\t",
    "         nine spaces",
    "a" * 40,
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    "Ελληνικά και русский текст",
    "עברית ועربية",
    "control chars: \u0001\u0002 end",
    "zero width:\u200b\u200d here",
]

PROMPTS = [
    "The capital of France is",
    "Here is a short poem about the sea:\n",
    "def fibonacci(n):",
    "Question: What is 17 times 23?\nAnswer:",
]


def long_prompt():
    # > 512 tokens: a story made of numbered sentences, so that a sliding-window layer
    # (512 keys) cannot see the beginning when it predicts.
    parts = [f"Sentence {i}: the {['red', 'green', 'blue', 'amber'][i % 4]} lantern number {i} glows near the river."
             for i in range(1, 60)]
    return " ".join(parts) + "\nSummary of the story so far:"


def tokenize(bin_dir, model, text, special):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write(text)
        path = f.name
    args = [f"{bin_dir}/llama-tokenize", "-m", model, "-f", path, "--ids", "--no-bos", "--log-disable",
            "--no-escape"]
    if not special:
        args.append("--no-parse-special")
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    os.unlink(path)
    return json.loads(out.strip().splitlines()[-1])


def complete(bin_dir, model, prompt, n):
    # -p with --no-escape: -f would drop a trailing newline of the prompt.
    args = [f"{bin_dir}/llama-completion", "-m", model, "-p", prompt, "--no-escape", "-n", str(n), "--temp", "0",
            "-ctk", "f32", "-ctv", "f32", "-fa", "off", "-c", "2048", "-t", "2", "--no-warmup",
            "--ignore-eos", "--no-display-prompt", "--simple-io", "-no-cnv", "-s", "0"]
    out = subprocess.run(args, check=True, capture_output=True).stdout.decode("utf-8")
    # llama-completion ends its output with "\n\n" of its own.
    assert out.endswith("\n\n"), repr(out[-20:])
    return out[:-2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--f32-model", required=True)
    ap.add_argument("-n", type=int, default=48)
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    cases = [{"text": s, "plain": tokenize(args.bin, args.model, s, False),
              "special": tokenize(args.bin, args.model, s, True)} for s in STRINGS]
    with open(f"{OUT}/tokenizer.json", "w", encoding="utf-8") as f:
        json.dump({"model": os.path.basename(args.model), "oracle": "llama-tokenize --ids --no-bos",
                   "cases": cases}, f, ensure_ascii=False, indent=1)
    greedy = []
    for p in PROMPTS + [long_prompt()]:
        ids = tokenize(args.bin, args.model, p, False)
        text = complete(args.bin, args.f32_model, p, args.n)
        greedy.append({"prompt": p, "prompt_tokens": len(ids) + 1, "text": text})
        print(len(ids) + 1, repr(text[:80]))
    with open(f"{OUT}/greedy.json", "w", encoding="utf-8") as f:
        json.dump({"model": os.path.basename(args.model), "tokens": args.n,
                   "oracle": "llama-completion --temp 0 -ctk f32 -ctv f32 -fa off on an all-F32 copy",
                   "cases": greedy}, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
