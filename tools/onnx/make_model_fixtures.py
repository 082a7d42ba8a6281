#!/usr/bin/env python3
"""Writes onnxruntime reference fixtures for the real ONNX models fetched by
tools/fetch_onnx_models.sh into crates/rlx-onnx/tests/fixtures/models/.

    tools/fetch_onnx_models.sh
    /tmp/ortvenv/bin/python tools/onnx/make_model_fixtures.py [MODEL_DIR]

MODEL_DIR defaults to ${RLX_MODELS:-~/.cache/rlx}/onnx-models. onnxruntime runs on
CPUExecutionProvider with intra_op_num_threads=1 and default graph optimizations. Every array is
a numpy.save .npy; everything is deterministic (fixed seeds, single thread).

Files (prefix_… per model):
  minilm_{1x7,4x32,2x128}_{input_ids,attention_mask}.npy, minilm_<shape>_output_<i>.npy
      (i = graph output index: 0 input_ids passthrough, 1 attention_mask passthrough,
       2 token embeddings [B,S,384], 3 mean-pooled sentence embedding [B,384])
  open_nsfw_input.npy [1,224,224,3] f32 (NHWC), open_nsfw_output_0.npy [1,2] (softmax)
  silero_*.npy + silero_io.json (stateful streaming, see silero_io.json)
  op_counts.json: per model IR version, opsets, I/O, op-type counts (subgraphs included)
"""
import collections
import hashlib
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "crates", "rlx-onnx", "tests", "fixtures", "models")
SIZE_LIMIT = 4 * 1024 * 1024


def session(path):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])


def dims(value_info):
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_param if d.HasField("dim_param") else (d.dim_value if d.HasField("dim_value") else "?")
            for d in t.shape.dim]


def io_desc(values):
    return [{"name": v.name,
             "dtype": onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name,
             "dims": dims(v)} for v in values]


def walk(graph, depth, counts, stats):
    stats["max_depth"] = max(stats["max_depth"], depth)
    stats["graphs"] += 1
    for n in graph.node:
        key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
        counts[key] += 1
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                walk(a.g, depth + 1, counts, stats)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    walk(g, depth + 1, counts, stats)


def describe(name, path):
    m = onnx.load(path, load_external_data=False)
    counts, stats = collections.Counter(), {"max_depth": 0, "graphs": 0}
    walk(m.graph, 0, counts, stats)
    ext = [t.name for t in m.graph.initializer if onnx.external_data_helper.uses_external_data(t)]
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    d = {
        "file": os.path.basename(path),
        "sha256": sha,
        "ir_version": m.ir_version,
        "producer": f"{m.producer_name} {m.producer_version}".strip(),
        "opset_import": {(o.domain or "ai.onnx"): o.version for o in m.opset_import},
        "inputs": io_desc(m.graph.input),
        "outputs": io_desc(m.graph.output),
        "top_level_nodes": len(m.graph.node),
        "initializers": len(m.graph.initializer),
        "external_data_initializers": len(ext),
        "functions": len(m.functions),
        "subgraph_count": stats["graphs"] - 1,
        "max_subgraph_depth": stats["max_depth"],
        "op_counts": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
    }
    print(f"== {name} ({d['file']}, IR {d['ir_version']}, opsets {d['opset_import']}, {d['producer']})")
    for io in ("inputs", "outputs"):
        for v in d[io]:
            print(f"  {io[:-1]:6} {v['name']!r:24} {v['dtype']:8} {v['dims']}")
    print(f"  {d['top_level_nodes']} top-level nodes, {d['initializers']} initializers"
          f" ({len(ext)} external), {d['subgraph_count']} subgraphs (max depth {d['max_subgraph_depth']})")
    print("  ops: " + ", ".join(f"{k}:{v}" for k, v in d["op_counts"].items()))
    return d


def save(name, arr):
    np.save(os.path.join(OUT, name + ".npy"), np.ascontiguousarray(arr))


def minilm(path):
    sess = session(path)
    in_names = [i.name for i in sess.get_inputs()]
    out_names = [o.name for o in sess.get_outputs()]
    assert set(in_names) <= {"input_ids", "attention_mask", "token_type_ids"}, in_names
    rng = np.random.default_rng(20240601)
    for b, s in [(1, 7), (4, 32), (2, 128)]:
        ids = rng.integers(1000, 20000, size=(b, s), dtype=np.int64)
        ids[:, 0], ids[:, -1] = 101, 102
        mask = np.ones((b, s), dtype=np.int64)
        if (b, s) == (4, 32):
            for row in (1, 3):
                ids[row, -5:] = 0
                ids[row, -6] = 102  # [SEP] right before the padding, like a real tokenizer
                mask[row, -5:] = 0
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in in_names:
            feeds["token_type_ids"] = np.zeros((b, s), dtype=np.int64)
        feeds = {k: v for k, v in feeds.items() if k in in_names}
        outs = sess.run(None, feeds)
        tag = f"minilm_{b}x{s}"
        for k, v in feeds.items():
            save(f"{tag}_{k}", v)
        for i, v in enumerate(outs):
            save(f"{tag}_output_{i}", v)
        print(f"  {tag}: " + ", ".join(f"{n}{list(v.shape)}{v.dtype}" for n, v in zip(out_names, outs)))


