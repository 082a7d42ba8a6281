"""`rlx serve` driven by the real `openai` client from PyPI, and by raw HTTP where a
client library would hide what is on the wire (malformed bodies, disconnects).

The oracle for the answers is `rlx generate` (itself checked against llama.cpp): a chat
completion at temperature 0 must be its `--chat --temp 0` text, a stream must join to
the non-streamed answer, and eight concurrent streams must each be their solo answer.
Embeddings are checked against llama.cpp's mean pooling (a fixture of llama-embedding).

Runs the `rlx` binary the Rust suite built (target/debug/rlx, or $RLX_BIN) on SmolLM2
from the model cache (tools/fetch_model.sh); tools/test_python.sh runs it.
"""

import http.client
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import threading
import time

import pytest
from openai import BadRequestError, NotFoundError, OpenAI

ROOT = pathlib.Path(__file__).resolve().parents[3]
RLX = os.environ.get("RLX_BIN", str(ROOT / "target" / "debug" / "rlx"))
CACHE = pathlib.Path(os.environ.get("RLX_MODELS", pathlib.Path.home() / ".cache" / "rlx"))
MODEL = CACHE / "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
CONTEXT = 512

if not MODEL.exists():
    if os.environ.get("RLX_REQUIRE_MODEL") == "1":
        raise RuntimeError(f"{MODEL} is missing: run tools/fetch_model.sh")
    pytest.skip(f"{MODEL} is missing: run tools/fetch_model.sh", allow_module_level=True)


