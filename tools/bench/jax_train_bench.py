#!/usr/bin/env python3
"""JAX's side of `rlx bench train`: the jitted training step (forward, backward, AdamW
update) of the same two networks RLX times, in float32 on the CPU. Prints one JSON object.

Networks (must match crates/rlx-cli/src/bench.rs):
- digits MLP: 64 -> 512 (ReLU) -> 10, softmax cross-entropy, batch 64;
- character transformer: vocab 64, sequence 64, width 128, 4 heads, 2 pre-norm blocks
  (causal attention, GELU MLP of width 512), batch 16;
- digits CNN: 1x8x8 -> conv 3x3 32 (pad 1) -> ReLU -> max pool 2 -> conv 3x3 64 (pad 1)
  -> ReLU -> max pool 2 -> dense 256 -> 10, NCHW, batch 64.
Each step time is the median of timed runs after compilation and warm-up.
"""
import argparse
import json
import os
import statistics
import time

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--reps", type=int, default=30)
args = ap.parse_args()
# Pin XLA's CPU thread pools before jax loads.
os.environ["XLA_FLAGS"] = (f"--xla_cpu_multi_thread_eigen={'true' if args.threads > 1 else 'false'} "
                           f"intra_op_parallelism_threads={args.threads}")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

key = jax.random.PRNGKey(0)


def dense(k, i, o):
    return {"w": jax.random.uniform(k, (i, o), minval=-1, maxval=1) * (6 / i) ** 0.5, "b": jnp.zeros(o)}


def ce(logits, labels):
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0])


def mlp_params(k):
    k1, k2 = jax.random.split(k)
    return {"fc1": dense(k1, 64, 512), "fc2": dense(k2, 512, 10)}


def mlp_loss(p, x, y):
    h = jax.nn.relu(x @ p["fc1"]["w"] + p["fc1"]["b"])
    return ce(h @ p["fc2"]["w"] + p["fc2"]["b"], y)


V, S, D, H, L = 64, 64, 128, 4, 2


def ln(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / jnp.sqrt(v + 1e-5) * g + b


def tf_params(k):
    ks = jax.random.split(k, 3 + 6 * L)
    p = {"tok": jax.random.normal(ks[0], (V, D)) * 0.02, "pos": jax.random.normal(ks[1], (S, D)) * 0.02,
         "head": dense(ks[2], D, V), "lnf": (jnp.ones(D), jnp.zeros(D)), "blocks": []}
    for l in range(L):
        kk = ks[3 + 6 * l: 9 + 6 * l]
        p["blocks"].append({"ln1": (jnp.ones(D), jnp.zeros(D)), "ln2": (jnp.ones(D), jnp.zeros(D)),
                            "q": dense(kk[0], D, D), "k": dense(kk[1], D, D), "v": dense(kk[2], D, D),
                            "o": dense(kk[3], D, D), "up": dense(kk[4], D, 4 * D), "down": dense(kk[5], 4 * D, D)})
    return p


def tf_loss(p, x, y):
    t = p["tok"][x] + p["pos"]
    b = x.shape[0]
    mask = jnp.tril(jnp.ones((S, S), dtype=bool))
    for blk in p["blocks"]:
        a = ln(t, *blk["ln1"])
        heads = lambda z: z.reshape(b, S, H, D // H).transpose(0, 2, 1, 3)
        q, k, v = (heads(a @ blk[n]["w"] + blk[n]["b"]) for n in "qkv")
        s = jnp.where(mask, q @ k.transpose(0, 1, 3, 2) / (D // H) ** 0.5, -jnp.inf)
        o = (jax.nn.softmax(s, -1) @ v).transpose(0, 2, 1, 3).reshape(b, S, D)
        t = t + o @ blk["o"]["w"] + blk["o"]["b"]
        m = ln(t, *blk["ln2"])
        m = jax.nn.gelu(m @ blk["up"]["w"] + blk["up"]["b"], approximate=False)
        t = t + m @ blk["down"]["w"] + blk["down"]["b"]
    t = ln(t, *p["lnf"])
    return ce(t @ p["head"]["w"] + p["head"]["b"], y)


def conv(k, o, c):
    return {"w": jax.random.uniform(k, (o, c, 3, 3), minval=-1, maxval=1) * (6 / (9 * c)) ** 0.5,
            "b": jnp.zeros(o)}


def cnn_params(k):
    k1, k2, k3 = jax.random.split(k, 3)
    return {"conv1": conv(k1, 32, 1), "conv2": conv(k2, 64, 32), "fc": dense(k3, 256, 10)}


def cnn_loss(p, x, y):
    h = x
    for name in ("conv1", "conv2"):
        h = jax.lax.conv_general_dilated(h, p[name]["w"], (1, 1), ((1, 1), (1, 1)),
                                         dimension_numbers=("NCHW", "OIHW", "NCHW"))
        h = jax.nn.relu(h + p[name]["b"][None, :, None, None])
        h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    h = h.reshape(h.shape[0], -1)
    return ce(h @ p["fc"]["w"] + p["fc"]["b"], y)


def time_step(loss_fn, params, x, y):
    opt = optax.adamw(1e-3, weight_decay=0.05)
    state = opt.init(params)

    @jax.jit
    def step(params, state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    for _ in range(5):
        params, state, loss = step(params, state, x, y)
    jax.block_until_ready(loss)
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        params, state, loss = step(params, state, x, y)
        jax.block_until_ready(loss)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


k1, k2, k3 = jax.random.split(key, 3)
x = jax.random.uniform(k1, (64, 64))
y = jax.random.randint(k2, (64,), 0, 10)
mlp_s = time_step(mlp_loss, mlp_params(k3), x, y)
tx = jax.random.randint(k1, (16, S), 0, V)
ty = jax.random.randint(k2, (16, S), 0, V)
tf_s = time_step(tf_loss, tf_params(k3), tx, ty)
cnn_s = time_step(cnn_loss, cnn_params(k3), jax.random.uniform(k1, (64, 1, 8, 8)), y)
print(json.dumps({"engine": f"jax {jax.__version__} (jit, XLA CPU)", "threads": args.threads,
                  "mlp_step_seconds": mlp_s, "transformer_step_seconds": tf_s, "cnn_step_seconds": cnn_s}))
