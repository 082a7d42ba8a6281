//! `rlx.onnx.load` and `rlx.OnnxModel`: ONNX files through rlx-onnx (import once per
//! distinct input shape, cached).

use crate::array::{named_arrays, tensor_to_py, views};
use crate::{detached, lock, threads_arg};
use pyo3::prelude::*;
use pyo3::types::PyList;
use rlx::ir::TensorRef;
use rlx::prelude::*;
use std::sync::Mutex;

/// (name, dtype, dims) of a tensor; `None` for what the model leaves symbolic.
type Described = (String, Option<&'static str>, Vec<Option<usize>>);

/// An ONNX model: `run` binds symbolic dims from the inputs' shapes and compiles once per
/// distinct shape (cached).
#[pyclass(module = "rlx", name = "OnnxModel")]
struct PyOnnxModel {
    model: Mutex<OnnxModel>,
    inputs: Vec<TensorInfo>,
    outputs: Vec<TensorInfo>,
}

fn info(t: &[TensorInfo]) -> Vec<Described> {
    t.iter().map(|t| (t.name.clone(), t.dtype.map(DType::name), t.dims.clone())).collect()
}

#[pymethods]
impl PyOnnxModel {
    /// Graph inputs that have no initializer, in order.
    #[getter]
    fn input_names(&self) -> Vec<String> {
        self.inputs.iter().map(|t| t.name.clone()).collect()
    }

    /// Graph outputs, in order (what `run` returns).
    #[getter]
    fn output_names(&self) -> Vec<String> {
        self.outputs.iter().map(|t| t.name.clone()).collect()
    }

    /// (name, dtype, dims) of each input; a symbolic dim is None.
    #[getter]
    fn inputs(&self) -> Vec<Described> {
        info(&self.inputs)
    }

    /// (name, dtype, dims) of each output; a symbolic dim is None.
    #[getter]
    fn outputs(&self) -> Vec<Described> {
        info(&self.outputs)
    }

    /// Runs on `inputs` (name -> array); returns the outputs in graph output order.
    fn run<'py>(&self, py: Python<'py>, inputs: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let named = named_arrays("input", Some(inputs), None, |name| {
            self.inputs.iter().find(|t| t.name == name).and_then(|t| t.dtype)
        })?;
        let views: Vec<(&str, TensorRef)> = views(py, "input", &named)?;
        let model = &self.model;
        let outputs = detached(py, || lock(model).run_views(&views))?;
        PyList::new(py, outputs.into_iter().map(|t| tensor_to_py(py, t)).collect::<PyResult<Vec<_>>>()?)
    }

    fn __repr__(&self) -> String {
        format!("rlx.OnnxModel(inputs={:?}, outputs={:?})", self.input_names(), self.output_names())
    }
}

/// Loads an ONNX file (external data files beside it are mapped too) for `device`
/// ("cpu" or "gpu"); `threads` defaults to RLX_THREADS or every core.
#[pyfunction]
#[pyo3(signature = (path, device = "cpu", threads = None))]
fn onnx_load(py: Python<'_>, path: std::path::PathBuf, device: &str, threads: Option<usize>) -> PyResult<PyOnnxModel> {
    let model = detached(py, || {
        let mut m = OnnxModel::load(&path)?;
        m.set_device(Device::from_name(device)?)?;
        if let Some(n) = threads_arg(threads)? {
            m.set_threads(n);
        }
        Ok(m)
    })?;
    Ok(PyOnnxModel { inputs: model.inputs().to_vec(), outputs: model.outputs().to_vec(), model: Mutex::new(model) })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyOnnxModel>()?;
    m.add_function(wrap_pyfunction!(onnx_load, m)?)?;
    Ok(())
}
