"""Type stubs for ``rlx``: typed tensor graphs, autodiff, compilation, GGUF LLMs and ONNX."""

import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Type, Union, overload

import numpy

from . import onnx as onnx

# ---- type aliases (stub-only; not importable at runtime) ------------------------------

_DTypeLike = Union["DType", str, numpy.dtype[Any], Type[Any]]
"""An rlx dtype, a name ("f32", "bfloat16", "bool", ...) or anything ``numpy.dtype`` takes."""

_ArrayLike = Union[numpy.ndarray, numpy.generic, int, float, bool, Sequence[Any]]
"""A NumPy array, or anything ``numpy.asarray`` turns into one (numbers, nested lists)."""

_Operand = Union["Value", int, float]
"""A value of the same graph, or a Python number made a scalar constant of the other side's dtype."""

_Axes = Union[int, Sequence[int], None]
"""One axis, several axes, or None for all of them."""

_Path = Union[str, "os.PathLike[str]"]

# ---- module attributes ------------------------------------------------------------------

__version__: str

class Error(Exception):
    """Any error raised by RLX; the message names the tensor, node, shape, dtype or field at fault."""

# ---- dtypes -----------------------------------------------------------------------------

class DType:
    """An RLX element type such as ``rlx.float32`` or ``rlx.bfloat16``."""

    @property
    def name(self) -> str:
        """Short name of the type: "f32", "bf16", "i64", "bool", ..."""
    @property
    def itemsize(self) -> int:
        """Size of one element in bytes."""
    def __eq__(self, other: object) -> bool:
        """Whether both are the same element type."""
    def __hash__(self) -> int:
        """Hash consistent with equality."""

float32: DType
float64: DType
float16: DType
bfloat16: DType
int8: DType
int32: DType
int64: DType
uint8: DType
bool_: DType

# ---- graphs -----------------------------------------------------------------------------

class Graph:
    """A typed tensor graph being built; leaves are inputs, params and constants."""

    def __init__(self, name: str = "graph") -> None:
        """Starts an empty graph called `name`."""
    def input(self, name: str, dtype: _DTypeLike, shape: Sequence[int]) -> Value:
        """Declares a named input, supplied on every run."""
    def param(self, name: str, dtype: _DTypeLike, shape: Sequence[int]) -> Value:
        """Declares a named param, set once via `Compiled.set_param` and kept across runs."""
    def constant(self, array: _ArrayLike, dtype: Optional[_DTypeLike] = None) -> Value:
        """Embeds `array`'s values as a constant, optionally converted to `dtype`."""
    def set_outputs(self, outputs: Union[Value, Sequence[Value]]) -> None:
        """Fixes the graph's results, in the order `Compiled.run` returns them."""
    @property
    def name(self) -> str:
        """The graph's name."""
    @property
    def input_names(self) -> List[str]:
        """Input names in declaration order."""
    @property
    def param_names(self) -> List[str]:
        """Param names in declaration order."""
    @property
    def output_count(self) -> int:
        """Number of outputs set so far."""
    def to_json(self) -> str:
        """Serializes the graph to RLX's versioned JSON format."""
    @staticmethod
    def from_json(text: str) -> Graph:
        """Rebuilds a graph from its JSON document."""
    def compile(
        self,
        device: str = "cpu",
        precision: str = "f32",
        threads: Optional[int] = None,
        fusion: bool = True,
    ) -> Compiled:
        """Verifies and plans the graph for `device` under a "f32", "bf16" or "f16" precision policy."""

