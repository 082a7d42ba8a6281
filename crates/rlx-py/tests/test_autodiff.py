"""Differentiation from Python: grad, grad_with_loss, jvp and hvp graphs compile like any
other and agree with central finite differences computed in float64 from the same graph."""

import numpy as np
import pytest

import rlx

RNG = np.random.default_rng(11)


def network(dtype=rlx.float64):
    """loss = mean(log_softmax(tanh(x @ w1 + b) @ w2)[label]) over 5 rows."""
    g = rlx.Graph("net")
    x = g.input("x", dtype, (5, 4))
    w1 = g.param("w1", dtype, (4, 3))
    b = g.param("b", dtype, (3,))
    w2 = g.param("w2", dtype, (3, 2))
    h = rlx.tanh(x @ w1 + b)
    loss = rlx.mean(rlx.softplus(h @ w2) * 0.5 + rlx.sigmoid(h).sum(axes=1, keepdims=True) ** 2)
    g.set_outputs([loss])
    return g


VALUES = {
    "x": RNG.standard_normal((5, 4)),
    "w1": RNG.standard_normal((4, 3)),
    "b": RNG.standard_normal(3),
    "w2": RNG.standard_normal((3, 2)),
}
PARAMS = ("w1", "b", "w2")


def loss_at(values):
    c = network().compile()
    for p in PARAMS:
        c.set_param(p, values[p])
    return float(c.run(x=values["x"])[0])


def numeric_grad(name, h=1e-6):
    out = np.zeros_like(VALUES[name])
    for i in np.ndindex(out.shape):
        up = {k: v.copy() for k, v in VALUES.items()}
        down = {k: v.copy() for k, v in VALUES.items()}
        up[name][i] += h
        down[name][i] -= h
        out[i] = (loss_at(up) - loss_at(down)) / (2 * h)
    return out


def compiled(graph):
    c = graph.compile()
    for p in PARAMS:
        c.set_param(p, VALUES[p])
    return c


@pytest.mark.parametrize("wrt", [["w1"], ["b", "w2", "x"]])
def test_grad_matches_finite_differences(wrt):
    g = rlx.grad(network(), wrt)
    assert "d_output" in g.input_names
    grads = compiled(g).run(x=VALUES["x"], d_output=np.array(1.0))
    assert len(grads) == len(wrt)
    for name, got in zip(wrt, grads):
        want = numeric_grad(name)
        assert got.shape == want.shape
        assert np.allclose(got, want, rtol=1e-6, atol=1e-8), (name, np.abs(got - want).max())


def test_grad_with_loss_and_the_seed_scales():
    g = rlx.grad_with_loss(network(), ["w2"])
    loss, gw = compiled(g).run(x=VALUES["x"], d_output=np.array(3.0))
    assert np.isclose(float(loss), loss_at(VALUES), rtol=1e-12)
    assert np.allclose(gw, 3 * numeric_grad("w2"), rtol=1e-6, atol=1e-8)


def test_jvp_is_the_directional_derivative():
    v = RNG.standard_normal((4, 3))
    g = rlx.jvp(network(), ["w1"])
    assert "tangent_w1" in g.input_names
    primal, tangent = compiled(g).run(x=VALUES["x"], tangent_w1=v)
    assert np.isclose(float(primal), loss_at(VALUES), rtol=1e-12)
    assert np.isclose(float(tangent), (numeric_grad("w1") * v).sum(), rtol=1e-6)


def test_hvp_matches_differences_of_gradients():
    v = RNG.standard_normal(3)
    g = rlx.hvp(network(), ["b"])
    loss, grad_b, hv = compiled(g).run(x=VALUES["x"], tangent_b=v)
    gradient = compiled(rlx.grad(network(), ["b"]))
    h = 1e-5
    base = VALUES["b"]

    def grad_at(b):
        gradient.set_param("b", b)
        return gradient.run(x=VALUES["x"], d_output=np.array(1.0))[0]

    want = (grad_at(base + h * v) - grad_at(base - h * v)) / (2 * h)
    assert np.allclose(hv, want, rtol=1e-5, atol=1e-8)
    assert np.allclose(grad_b, numeric_grad("b"), rtol=1e-6, atol=1e-8)


def test_transforms_compose_and_f32_graphs_differentiate():
    assert rlx.grad(network(rlx.float32), ["x"]).output_count == 1
    # jvp of grad: the grad and its directional derivative (an HVP by forward-over-reverse).
    v = RNG.standard_normal(3)
    g = compiled(rlx.jvp(rlx.grad(network(), ["b"]), ["b"]))
    grad_b, hv = g.run(x=VALUES["x"], d_output=np.array(1.0), tangent_b=v)
    h = compiled(rlx.hvp(network(), ["b"])).run(x=VALUES["x"], tangent_b=v)[2]
    assert np.allclose(grad_b, numeric_grad("b"), rtol=1e-6, atol=1e-8)
    assert np.allclose(hv, h, rtol=1e-10, atol=1e-12)
    with pytest.raises(rlx.Error, match="nope"):
        rlx.grad(network(), ["nope"])
