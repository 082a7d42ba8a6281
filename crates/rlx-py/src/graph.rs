//! `rlx.Graph`, `rlx.Value` (operators build nodes) and the builder functions, thin over
//! the Rust `Graph` builders: every shape and dtype rule is the IR's, so an error names
//! the op, shapes and dtypes exactly as it does from Rust.

use crate::array::{convert, dtype_arg, int_fits, tensor_from_py};
use crate::compiled::PyCompiled;
use crate::{detached, guarded, threads_arg, to_py};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyTuple};
use rlx::prelude::*;

/// A typed tensor graph under construction.
///
/// Leaves come from `input`, `param` and `constant`; every other node from an operator
/// on `Value`s (`+ - * / ** @`, unary `-`, comparisons) or a builder (`rlx.matmul`,
/// `rlx.softmax`, ...). Shapes are inferred and broadcast as in NumPy. `set_outputs`
/// fixes the results; `compile` plans it for a device.
#[pyclass(module = "rlx", name = "Graph")]
pub struct PyGraph {
    pub graph: Graph,
}

/// A node of a graph: its result's `shape` and `dtype`. Operators and builders on values
/// add nodes to the graph they belong to.
#[pyclass(module = "rlx", name = "Value", frozen)]
pub struct PyValue {
    graph: Py<PyGraph>,
    id: NodeId,
}

/// Adds a node built by `f` from `x`'s graph.
fn build(py: Python<'_>, x: &PyValue, f: impl FnOnce(&mut Graph) -> rlx::Result<NodeId>) -> PyResult<PyValue> {
    let id = edit(py, &x.graph, f)?;
    Ok(PyValue { graph: x.graph.clone_ref(py), id })
}

/// Runs `f` on `graph` for writing; a graph another thread is compiling or
/// differentiating (with the GIL released) is an error, not a wait.
fn edit<T>(py: Python<'_>, graph: &Py<PyGraph>, f: impl FnOnce(&mut Graph) -> rlx::Result<T>) -> PyResult<T> {
    let mut g = graph.try_borrow_mut(py).map_err(|_| {
        to_py(rlx::Error::input("the graph is in use by another thread (compile, grad or a Trainer is reading it)"))
    })?;
    guarded(|| f(&mut g.graph))
}

/// The node `other` stands for in `x`'s graph: a value of the same graph, or a Python
/// number made a scalar constant of `x`'s dtype (a weak type, as in JAX).
fn operand(py: Python<'_>, x: &PyValue, other: &Bound<'_, PyAny>) -> PyResult<NodeId> {
    let dtype = x.graph.borrow(py).graph.dtype(x.id);
    operand_as(py, &x.graph, dtype, other)
}

/// `other` in `graph`: a value of it, or a Python number as a scalar constant of `dtype`.
fn operand_as(py: Python<'_>, graph: &Py<PyGraph>, dtype: DType, other: &Bound<'_, PyAny>) -> PyResult<NodeId> {
    if let Ok(v) = other.cast::<PyValue>() {
        let v = v.get();
        if !v.graph.is(graph) {
            return Err(to_py(rlx::Error::input("the two values belong to different graphs")));
        }
        return Ok(v.id);
    }
    let scalar = if other.is_instance_of::<PyBool>() || other.is_instance_of::<PyInt>() {
        let v: i64 = other.extract()?;
        if dtype == DType::I64 {
            HostTensor::from_i64(&[], &[v])
        } else if int_fits(v, dtype) {
            HostTensor::from_f64_as(dtype, &[], &[v as f64])
        } else {
            Err(rlx::Error::input(format!("the Python number {v} does not fit {dtype}")))
        }
    } else if other.is_instance_of::<PyFloat>() {
        let v: f64 = other.extract()?;
        HostTensor::from_f64_as(dtype, &[], &[v])
    } else {
        return Err(PyTypeError::new_err(format!(
            "expected an rlx.Value or a Python number, got {}",
            other.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        )));
    };
    edit(py, graph, |g| g.constant_tensor(scalar?))
}

/// A possibly negative axis of a rank-`rank` value.
fn axis(rank: usize, a: isize, what: &str) -> PyResult<usize> {
    let r = rank as isize;
    if a < -r || a >= r.max(1) {
        return Err(to_py(rlx::Error::shape(format!("{what}: axis {a} is out of range for rank {rank}"))));
    }
    Ok(if a < 0 { (a + r) as usize } else { a as usize })
}