class Value:
    """One node of a graph; operators and builders on it add nodes to that graph."""

    @property
    def shape(self) -> Tuple[int, ...]:
        """Dimensions of the node's result."""
    @property
    def dtype(self) -> str:
        """Short name of the result's element type ("f32", "bf16", "i64", ...)."""
    @property
    def ndim(self) -> int:
        """Rank of the result."""
    @property
    def graph(self) -> Graph:
        """The graph that owns this node."""
    @property
    def T(self) -> Value:
        """The transpose with all axes reversed."""
    def __add__(self, other: _Operand) -> Value:
        """self + other, broadcasting."""
    def __radd__(self, other: _Operand) -> Value:
        """other + self, broadcasting."""
    def __sub__(self, other: _Operand) -> Value:
        """self - other, broadcasting."""
    def __rsub__(self, other: _Operand) -> Value:
        """other - self, broadcasting."""
    def __mul__(self, other: _Operand) -> Value:
        """self * other, broadcasting."""
    def __rmul__(self, other: _Operand) -> Value:
        """other * self, broadcasting."""
    def __truediv__(self, other: _Operand) -> Value:
        """self / other, broadcasting."""
    def __rtruediv__(self, other: _Operand) -> Value:
        """other / self, broadcasting."""
    def __pow__(self, other: _Operand, mod: None = None) -> Value:
        """self ** other elementwise (no modulus allowed)."""
    def __rpow__(self, other: _Operand, mod: None = None) -> Value:
        """other ** self elementwise."""
    def __matmul__(self, other: _Operand) -> Value:
        """self @ other, batched matrix product."""
    def __rmatmul__(self, other: _Operand) -> Value:
        """other @ self, batched matrix product."""
    def __neg__(self) -> Value:
        """Elementwise negation."""
    def __abs__(self) -> Value:
        """Elementwise absolute value."""
    def __lt__(self, other: _Operand) -> Value:
        """self < other elementwise (bool result)."""
    def __le__(self, other: _Operand) -> Value:
        """self <= other elementwise (bool result)."""
    def __gt__(self, other: _Operand) -> Value:
        """self > other elementwise (bool result)."""
    def __ge__(self, other: _Operand) -> Value:
        """self >= other elementwise (bool result)."""
    def astype(self, dtype: _DTypeLike) -> Value:
        """This value converted to `dtype` (floats round to nearest even)."""
    @overload
    def reshape(self, shape: Sequence[int]) -> Value:
        """Same elements with dims `shape`; one -1 stands for the rest."""
    @overload
    def reshape(self, *shape: int) -> Value:
        """Same elements with the given dims; one -1 stands for the rest."""
    def transpose(self, *perm: int) -> Value:
        """Axes permuted by `perm`, or reversed when none are given."""
    def sum(self, axes: _Axes = None, keepdims: bool = False) -> Value:
        """Sum over `axes` (None: all), optionally keeping them as size 1."""
    def mean(self, axes: _Axes = None, keepdims: bool = False) -> Value:
        """Mean over `axes` (None: all), optionally keeping them as size 1."""
    def max(self, axes: _Axes = None, keepdims: bool = False) -> Value:
        """Maximum over `axes` (None: all), optionally keeping them as size 1."""

# ---- compiled graphs ----------------------------------------------------------------------

class Compiled:
    """A graph planned for a device: set params once, then run it many times."""

    def set_param(self, name: str, array: _ArrayLike) -> None:
        """Sets param `name` from an array, converted to the param's declared dtype."""
    def run(self, inputs: Optional[Dict[str, _ArrayLike]] = None, **kwargs: _ArrayLike) -> List[numpy.ndarray]:
        """Runs once on inputs given by name (dict or keywords); returns one array per output."""
    @property
    def input_names(self) -> List[str]:
        """Input names in declaration order."""
    @property
    def param_names(self) -> List[str]:
        """Param names in declaration order."""
    @property
    def output_count(self) -> int:
        """Number of graph outputs."""
    @property
    def inputs(self) -> List[Tuple[str, str, List[int]]]:
        """(name, dtype, shape) for every input."""
    @property
    def params(self) -> List[Tuple[str, str, List[int]]]:
        """(name, dtype, shape) for every param."""
    @property
    def outputs(self) -> List[Tuple[str, List[int]]]:
        """(dtype, shape) for every output."""
    @property
    def arena_bytes(self) -> int:
        """Size in bytes of the arena for intermediate tensors."""
    @property
    def device(self) -> str:
        """The device it runs on: "cpu" or "gpu"."""

# ---- builders -----------------------------------------------------------------------------

def matmul(a: Value, b: _Operand) -> Value:
    """Batched matrix product [..., m, k] x [..., k, n] -> [..., m, n], batch dims broadcast."""

def unary(op: str, x: Value) -> Value:
    """Applies the elementwise function named `op` ("relu", "exp", ...) to `x`."""

