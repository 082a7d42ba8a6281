//! `rlx.Compiled`: a graph planned for a device; `run` takes and returns NumPy arrays.

use crate::array::{convert, dtype_arg, named_arrays, tensor_from_py, tensor_to_py, views};
use crate::{detached, guarded, lock};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rlx::ir::TensorRef;
use rlx::prelude::*;
use rlx::runtime::Boundary;
use std::sync::Mutex;

/// A compiled graph: params set once, then `run` many times. Runs of one `Compiled`
/// from several threads take turns; the GIL is released while it runs.
#[pyclass(module = "rlx", name = "Compiled")]
pub struct PyCompiled {
    compiled: Mutex<CompiledGraph>,
    // What never changes, read without the lock (a getter must not wait, GIL held, for
    // a run on another thread).
    inputs: Vec<Boundary>,
    params: Vec<Boundary>,
    outputs: Vec<(DType, Vec<usize>)>,
    device: Device,
    arena_bytes: usize,
}

impl PyCompiled {
    pub fn new(compiled: CompiledGraph) -> PyCompiled {
        PyCompiled {
            inputs: compiled.inputs().to_vec(),
            params: compiled.params().to_vec(),
            outputs: compiled.outputs().to_vec(),
            device: compiled.device(),
            arena_bytes: compiled.arena_bytes(),
            compiled: Mutex::new(compiled),
        }
    }
}

/// (name, dtype, shape) of each boundary tensor.
fn describe(b: &[Boundary]) -> Vec<(String, &'static str, Vec<usize>)> {
    b.iter().map(|b| (b.name.clone(), b.dtype.name(), b.dims.clone())).collect()
}

#[pymethods]
impl PyCompiled {
    /// Sets param `name` from an array, converted to the param's dtype (floats round to
    /// nearest even; integers must fit).
    fn set_param(&self, py: Python<'_>, name: &str, array: &Bound<'_, PyAny>) -> PyResult<()> {
        let declared = self.params.iter().find(|p| p.name == name);
        let mut t = tensor_from_py(array, declared.map(|p| p.dtype))?;
        if let Some(p) = declared.filter(|p| p.dtype != t.dtype()) {
            t = guarded(|| convert(&t, p.dtype).map_err(|e| e.context(format!("param '{name}'"))))?;
        }
        let compiled = &self.compiled;
        detached(py, || lock(compiled).set_param_typed(name, &t))
    }

    /// Runs once: `inputs` maps each input's name to an array (or pass them as keywords).
    /// Returns one array per graph output, in its declared dtype. An array of the input's
    /// dtype in C order is read in place (no copy; do not write to it from another thread
    /// during the run); a float array of another format is converted by value; an
    /// integer or bool input takes its own dtype only.
    #[pyo3(signature = (inputs = None, **kwargs))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: Option<&Bound<'py, PyAny>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let named =
            named_arrays("input", inputs, kwargs, |name| self.inputs.iter().find(|b| b.name == name).map(|b| b.dtype))?;
        let views: Vec<(&str, TensorRef)> = views(py, "input", &named)?;
        let compiled = &self.compiled;
        let outputs = detached(py, || lock(compiled).run_views(&views))?;
        let arrays = outputs.into_iter().map(|t| tensor_to_py(py, t)).collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, arrays)
    }

    /// Input names, in declaration order.
    #[getter]
    fn input_names(&self) -> Vec<String> {
        self.inputs.iter().map(|b| b.name.clone()).collect()
    }

    /// Param names, in declaration order.
    #[getter]
    fn param_names(&self) -> Vec<String> {
        self.params.iter().map(|b| b.name.clone()).collect()
    }

    /// How many arrays `run` returns.
    #[getter]
    fn output_count(&self) -> usize {
        self.outputs.len()
    }

    /// (name, dtype, shape) of each input.
    #[getter]
    fn inputs(&self) -> Vec<(String, &'static str, Vec<usize>)> {
        describe(&self.inputs)
    }

    /// (name, dtype, shape) of each param.
    #[getter]
    fn params(&self) -> Vec<(String, &'static str, Vec<usize>)> {
        describe(&self.params)
    }

    /// (dtype, shape) of each output.
    #[getter]
    fn outputs(&self) -> Vec<(&'static str, Vec<usize>)> {
        self.outputs.iter().map(|(d, dims)| (d.name(), dims.clone())).collect()
    }

    /// Bytes of the arena holding the graph's intermediate tensors.
    #[getter]
    fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// "cpu" or "gpu".
    #[getter]
    fn device(&self) -> &'static str {
        self.device.name()
    }

    fn __repr__(&self) -> String {
        format!(
            "rlx.Compiled(device={}, inputs={:?}, params={:?}, outputs={})",
            self.device(),
            self.input_names(),
            self.param_names(),
            self.outputs.len()
        )
    }
}

/// Whether `device` ("cpu", "gpu") works here (answered by running a probe, cached).
#[pyfunction]
#[pyo3(name = "is_available")]
fn py_is_available(device: &str) -> PyResult<bool> {
    guarded(|| Device::from_name(device)).map(rlx::prelude::is_available)
}

/// A dtype argument resolved to its short name ("f32", "bf16", ...).
#[pyfunction]
fn dtype_name(dtype: &Bound<'_, PyAny>) -> PyResult<&'static str> {
    dtype_arg(dtype).map(DType::name)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCompiled>()?;
    m.add_function(wrap_pyfunction!(py_is_available, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_name, m)?)?;
    Ok(())
}
