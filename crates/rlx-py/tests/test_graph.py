"""Graph building, compiling and running from Python, each builder checked against a
NumPy float64 oracle at odd sizes; dtype conversions; errors."""

import math

import numpy as np
import pytest

import rlx

RNG = np.random.default_rng(7)
SIZES = [1, 3, 17, 1000]


def run1(build, *arrays, dtype=rlx.float32):
    """Builds `build(*inputs)` over inputs shaped like `arrays`, runs it, returns output 0."""
    g = rlx.Graph("t")
    xs = [g.input(f"x{i}", dtype, a.shape) for i, a in enumerate(arrays)]
    g.set_outputs([build(*xs)])
    return g.compile().run({f"x{i}": a for i, a in enumerate(arrays)})[0]


def close(got, want, dtype=np.float32, ulps=4, atol=0.0):
    want = np.asarray(want, np.float64)
    eps = np.finfo(dtype).eps
    tol = ulps * eps * np.maximum(np.abs(want), 1.0) + atol
    err = np.abs(got.astype(np.float64) - want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.all(err <= tol), f"max error {err.max()} (tolerance {tol.max()})"


ERF = np.vectorize(math.erf)
UNARY = {
    # name: (f64 oracle, domain, ulps)
    "neg": (lambda x: -x, (-5, 5), 0),
    "abs": (np.abs, (-5, 5), 0),
    "exp": (np.exp, (-20, 20), 4),
    "log": (np.log, (1e-3, 1e3), 4),
    "sqrt": (np.sqrt, (0, 100), 1),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (1e-2, 100), 4),
    "recip": (lambda x: 1 / x, (0.1, 10), 1),
    "relu": (lambda x: np.maximum(x, 0), (-5, 5), 0),
    "gelu": (lambda x: 0.5 * x * (1 + ERF(x / math.sqrt(2))), (-6, 6), 8),
    "gelu_tanh": (lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))), (-6, 6), 8),
    "silu": (lambda x: x / (1 + np.exp(-x)), (-10, 10), 8),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (-10, 10), 4),
    "tanh": (np.tanh, (-5, 5), 4),
    "softplus": (lambda x: np.log1p(np.exp(x)), (-10, 10), 8),
    "sin": (np.sin, (-6, 6), 4),
    "cos": (np.cos, (-6, 6), 4),
    "tan": (np.tan, (-1.4, 1.4), 8),
    "atan": (np.arctan, (-10, 10), 4),
    "mish": (lambda x: x * np.tanh(np.log1p(np.exp(x))), (-10, 10), 8),
    "erf": (ERF, (-3, 3), 4),
    "ln1p": (np.log1p, (-0.5, 10), 4),
    "log_sigmoid": (lambda x: -np.log1p(np.exp(-x)), (-10, 10), 8),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("n", SIZES)
def test_unary_against_f64(name, n):
    oracle, (lo, hi), ulps = UNARY[name]
    x = RNG.uniform(lo, hi, n).astype(np.float32)
    got = run1(getattr(rlx, name), x)
    close(got, oracle(x.astype(np.float64)), ulps=ulps, atol=1e-7 if name in ("sin", "cos", "erf", "atan") else 0)


def test_every_unary_has_a_builder_and_an_oracle():
    for name in rlx._rlx.unary_names():
        assert callable(getattr(rlx, name)), name
        assert name in UNARY, f"{name} has no f64 oracle in this test"


@pytest.mark.parametrize("n", SIZES)
def test_operators_broadcast_and_take_python_numbers(n):
    a = RNG.standard_normal((3, n)).astype(np.float32)
    b = RNG.standard_normal((n,)).astype(np.float32)
    got = run1(lambda x, y: (2.0 - x) * y / 4 + x**2 - (-y), a, b)
    want = (2.0 - a.astype(np.float64)) * b / 4 + a.astype(np.float64) ** 2 + b
    close(got, want, ulps=8)
    got = run1(lambda x, y: rlx.maximum(x, y) - rlx.minimum(x, 0.5), a, b)
    close(got, np.maximum(a, b) - np.minimum(a, 0.5), ulps=1)
    got = run1(lambda x: 1 / (x * x + 1) + 3 ** (x / 10), a)
    close(got, 1 / (a.astype(np.float64) ** 2 + 1) + 3.0 ** (a.astype(np.float64) / 10), ulps=8)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 17, 5), (17, 64, 33), (2, 1000, 3)])