def neg(x: Value) -> Value:
    """Elementwise -x."""

def abs(x: Value) -> Value:
    """Elementwise absolute value."""

def exp(x: Value) -> Value:
    """Elementwise e**x."""

def log(x: Value) -> Value:
    """Elementwise natural logarithm."""

def sqrt(x: Value) -> Value:
    """Elementwise square root."""

def rsqrt(x: Value) -> Value:
    """Elementwise reciprocal square root."""

def recip(x: Value) -> Value:
    """Elementwise reciprocal 1/x."""

def relu(x: Value) -> Value:
    """Elementwise max(x, 0)."""

def gelu(x: Value) -> Value:
    """Elementwise GELU (exact, erf-based)."""

def gelu_tanh(x: Value) -> Value:
    """Elementwise GELU, tanh approximation."""

def silu(x: Value) -> Value:
    """Elementwise x * sigmoid(x)."""

def sigmoid(x: Value) -> Value:
    """Elementwise logistic sigmoid."""

def tanh(x: Value) -> Value:
    """Elementwise hyperbolic tangent."""

def softplus(x: Value) -> Value:
    """Elementwise log(1 + e**x)."""

def sin(x: Value) -> Value:
    """Elementwise sine."""

def cos(x: Value) -> Value:
    """Elementwise cosine."""

def tan(x: Value) -> Value:
    """Elementwise tangent."""

def atan(x: Value) -> Value:
    """Elementwise arctangent."""

def erf(x: Value) -> Value:
    """Elementwise error function."""

def ln1p(x: Value) -> Value:
    """Elementwise log(1 + x)."""

def mish(x: Value) -> Value:
    """Elementwise x * tanh(softplus(x))."""

def log_sigmoid(x: Value) -> Value:
    """Elementwise log(sigmoid(x))."""

def maximum(a: _Operand, b: _Operand) -> Value:
    """Elementwise maximum with broadcasting (at least one operand a Value)."""

def minimum(a: _Operand, b: _Operand) -> Value:
    """Elementwise minimum with broadcasting (at least one operand a Value)."""

def power(a: _Operand, b: _Operand) -> Value:
    """Elementwise a ** b (at least one operand a Value)."""

def equal(a: _Operand, b: _Operand) -> Value:
    """Elementwise a == b as bool (at least one operand a Value)."""

def not_equal(a: _Operand, b: _Operand) -> Value:
    """Elementwise a != b as bool (at least one operand a Value)."""

def sum(x: Value, axes: _Axes = None, keepdims: bool = False) -> Value:
    """Sum over `axes` (None: all), optionally keeping them as size 1."""

def mean(x: Value, axes: _Axes = None, keepdims: bool = False) -> Value:
    """Mean over `axes` (None: all), optionally keeping them as size 1."""

def max(x: Value, axes: _Axes = None, keepdims: bool = False) -> Value:
    """Maximum over `axes` (None: all), optionally keeping them as size 1."""

def min(x: Value, axes: _Axes = None, keepdims: bool = False) -> Value:
    """Minimum over `axes` (None: all), optionally keeping them as size 1."""

def prod(x: Value, axes: _Axes = None, keepdims: bool = False) -> Value:
    """Product over `axes` (None: all), optionally keeping them as size 1."""

def softmax(x: Value, axis: int = -1) -> Value:
    """Softmax along `axis`."""

def log_softmax(x: Value, axis: int = -1) -> Value:
    """Numerically stable log(softmax(x)) along `axis`."""

def argmax(x: Value, axis: int = -1, keepdims: bool = False) -> Value:
    """Index (i64) of the largest element along `axis`, first on ties."""

def reshape(x: Value, shape: Sequence[int]) -> Value:
    """`x` with dims `shape` (same element count; one -1 stands for the rest)."""

def transpose(x: Value, perm: Optional[Sequence[int]] = None) -> Value:
    """`x` with axes permuted by `perm`, or reversed when None."""

def concat(xs: Sequence[Value], axis: int = 0) -> Value:
    """Joins values of one graph along `axis`."""