class Server:
    """`rlx serve` on a free loopback port; its log lines are kept."""

    def __init__(self, *args):
        self.proc = subprocess.Popen(
            [RLX, "serve", "-m", str(MODEL), "--port", "0", "-c", str(CONTEXT), *args],
            stderr=subprocess.PIPE,
            text=True,
        )
        self.log = []
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"listening on http://([\d.]+):(\d+)", line)
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                break
        else:
            raise RuntimeError("rlx serve exited: " + "".join(self.log))
        threading.Thread(target=self._drain, daemon=True).start()
        self.client = OpenAI(base_url=f"http://{self.host}:{self.port}/v1", api_key="none", max_retries=0)

    def _drain(self):
        # Line by line (list.extend would show nothing until the pipe closes).
        for line in self.proc.stderr:
            self.log.append(line)

    def post(self, path, body, raw=False):
        """Status and parsed JSON of a POST (`body` sent as is when `raw`)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
        conn.request("POST", path, body if raw else json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, json.loads(data)

    def health(self):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        conn.request("GET", "/health")
        health = json.loads(conn.getresponse().read())
        conn.close()
        return health

    def stop(self):
        """Ctrl-C: the server drains and exits 0."""
        self.proc.send_signal(signal.SIGINT)
        assert self.proc.wait(timeout=120) == 0, "".join(self.log)


@pytest.fixture(scope="module")
def server():
    s = Server("--parallel", "8")
    yield s
    s.stop()


def generate(prompt, n, chat):
    """`rlx generate --temp 0` on the same model and context: its text."""
    args = [RLX, "generate", "-m", str(MODEL), "-c", str(CONTEXT), "--temp", "0", "-n", str(n), "-p", prompt, "--json"]
    out = subprocess.run(args + (["--chat"] if chat else []), capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["text"]


def chat(server, content, max_tokens, **kw):
    return server.client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": content}], temperature=0, max_tokens=max_tokens, **kw
    )


def test_models_and_health(server):
    models = server.client.models.list()
    assert [m.id for m in models.data] == [MODEL_ID]
    health = server.health()
    assert health["status"] == "ok" and health["slots"] == 8


def test_chat_completion_equals_rlx_generate(server):
    question = "What is the capital of France?"
    got = chat(server, question, 40)
    assert got.choices[0].message.content == generate(question, 40, chat=True)
    assert got.choices[0].message.role == "assistant"
    assert got.choices[0].finish_reason in ("stop", "length")
    assert got.usage.completion_tokens > 0
    assert got.usage.total_tokens == got.usage.prompt_tokens + got.usage.completion_tokens


def test_completion_equals_rlx_generate_and_stops_at_length(server):
    got = server.client.completions.create(model=MODEL_ID, prompt="The three primary colors are", max_tokens=12, temperature=0)
    assert got.choices[0].text == generate("The three primary colors are", 12, chat=False)
    assert got.choices[0].finish_reason == "length"
    assert got.usage.completion_tokens == 12


def test_streaming_equals_non_streaming(server):
    whole = chat(server, "Name three animals that live in the sea.", 48)
    stream = chat(server, "Name three animals that live in the sea.", 48, stream=True, stream_options={"include_usage": True})
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            pieces.append(c.delta.content or "")
            finish = c.finish_reason or finish
    assert "".join(pieces) == whole.choices[0].message.content
    assert finish == whole.choices[0].finish_reason
    assert usage.completion_tokens == whole.usage.completion_tokens
    # The completions endpoint too.
    text = server.client.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=20, temperature=0)
    streamed = server.client.completions.create(
        model=MODEL_ID, prompt="Once upon a time", max_tokens=20, temperature=0, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices) == text.choices[0].text


def test_stop_strings_end_the_text(server):
    whole = server.client.completions.create(model=MODEL_ID, prompt="1, 2, 3, 4,", max_tokens=16, temperature=0).choices[0]
    assert " 6" in whole.text
    cut = server.client.completions.create(
        model=MODEL_ID, prompt="1, 2, 3, 4,", max_tokens=16, temperature=0, stop=[" 6"]
    ).choices[0]
    assert cut.text == whole.text[: whole.text.index(" 6")]
    assert cut.finish_reason == "stop"


def test_ignore_eos_runs_to_max_tokens(server):
    # SmolLM2's greedy answer to this bare prompt is the end-of-sequence token at once.
    prompt = "Tell me the history of the printing press."
    ended = server.client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=10, temperature=0)
    assert ended.choices[0].finish_reason == "stop" and ended.usage.completion_tokens == 1
    # llama-server's extension: end-of-generation tokens are never sampled.
    got, answer = server.post("/v1/completions", {"prompt": prompt, "max_tokens": 10, "temperature": 0, "ignore_eos": True})
    assert got == 200, answer
    assert answer["choices"][0]["finish_reason"] == "length" and answer["usage"]["completion_tokens"] == 10
    assert answer["choices"][0]["text"].strip()


def test_eight_concurrent_streams_each_equal_their_solo_answer(server):
    questions = [
        "What is the capital of France?",
        "Write a haiku about the sea.",
        "What is 12 times 12?",
        "Name a famous painter.",
        "Why is the sky blue?",
        "Give me a word that rhymes with cat.",
        "What is the boiling point of water?",
        "Say hello in Spanish.",
    ]
    solo = [chat(server, q, 24).choices[0].message.content for q in questions]
    results = [None] * len(questions)
    peak = [0]
    done = threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], server.health()["running"])
            time.sleep(0.02)

    def ask(i):
        stream = chat(server, questions[i], 24, stream=True)
        results[i] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(questions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    assert results == solo
    assert peak[0] > 1, "the requests never ran together"


STORY = (
    "Once upon a time, in a small village by the sea, there lived an old fisherman who told stories "
    "to the children every evening about dragons, storms and lost ships. "
) * 3


def test_prompt_cache_reuses_rows_and_keeps_the_answers(server):
    """A prompt that begins as an earlier one did reuses the rows that prompt's prefill left
    in its slot, in whole row blocks of 64 tokens (splits there keep every bit:
    tests/batch.rs in rlx-models), and says how many in usage.prompt_tokens_details;
    its answer is the one without them (`cache_prompt: false`) and `rlx generate`'s. A
    conversation's next turn reuses the rows of the turn before's prompt."""
    question = STORY + "Summarize this story in one sentence."
    first = chat(server, question, 32)
    again = chat(server, question, 32)
    fresh = chat(server, question, 32, extra_body={"cache_prompt": False})
    n = first.usage.prompt_tokens
    assert again.usage.prompt_tokens_details.cached_tokens == (n - 1) // 64 * 64 > 0, again.usage
    assert fresh.usage.prompt_tokens_details.cached_tokens == 0, fresh.usage
    text = first.choices[0].message.content
    assert again.choices[0].message.content == text and fresh.choices[0].message.content == text
    assert text == generate(question, 32, chat=True)
    turn = [
        {"role": "user", "content": question},
        {"role": "assistant", "content": text},
        {"role": "user", "content": "Give the story a title."},
    ]

    def ask(**kw):
        return server.client.chat.completions.create(model=MODEL_ID, messages=turn, temperature=0, max_tokens=24, **kw)

    cached, uncached = ask(), ask(extra_body={"cache_prompt": False})
    assert cached.usage.prompt_tokens_details.cached_tokens >= 64, cached.usage
    assert uncached.usage.prompt_tokens_details.cached_tokens == 0, uncached.usage
    assert cached.choices[0].message.content == uncached.choices[0].message.content


def test_bad_requests_are_4xx_naming_the_field(server):
    cases = [
        ("/v1/completions", b"{bad json", 400, "body", "not valid JSON"),
        ("/v1/completions", b"[1, 2]", 400, "body", "JSON object"),
        ("/v1/completions", {"prompt": "hi", "max_tokens": "ten"}, 400, "max_tokens", "integer"),
        ("/v1/completions", {"prompt": "hi", "max_tokens": -5}, 400, "max_tokens", "at least 1"),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 10**12}, 400, "max_tokens", f"context of {CONTEXT}"),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 10**30}, 400, "max_tokens", "too large"),
        ("/v1/completions", {"prompt": 5}, 400, "prompt", "string"),
        ("/v1/completions", {}, 400, "prompt", "required"),
        ("/v1/completions", {"prompt": "hi", "temperature": "hot"}, 400, "temperature", "number"),
        ("/v1/completions", {"prompt": "hi", "temperature": 9}, 400, "temperature", "between"),
        ("/v1/completions", {"prompt": "hi", "stop": [1]}, 400, "stop", "string"),
        ("/v1/completions", {"prompt": "hi", "n": 2}, 400, "n", "must be 1"),
        ("/v1/completions", {"prompt": "hi", "stream": "yes"}, 400, "stream", "boolean"),
        ("/v1/completions", {"prompt": "hi", "ignore_eos": 1}, 400, "ignore_eos", "boolean"),
        ("/v1/completions", {"prompt": "hi", "cache_prompt": "no"}, 400, "cache_prompt", "boolean"),
        ("/v1/completions", {"prompt": "hi", "model": "gpt-4"}, 404, "model", "gpt-4"),
        ("/v1/chat/completions", {"messages": "hi"}, 400, "messages", "array"),
        ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role", "robot"),
        ("/v1/chat/completions", {"messages": [{"role": "user"}]}, 400, "messages[0].content", "required"),
    ]
    for path, body, status, param, text in cases:
        got, answer = server.post(path, body, raw=isinstance(body, bytes))
        assert got == status, (body, answer)
        assert answer["error"]["param"] == param, (body, answer)
        assert text in answer["error"]["message"], (body, answer)
    long_prompt = "word " * (CONTEXT + 50)
    got, answer = server.post("/v1/completions", {"prompt": long_prompt})
    assert got == 400
    lengths = [int(x) for x in re.findall(r"\d+", answer["error"]["message"])]
    assert CONTEXT in lengths and any(n > CONTEXT for n in lengths), answer
    # The client raises the matching errors.
    with pytest.raises(BadRequestError):
        server.client.completions.create(model=MODEL_ID, prompt="hi", max_tokens=-1)
    with pytest.raises(NotFoundError):
        server.client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    # An unknown route is a JSON 404.
    got, answer = server.post("/v1/embedding", {"input": "x"})
    assert got == 404 and "no route" in answer["error"]["message"]
    # Still serving.
    assert chat(server, "What is the capital of France?", 8).choices[0].message.content


EMBEDDINGS = json.loads((ROOT / "crates/rlx-models/tests/fixtures/llm/embeddings.json").read_text())["cases"]


def max_diff(a, b):
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))


def test_embeddings_equal_llama_cpp_mean_pooling():
    """/v1/embeddings with an f32 KV cache against llama-embedding --pooling mean
    --embd-normalize 2 on an all-f32 copy (tools/llm/make_embedding_fixtures.py): the
    bound of the Rust test of the pooled hidden states with the default 16-bit prompt
    activations (crates/rlx-models/tests/llm.rs)."""
    s = Server("--cache-type", "f32", "--parallel", "2")
    try:
        texts = [c["text"] for c in EMBEDDINGS]
        # The openai client asks for base64 and decodes it; all inputs in one request.
        got = s.client.embeddings.create(model=MODEL_ID, input=texts)
        assert [d.index for d in got.data] == list(range(len(texts)))
        assert got.usage.prompt_tokens == sum(len(c["ids"]) for c in EMBEDDINGS)
        for case, d in zip(EMBEDDINGS, got.data):
            assert max_diff(d.embedding, case["embedding"]) < 1e-4, case["text"][:40]
        # Floats over raw HTTP, one input, as text or as its token ids: the same vector.
        for body in ({"input": texts[0]}, {"input": EMBEDDINGS[0]["ids"], "encoding_format": "float"}):
            status, answer = s.post("/v1/embeddings", body)
            assert status == 200, answer
            (d,) = answer["data"]
            assert d["object"] == "embedding" and max_diff(d["embedding"], got.data[0].embedding) == 0.0
    finally:
        s.stop()


def test_embeddings_with_the_default_f16_cache(server):
    """The default cache holds K and V rounded to f16 (relative 2^-11): measured max|diff|
    2.0e-4 from the f32 oracle on components of ~0.04."""
    got = server.client.embeddings.create(model=MODEL_ID, input=[c["text"] for c in EMBEDDINGS])
    for case, d in zip(EMBEDDINGS, got.data):
        assert max_diff(d.embedding, case["embedding"]) < 1e-3, case["text"][:40]


def test_embeddings_bad_requests_name_the_field(server):
    cases = [
        ({}, "input", "required"),
        ({"input": ""}, "input", "empty"),
        ({"input": []}, "input", "empty"),
        ({"input": ["ok", 5]}, "input[1]", "string or an array of token ids"),
        ({"input": [1, 10**9]}, "input", "token id"),
        ({"input": [[1, 2], []]}, "input[1]", "empty"),
        ({"input": "x", "encoding_format": "hex"}, "encoding_format", "base64"),
        ({"input": "x", "dimensions": 7}, "dimensions", "576"),
        ({"input": "word " * (CONTEXT + 50)}, "input", f"context of {CONTEXT}"),
    ]
    for body, param, text in cases:
        status, answer = server.post("/v1/embeddings", body)
        assert status == 400, (body, answer)
        assert answer["error"]["param"] == param, (body, answer)
        assert text in answer["error"]["message"], (body, answer)
    status, answer = server.post("/v1/embeddings", {"input": "x", "model": "other"})
    assert status == 404 and answer["error"]["param"] == "model"


def stream_socket(server, max_tokens):
    """A raw streaming request; returns the socket after the first chunk arrived."""
    # Counting: a greedy answer that runs to max_tokens.
    body = json.dumps({"prompt": "1, 2, 3, 4,", "max_tokens": max_tokens, "stream": True, "temperature": 0})
    s = socket.create_connection((server.host, server.port))
    s.sendall(
        (
            f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}"
        ).encode()
    )
    received = b""
    while b"data: {" not in received:
        received += s.recv(4096)
    return s, received


def test_a_client_that_disconnects_mid_stream_frees_its_slot(server):
    s, head = stream_socket(server, 400)
    assert b"200 OK" in head and b"text/event-stream" in head
    s.close()
    deadline = time.time() + 60
    while not any("client disconnected" in line for line in server.log):
        assert time.time() < deadline, "".join(server.log)
        time.sleep(0.05)
    answer = chat(server, "What is the capital of France?", 40).choices[0].message.content
    assert answer == generate("What is the capital of France?", 40, chat=True)


def test_overload_is_503_and_the_queue_drains():
    server = Server("--parallel", "1", "--queue", "1")
    try:
        running, _ = stream_socket(server, 400)
        # The next request waits in the queue; the one after finds it full.
        waiting = socket.create_connection((server.host, server.port))
        body = json.dumps({"prompt": "hi", "max_tokens": 2})
        waiting.sendall(
            f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        deadline = time.time() + 30
        while server.health()["queued"] < 1:
            assert time.time() < deadline, server.health()
            time.sleep(0.02)
        got, answer = server.post("/v1/completions", {"prompt": "hi", "max_tokens": 2})
        assert got == 503, answer
        assert "busy" in answer["error"]["message"]
        # The running stream leaves; the queued request is served.
        running.close()
        waiting.settimeout(120)
        reply = b""
        while b"finish_reason" not in reply:
            chunk = waiting.recv(4096)
            assert chunk, reply
            reply += chunk
        assert b"200 OK" in reply
        waiting.close()
    finally:
        server.stop()