def test_matmul(m, k, n):
    a = RNG.standard_normal((2, m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    got = run1(lambda x, y: x @ y, a, b)
    want = a.astype(np.float64) @ b.astype(np.float64)
    # A length-k dot product: error bounded by k u sum |a_i b_i|.
    bound = k * np.finfo(np.float32).eps * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
    assert np.all(np.abs(got - want) <= bound + 1e-30)
    assert np.array_equal(got, run1(rlx.matmul, a, b))


@pytest.mark.parametrize("n", SIZES)
def test_reductions_and_softmax(n):
    x = RNG.standard_normal((4, n)).astype(np.float32)
    x64 = x.astype(np.float64)
    close(run1(lambda v: rlx.sum(v, axes=-1), x), x64.sum(-1), ulps=2 * max(1, int(math.log2(n)) + 1), atol=1e-6)
    close(run1(lambda v: rlx.mean(v), x), x64.mean(), ulps=16, atol=1e-6)
    close(run1(lambda v: rlx.max(v, axes=0, keepdims=True), x), x64.max(0, keepdims=True), ulps=0)
    close(run1(lambda v: v.sum((0, 1)), x), x64.sum(), ulps=32, atol=1e-5)
    close(run1(lambda v: rlx.min(v, axes=1), x), x64.min(1), ulps=0)
    small = (x[:, :8] / 2 + 1).astype(np.float32)
    close(run1(lambda v: rlx.prod(v, axes=-1), small), small.astype(np.float64).prod(-1), ulps=16)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    close(run1(rlx.softmax, x), e / e.sum(-1, keepdims=True), ulps=8)
    close(run1(lambda v: rlx.log_softmax(v, axis=1), x), np.log(e / e.sum(-1, keepdims=True)), ulps=8, atol=1e-6)
    assert np.array_equal(run1(lambda v: rlx.argmax(v), x), x.argmax(-1))


def test_layout_builders():
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    assert np.array_equal(run1(lambda v: v.reshape(5, -1), x), x.reshape(5, -1))
    assert np.array_equal(run1(lambda v: rlx.reshape(v, (6, 5)), x), x.reshape(6, 5))
    assert np.array_equal(run1(lambda v: rlx.transpose(v, (2, 0, 1)), x), x.transpose(2, 0, 1))
    assert np.array_equal(run1(lambda v: v.T, x), x.T)
    assert np.array_equal(run1(lambda a, b: rlx.concat([a, b], axis=-1), x, x), np.concatenate([x, x], -1))
    assert np.array_equal(run1(lambda v: rlx.narrow(v, 2, 1, 3), x), x[:, :, 1:4])
    assert np.array_equal(run1(lambda v: rlx.broadcast_to(v, (4, 2, 3, 5)), x), np.broadcast_to(x, (4, 2, 3, 5)))
    assert np.array_equal(run1(lambda v: rlx.where(v > 0, v, 0.0), x), np.where(x > 0, x, 0))


@pytest.mark.parametrize("d", [1, 3, 17, 1000])
def test_norms(d):
    x = RNG.standard_normal((3, d)).astype(np.float32)
    gamma = RNG.standard_normal(d).astype(np.float32)
    beta = RNG.standard_normal(d).astype(np.float32)
    x64 = x.astype(np.float64)
    mu, var = x64.mean(-1, keepdims=True), x64.var(-1, keepdims=True)
    want = (x64 - mu) / np.sqrt(var + 1e-5) * gamma + beta
    close(run1(lambda v, g_, b_: rlx.layer_norm(v, g_, b_, eps=1e-5), x, gamma, beta), want, ulps=64, atol=1e-5)
    want = x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-6) * gamma
    close(run1(lambda v, g_: rlx.rms_norm(v, g_), x, gamma), want, ulps=32, atol=1e-6)


def test_cross_entropy_and_integer_inputs():
    logits = RNG.standard_normal((17, 5)).astype(np.float32)
    labels = RNG.integers(0, 5, 17).astype(np.int64)
    g = rlx.Graph()
    z = g.input("z", rlx.float32, logits.shape)
    y = g.input("y", rlx.int64, labels.shape)
    g.set_outputs([rlx.cross_entropy(z, y)])
    (got,) = g.compile().run(z=logits, y=labels)
    l64 = logits.astype(np.float64)
    lse = np.log(np.exp(l64 - l64.max(1, keepdims=True)).sum(1)) + l64.max(1)
    close(got, (lse - l64[np.arange(17), labels]).mean(), ulps=16)


def test_gather_and_constants():
    table = RNG.standard_normal((10, 4)).astype(np.float32)
    g = rlx.Graph()
    t = g.constant(table)
    i = g.input("i", "i32", (5,))
    g.set_outputs([rlx.gather(t, i) + g.constant([1, 2, 3, 4], dtype="f32")])
    idx = np.array([0, 9, 3, 3, 1], np.int32)
    (got,) = g.compile().run(i=idx)
    assert np.array_equal(got, table[idx] + np.array([1, 2, 3, 4], np.float32))
    # Lists become arrays of the input's own dtype.
    (got,) = g.compile().run(i=[1, 2, 3, 4, 5])
    assert np.array_equal(got, table[1:6] + np.array([1, 2, 3, 4], np.float32))


def test_conv_and_pools_against_direct_loops():
    x = RNG.standard_normal((1, 2, 5, 6)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    got = run1(lambda a, b: rlx.conv2d(a, b, padding=1), x, w)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 3, 5, 6))
    for o in range(3):
        for i in range(5):
            for j in range(6):
                want[0, o, i, j] = (xp[0, :, i : i + 3, j : j + 3] * w[o]).sum()
    close(got, want, ulps=64, atol=1e-5)
    got = run1(lambda a: rlx.max_pool2d(a, 2), x)
    assert np.array_equal(got, x[:, :, :4, :6].reshape(1, 2, 2, 2, 3, 2).max((3, 5)))
    close(run1(lambda a: rlx.avg_pool2d(a, 2), x), x[:, :, :4].astype(np.float64).reshape(1, 2, 2, 2, 3, 2).mean((3, 5)))