def narrow(x: Value, axis: int, start: int, len: int) -> Value:
    """The slice of `len` elements of `x` along `axis`, beginning at `start`."""

def broadcast_to(x: Value, shape: Sequence[int]) -> Value:
    """`x` broadcast to `shape` by NumPy rules."""

def cast(x: Value, dtype: _DTypeLike) -> Value:
    """`x` converted to `dtype`."""

def where(cond: Value, a: _Operand, b: _Operand) -> Value:
    """Elementwise select: `a` where bool `cond` holds, else `b`."""

def gather(table: Value, indices: Value) -> Value:
    """Rows (axis 0) of `table` selected by integer `indices`."""

def layer_norm(x: Value, gamma: Optional[Value] = None, beta: Optional[Value] = None, eps: float = 1e-5) -> Value:
    """Layer normalization over the last axis with optional scale and shift."""

def rms_norm(x: Value, gamma: Optional[Value] = None, eps: float = 1e-6) -> Value:
    """RMS normalization over the last axis with optional scale."""

def cross_entropy(logits: Value, labels: Value) -> Value:
    """Scalar mean softmax cross-entropy of logits [n, c] against integer labels [n]."""

def conv2d(
    x: Value,
    w: Value,
    bias: Optional[Value] = None,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    groups: int = 1,
) -> Value:
    """NCHW 2-D convolution of x [n, c, h, w] by w [o, c / groups, kh, kw]."""

def max_pool2d(x: Value, kernel: int, stride: Optional[int] = None, padding: int = 0) -> Value:
    """NCHW max pooling over square windows (stride defaults to the kernel size)."""

def avg_pool2d(x: Value, kernel: int, stride: Optional[int] = None, padding: int = 0) -> Value:
    """NCHW average pooling over square windows, padding excluded from the count."""

def attention(q: Value, k: Value, v: Value, causal: bool = False, scale: Optional[float] = None) -> Value:
    """Scaled dot-product attention on [batch, heads, seq, head_dim], grouped heads allowed."""

# ---- differentiation --------------------------------------------------------------------

def grad(graph: Graph, wrt: Union[str, Sequence[str]]) -> Graph:
    """Backward graph of a scalar-loss graph: adds input "d_output", outputs d loss / d each name."""

def grad_with_loss(graph: Graph, wrt: Union[str, Sequence[str]]) -> Graph:
    """Like `grad`, with the loss prepended to the outputs: [loss, grads...]."""

def jvp(graph: Graph, wrt: Union[str, Sequence[str]]) -> Graph:
    """Forward mode: adds "tangent_<name>" inputs; outputs the primal outputs then their tangents."""

def hvp(graph: Graph, wrt: Union[str, Sequence[str]]) -> Graph:
    """Hessian-vector product of the scalar loss: outputs [loss, grads..., H v per name...]."""

# ---- devices ------------------------------------------------------------------------------

def is_available(device: str) -> bool:
    """Whether `device` ("cpu" or "gpu") works on this machine (probed once, cached)."""

# ---- GGUF files and LLMs ------------------------------------------------------------------

class GgufFile:
    """A memory-mapped GGUF file: metadata plus tensors dequantized to f32 on request."""

    @property
    def metadata(self) -> Dict[str, Any]:
        """All metadata keys and values (arrays as lists)."""
    @property
    def tensor_names(self) -> List[str]:
        """Tensor names in file order."""
    @property
    def tensor_info(self) -> List[Tuple[str, str, List[int]]]:
        """(name, format, row-major shape) of every tensor."""
    def tensor(self, name: str) -> numpy.ndarray:
        """Tensor `name` as an f32 array, dequantized if stored quantized."""

def load_gguf(path: _Path) -> GgufFile:
    """Opens a GGUF file (memory-mapped; tensors read lazily)."""

