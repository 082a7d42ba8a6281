#!/usr/bin/env python3
"""JAX fixtures for RLX's autodiff tests (crates/rlx/tests/autodiff/jax.rs).

For five small networks, all in float64 (jax_enable_x64), this writes the inputs, the
loss, the gradient with respect to every input, a forward-mode directional derivative
(jvp of the loss along random tangents) and a Hessian-vector product (jax.jvp of
jax.grad, forward over reverse), as .npy files plus manifest.json describing them.

    pip install jax numpy
    python3 tools/autodiff/make_jax_fixtures.py [--out crates/rlx/tests/autodiff/fixtures/jax]

RLX builds the same networks with its graph builders (the test spells out each one);
the semantics must agree op for op: cross-entropy is the batch mean of
logsumexp(logits) - logits[label]; layer norm uses the biased variance; attention is
softmax(q k^T * scale + causal mask) v with each K/V head repeated for its query-head
group; convolution is cross-correlation (NCHW / OIHW, PyTorch padding order top, left,
bottom, right); pooling windows are VALID (no padding) here.
"""

import argparse
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

jax.config.update("jax_enable_x64", True)


def cross_entropy(logits, labels):
    lse = jax.nn.logsumexp(logits, axis=1)
    picked = jnp.take_along_axis(logits, labels[:, None], axis=1)[:, 0]
    return jnp.mean(lse - picked)


def mlp(p):
    h = jnp.tanh(p["x"] @ p["w1"] + p["b1"])
    logits = h @ p["w2"] + p["b2"]
    return cross_entropy(logits, LABELS8)


def layer_norm_net(p):
    x = p["x"]
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mu) / jnp.sqrt(var + EPS) * p["gamma"] + p["beta"]
    return jnp.sum(jnp.tanh(y) * R_LN)


def attention_block(p):
    x = p["x"]  # [5, 16]
    q = (x @ p["wq"]).reshape(5, 2, 8).transpose(1, 0, 2)  # [2 heads, 5, 8]
    k = (x @ p["wk"]).reshape(5, 1, 8).transpose(1, 0, 2)  # [1 kv head, 5, 8]
    v = (x @ p["wv"]).reshape(5, 1, 8).transpose(1, 0, 2)
    k = jnp.repeat(k, 2, axis=0)
    v = jnp.repeat(v, 2, axis=0)
    s = q @ k.transpose(0, 2, 1) / jnp.sqrt(8.0)
    mask = jnp.tril(jnp.ones((5, 5), dtype=bool))
    s = jnp.where(mask, s, -jnp.inf)
    a = jax.nn.softmax(s, axis=-1) @ v  # [2, 5, 8]
    o = a.transpose(1, 0, 2).reshape(5, 16) @ p["wo"]
    return jnp.sum(o * R_ATT)


def conv(x, w, pad, stride=(1, 1)):
    # pad: (top, left, bottom, right), as RLX orders it.
    return lax.conv_general_dilated(
        x, w, window_strides=stride, padding=((pad[0], pad[2]), (pad[1], pad[3])),
        dimension_numbers=("NCHW", "OIHW", "NCHW"))


def conv_net(p):
    h = conv(p["x"], p["k1"], (1, 1, 1, 1)) + p["c1"][None, :, None, None]
    h = jnp.maximum(h, 0.0)
    h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")  # [2, 4, 4, 4]
    h = jnp.tanh(conv(h, p["k2"], (0, 0, 0, 0)))  # [2, 6, 2, 2]
    h = lax.reduce_window(h, 0.0, lax.add, (1, 1, 2, 2), (1, 1, 2, 2), "VALID") / 4.0  # [2, 6, 1, 1]
    logits = h.reshape(2, 6) @ p["wf"]
    return cross_entropy(logits, LABELS2)


def scan_rnn(p):
    def step(h, x):
        return jnp.tanh(h @ p["w"] + x @ p["u"] + p["b"]), None

    h, _ = lax.scan(step, p["h0"], p["xs"])
    return jnp.sum(h * Q_RNN)


# RLX stores a norm's eps as an f32 attribute, so its 1e-5 is float32(1e-5) even in an
# f64 graph; use that value here too.
EPS = float(np.float32(1e-5))
rng = np.random.default_rng(2026)
LABELS8 = jnp.array(rng.integers(0, 10, size=8))
LABELS2 = jnp.array([3, 1])
R_LN = jnp.array(rng.uniform(-1, 1, size=(4, 8)))
R_ATT = jnp.array(rng.uniform(-1, 1, size=(5, 16)))
Q_RNN = jnp.array([[0.5, -1.0, 2.0, 0.25]])

NETWORKS = {
    "mlp": (mlp, {"x": (8, 16), "w1": (16, 32), "b1": (32,), "w2": (32, 10), "b2": (10,)}),
    "layer_norm": (layer_norm_net, {"x": (4, 8), "gamma": (8,), "beta": (8,)}),
    "attention": (attention_block, {"x": (5, 16), "wq": (16, 16), "wk": (16, 8), "wv": (16, 8), "wo": (16, 16)}),
    "conv_net": (conv_net, {"x": (2, 1, 8, 8), "k1": (4, 1, 3, 3), "c1": (4,), "k2": (6, 4, 3, 3), "wf": (6, 10)}),
    "scan_rnn": (scan_rnn, {"h0": (1, 4), "w": (4, 4), "u": (3, 4), "b": (4,), "xs": (6, 1, 3)}),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="crates/rlx/tests/autodiff/fixtures/jax")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    manifest = {"generator": f"tools/autodiff/make_jax_fixtures.py (jax {jax.__version__})",
                "constants": {"labels8": np.asarray(LABELS8).tolist(), "labels2": np.asarray(LABELS2).tolist(),
                              "r_ln": np.asarray(R_LN).tolist(), "r_att": np.asarray(R_ATT).tolist(),
                              "q_rnn": np.asarray(Q_RNN).tolist()},
                "networks": {}}
    for name, (fn, shapes) in NETWORKS.items():
        params = {k: jnp.array(rng.uniform(-1, 1, size=s)) for k, s in shapes.items()}
        tangents = {k: jnp.array(rng.uniform(-1, 1, size=s)) for k, s in shapes.items()}
        loss, grads = jax.value_and_grad(fn)(params)
        _, jvp = jax.jvp(fn, (params,), (tangents,))
        _, hvp = jax.jvp(jax.grad(fn), (params,), (tangents,))
        save = lambda tag, k, v: np.save(os.path.join(args.out, f"{name}.{tag}.{k}.npy"), np.asarray(v, dtype=np.float64))
        for k in shapes:
            save("input", k, params[k])
            save("tangent", k, tangents[k])
            save("grad", k, grads[k])
            save("hvp", k, hvp[k])
        manifest["networks"][name] = {"inputs": {k: list(s) for k, s in shapes.items()},
                                      "loss": float(loss), "jvp": float(jvp)}
        print(f"{name}: loss {float(loss):.6f}, jvp {float(jvp):.6f}")
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