@pytest.mark.parametrize("causal", [False, True])
def test_attention_against_f64(causal):
    q = RNG.standard_normal((1, 4, 5, 8)).astype(np.float32)
    k = RNG.standard_normal((1, 2, 5, 8)).astype(np.float32)  # grouped: 2 K/V heads for 4 queries
    v = RNG.standard_normal((1, 2, 5, 8)).astype(np.float32)
    got = run1(lambda a, b, c: rlx.attention(a, b, c, causal=causal), q, k, v)
    kk, vv = np.repeat(k, 2, axis=1).astype(np.float64), np.repeat(v, 2, axis=1).astype(np.float64)
    s = q.astype(np.float64) @ kk.transpose(0, 1, 3, 2) / math.sqrt(8)
    if causal:
        s = np.where(np.tril(np.ones((5, 5), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    close(got, (p / p.sum(-1, keepdims=True)) @ vv, ulps=64, atol=1e-6)


def test_casts():
    x = np.array([-2.5, -0.5, 0.5, 1.5, 2.5, 1e-8, 70000.0], np.float32)
    # f32 -> f16 rounds to nearest even (NumPy's astype does too); 70000 overflows to inf.
    with np.errstate(over="ignore"):
        assert np.array_equal(run1(lambda v: v.astype("f16"), x), x.astype(np.float16))
    assert np.array_equal(run1(lambda v: rlx.cast(v, rlx.float64), x), x.astype(np.float64))
    i = np.array([-3, 0, 7, 2**31 - 1], np.int32)
    assert np.array_equal(run1(lambda v: v.astype(rlx.int64), i, dtype=rlx.int32), i.astype(np.int64))


# ---- dtypes ------------------------------------------------------------------------


def bf16_round(x):
    """f32 -> bf16 -> f32, round to nearest even, by integer arithmetic."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32)


def test_bf16_and_f16_inputs_round_to_nearest_even():
    # Ties both ways, a value just above a tie, denormals, inf, nan.
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, 1e-40, -3e38, np.inf, -0.0], np.float32)
    out = run1(lambda v: v, x, dtype=rlx.bfloat16)
    import ml_dtypes

    assert out.dtype == ml_dtypes.bfloat16
    assert np.array_equal(out.astype(np.float32).view(np.uint32), bf16_round(x).view(np.uint32))
    out = run1(lambda v: v, x, dtype=rlx.float16)
    assert out.dtype == np.float16
    with np.errstate(over="ignore"):  # NumPy's cast is RNE too; -3e38 overflows to -inf
        assert np.array_equal(out.view(np.uint16), x.astype(np.float16).view(np.uint16))
    nan = run1(lambda v: v, np.array([np.nan], np.float32), dtype=rlx.bfloat16)
    assert np.isnan(nan.astype(np.float32)).all()


@pytest.mark.parametrize(
    "dtype,values",
    [
        (np.int8, [-128, -1, 0, 1, 127]),
        (np.uint8, [0, 1, 200, 255]),
        (np.int32, [-(2**31), -7, 0, 2**31 - 1]),
        (np.int64, [-(2**63), -(2**53) - 1, 2**53 + 1, 2**63 - 1]),
        (np.bool_, [True, False, True]),
    ],
)
def test_integers_pass_exactly(dtype, values):
    x = np.array(values, dtype)
    out = run1(lambda v: v, x, dtype=np.dtype(dtype))
    assert out.dtype == x.dtype and np.array_equal(out, x)
    if dtype is not np.bool_ and dtype is not np.uint8:
        assert np.array_equal(run1(lambda v: -v, x, dtype=np.dtype(dtype)), -x)


def test_float_inputs_of_another_format_convert_by_value():
    x = np.array([0.1, 1 / 3, 1e-45, 3.4e38], np.float64)
    out = run1(lambda v: v, x)  # f64 array into an f32 input
    assert np.array_equal(out, x.astype(np.float32))
    # Non-contiguous and big-endian arrays are read by value.
    y = np.arange(12, dtype=">f4").reshape(3, 4)[:, ::2]
    assert np.array_equal(run1(lambda v: v * 1.0, y), y.astype(np.float32))


def test_params_convert_to_their_dtype():
    g = rlx.Graph()
    w = g.param("w", rlx.bfloat16, (3,))
    g.set_outputs([w.astype("f32")])
    c = g.compile()
    c.set_param("w", np.array([1 + 2**-8, 2.0, 1 + 3 * 2**-8]))
    assert np.array_equal(c.run()[0], bf16_round(np.array([1 + 2**-8, 2.0, 1 + 3 * 2**-8], np.float32)))
    assert c.param_names == ["w"] and c.input_names == [] and c.output_count == 1


def test_empty_scalar_and_unaligned_arrays():
    # Zero-size and 0-d inputs and outputs.
    assert run1(lambda v: v * 2, np.zeros((0, 3), np.float32)).shape == (0, 3)
    out = run1(lambda v: v + 1, np.array(2.5, np.float32))
    assert out.shape == () and out == 3.5
    # An unaligned buffer is read by value.
    raw = np.arange(17, dtype=np.float32).tobytes()
    x = np.frombuffer(b"\0" + raw, dtype=np.float32, offset=1)
    assert not x.flags["ALIGNED"]
    assert np.array_equal(run1(lambda v: v * 1.0, x), np.arange(17, dtype=np.float32))
    # Outputs own their bytes: valid and writable after the program is gone.
    g = rlx.Graph()
    g.set_outputs([g.input("x", rlx.float32, (3,)) * 2])
    c = g.compile()
    (o,) = c.run(x=np.ones(3, np.float32))
    del c, g
    import gc

    gc.collect()
    o[0] = 7
    assert o.tolist() == [7.0, 2.0, 2.0] and o.flags["WRITEABLE"]


def test_python_numbers_convert_exactly_to_integer_inputs():
    g = rlx.Graph()
    g.set_outputs([g.input("i", rlx.uint8, (2,)) + 1])
    c = g.compile()
    assert c.run(i=[3, 254])[0].tolist() == [4, 255]
    with pytest.raises(rlx.Error, match=r"input 'i'.*300"):
        c.run(i=[3, 300])
    with pytest.raises(rlx.Error, match=r"input 'i'.*1.5"):
        c.run(i=[3, 1.5])
    with pytest.raises(TypeError, match="None is not a dtype"):
        rlx.Graph().input("x", None, (1,))
    with pytest.raises(rlx.Error, match=r"input 'x': dim 1 of \[2, -3\] is negative"):
        rlx.Graph().input("x", rlx.float32, (2, -3))
    with pytest.raises(rlx.Error, match="negative"):
        rlx.narrow(rlx.Graph().input("x", rlx.float32, (4,)), 0, -1, 2)


def test_dtype_arguments():
    for arg in (rlx.float32, "f32", "float32", np.float32, np.dtype("float32")):
        assert rlx.Graph().input("x", arg, (1,)).dtype == "f32"
    assert rlx.Graph().input("x", "bool", (1,)).dtype == "bool"
    assert repr(rlx.bfloat16) == "rlx.bfloat16" and rlx.int64.itemsize == 8


# ---- errors ------------------------------------------------------------------------


def test_errors_name_what_is_wrong():
    g = rlx.Graph()
    x = g.input("x", rlx.float32, (2, 3))
    with pytest.raises(rlx.Error, match=r"matmul.*\[2, ?3\].*\[2, ?3\]|\[2,3\].*\[2,3\]"):
        x @ x
    with pytest.raises(rlx.Error, match="axis 5"):
        rlx.softmax(x, axis=5)
    g.set_outputs([x * 2])
    c = g.compile()
    with pytest.raises(rlx.Error, match=r"missing input 'x'"):
        c.run()
    with pytest.raises(rlx.Error, match=r"unknown input 'y'"):
        c.run(y=np.zeros((2, 3), np.float32))
    with pytest.raises(rlx.Error, match=r"'x' expects f32\[2,3\], got f32\[3,2\]"):
        c.run(x=np.zeros((3, 2), np.float32))
    with pytest.raises(rlx.Error, match=r"expects f32\[2,3\], got i64\[2,3\]"):
        c.run(x=np.zeros((2, 3), np.int64))
    with pytest.raises(TypeError):
        c.run(x="not an array")
    with pytest.raises(TypeError, match="has no RLX equivalent"):
        c.run(x=np.zeros((2, 3), np.complex64))
    with pytest.raises(TypeError):
        x + "a"
    with pytest.raises(rlx.Error, match="unknown device"):
        g.compile(device="tpu")
    with pytest.raises(rlx.Error, match="precision"):
        g.compile(precision="f8")
    other = rlx.Graph().input("y", rlx.float32, (2, 3))
    with pytest.raises(rlx.Error, match="different graphs"):
        x + other
    with pytest.raises(rlx.Error):
        rlx.Graph.from_json("{not json")
    assert issubclass(rlx.Error, Exception)
    # A bool input's bytes are checked (a uint8 buffer viewed as bool can hold 2).
    h = rlx.Graph()
    b = h.input("b", rlx.bool_, (3,))
    h.set_outputs([rlx.where(b, 1.0, 0.0)])
    with pytest.raises(rlx.Error, match="bool byte 2 at offset 1"):
        h.compile().run(b=np.array([1, 2, 0], np.uint8).view(np.bool_))
    (out,) = h.compile().run(b=np.array([True, False, True]))
    assert out.dtype == np.float32 and out.tolist() == [1.0, 0.0, 1.0]


def test_a_device_this_build_lacks_is_an_error():
    g = rlx.Graph()
    g.set_outputs([g.input("x", rlx.float32, (1,)) * 2])
    if rlx.is_available("gpu"):
        pytest.skip("this build has a working GPU device")
    with pytest.raises(rlx.Error, match="gpu"):
        g.compile(device="gpu")


def test_help_reads_well():
    text = rlx.Graph.__doc__ + rlx.Graph.compile.__doc__ + rlx.Compiled.run.__doc__ + rlx.Llama.generate.__doc__
    assert "typed tensor graph" in text and "precision" in text and "stop" in text
    assert rlx.relu.__doc__ and rlx.sum.__doc__ and rlx.grad.__doc__


def test_json_round_trip_and_precision():
    g = rlx.Graph("mlp")
    x = g.input("x", rlx.float32, (4, 8))
    w = g.param("w", rlx.float32, (8, 8))
    g.set_outputs([rlx.gelu(x @ w)])
    h = rlx.Graph.from_json(g.to_json())
    assert h.input_names == ["x"] and h.param_names == ["w"]
    xs = RNG.standard_normal((4, 8)).astype(np.float32)
    ws = RNG.standard_normal((8, 8)).astype(np.float32)
    outs = []
    for graph, precision in ((g, "f32"), (h, "f32"), (g, "bf16")):
        c = graph.compile(precision=precision)
        c.set_param("w", ws)
        outs.append(c.run(x=xs)[0])
    assert np.array_equal(outs[0], outs[1])
    # bf16 matmul inputs: about 3 significant digits.
    assert np.allclose(outs[2], outs[0], rtol=0.05, atol=0.05)
    assert not np.array_equal(outs[2], outs[0])


def test_runs_release_the_gil_and_are_thread_safe():
    import threading

    # A run long enough to see: a Python thread makes progress during it only if the
    # GIL is released (a thread cannot run Python while another holds the GIL).
    g = rlx.Graph()
    x = g.input("x", rlx.float32, (512, 512))
    y = x
    for _ in range(8):
        y = rlx.tanh(y @ x)
    g.set_outputs([y])
    c = g.compile(threads=1)
    xs = (RNG.standard_normal((512, 512)) / 30).astype(np.float32)
    c.run(x=xs)
    ticks, running = [0], threading.Event()

    def count():
        while not running.is_set():
            pass
        while running.is_set():
            ticks[0] += 1

    counter = threading.Thread(target=count)
    counter.start()
    running.set()
    c.run(x=xs)
    during = ticks[0]
    running.clear()
    counter.join()
    assert during > 0

    g = rlx.Graph()
    x = g.input("x", rlx.float32, (64, 64))
    g.set_outputs([rlx.tanh(x @ x)])
    c = g.compile(threads=1)
    xs = RNG.standard_normal((64, 64)).astype(np.float32)
    want = c.run(x=xs)[0]
    results = []

    def work():
        for _ in range(20):
            results.append(np.array_equal(c.run(x=xs)[0], want))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 80


@pytest.mark.skipif(not rlx.is_available("gpu"), reason="a wheel built with --features gpu and a Vulkan device")
def test_gpu_matches_cpu():
    g = rlx.Graph()
    x = g.input("x", rlx.float32, (17, 33))
    w = g.param("w", rlx.float32, (33, 5))
    g.set_outputs([rlx.log_softmax(rlx.gelu(x @ w))])
    xs, ws = RNG.standard_normal((17, 33)).astype(np.float32), RNG.standard_normal((33, 5)).astype(np.float32)
    outs = []
    for device in ("cpu", "gpu"):
        c = g.compile(device=device)
        c.set_param("w", ws)
        outs.append(c.run(x=xs)[0])
    assert np.allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)