class Llama:
    """A Llama-family language model loaded from a GGUF file."""

    def __init__(
        self,
        path: _Path,
        threads: Optional[int] = None,
        ctx: int = 0,
        f32_decode: bool = False,
        device: str = "cpu",
    ) -> None:
        """Loads the model at `path` with the given threads, KV cache size, decode mode and device."""
    def tokenize(self, text: str, add_special: bool = True, special: bool = False) -> List[int]:
        """Token ids of `text`, optionally with the prompt's leading special tokens."""
    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of token ids (invalid UTF-8 replaced by U+FFFD)."""
    def generate(
        self,
        prompt: str,
        max_tokens: int = 128,
        temperature: float = 0.0,
        top_k: int = 40,
        top_p: float = 0.95,
        seed: int = 0,
        chat: bool = False,
        stop: Optional[Sequence[str]] = None,
        system: Optional[str] = None,
        repeat_penalty: float = 1.0,
        special: bool = False,
    ) -> str:
        """The continuation of `prompt` (prompt excluded), greedy at temperature 0."""
    def stream(
        self,
        prompt: str,
        max_tokens: int = 128,
        temperature: float = 0.0,
        top_k: int = 40,
        top_p: float = 0.95,
        seed: int = 0,
        chat: bool = False,
        stop: Optional[Sequence[str]] = None,
        system: Optional[str] = None,
        repeat_penalty: float = 1.0,
        special: bool = False,
    ) -> Stream:
        """Like `generate`, but yields text pieces as they become final."""
    @property
    def last_stats(self) -> Optional[Dict[str, Any]]:
        """Token counts, timings, rates and finish_reason of the last finished generation, or None."""
    @property
    def context(self) -> int:
        """KV cache rows: max tokens of prompt plus continuation."""
    @property
    def vocab_size(self) -> int:
        """Number of tokens in the vocabulary."""
    @property
    def eos_token(self) -> Optional[int]:
        """End-of-sequence token id, if the model has one."""
    @property
    def bos_token(self) -> Optional[int]:
        """Beginning-of-sequence token id, if the model has one."""

class Stream:
    """Iterator over the text pieces of one `Llama.stream` generation."""

    def __iter__(self) -> Stream:
        """Returns the stream itself."""
    def __next__(self) -> str:
        """The next text piece; raises Error if a later generation on the model superseded it."""

# ---- training -----------------------------------------------------------------------------

class Trainer:
    """Trains the params of a graph whose first output is a scalar loss."""

    def __init__(
        self,
        loss: Graph,
        params: Dict[str, _ArrayLike],
        optimizer: str = "adamw",
        lr: float = 1e-3,
        weight_decay: Optional[float] = None,
        momentum: float = 0.0,
        nesterov: bool = False,
        clip_norm: Optional[float] = None,
        warmup_steps: int = 0,
        total_steps: Optional[int] = None,
        end_lr: float = 0.0,
        device: str = "cpu",
        precision: str = "f32",
        threads: Optional[int] = None,
    ) -> None:
        """Compiles the gradient graph and sets up an optax-style optimizer ("sgd", "adam", "adamw", "lion")."""
    def step(self, inputs: Optional[Dict[str, _ArrayLike]] = None, **kwargs: _ArrayLike) -> float:
        """Applies one update on a batch; returns that batch's loss before the update."""
    @property
    def params(self) -> Dict[str, numpy.ndarray]:
        """Current f32 master params by name."""
    @property
    def steps(self) -> int:
        """Number of updates applied so far."""
    @property
    def lr(self) -> float:
        """Learning rate for the next update."""
    def optimizer_json(self) -> str:
        """Optimizer state (hyper-parameters, step, moments) as JSON for checkpointing."""

# ---- ONNX ---------------------------------------------------------------------------------

class OnnxModel:
    """An ONNX model, compiled once per distinct input shape (cached)."""

    @property
    def input_names(self) -> List[str]:
        """Names of graph inputs without initializers, in order."""
    @property
    def output_names(self) -> List[str]:
        """Names of graph outputs, in order."""
    @property
    def inputs(self) -> List[Tuple[str, Optional[str], List[Optional[int]]]]:
        """(name, dtype, dims) of each input; unknown dtype or symbolic dims are None."""
    @property
    def outputs(self) -> List[Tuple[str, Optional[str], List[Optional[int]]]]:
        """(name, dtype, dims) of each output; unknown dtype or symbolic dims are None."""
    def run(self, inputs: Dict[str, _ArrayLike]) -> List[numpy.ndarray]:
        """Runs on a dict of name -> array; returns outputs in graph output order."""
