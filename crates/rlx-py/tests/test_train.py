"""rlx.Trainer on a loss graph built in Python: one SGD step equals the f64 gradient
step computed by hand, Adam's first steps follow optax's formulas, and a small regression
trains to a low loss."""

import numpy as np
import pytest

import rlx

RNG = np.random.default_rng(3)


def regression(n=17, d=3):
    g = rlx.Graph("regression")
    x = g.input("x", rlx.float32, (n, d))
    y = g.input("y", rlx.float32, (n, 1))
    w = g.param("w", rlx.float32, (d, 1))
    b = g.param("b", rlx.float32, (1,))
    g.set_outputs([rlx.mean((x @ w + b - y) ** 2)])
    return g


def data(n=17, d=3):
    x = RNG.standard_normal((n, d)).astype(np.float32)
    y = (x @ np.array([[1.5], [-2.0], [0.5]], np.float32) + 0.25).astype(np.float32)
    return x, y


def test_one_sgd_step_is_the_gradient_step():
    x, y = data()
    w0, b0 = np.zeros((3, 1), np.float32), np.zeros(1, np.float32)
    t = rlx.Trainer(regression(), {"w": w0, "b": b0}, optimizer="sgd", lr=0.1)
    loss = t.step(x=x, y=y)
    r = x.astype(np.float64) @ w0 + b0 - y
    assert np.isclose(loss, (r**2).mean(), rtol=1e-6)
    gw, gb = 2 * x.T.astype(np.float64) @ r / len(x), 2 * r.mean(0)
    assert np.allclose(t.params["w"], w0 - 0.1 * gw, rtol=1e-5, atol=1e-7)
    assert np.allclose(t.params["b"], b0 - 0.1 * gb, rtol=1e-5, atol=1e-7)
    assert t.steps == 1


def test_param_order_and_a_loss_of_shape_1():
    # Params given in another order than declared; the loss is [1], not a scalar.
    x, y = data()
    g = rlx.Graph("regression1")
    xi = g.input("x", rlx.float32, x.shape)
    yi = g.input("y", rlx.float32, y.shape)
    w = g.param("w", rlx.float32, (3, 1))
    b = g.param("b", rlx.float32, (1,))
    g.set_outputs([rlx.mean((xi @ w + b - yi) ** 2, axes=0)])
    b0, w0 = np.array([0.5], np.float32), np.array([[1.0], [0.0], [-1.0]], np.float32)
    t = rlx.Trainer(g, {"b": b0, "w": w0}, optimizer="sgd", lr=0.1)
    loss = t.step(x=x, y=y)
    r = x.astype(np.float64) @ w0 + b0 - y
    assert np.isclose(loss, (r**2).mean(), rtol=1e-6)
    assert np.allclose(t.params["w"], w0 - 0.1 * 2 * x.T.astype(np.float64) @ r / len(x), rtol=1e-5, atol=1e-7)
    assert np.allclose(t.params["b"], b0 - 0.1 * 2 * r.mean(0), rtol=1e-5, atol=1e-7)


def test_adam_first_step_moves_each_weight_by_lr():
    # optax: m = (1-b1) g, v = (1-b2) g^2, bias-corrected: update = g / (|g| + eps) -> sign(g).
    x, y = data()
    t = rlx.Trainer(regression(), {"w": np.zeros((3, 1)), "b": np.zeros(1)}, optimizer="adam", lr=0.01)
    t.step({"x": x, "y": y})
    r = -y.astype(np.float64)
    gw = 2 * x.T.astype(np.float64) @ r / len(x)
    assert np.allclose(t.params["w"], -0.01 * np.sign(gw), rtol=1e-5)


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw", "lion"])
def test_training_converges(optimizer):
    x, y = data()
    lr = {"sgd": 0.1, "adam": 0.05, "adamw": 0.05, "lion": 0.05}[optimizer]
    # A cosine decay to 0 over the run: sign-based Lion circles the optimum at a constant rate.
    zeros = {"w": np.zeros((3, 1)), "b": np.zeros(1)}
    t = rlx.Trainer(regression(), zeros, optimizer=optimizer, lr=lr, total_steps=300)
    losses = [t.step(x=x, y=y) for _ in range(300)]
    assert losses[-1] < 1e-3 * losses[0], (losses[0], losses[-1])


def test_schedule_and_bad_settings():
    x, y = data()
    t = rlx.Trainer(regression(), {"w": np.zeros((3, 1)), "b": np.zeros(1)}, lr=0.1, warmup_steps=2, total_steps=10)
    assert t.lr == 0.0
    t.step(x=x, y=y)
    assert np.isclose(t.lr, 0.05)
    assert '"step":1' in t.optimizer_json().replace(" ", "")
    with pytest.raises(rlx.Error, match="has no initial value"):
        rlx.Trainer(regression(), {"w": np.zeros((3, 1))})
    with pytest.raises(rlx.Error, match=r"param 'w' is \[3, 1\]"):
        rlx.Trainer(regression(), {"w": np.zeros(3), "b": np.zeros(1)})
    with pytest.raises(rlx.Error, match="unknown optimizer"):
        rlx.Trainer(regression(), {"w": np.zeros((3, 1)), "b": np.zeros(1)}, optimizer="rmsprop")
    with pytest.raises(rlx.Error, match="learning rate"):
        rlx.Trainer(regression(), {"w": np.zeros((3, 1)), "b": np.zeros(1)}, lr=float("nan"))
    with pytest.raises(rlx.Error, match="missing input 'y'"):
        t.step(x=x)