/// A shape argument: a sequence of ints, each >= 0 (an error names a negative one).
fn shape_arg(what: &str, shape: Vec<i64>) -> PyResult<Vec<usize>> {
    shape
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            usize::try_from(d)
                .map_err(|_| to_py(rlx::Error::shape(format!("{what}: dim {i} of {shape:?} is negative"))))
        })
        .collect()
}

fn axes_arg(rank: usize, axes: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Vec<usize>> {
    let Some(axes) = axes.filter(|a| !a.is_none()) else {
        return Ok((0..rank).collect());
    };
    let list: Vec<isize> = if let Ok(a) = axes.extract::<isize>() { vec![a] } else { axes.extract()? };
    list.into_iter().map(|a| axis(rank, a, what)).collect()
}

impl PyValue {
    fn rank(&self, py: Python<'_>) -> usize {
        self.graph.borrow(py).graph.dims(self.id).len()
    }

    fn binary(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        reflected: bool,
        f: fn(&mut Graph, NodeId, NodeId) -> rlx::Result<NodeId>,
    ) -> PyResult<PyValue> {
        let o = operand(py, self, other)?;
        let (a, b) = if reflected { (o, self.id) } else { (self.id, o) };
        build(py, self, |g| f(g, a, b))
    }
}

#[pymethods]
impl PyValue {
    /// The dims of the value.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.graph.borrow(py).graph.dims(self.id))
    }

    /// The element type's short name ("f32", "bf16", "i64", ...).
    #[getter]
    fn dtype(&self, py: Python<'_>) -> &'static str {
        self.graph.borrow(py).graph.dtype(self.id).name()
    }

    /// The rank (number of dims).
    #[getter]
    fn ndim(&self, py: Python<'_>) -> usize {
        self.rank(py)
    }

    /// The graph this value belongs to.
    #[getter]
    fn graph(&self, py: Python<'_>) -> Py<PyGraph> {
        self.graph.clone_ref(py)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let g = &self.graph.borrow(py).graph;
        let what = g.node(self.id).map(|n| n.op().name()).unwrap_or("?");
        let leaf = g.node(self.id).and_then(|n| n.leaf_name()).map(|n| format!(" '{n}'")).unwrap_or_default();
        format!("rlx.Value({what}{leaf}: {}{:?})", g.dtype(self.id), g.dims(self.id))
    }

    fn __add__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyValue> {
        self.binary(py, o, false, Graph::add)
    }
    fn __radd__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyValue> {
        self.binary(py, o, true, Graph::add)
    }
    fn __sub__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyValue> {
        self.binary(py, o, false, Graph::sub)
    }
    fn __rsub__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyValue> {
        self.binary(py, o, true, Graph::sub)
    }
    fn __mul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyValue> {
        self.binary(py, o, false, Graph::mul)
    }
    fn __rmul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyValue> {
        self.binary(py, o, true, Graph::mul)
    }
    fn __truediv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyValue> {
        self.binary(py, o, false, Graph::div)
    }
    fn __rtruediv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyValue> {
        self.binary(py, o, true, Graph::div)
    }
    fn __pow__(&self, py: Python<'_>, o: &Bound<'_, PyAny>, modulo: Option<&Bound<'_, PyAny>>) -> PyResult<PyValue> {
        if modulo.is_some_and(|m| !m.is_none()) {
            return Err(PyTypeError::new_err("pow() with a modulus is not defined for rlx.Value"));
        }
        self.binary(py, o, false, Graph::pow)
    }
    fn __rpow__(&self, py: Python<'_>, o: &Bound<'_, PyAny>, _modulo: Option<&Bound<'_, PyAny>>) -> PyResult<PyValue> {
        self.binary(py, o, true, Graph::pow)
    }
    fn __matmul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyValue> {
        self.binary(py, o, false, Graph::matmul)
    }
    fn __rmatmul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyValue> {
        self.binary(py, o, true, Graph::matmul)
    }
    fn __neg__(&self, py: Python<'_>) -> PyResult<PyValue> {
        build(py, self, |g| g.unary(Unary::Neg, self.id))
    }
    fn __abs__(&self, py: Python<'_>) -> PyResult<PyValue> {
        build(py, self, |g| g.unary(Unary::Abs, self.id))
    }
    fn __lt__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyValue> {
        self.binary(py, o, false, Graph::lt)
    }
    fn __le__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyValue> {
        self.binary(py, o, false, Graph::le)
    }
    fn __gt__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyValue> {
        self.binary(py, o, false, Graph::gt)
    }
    fn __ge__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<PyValue> {
        self.binary(py, o, false, Graph::ge)
    }

    /// This value converted to `dtype` (floats round to nearest even).
    fn astype(&self, py: Python<'_>, dtype: &Bound<'_, PyAny>) -> PyResult<PyValue> {
        let to = dtype_arg(dtype)?;
        build(py, self, |g| g.cast(self.id, to))
    }

    /// `rlx.reshape(self, shape)`; `x.reshape(2, 3)` works too.
    #[pyo3(signature = (*shape))]
    fn reshape(&self, py: Python<'_>, shape: &Bound<'_, PyTuple>) -> PyResult<PyValue> {
        let shape = if shape.len() == 1 && shape.get_item(0)?.extract::<isize>().is_err() {
            shape.get_item(0)?
        } else {
            shape.clone().into_any()
        };
        reshape(py, self, &shape)
    }

    /// The transpose (axes reversed, or permuted by `perm`).
    #[pyo3(signature = (*perm))]
    fn transpose(&self, py: Python<'_>, perm: Vec<isize>) -> PyResult<PyValue> {
        transpose(py, self, if perm.is_empty() { None } else { Some(perm) })
    }

    /// The transpose (axes reversed).
    #[getter(T)]
    fn t(&self, py: Python<'_>) -> PyResult<PyValue> {
        transpose(py, self, None)
    }

    #[pyo3(signature = (axes=None, keepdims=false))]
    fn sum(&self, py: Python<'_>, axes: Option<&Bound<'_, PyAny>>, keepdims: bool) -> PyResult<PyValue> {
        reduce(py, self, ReduceOp::Sum, axes, keepdims)
    }
    #[pyo3(signature = (axes=None, keepdims=false))]
    fn mean(&self, py: Python<'_>, axes: Option<&Bound<'_, PyAny>>, keepdims: bool) -> PyResult<PyValue> {
        reduce(py, self, ReduceOp::Mean, axes, keepdims)
    }
    #[pyo3(signature = (axes=None, keepdims=false))]
    fn max(&self, py: Python<'_>, axes: Option<&Bound<'_, PyAny>>, keepdims: bool) -> PyResult<PyValue> {
        reduce(py, self, ReduceOp::Max, axes, keepdims)
    }
}

fn reduce(
    py: Python<'_>,
    x: &PyValue,
    op: ReduceOp,
    axes: Option<&Bound<'_, PyAny>>,
    keepdims: bool,
) -> PyResult<PyValue> {
    let axes = axes_arg(x.rank(py), axes, "reduce")?;
    build(py, x, |g| g.reduce(op, x.id, &axes, keepdims))
}

fn reshape(py: Python<'_>, x: &PyValue, shape: &Bound<'_, PyAny>) -> PyResult<PyValue> {
    let want: Vec<isize> = shape.extract()?;
    let numel: usize = x.graph.borrow(py).graph.dims(x.id).iter().product();
    let known = want.iter().filter(|&&d| d >= 0).try_fold(1usize, |p, &d| p.checked_mul(d as usize));
    let Some(known) = known else {
        return Err(to_py(rlx::Error::shape(format!("reshape: {want:?} has more elements than fit in memory"))));
    };
    let mut dims = Vec::with_capacity(want.len());
    for (i, &d) in want.iter().enumerate() {
        dims.push(match d {
            -1 if want.iter().filter(|&&d| d == -1).count() == 1 && known > 0 => numel / known,
            d if d >= 0 => d as usize,
            _ => {
                return Err(to_py(rlx::Error::shape(format!(
                    "reshape: dim {i} is {d} (one -1 may stand for the rest; others must be >= 0)"
                ))));
            }
        });
    }
    build(py, x, |g| g.reshape(x.id, &dims))
}

fn transpose(py: Python<'_>, x: &PyValue, perm: Option<Vec<isize>>) -> PyResult<PyValue> {
    let rank = x.rank(py);
    let perm: Vec<usize> = match perm {
        None => (0..rank).rev().collect(),
        Some(p) => p.into_iter().map(|a| axis(rank, a, "transpose")).collect::<PyResult<_>>()?,
    };
    build(py, x, |g| g.transpose(x.id, &perm))
}

#[pymethods]
impl PyGraph {
    #[new]
    #[pyo3(signature = (name = "graph"))]
    fn new(name: &str) -> PyGraph {
        PyGraph { graph: Graph::new(name) }
    }

    /// A named input: fed to every run.
    fn input(slf: &Bound<'_, Self>, name: &str, dtype: &Bound<'_, PyAny>, shape: Vec<i64>) -> PyResult<PyValue> {
        let d = dtype_arg(dtype)?;
        let shape = shape_arg(&format!("input '{name}'"), shape)?;
        leaf(slf, |g| g.input(name, d, &shape))
    }

    /// A named param: set once with `Compiled.set_param`, kept between runs.
    fn param(slf: &Bound<'_, Self>, name: &str, dtype: &Bound<'_, PyAny>, shape: Vec<i64>) -> PyResult<PyValue> {
        let d = dtype_arg(dtype)?;
        let shape = shape_arg(&format!("param '{name}'"), shape)?;
        leaf(slf, |g| g.param(name, d, &shape))
    }

    /// A constant holding `array`'s values (converted to `dtype` when given).
    #[pyo3(signature = (array, dtype = None))]
    fn constant(
        slf: &Bound<'_, Self>,
        array: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyValue> {
        let want = dtype.map(dtype_arg).transpose()?;
        let t = tensor_from_py(array, want)?;
        let t = match want {
            Some(d) if d != t.dtype() => guarded(|| convert(&t, d).map_err(|e| e.context("constant")))?,
            _ => t,
        };
        leaf(slf, |g| g.constant_tensor(t))
    }

    /// The graph's results, in order (what `Compiled.run` returns).
    fn set_outputs(&mut self, outputs: &Bound<'_, PyAny>) -> PyResult<()> {
        let ids: Vec<NodeId> = if let Ok(v) = outputs.cast::<PyValue>() {
            vec![v.get().id]
        } else {
            let list: Vec<Bound<'_, PyValue>> = outputs.extract()?;
            list.iter().map(|v| v.get().id).collect()
        };
        guarded(|| self.graph.set_outputs(&ids))
    }

    /// The graph's name (in error messages and the JSON document).
    #[getter]
    fn name(&self) -> &str {
        self.graph.name()
    }

    /// Names of the inputs, in declaration order.
    #[getter]
    fn input_names(&self) -> Vec<String> {
        leaf_names(&self.graph, self.graph.inputs())
    }

    /// Names of the params, in declaration order.
    #[getter]
    fn param_names(&self) -> Vec<String> {
        leaf_names(&self.graph, self.graph.params())
    }

    /// How many outputs `set_outputs` declared.
    #[getter]
    fn output_count(&self) -> usize {
        self.graph.outputs().len()
    }

    /// The graph as RLX's versioned JSON document (docs/graph-format.md).
    fn to_json(&self) -> PyResult<String> {
        guarded(|| self.graph.to_json())
    }

    /// A graph from RLX's JSON document; a malformed document or an unknown format
    /// version is an `rlx.Error` naming what is wrong.
    #[staticmethod]
    fn from_json(text: &str) -> PyResult<PyGraph> {
        guarded(|| Graph::from_json(text)).map(|graph| PyGraph { graph })
    }

    /// Verifies and plans the graph for `device` ("cpu" or "gpu") under a precision
    /// policy: "f32", or "bf16" / "f16" (matmuls, convs and elementwise math in the half
    /// format with f32 accumulation; softmax, norms, reductions and losses in f32).
    /// `threads` defaults to RLX_THREADS or every core; results are bit-identical for
    /// any count.
    #[pyo3(signature = (device = "cpu", precision = "f32", threads = None, fusion = true))]
    fn compile(
        &self,
        py: Python<'_>,
        device: &str,
        precision: &str,
        threads: Option<usize>,
        fusion: bool,
    ) -> PyResult<PyCompiled> {
        let graph = &self.graph;
        let compiled = detached(py, || {
            let mut options = CompileOptions::from_env()?;
            options.precision = PrecisionPolicy::parse(precision)?;
            options.threads = threads_arg(threads)?.or(options.threads);
            options.fusion = fusion && options.fusion;
            Session::new(Device::from_name(device)?)?.compile_with(graph, &options)
        })?;
        Ok(PyCompiled::new(compiled))
    }

    fn __repr__(&self) -> String {
        format!(
            "rlx.Graph('{}': {} nodes, inputs {:?}, params {:?}, {} outputs)",
            self.graph.name(),
            self.graph.len(),
            self.input_names(),
            self.param_names(),
            self.graph.outputs().len()
        )
    }
}

fn leaf_names(g: &Graph, ids: Vec<NodeId>) -> Vec<String> {
    ids.into_iter().map(|id| g.node(id).and_then(|n| n.leaf_name()).unwrap_or_default().to_string()).collect()
}

fn leaf(slf: &Bound<'_, PyGraph>, f: impl FnOnce(&mut Graph) -> rlx::Result<NodeId>) -> PyResult<PyValue> {
    let graph = slf.clone().unbind();
    let id = edit(slf.py(), &graph, f)?;
    Ok(PyValue { graph, id })
}

// ---- builders ----------------------------------------------------------------------

/// `a @ b`: batched matmul, [..., m, k] x [..., k, n] -> [..., m, n], batch dims broadcast.
#[pyfunction]
fn matmul(py: Python<'_>, a: &Bound<'_, PyValue>, b: &Bound<'_, PyAny>) -> PyResult<PyValue> {
    a.get().binary(py, b, false, Graph::matmul)
}

/// An elementwise function by name ("relu", "gelu", "gelu_tanh", "silu", "exp", ...).
#[pyfunction]
fn unary(py: Python<'_>, op: &str, x: &Bound<'_, PyValue>) -> PyResult<PyValue> {
    let Some(u) = Unary::ALL.into_iter().find(|u| u.name() == op) else {
        let names: Vec<&str> = Unary::ALL.iter().map(|u| u.name()).collect();
        return Err(to_py(rlx::Error::input(format!("unknown unary op '{op}' (one of {})", names.join(", ")))));
    };
    let x = x.get();
    build(py, x, |g| g.unary(u, x.id))
}

/// The names `rlx.unary` accepts.
#[pyfunction]
fn unary_names() -> Vec<&'static str> {
    Unary::ALL.iter().map(|u| u.name()).collect()
}

/// An elementwise binary op by name: add, sub, mul, div, maximum, minimum, pow, and the
/// comparisons eq, ne, lt, le, gt, ge (bool results).
#[pyfunction]
fn binary(py: Python<'_>, op: &str, a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<PyValue> {
    let f: fn(&mut Graph, NodeId, NodeId) -> rlx::Result<NodeId> = match op {
        "add" => Graph::add,
        "sub" => Graph::sub,
        "mul" => Graph::mul,
        "div" => Graph::div,
        "maximum" => Graph::maximum,
        "minimum" => Graph::minimum,
        "pow" => Graph::pow,
        "eq" => Graph::eq,
        "ne" => Graph::ne,
        "lt" => Graph::lt,
        "le" => Graph::le,
        "gt" => Graph::gt,
        "ge" => Graph::ge,
        _ => return Err(to_py(rlx::Error::input(format!("unknown binary op '{op}'")))),
    };
    match (a.cast::<PyValue>(), b.cast::<PyValue>()) {
        (Ok(a), _) => a.get().binary(py, b, false, f),
        (Err(_), Ok(b)) => b.get().binary(py, a, true, f),
        _ => Err(PyTypeError::new_err(format!("{op}: at least one operand must be an rlx.Value"))),
    }
}

/// Softmax along `axis`.
#[pyfunction]
#[pyo3(signature = (x, axis = -1))]
fn softmax(py: Python<'_>, x: &Bound<'_, PyValue>, axis: isize) -> PyResult<PyValue> {
    let x = x.get();
    let a = self::axis(x.rank(py), axis, "softmax")?;
    build(py, x, |g| g.softmax(x.id, a))
}

/// log(softmax(x)) along `axis`, computed stably.
#[pyfunction]
#[pyo3(signature = (x, axis = -1))]
fn log_softmax(py: Python<'_>, x: &Bound<'_, PyValue>, axis: isize) -> PyResult<PyValue> {
    let x = x.get();
    let a = self::axis(x.rank(py), axis, "log_softmax")?;
    build(py, x, |g| g.log_softmax(x.id, a))
}

/// A reduction ("sum", "mean", "max", "min", "prod") over `axes` (None: all).
#[pyfunction]
#[pyo3(name = "reduce", signature = (op, x, axes = None, keepdims = false))]
fn reduce_fn(
    py: Python<'_>,
    op: &str,
    x: &Bound<'_, PyValue>,
    axes: Option<&Bound<'_, PyAny>>,
    keepdims: bool,
) -> PyResult<PyValue> {
    let op = match op {
        "sum" => ReduceOp::Sum,
        "mean" => ReduceOp::Mean,
        "max" => ReduceOp::Max,
        "min" => ReduceOp::Min,
        "prod" => ReduceOp::Prod,
        _ => return Err(to_py(rlx::Error::input(format!("unknown reduction '{op}' (sum, mean, max, min, prod)")))),
    };
    reduce(py, x.get(), op, axes, keepdims)
}

/// Index of the largest element along `axis` (i64; ties to the first).
#[pyfunction]
#[pyo3(signature = (x, axis = -1, keepdims = false))]
fn argmax(py: Python<'_>, x: &Bound<'_, PyValue>, axis: isize, keepdims: bool) -> PyResult<PyValue> {
    let x = x.get();
    let a = self::axis(x.rank(py), axis, "argmax")?;
    build(py, x, |g| g.argmax(x.id, a, keepdims))
}

/// `x` with dims `shape` (same element count; one -1 stands for the rest).
#[pyfunction]
#[pyo3(name = "reshape")]
fn reshape_fn(py: Python<'_>, x: &Bound<'_, PyValue>, shape: &Bound<'_, PyAny>) -> PyResult<PyValue> {
    reshape(py, x.get(), shape)
}

/// `x`'s axes permuted by `perm` (None: reversed).
#[pyfunction]
#[pyo3(name = "transpose", signature = (x, perm = None))]
fn transpose_fn(py: Python<'_>, x: &Bound<'_, PyValue>, perm: Option<Vec<isize>>) -> PyResult<PyValue> {
    transpose(py, x.get(), perm)
}

/// Values joined along `axis`.
#[pyfunction]
#[pyo3(signature = (xs, axis = 0))]
fn concat(py: Python<'_>, xs: &Bound<'_, PyAny>, axis: isize) -> PyResult<PyValue> {
    let xs: Vec<Bound<'_, PyValue>> = xs.extract()?;
    let Some(first) = xs.first().map(|x| x.get()) else {
        return Err(to_py(rlx::Error::input("concat needs at least one value")));
    };
    let ids = xs.iter().map(|x| operand(py, first, x.as_any())).collect::<PyResult<Vec<_>>>()?;
    let a = self::axis(first.rank(py), axis, "concat")?;
    build(py, first, |g| g.concat(&ids, a))
}

/// `len` elements of `x` along `axis` from `start`.
#[pyfunction]
fn narrow(py: Python<'_>, x: &Bound<'_, PyValue>, axis: isize, start: i64, len: i64) -> PyResult<PyValue> {
    let x = x.get();
    let bounds = shape_arg("narrow (start, len)", vec![start, len])?;
    let a = self::axis(x.rank(py), axis, "narrow")?;
    build(py, x, |g| g.narrow(x.id, a, bounds[0], bounds[1]))
}

/// `x` broadcast to `shape` (NumPy rules).
#[pyfunction]
fn broadcast_to(py: Python<'_>, x: &Bound<'_, PyValue>, shape: Vec<i64>) -> PyResult<PyValue> {
    let x = x.get();
    let shape = shape_arg("broadcast_to", shape)?;
    build(py, x, |g| g.expand(x.id, &shape))
}

/// `x` converted to `dtype`.
#[pyfunction]
fn cast(py: Python<'_>, x: &Bound<'_, PyValue>, dtype: &Bound<'_, PyAny>) -> PyResult<PyValue> {
    x.get().astype(py, dtype)
}

/// `cond ? a : b` elementwise (cond bool). A Python number takes the other branch's
/// dtype; two numbers make f32 (or i64 when both are ints), as NumPy's defaults would.
#[pyfunction]
#[pyo3(name = "where")]
fn where_(py: Python<'_>, cond: &Bound<'_, PyValue>, a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<PyValue> {
    let c = cond.get();
    let dtype = match a.cast::<PyValue>().or_else(|_| b.cast::<PyValue>()) {
        Ok(v) => v.get().graph.borrow(py).graph.dtype(v.get().id),
        Err(_) if a.is_instance_of::<PyFloat>() || b.is_instance_of::<PyFloat>() => DType::F32,
        Err(_) => DType::I64,
    };
    let (ia, ib) = (operand_as(py, &c.graph, dtype, a)?, operand_as(py, &c.graph, dtype, b)?);
    build(py, c, |g| g.where_(c.id, ia, ib))
}

/// Rows of `table` (axis 0) picked by integer `indices`.
#[pyfunction]
fn gather(py: Python<'_>, table: &Bound<'_, PyValue>, indices: &Bound<'_, PyAny>) -> PyResult<PyValue> {
    let t = table.get();
    let i = operand(py, t, indices)?;
    build(py, t, |g| g.gather(t.id, i))
}

/// Layer normalization over the last axis, with optional scale and shift.
#[pyfunction]
#[pyo3(signature = (x, gamma = None, beta = None, eps = 1e-5))]
fn layer_norm(
    py: Python<'_>,
    x: &Bound<'_, PyValue>,
    gamma: Option<&Bound<'_, PyValue>>,
    beta: Option<&Bound<'_, PyValue>>,
    eps: f32,
) -> PyResult<PyValue> {
    let x = x.get();
    let g_ = gamma.map(|v| operand(py, x, v.as_any())).transpose()?;
    let b_ = beta.map(|v| operand(py, x, v.as_any())).transpose()?;
    build(py, x, |g| g.layer_norm(x.id, g_, b_, eps))
}

/// RMS normalization over the last axis, with an optional scale.
#[pyfunction]
#[pyo3(signature = (x, gamma = None, eps = 1e-6))]
fn rms_norm(py: Python<'_>, x: &Bound<'_, PyValue>, gamma: Option<&Bound<'_, PyValue>>, eps: f32) -> PyResult<PyValue> {
    let x = x.get();
    let g_ = gamma.map(|v| operand(py, x, v.as_any())).transpose()?;
    build(py, x, |g| g.rms_norm(x.id, g_, eps))
}

/// Mean softmax cross-entropy of `logits` [n, c] against integer `labels` [n] (a scalar).
#[pyfunction]
fn cross_entropy(py: Python<'_>, logits: &Bound<'_, PyValue>, labels: &Bound<'_, PyAny>) -> PyResult<PyValue> {
    let l = logits.get();
    let y = operand(py, l, labels)?;
    build(py, l, |g| g.cross_entropy(l.id, y))
}

/// 2-D convolution of `x` [n, c, h, w] by `w` [o, c / groups, kh, kw], NCHW.
#[pyfunction]
#[pyo3(signature = (x, w, bias = None, stride = 1, padding = 0, dilation = 1, groups = 1))]
#[allow(clippy::too_many_arguments)]
fn conv2d(
    py: Python<'_>,
    x: &Bound<'_, PyValue>,
    w: &Bound<'_, PyValue>,
    bias: Option<&Bound<'_, PyValue>>,
    stride: usize,
    padding: usize,
    dilation: usize,
    groups: usize,
) -> PyResult<PyValue> {
    let x = x.get();
    let wi = operand(py, x, w.as_any())?;
    let bi = bias.map(|b| operand(py, x, b.as_any())).transpose()?;
    let params = Conv2dParams { stride: [stride; 2], padding: [padding; 4], dilation: [dilation; 2], groups };
    build(py, x, |g| g.conv2d(x.id, wi, bi, params))
}

fn pool_params(kernel: usize, stride: Option<usize>, padding: usize) -> PoolParams {
    PoolParams { kernel: [kernel; 2], stride: [stride.unwrap_or(kernel); 2], padding: [padding; 4] }
}

/// Max pooling over `kernel` x `kernel` windows (stride defaults to the kernel), NCHW.
#[pyfunction]
#[pyo3(signature = (x, kernel, stride = None, padding = 0))]
fn max_pool2d(
    py: Python<'_>,
    x: &Bound<'_, PyValue>,
    kernel: usize,
    stride: Option<usize>,
    padding: usize,
) -> PyResult<PyValue> {
    let x = x.get();
    build(py, x, |g| g.max_pool2d(x.id, pool_params(kernel, stride, padding)))
}

/// Average pooling over `kernel` x `kernel` windows (padding not counted), NCHW.
#[pyfunction]
#[pyo3(signature = (x, kernel, stride = None, padding = 0))]
fn avg_pool2d(
    py: Python<'_>,
    x: &Bound<'_, PyValue>,
    kernel: usize,
    stride: Option<usize>,
    padding: usize,
) -> PyResult<PyValue> {
    let x = x.get();
    build(py, x, |g| g.avg_pool2d(x.id, pool_params(kernel, stride, padding), false))
}

/// Scaled dot-product attention over [batch, heads, seq, head_dim] q, k, v (k and v may
/// have fewer heads: grouped); `causal` masks later keys; `scale` defaults to
/// 1 / sqrt(head_dim).
#[pyfunction]
#[pyo3(signature = (q, k, v, causal = false, scale = None))]
fn attention(
    py: Python<'_>,
    q: &Bound<'_, PyValue>,
    k: &Bound<'_, PyValue>,
    v: &Bound<'_, PyValue>,
    causal: bool,
    scale: Option<f32>,
) -> PyResult<PyValue> {
    let q = q.get();
    let (ki, vi) = (operand(py, q, k.as_any())?, operand(py, q, v.as_any())?);
    let mask = if causal { AttentionMask::Causal } else { AttentionMask::None };
    build(py, q, |g| g.attention(q.id, ki, vi, mask, scale))
}

// ---- differentiation -----------------------------------------------------------------

fn names(wrt: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(s) = wrt.extract::<String>() {
        return Ok(vec![s]);
    }
    wrt.extract().map_err(|_| PyTypeError::new_err("wrt: a list of input or param names"))
}

fn transform(
    py: Python<'_>,
    graph: &Bound<'_, PyGraph>,
    wrt: &Bound<'_, PyAny>,
    f: fn(&Graph, &[&str]) -> rlx::Result<Graph>,
) -> PyResult<PyGraph> {
    let wrt = names(wrt)?;
    let refs: Vec<&str> = wrt.iter().map(String::as_str).collect();
    let g = graph.borrow();
    let graph = &g.graph;
    detached(py, || f(graph, &refs)).map(|graph| PyGraph { graph })
}

/// The backward graph of a graph whose first output is a scalar loss: it keeps the
/// inputs and params, adds an input "d_output" (the seed, normally 1.0) and outputs
/// d loss / d wrt[i] for each name, shaped like its leaf.
#[pyfunction]
#[pyo3(name = "grad")]
fn py_grad(py: Python<'_>, graph: &Bound<'_, PyGraph>, wrt: &Bound<'_, PyAny>) -> PyResult<PyGraph> {
    transform(py, graph, wrt, rlx::autodiff::grad)
}

/// `grad` with the loss as its first output: [loss, grads...].
#[pyfunction]
#[pyo3(name = "grad_with_loss")]
fn py_grad_with_loss(py: Python<'_>, graph: &Bound<'_, PyGraph>, wrt: &Bound<'_, PyAny>) -> PyResult<PyGraph> {
    transform(py, graph, wrt, rlx::autodiff::grad_with_loss)
}

/// Forward mode: adds an input "tangent_<name>" per name; outputs the primal outputs,
/// then their tangents.
#[pyfunction]
#[pyo3(name = "jvp")]
fn py_jvp(py: Python<'_>, graph: &Bound<'_, PyGraph>, wrt: &Bound<'_, PyAny>) -> PyResult<PyGraph> {
    transform(py, graph, wrt, rlx::autodiff::jvp)
}

/// Hessian-vector product of the scalar first output: adds inputs "tangent_<name>" (the
/// vector); outputs [loss, grads..., H v for each name...].
#[pyfunction]
#[pyo3(name = "hvp")]
fn py_hvp(py: Python<'_>, graph: &Bound<'_, PyGraph>, wrt: &Bound<'_, PyAny>) -> PyResult<PyGraph> {
    transform(py, graph, wrt, rlx::autodiff::hvp)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGraph>()?;
    m.add_class::<PyValue>()?;
    for f in [
        wrap_pyfunction!(matmul, m)?,
        wrap_pyfunction!(unary, m)?,
        wrap_pyfunction!(unary_names, m)?,
        wrap_pyfunction!(binary, m)?,
        wrap_pyfunction!(softmax, m)?,
        wrap_pyfunction!(log_softmax, m)?,
        wrap_pyfunction!(reduce_fn, m)?,
        wrap_pyfunction!(argmax, m)?,
        wrap_pyfunction!(reshape_fn, m)?,
        wrap_pyfunction!(transpose_fn, m)?,
        wrap_pyfunction!(concat, m)?,
        wrap_pyfunction!(narrow, m)?,
        wrap_pyfunction!(broadcast_to, m)?,
        wrap_pyfunction!(cast, m)?,
        wrap_pyfunction!(where_, m)?,
        wrap_pyfunction!(gather, m)?,
        wrap_pyfunction!(layer_norm, m)?,
        wrap_pyfunction!(rms_norm, m)?,
        wrap_pyfunction!(cross_entropy, m)?,
        wrap_pyfunction!(conv2d, m)?,
        wrap_pyfunction!(max_pool2d, m)?,
        wrap_pyfunction!(avg_pool2d, m)?,
        wrap_pyfunction!(attention, m)?,
        wrap_pyfunction!(py_grad, m)?,
        wrap_pyfunction!(py_grad_with_loss, m)?,
        wrap_pyfunction!(py_jvp, m)?,
        wrap_pyfunction!(py_hvp, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
