#!/usr/bin/env python3
"""Independent NumPy reference for a Llama-architecture GGUF model (RLX test oracle).

Why this exists
---------------
RLX compiles and runs Llama-style models read from GGUF files.  To test that end to
end we need numbers that do not come from RLX itself: token ids, prompt logits and
greedy continuations computed by a second, deliberately simple implementation.  This
script is that implementation.  It uses only

  * ``gguf`` (the ggml project's reader) to parse the file and dequantize tensors,
  * ``numpy`` for the forward pass, written out op by op with no fusion tricks,
  * HuggingFace ``tokenizers`` as the tokenizer oracle, built from the GGUF metadata
    (so nothing is downloaded; the file is the single source of truth).

It mirrors the numerics RLX uses so that greedy generations can be compared token for
token (not just "close"):

  * Prefill (the whole prompt in one pass) uses plain f32 activations.
  * Each single-token decode step quantizes the activation row to llama.cpp-style Q8
    blocks (32 values, one f32 scale, round half away from zero) before EVERY weight
    matmul, then multiplies the dequantized row by the dequantized weights.

Precision policy: every tensor RLX would materialize (x, q, k, v, attention output,
FFN hidden, logits) is rounded to f32, but every reduction (matmul dots, attention
scores, softmax sums, RMS means) is accumulated in float64.  That makes each stored
value essentially "the exact result rounded to f32", independent of BLAS summation
order, which is the best target an optimized f32 implementation can be held to.

Usage:
    python3 tools/llm/reference.py --model ~/.cache/rlx/SmolLM2-135M-Instruct.Q4_1.gguf \
        --out crates/rlx-models/tests/fixtures/llm
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

import gguf
from gguf.quants import dequantize

F32 = np.float32
F64 = np.float64


# --------------------------------------------------------------------------------------
# GGUF loading
# --------------------------------------------------------------------------------------


def field_value(reader: gguf.GGUFReader, key: str, default=None):
    """Return a metadata value as a plain Python object (str, int, float, list)."""
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


class Model:
    """Config + dequantized weights.

    Weights are dequantized once with gguf.quants.dequantize (the ggml project's own
    reference dequantizer, so Q4_1/Q8_0 block decoding is not re-implemented here) and
    kept as float64 arrays.  Every value is an exact f32 value (the dequantizer works in
    f32); storing it widened to f64 just lets NumPy/BLAS do the matmuls with f64
    accumulation without re-converting ~135M weights on every decode step.

    GGUF shapes: a 2-D tensor listed as [k, n] (ggml ne0 = k fastest) has raw data of
    n rows by k values, i.e. row-major [n, k] = [out_features, in_features], so a linear
    layer is y = x @ W.T.  dequantize() returns exactly that [n, k] array.
    """

    def __init__(self, path: str):
        self.path = path
        r = gguf.GGUFReader(path)
        self.reader = r
        arch = field_value(r, "general.architecture")
        if arch != "llama":
            raise SystemExit(f"unsupported architecture {arch!r} (only llama)")
        g = lambda k, d=None: field_value(r, f"llama.{k}", d)  # noqa: E731
        self.n_layer = int(g("block_count"))
        self.d_model = int(g("embedding_length"))
        self.n_head = int(g("attention.head_count"))
        self.n_kv_head = int(g("attention.head_count_kv", self.n_head))
        self.d_ff = int(g("feed_forward_length"))
        self.head_dim = self.d_model // self.n_head
        self.rope_dim = int(g("rope.dimension_count", self.head_dim))
        self.rope_base = float(g("rope.freq_base", 10000.0))
        # Stored as f32 in the file (9.99999974738e-06); used as-is.
        self.eps = float(g("attention.layer_norm_rms_epsilon", 1e-5))
        assert self.rope_dim == self.head_dim, "partial RoPE not handled"
        assert self.n_head % self.n_kv_head == 0

        tensors = {t.name: t for t in r.tensors}
        self.tensor_types = {t.name: t.tensor_type.name for t in r.tensors}

        def load(name: str) -> np.ndarray:
            t = tensors[name]
            a = dequantize(t.data, t.tensor_type)
            a = np.asarray(a, dtype=F32)  # dequantizer output is f32 already
            # Logical shape: reverse of ggml's ne order.
            shape = tuple(int(s) for s in reversed(t.shape.tolist()))
            return a.reshape(shape)

        def mat(name: str) -> np.ndarray:
            return np.ascontiguousarray(load(name).astype(F64))

        self.tok_embd = load("token_embd.weight")  # [vocab, d] f32, for row lookup
        self.vocab = self.tok_embd.shape[0]
        # Output head: output.weight if the file has one, else tied to token_embd.
        self.tied_output = "output.weight" not in tensors
        self.w_out = mat("token_embd.weight" if self.tied_output else "output.weight")
        self.output_norm = load("output_norm.weight")
        self.layers = []
        for i in range(self.n_layer):
            p = f"blk.{i}."
            self.layers.append(
                dict(
                    attn_norm=load(p + "attn_norm.weight"),
                    wq=mat(p + "attn_q.weight"),
                    wk=mat(p + "attn_k.weight"),
                    wv=mat(p + "attn_v.weight"),
                    wo=mat(p + "attn_output.weight"),
                    ffn_norm=load(p + "ffn_norm.weight"),
                    wg=mat(p + "ffn_gate.weight"),
                    wu=mat(p + "ffn_up.weight"),
                    wd=mat(p + "ffn_down.weight"),
                )
            )
        # RoPE inverse frequencies base^(-2i/d), i in 0..d/2, computed in f64.
        i = np.arange(self.head_dim // 2, dtype=F64)
        self.inv_freq = self.rope_base ** (-2.0 * i / self.head_dim)


# --------------------------------------------------------------------------------------
# Numeric building blocks
# --------------------------------------------------------------------------------------


def round_half_away(v: np.ndarray) -> np.ndarray:
    """Round to nearest, ties away from zero (C roundf), as llama.cpp's reference
    quantize_row_q8_0 does.  np.round is ties-to-even, so it is not used.  Done in f64:
    in f32, floor(|v| + 0.5) is wrong for |v| = 0.5 - 2^-25 (the add rounds up to 1)."""
    v = v.astype(F64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def quantize_rows(x: np.ndarray, bits: int) -> np.ndarray:
    """Activation quantize + dequantize, per row, in blocks of 32 (llama.cpp's Q8_0/Q8_1
    activation blocks for bits=8; RLX's prompt activations for bits=16): L = 127 or 32767,
    amax = max|x| (f32), d = amax / L (f32), id = 1/d (f32, 0 if d == 0),
    q = clip(round_half_away(x * id), -L, L); returns q * d as f32."""
    levels = {8: 127.0, 16: 32767.0}[bits]
    x = np.asarray(x, dtype=F32)
    rows, k = x.shape
    assert k % 32 == 0, "quantized blocks need k % 32 == 0"
    b = x.reshape(rows, k // 32, 32)
    amax = np.max(np.abs(b), axis=-1, keepdims=True).astype(F32)
    d = (amax / F32(levels)).astype(F32)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, F32(1.0) / np.where(d != 0, d, F32(1.0)), F32(0.0)).astype(F32)
    scaled = (b * idv).astype(F32)  # f32 product, as in C
    q = np.clip(round_half_away(scaled), -levels, levels).astype(np.int32)
    return (q.astype(F32) * d).astype(F32).reshape(rows, k)


def linear(x: np.ndarray, w64: np.ndarray, bits: int | None) -> np.ndarray:
    """y = x @ W.T with f64 accumulation, result rounded to f32.  With `bits` (8 or 16)
    the activation row(s) are first quantized/dequantized to that many bits."""
    if bits:
        x = quantize_rows(x, bits)
    return (x.astype(F64) @ w64.T).astype(F32)


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * w; the mean and division in f64, then f32."""
    x64 = x.astype(F64)
    ms = np.mean(x64 * x64, axis=-1, keepdims=True)
    n = (x64 / np.sqrt(ms + eps)).astype(F32)
    return (n * w).astype(F32)


def rope(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """GPT-J / llama.cpp "NORM" RoPE on x [seq, heads, head_dim]: rotate adjacent pairs
    (2i, 2i+1) by angle pos * base^(-2i/d).  (llama.cpp's converter permutes HF's q/k
    weights so this interleaved pairing is the right one for GGUF llama models.)
    Angles in f64, cos/sin rounded to f32, rotation in f32."""
    ang = positions.astype(F64)[:, None] * inv_freq[None, :]  # [seq, d/2]
    c = np.cos(ang).astype(F32)[:, None, :]
    s = np.sin(ang).astype(F32)[:, None, :]
    x0 = x[..., 0::2]
    x1 = x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def silu(g: np.ndarray) -> np.ndarray:
    g64 = g.astype(F64)
    return (g64 / (1.0 + np.exp(-g64))).astype(F32)


# --------------------------------------------------------------------------------------
# Forward pass with KV cache
# --------------------------------------------------------------------------------------


class KVCache:
    """Per layer: k, v as f32 [n_kv_head, T, head_dim] (k already RoPE'd)."""

    def __init__(self, m: Model):
        self.k = [np.zeros((m.n_kv_head, 0, m.head_dim), F32) for _ in range(m.n_layer)]
        self.v = [np.zeros((m.n_kv_head, 0, m.head_dim), F32) for _ in range(m.n_layer)]

    @property
    def length(self) -> int:
        return self.k[0].shape[1]


def forward(m: Model, ids: list[int], cache: KVCache, bits: int | None) -> np.ndarray:
    """Run `ids` at positions cache.length.. and return the LAST position's logits (f32).

    bits=None: f32 activations.  bits=8 / 16: activation quantization before every weight
    matmul, including the output head (RLX's default: 16 for prompts, 8 for decode)."""
    start = cache.length
    S = len(ids)
    H, KH, D = m.n_head, m.n_kv_head, m.head_dim
    group = H // KH
    pos = np.arange(start, start + S)
    kv_of_head = np.arange(H) // group  # GQA: query head h reads kv head h // group

    x = m.tok_embd[np.asarray(ids)].astype(F32)  # [S, d]
    for li, L in enumerate(m.layers):
        n = rmsnorm(x, L["attn_norm"], m.eps)
        q = linear(n, L["wq"], bits).reshape(S, H, D)
        k = linear(n, L["wk"], bits).reshape(S, KH, D)
        v = linear(n, L["wv"], bits).reshape(S, KH, D)
        q = rope(q, pos, m.inv_freq)
        k = rope(k, pos, m.inv_freq)
        cache.k[li] = np.concatenate([cache.k[li], k.transpose(1, 0, 2)], axis=1)
        cache.v[li] = np.concatenate([cache.v[li], v.transpose(1, 0, 2)], axis=1)
        K = cache.k[li][kv_of_head].astype(F64)  # [H, T, D]
        V = cache.v[li][kv_of_head].astype(F64)
        T = K.shape[1]
        Q = q.transpose(1, 0, 2).astype(F64)  # [H, S, D]
        scores = (Q @ K.transpose(0, 2, 1)) * (1.0 / np.sqrt(D))  # [H, S, T]
        # Causal: query at absolute position p sees keys 0..=p.
        mask = np.arange(T)[None, :] > pos[:, None]  # [S, T]
        scores = np.where(mask[None], -np.inf, scores)
        scores = scores - scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p = p / p.sum(axis=-1, keepdims=True)
        att = (p @ V).astype(F32)  # [H, S, D]
        att = att.transpose(1, 0, 2).reshape(S, H * D)  # concat heads, head-major
        x = (x + linear(att, L["wo"], bits)).astype(F32)

        n2 = rmsnorm(x, L["ffn_norm"], m.eps)
        gt = linear(n2, L["wg"], bits)
        up = linear(n2, L["wu"], bits)
        h = (silu(gt) * up).astype(F32)
        x = (x + linear(h, L["wd"], bits)).astype(F32)

    last = rmsnorm(x[-1:], m.output_norm, m.eps)
    return linear(last, m.w_out, bits)[0]


def top2_margin(logits: np.ndarray) -> tuple[int, float]:
    """argmax (first index on ties) and top1 - top2 logit (0.0 on a tie)."""
    top = int(np.argmax(logits))
    rest = np.delete(logits, top)
    return top, float(logits[top] - rest.max())


MARGIN_THRESHOLDS = (0.01, 0.05, 0.1, 0.25)


def stable_prefix(margins: list[float]) -> dict[str, int]:
    out = {}
    for thr in MARGIN_THRESHOLDS:
        out[str(thr)] = next((j for j, mg in enumerate(margins) if mg < thr), len(margins))
    return out


def generate(m: Model, prompt_ids: list[int], n_new: int, q8_decode: bool):
    """Prefill -> argmax, then n_new - 1 single-token decode steps; with `q8_decode`, RLX's
    default activations (16-bit prompt, 8-bit decode steps), else f32."""
    cache = KVCache(m)
    prefill_logits = forward(m, prompt_ids, cache, 16 if q8_decode else None)
    tok, margin = top2_margin(prefill_logits)
    generated, margins = [tok], [margin]
    first_decode_logits = None
    for _ in range(n_new - 1):
        logits = forward(m, [tok], cache, 8 if q8_decode else None)
        if first_decode_logits is None:
            first_decode_logits = logits
        tok, margin = top2_margin(logits)
        generated.append(tok)
        margins.append(margin)
    return prefill_logits, first_decode_logits, generated, margins


# --------------------------------------------------------------------------------------
# Tokenizer (HF tokenizers built from GGUF metadata)
# --------------------------------------------------------------------------------------


def build_tokenizer(reader: gguf.GGUFReader):
    """Byte-level BPE equivalent to the model's tokenizer, from GGUF metadata only.

    tokenizer.ggml.model == "gpt2" means GPT-2 byte-level BPE: token strings are already
    in the byte->unicode mapped alphabet (e.g. 'Ġ' for space), merges are "a b" pairs in
    rank order.  Tokens of type 3 (CONTROL) are registered as special added tokens so
    that "<|im_start|>" etc. in the text are matched whole, before BPE.  The "smollm"
    pre-tokenizer is Digits(individual) then the GPT-2 ByteLevel regex."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    model = field_value(reader, "tokenizer.ggml.model")
    pre = field_value(reader, "tokenizer.ggml.pre")
    if model != "gpt2" or pre != "smollm":
        raise SystemExit(f"tokenizer {model!r}/{pre!r} not handled (expects gpt2/smollm)")
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    types = field_value(reader, "tokenizer.ggml.token_type")
    merges = field_value(reader, "tokenizer.ggml.merges")
    vocab = {t: i for i, t in enumerate(tokens)}
    assert len(vocab) == len(tokens), "duplicate token strings"
    merge_pairs = [tuple(mg.split(" ")) for mg in merges]
    assert all(len(p) == 2 for p in merge_pairs)
    bpe = models.BPE(vocab=vocab, merges=merge_pairs, unk_token=None, fuse_unk=False,
                     byte_fallback=False)
    tk = Tokenizer(bpe)
    tk.normalizer = None
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tk.decoder = decoders.ByteLevel()
    specials = [tokens[i] for i, t in enumerate(types) if t == 3]
    tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    for s in specials:  # added tokens must keep their GGUF ids
        assert tk.token_to_id(s) == vocab[s]
    return tk, specials


def encode(tk, text: str, bos_id: int | None) -> list[int]:
    ids = tk.encode(text, add_special_tokens=False).ids
    return ([bos_id] if bos_id is not None else []) + ids


def decode(tk, ids: list[int]) -> str:
    return tk.decode(ids, skip_special_tokens=False)


def render_chatml(messages: list[dict], add_generation_prompt: bool) -> str:
    """Hand rendering of the file's tokenizer.chat_template (SmolLM2 ChatML):
    a default system turn is inserted only if the first message is not 'system'; each
    message is '<|im_start|>' + role + '\\n' + content + '<|im_end|>\\n'; the generation
    prompt is '<|im_start|>assistant\\n'.  Checked against jinja2 when it is installed."""
    out = []
    for i, msg in enumerate(messages):
        if i == 0 and messages[0]["role"] != "system":
            out.append("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
                       "trained by Hugging Face<|im_end|>\n")
        out.append("<|im_start|>" + msg["role"] + "\n" + msg["content"] + "<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
    return "".join(out)


# Strings for RLX's tokenizer round-trip test: ASCII, digits, contractions, whitespace
# runs, tabs/newlines, unicode of several kinds, inline special tokens, edge cases.
TOKENIZER_CASES = [
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "12345",
    "3.14159 and 2,718,281",
    "In 2024, 7 out of 10 people",
    "don't I'll we're they've she's he'd I'm",
    "DON'T Don't",
    "a  b   c    d",
    "     five leading spaces",
    "trailing spaces   ",
    " leading space",
    "line1\nline2\n\nline4",
    "\n\n\n",
    "tab\tseparated\tvalues",
    "\t\tindented\n    four spaces",
    "def f(x):\n    return x * 2\n",
    "if (a != b && c <= d) { return -1; }",
    "café naïve résumé façade",
    "Ångström Øresund Straße",
    "日本語のテキスト",
    "中文测试",
    "한국어",
    "Привет, мир!",
    "مرحبا بالعالم",
    "emoji 😀🎉👍🏽",
    "family 👨‍👩‍👧‍👦",
    "combining e\u0301 a\u0308 n\u0303",
    "math ∑ ∫ ≤ ≥ ∞ π",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "<|im_end|><|im_end|>",
    "not special: <|im_start |> <im_start>",
    "<repo_name>rlx<file_sep>main.rs",
    "https://example.com/path?q=1&r=two#frag",
    "user@example.com",
    "ALL CAPS SENTENCE",
    "MixedCaseIdentifier snake_case_name kebab-case",
    "¡Hola! ¿Qué tal?",
    "",
    " ",
    "a",
    # Pre-tokenizer corners (review): CR LF, no-break and ideographic spaces before words,
    # a space run before a digit, contractions after a space / a digit, newline + digit.
    "line1\r\nline2\r\n",
    "x\u00a0word \u3000word",
    "a  1 and  22",
    " 's 1's \n1",
    "=" * 300,
]


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------

PLAIN_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "1 + 1 = 2, 2 + 2 =",
]
CHAT_MESSAGES = [
    {"role": "system", "content": "You are a helpful AI assistant named SmolLM, trained by Hugging Face"},
    {"role": "user", "content": "What is the tallest mountain on Earth?"},
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/rlx/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default="crates/rlx-models/tests/fixtures/llm")
    ap.add_argument("--n-new", type=int, default=64, help="greedy tokens per prompt")
    args = ap.parse_args()

    t0 = time.time()
    m = Model(args.model)
    r = m.reader
    print(f"loaded {args.model} in {time.time() - t0:.1f}s: {m.n_layer} layers, d={m.d_model}, "
          f"heads={m.n_head}/{m.n_kv_head}, ff={m.d_ff}, vocab={m.vocab}, "
          f"tied_output={m.tied_output}", flush=True)

    tk, specials = build_tokenizer(r)
    add_bos = field_value(r, "tokenizer.ggml.add_bos_token")
    bos_token_id = field_value(r, "tokenizer.ggml.bos_token_id")
    eos_token_id = field_value(r, "tokenizer.ggml.eos_token_id")
    # llama.cpp adds BOS only when add_bos_token is true; honour the file's flag.
    bos_for_prompts = int(bos_token_id) if add_bos else None
    template = field_value(r, "tokenizer.chat_template")

    chat_text = render_chatml(CHAT_MESSAGES, add_generation_prompt=True)
    try:
        import jinja2  # optional: verify the hand rendering against the real template
        env = jinja2.Environment()
        jt = env.from_string(template).render(messages=CHAT_MESSAGES, add_generation_prompt=True)
        assert jt == chat_text, (jt, chat_text)
        template_checked = True
    except ImportError:
        template_checked = False

    os.makedirs(args.out, exist_ok=True)
    prompts = PLAIN_PROMPTS + [chat_text]
    records = []
    for i, text in enumerate(prompts):
        t1 = time.time()
        ids = encode(tk, text, bos_for_prompts)
        prefill_logits, dec0_logits, gen, margins = generate(m, ids, args.n_new, False)
        _, dec0_q8_logits, gen_q8, margins_q8 = generate(m, ids, args.n_new, True)
        np.save(os.path.join(args.out, f"prompt{i}_logits.npy"), prefill_logits.astype(F32))
        if dec0_logits is not None:
            np.save(os.path.join(args.out, f"prompt{i}_decode0_logits.npy"),
                    dec0_logits.astype(F32))
            np.save(os.path.join(args.out, f"prompt{i}_decode0_q8_logits.npy"),
                    dec0_q8_logits.astype(F32))
        rec = dict(
            text=text,
            ids=ids,
            generated=gen,
            min_margin=min(margins),
            margins=margins,
            decoded_text=decode(tk, gen),
            # How many leading generated tokens are "safe" to compare for an implementation
            # whose logits differ from ours by less than thr/2: the first step whose
            # top1-top2 margin is below thr may legitimately pick another token.
            stable_prefix=stable_prefix(margins),
            # The same with RLX's default activations: 16 bits in the prompt, 8 in every
            # decode step (llama.cpp's decode arithmetic). Q8 rounding makes decode logits sensitive to the last bits of
            # the activations (SmolLM2 has outlier features, so a rounding flip in a block
            # with a large max moves a dot by amax/127 * w), so implementations with other
            # f32 summation orders agree on these only up to the first small margin.
            generated_q8=gen_q8,
            margins_q8=margins_q8,
            stable_prefix_q8=stable_prefix(margins_q8),
        )
        if i == len(prompts) - 1:
            rec["chat_messages"] = CHAT_MESSAGES
        records.append(rec)
        print(f"prompt {i} ({len(ids)} tok, {time.time() - t1:.1f}s): {text!r}\n"
              f"  ids={ids}\n  -> {rec['decoded_text']!r}\n  min_margin={rec['min_margin']:.4f}",
              flush=True)

    ref = dict(
        model=os.path.basename(args.model),
        model_bytes=os.path.getsize(args.model),
        add_bos=bool(add_bos),
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        n_new=args.n_new,
        config=dict(n_layer=m.n_layer, d_model=m.d_model, n_head=m.n_head,
                    n_kv_head=m.n_kv_head, head_dim=m.head_dim, d_ff=m.d_ff, vocab=m.vocab,
                    rope_base=m.rope_base, rms_eps=m.eps, tied_output=m.tied_output),
        chat_template=template,
        chat_template_checked_with_jinja2=template_checked,
        prompts=records,
        notes=(
            "Generated by tools/llm/reference.py (NumPy, independent of RLX). Weights "
            "dequantized with gguf.quants.dequantize. Prefill: f32 activations; "
            "prompt{i}_logits.npy = logits of the last prompt position from prefill. "
            "generated[0] = argmax of those; generated[1..] come from single-token decode "
            "steps with f32 activations; prompt{i}_decode0_logits.npy = logits of the first "
            "decode step (input generated[0]). generated_q8 / margins_q8 / "
            "prompt{i}_decode0_q8_logits.npy: the same with the prompt's activation rows "
            "quantized to 16 bits and the decode steps' to 8 (blocks of 32, d=amax/32767 "
            "or amax/127, round half away from zero) before every weight matmul incl. the "
            "output head. margins[j] = top1-top2 "
            "logit at step j. Dots accumulate in "
            "f64, stored tensors are f32. RoPE NORM (adjacent pairs), GQA h//group, "
            "output head tied to token_embd when output.weight is absent. Greedy "
            "generation does not stop at EOS. add_bos follows tokenizer.ggml.add_bos_token. "
            "stable_prefix[thr] = index of the first step whose margin < thr (tokens "
            "before it are robust to logit noise below thr/2). Cross-checked: prefill "
            "logits equal llama.cpp's on an all-F32 copy of the model to ~3e-5 "
            "(tools/llm/crosscheck_llamacpp.py)."
        ),
    )
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")

    # Tokenizer round-trip fixtures for RLX's tokenizer test.
    cases = []
    for s in TOKENIZER_CASES:
        ids = tk.encode(s, add_special_tokens=False).ids
        dec = decode(tk, ids)
        cases.append(dict(text=s, ids=ids, decoded=dec, roundtrip=(dec == s)))
    decode_checks = []
    for tid in [0, 1, 2, 198, 216, 28, 504, 3575]:  # specials, '\n', ' ', ...
        decode_checks.append(dict(ids=[tid], text=decode(tk, [tid]),
                                  token=tk.id_to_token(tid)))
    for rec in records:
        decode_checks.append(dict(ids=rec["ids"], text=decode(tk, rec["ids"])))
        decode_checks.append(dict(ids=rec["generated"], text=rec["decoded_text"]))
    tok_fixture = dict(
        model=os.path.basename(args.model),
        oracle="HuggingFace tokenizers BPE built from GGUF metadata "
               "(Digits(individual) + ByteLevel(no prefix space, regex); ByteLevel decoder)",
        add_bos=bool(add_bos),
        special_tokens=specials,
        notes="ids are encode(text) with no BOS/EOS added; decoded = decode(ids) with "
              "special tokens kept; roundtrip tells whether decoded == text.",
        cases=cases,
        decode_checks=decode_checks,
    )
    with open(os.path.join(args.out, "tokenizer.json"), "w") as f:
        json.dump(tok_fixture, f, indent=1, ensure_ascii=False)
        f.write("\n")

    all_min = min(rec["min_margin"] for rec in records)
    print(f"min top1-top2 margin over all steps: {all_min:.5f}")
    print(f"total {time.time() - t0:.1f}s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
