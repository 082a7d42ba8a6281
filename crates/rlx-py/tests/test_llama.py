"""rlx.Llama on SmolLM2-135M (Q4_1): greedy text equals `rlx generate --temp 0`'s, streamed
pieces join to the non-streamed text, stop strings end it (OpenAI semantics), tokenize /
detokenize round-trip, and GGUF tensors read back. The CLI is the oracle for "same text"
(it shares the generation code, and its text was checked against llama.cpp)."""

import subprocess

import numpy as np
import pytest

import rlx

PROMPTS = [
    ("The capital of France is", False),
    ("Write a haiku about rust.", True),
    ("1, 2, 3, 4,", False),
]


@pytest.fixture(scope="module")
def llama(smollm2):
    return rlx.Llama(str(smollm2), threads=2)


def cli_text(rlx_cli, model, prompt, chat, n, extra=()):
    """What `rlx generate` prints after the prompt (stdout ends with one newline)."""
    args = [str(rlx_cli), "generate", "--model", str(model), "-p", prompt, "-n", str(n), "--temp", "0", "--threads", "2"]
    out = subprocess.run(args + (["--chat"] if chat else []) + list(extra), capture_output=True, check=True)
    text = out.stdout.decode()
    assert text.endswith("\n")
    text = text[:-1]
    return text if chat else text[len(prompt) :]


@pytest.mark.parametrize("prompt,chat", PROMPTS)
def test_greedy_text_equals_the_cli(llama, smollm2, rlx_cli, prompt, chat):
    got = llama.generate(prompt, max_tokens=24, chat=chat)
    assert got == cli_text(rlx_cli, smollm2, prompt, chat, 24)
    assert len(got) > 10
    stats = llama.last_stats
    assert stats["generated_tokens"] <= 24 and stats["finish_reason"] in ("stop", "length")


def test_stop_strings_match_the_cli(llama, smollm2, rlx_cli):
    full = llama.generate("1, 2, 3, 4,", max_tokens=24)
    # A stop string from the middle of the greedy text: the text ends right before it.
    stop = full[8:11]
    got = llama.generate("1, 2, 3, 4,", max_tokens=24, stop=[stop, "never appears"])
    assert got == full[: full.index(stop)]
    assert llama.last_stats["finish_reason"] == "stop"
    assert got == cli_text(rlx_cli, smollm2, "1, 2, 3, 4,", False, 24, ["--stop", stop])


@pytest.mark.parametrize("prompt,chat", PROMPTS)
def test_streaming_equals_non_streaming(llama, prompt, chat):
    full = llama.generate(prompt, max_tokens=32, chat=chat)
    for stop in (None, ["."], [" 7", ", 8"], ["e", "zzz"]):
        want = llama.generate(prompt, max_tokens=32, chat=chat, stop=stop)
        pieces = list(llama.stream(prompt, max_tokens=32, chat=chat, stop=stop))
        assert "".join(pieces) == want
        assert all(pieces)
        # Independently of the shared code: the unstopped text cut at the first stop.
        cuts = [full.index(s) for s in stop or [] if s in full]
        assert want == full[: min(cuts)] if cuts else want == full


def test_sampling_is_seeded(llama):
    a = llama.generate("Once upon a time", max_tokens=16, temperature=0.8, seed=5)
    b = llama.generate("Once upon a time", max_tokens=16, temperature=0.8, seed=5)
    c = llama.generate("Once upon a time", max_tokens=16, temperature=0.8, seed=6)
    assert a == b and a != c


def test_a_later_call_ends_a_stream(llama):
    s = llama.stream("Hello", max_tokens=8)
    next(s)
    llama.generate("Hi", max_tokens=2)
    with pytest.raises(rlx.Error, match="ended by a later"):
        next(s)


def test_tokenize_round_trip(llama):
    text = "Hello, wörld! 12345 <|im_start|>  tabs\tand\nnewlines 🦀"
    ids = llama.tokenize(text, add_special=False)
    assert llama.detokenize(ids) == text
    # Control-token text stays plain text unless asked.
    assert len(llama.tokenize("<|im_start|>", add_special=False)) > 1
    assert llama.tokenize("<|im_start|>", add_special=False, special=True) == [1]
    assert llama.context > 0 and llama.vocab_size == 49152 and llama.eos_token is not None


def test_errors(smollm2, llama):
    with pytest.raises(rlx.Error, match="nope.gguf"):
        rlx.Llama("/nope.gguf")
    with pytest.raises(rlx.Error, match="stop string 0 is empty"):
        llama.generate("Hi", stop=[""])
    with pytest.raises(rlx.Error, match="system message needs chat"):
        llama.generate("Hi", system="be brief")
    with pytest.raises(rlx.Error, match="top-p"):
        llama.generate("Hi", temperature=1.0, top_p=2.0)
    with pytest.raises(TypeError):
        llama.generate(42)


def test_gguf_file(smollm2):
    f = rlx.load_gguf(str(smollm2))
    assert f.metadata["general.architecture"] == "llama"
    assert "token_embd.weight" in f.tensor_names
    norm = f.tensor("blk.0.attn_norm.weight")
    assert norm.dtype == np.float32 and norm.shape == (576,)
    emb = f.tensor("token_embd.weight")
    assert emb.shape == (49152, 576) and np.isfinite(emb).all()
    with pytest.raises(rlx.Error, match="no tensor 'nope'"):
        f.tensor("nope")
