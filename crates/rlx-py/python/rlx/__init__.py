"""RLX from Python: build typed tensor graphs, differentiate and compile them, run them on
NumPy arrays; run GGUF LLMs and ONNX models.

    import numpy as np, rlx
    g = rlx.Graph("affine")
    x = g.input("x", rlx.float32, (2, 3))
    w = g.param("w", rlx.float32, (3, 2))
    g.set_outputs([rlx.relu(x @ w)])
    c = g.compile()
    c.set_param("w", np.ones((3, 2), np.float32))
    (y,) = c.run({"x": np.arange(6, dtype=np.float32).reshape(2, 3)})

Every error from RLX is raised as ``rlx.Error`` with its one-line message.
"""

from . import _rlx
from ._rlx import (  # noqa: F401
    Compiled,
    DType,
    Error,
    GgufFile,
    Graph,
    Llama,
    OnnxModel,
    Stream,
    Trainer,
    Value,
    __version__,
    argmax,
    attention,
    avg_pool2d,
    bfloat16,
    bool_,
    broadcast_to,
    cast,
    concat,
    conv2d,
    cross_entropy,
    float16,
    float32,
    float64,
    gather,
    grad,
    grad_with_loss,
    hvp,
    int8,
    int32,
    int64,
    is_available,
    jvp,
    layer_norm,
    load_gguf,
    log_softmax,
    matmul,
    max_pool2d,
    narrow,
    rms_norm,
    softmax,
    uint8,
    unary,
)
from . import onnx  # noqa: F401

where = _rlx.where
reshape = _rlx.reshape
transpose = _rlx.transpose


def _unary(name):
    def f(x):
        return _rlx.unary(name, x)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"Elementwise {name}(x) as a new node of x's graph."
    return f


# One builder per IR unary function (relu, gelu, gelu_tanh, silu, tanh, exp, log, ...).
for _name in _rlx.unary_names():
    globals()[_name] = _unary(_name)
del _name


def _binary(name, doc):
    def f(a, b):
        return _rlx.binary(name, a, b)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


maximum = _binary("maximum", "Elementwise maximum (NumPy broadcasting).")
minimum = _binary("minimum", "Elementwise minimum (NumPy broadcasting).")
power = _binary("pow", "a ** b elementwise.")
equal = _binary("eq", "a == b elementwise (bool).")
not_equal = _binary("ne", "a != b elementwise (bool).")


def _reduction(name):
    def f(x, axes=None, keepdims=False):
        return _rlx.reduce(name, x, axes, keepdims)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"{name.capitalize()} over `axes` (an int, a list, or None for all), keeping them as size 1 with `keepdims`."
    return f


sum = _reduction("sum")  # noqa: A001 (NumPy's names)
mean = _reduction("mean")
max = _reduction("max")  # noqa: A001
min = _reduction("min")  # noqa: A001
prod = _reduction("prod")