def open_nsfw(path):
    sess = session(path)
    (inp,) = sess.get_inputs()
    rng = np.random.default_rng(20240602)
    # a mean-subtracted BGR-ish image: smooth-ish structure plus noise, roughly [-120, 120]
    h = w = 224
    yy, xx = np.meshgrid(np.linspace(-1, 1, h), np.linspace(-1, 1, w), indexing="ij")
    base = 80.0 * np.sin(3.0 * xx + 2.0 * yy)[..., None] * np.array([1.0, 0.6, -0.4])
    x = np.clip(base + rng.normal(0.0, 30.0, size=(h, w, 3)), -120, 120).astype(np.float32)[None]
    outs = sess.run(None, {inp.name: x})
    save("open_nsfw_input", x)
    for i, v in enumerate(outs):
        save(f"open_nsfw_output_{i}", v)
    print(f"  open_nsfw: {inp.name}{list(x.shape)} -> "
          + ", ".join(f"{o.name}{list(v.shape)}={v.ravel().tolist()}" for o, v in zip(sess.get_outputs(), outs)))


def silero(path):
    """Mirrors silero_vad.utils_vad.OnnxWrapper.__call__ at 16 kHz: each call feeds
    [context(64) | chunk(512)] = [1, 576], the context being the previous call's last 64 input
    samples (zeros first), and the previous call's stateN."""
    sess = session(path)
    in_names = [i.name for i in sess.get_inputs()]
    out_names = [o.name for o in sess.get_outputs()]
    assert in_names == ["input", "state", "sr"] and out_names == ["output", "stateN"], (in_names, out_names)
    n_chunks, chunk, ctx, sr = 20, 512, 64, 16000
    rng = np.random.default_rng(20240603)
    t = np.arange(n_chunks * chunk) / sr
    # voiced-like bursts: harmonics of a 140 Hz glottal pitch, amplitude-modulated at ~4 Hz
    # (syllable rate), gated on for chunks 4..9 and 13..17; faint noise elsewhere.
    voiced = sum(np.sin(2 * np.pi * 140 * k * t + k) / k for k in range(1, 12))
    syll = 0.5 * (1 - np.cos(2 * np.pi * 4.0 * t))
    gate = np.zeros(n_chunks)
    gate[4:10] = 1.0
    gate[13:18] = 0.7
    gate = np.repeat(gate, chunk)
    sig = 0.25 * gate * syll * voiced + gate * 0.02 * rng.normal(size=t.size) + 0.002 * rng.normal(size=t.size)
    chunks = sig.astype(np.float32).reshape(n_chunks, chunk)

    state0 = np.zeros((2, 1, 128), dtype=np.float32)
    state, context = state0, np.zeros((1, ctx), dtype=np.float32)
    inputs, probs, states = [], [], []
    for c in chunks:
        x = np.concatenate([context, c[None]], axis=1)
        out, state = sess.run(None, {"input": x, "state": state, "sr": np.array(sr, dtype=np.int64)})
        context = x[:, -ctx:]
        inputs.append(x)
        probs.append(out)
        states.append(state)
    probs, states, inputs = np.stack(probs), np.stack(states), np.stack(inputs)
    save("silero_chunks", chunks)
    save("silero_inputs", inputs)
    save("silero_state_init", state0)
    save("silero_probs", probs)
    save("silero_states", states)
    save("silero_state_final", states[-1])
    io = {
        "model": os.path.basename(path),
        "inputs": io_desc(onnx.load(path).graph.input),
        "outputs": io_desc(onnx.load(path).graph.output),
        "input_order": in_names,
        "output_order": out_names,
        "sr": sr,
        "chunk_samples": chunk,
        "context_samples": ctx,
        "calls": n_chunks,
        "protocol": "call i feeds input=silero_inputs[i] ([1,576] = previous call's last 64 input "
                    "samples (zeros for i=0) ++ silero_chunks[i]), state=silero_state_init for i=0 else "
                    "silero_states[i-1], sr=int64 scalar 16000; expects output=silero_probs[i] and "
                    "stateN=silero_states[i]. This is what silero_vad's OnnxWrapper does.",
        "files": {
            "silero_chunks.npy": list(chunks.shape),
            "silero_inputs.npy": list(inputs.shape),
            "silero_state_init.npy": list(state0.shape),
            "silero_probs.npy": list(probs.shape),
            "silero_states.npy": list(states.shape),
            "silero_state_final.npy": list(states[-1].shape),
        },
    }
    with open(os.path.join(OUT, "silero_io.json"), "w") as f:
        json.dump(io, f, indent=1)
        f.write("\n")
    print("  silero probs: " + " ".join(f"{p:.3f}" for p in probs.ravel()))


def main():
    default = os.path.join(os.environ.get("RLX_MODELS", os.path.expanduser("~/.cache/rlx")), "onnx-models")
    model_dir = sys.argv[1] if len(sys.argv) > 1 else default
    os.makedirs(OUT, exist_ok=True)
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}")
    models = {"minilm": "minilm.onnx", "open_nsfw": "open_nsfw.onnx",
              "silero_vad": "silero_vad.onnx", "silero_vad_16k": "silero_vad_16k.onnx"}
    summary = {"onnxruntime": ort.__version__, "onnx": onnx.__version__, "models": {}}
    for name, file in models.items():
        path = os.path.join(model_dir, file)
        if name == "silero_vad_16k" and not os.path.exists(path):
            continue
        summary["models"][name] = describe(name, path)
        {"minilm": minilm, "open_nsfw": open_nsfw, "silero_vad": silero}.get(name, lambda p: None)(path)
    with open(os.path.join(OUT, "op_counts.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"wrote {len(os.listdir(OUT))} files, {total} bytes to {OUT}")
    if total > SIZE_LIMIT:
        sys.exit(f"fixture dir is {total} bytes, over {SIZE_LIMIT}")


if __name__ == "__main__":
    main()
