#!/usr/bin/env python3
"""optax fixtures for rlx-optim's tests: parameters after each of several updates, for
each optimizer configuration, from the same random gradients (float32, optax's default).

    pip install jax optax
    python3 tools/optim/make_optax_fixtures.py > crates/rlx-optim/tests/fixtures/optax.json
"""
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax

rng = np.random.default_rng(11)
shapes = [(3,), (2, 2)]
init = [rng.normal(size=s).astype(np.float32) for s in shapes]
grads = [[rng.normal(size=s).astype(np.float32) * 2 for s in shapes] for _ in range(6)]

warmup_cosine = dict(init=0.0, peak=0.01, warmup=2, decay_steps=5, end=0.001)
CONFIGS = {
    "sgd": (optax.sgd(0.1), dict(rule="sgd", momentum=0.0, nesterov=False, lr=0.1)),
    "sgd_momentum": (optax.sgd(0.1, momentum=0.9), dict(rule="sgd", momentum=0.9, nesterov=False, lr=0.1)),
    "sgd_nesterov": (optax.sgd(0.1, momentum=0.9, nesterov=True), dict(rule="sgd", momentum=0.9, nesterov=True, lr=0.1)),
    "adam": (optax.adam(1e-2), dict(rule="adam", weight_decay=0.0, lr=1e-2)),
    "adamw": (optax.adamw(1e-2, weight_decay=0.01), dict(rule="adam", weight_decay=0.01, lr=1e-2)),
    "lion": (optax.lion(1e-3, weight_decay=0.01), dict(rule="lion", weight_decay=0.01, lr=1e-3)),
    "adam_clip_warmup_cosine": (
        optax.chain(optax.clip_by_global_norm(0.5),
                    optax.adam(optax.warmup_cosine_decay_schedule(0.0, 0.01, 2, 5, 0.001))),
        dict(rule="adam", weight_decay=0.0, clip=0.5, schedule=warmup_cosine)),
}

out = {"generator": f"tools/optim/make_optax_fixtures.py (optax {optax.__version__}, jax {jax.__version__})",
       "init": [p.tolist() for p in init], "grads": [[g.tolist() for g in step] for step in grads], "configs": {}}
for name, (tx, spec) in CONFIGS.items():
    params = [jnp.array(p) for p in init]
    state = tx.init(params)
    trail = []
    for g in grads:
        updates, state = tx.update([jnp.array(x) for x in g], state, params)
        params = optax.apply_updates(params, updates)
        trail.append([np.asarray(p).tolist() for p in params])
    out["configs"][name] = dict(spec=spec, params=trail)
print(json.dumps(out, indent=1))
