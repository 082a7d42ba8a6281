//! `rlx.Trainer`: trains the params of any loss graph built in Python, over rlx-train's
//! `GraphTrainer` (the gradient graph compiled once, f32 master params on the host, an
//! optax-equivalent optimizer).

use crate::array::{named_arrays, tensor_to_py, views};
use crate::{detached, lock, threads_arg};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rlx::ir::TensorRef;
use rlx::optim::{Rule, Schedule};
use rlx::prelude::*;
use rlx::train::GraphTrainer;
use std::sync::Mutex;

/// Trains the params of `loss` (a graph whose first output is a scalar loss).
#[pyclass(module = "rlx", name = "Trainer")]
struct PyTrainer {
    trainer: Mutex<GraphTrainer>,
    /// (name, dims) of each param, in the trainer's order.
    params: Vec<(String, Vec<usize>)>,
    /// (name, dtype) of each input of the loss graph.
    inputs: Vec<(String, DType)>,
}

fn rule(name: &str, weight_decay: Option<f32>, momentum: f32, nesterov: bool) -> rlx::Result<Rule> {
    Ok(match name {
        "sgd" => Rule::sgd(momentum, nesterov),
        // A weight decay on Adam is decoupled, as AdamW's.
        "adam" => Rule::adamw(weight_decay.unwrap_or(0.0)),
        // optax's default decay.
        "adamw" => Rule::adamw(weight_decay.unwrap_or(1e-4)),
        "lion" => Rule::lion(weight_decay.unwrap_or(0.0)),
        other => return Err(rlx::Error::input(format!("unknown optimizer '{other}' (sgd, adam, adamw, lion)"))),
    })
}

#[pymethods]
impl PyTrainer {
    /// `params` maps every param of `loss` to its initial array. `optimizer` is "sgd",
    /// "adam", "adamw" or "lion" (optax's update rules), with `lr`, `weight_decay`
    /// (AdamW's default 1e-4), `momentum` / `nesterov` (SGD) and `clip_norm` (clip by
    /// global norm first). With `total_steps`, the rate follows optax's warmup + cosine
    /// schedule: 0 to `lr` over `warmup_steps`, then down to `end_lr` at `total_steps`.
    /// `precision` "bf16" / "f16" computes in the half format with f32 master weights.
    #[new]
    #[pyo3(signature = (loss, params, optimizer = "adamw", lr = 1e-3, weight_decay = None, momentum = 0.0,
                        nesterov = false, clip_norm = None, warmup_steps = 0, total_steps = None, end_lr = 0.0,
                        device = "cpu", precision = "f32", threads = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        loss: &Bound<'_, crate::graph::PyGraph>,
        params: &Bound<'_, PyDict>,
        optimizer: &str,
        lr: f32,
        weight_decay: Option<f32>,
        momentum: f32,
        nesterov: bool,
        clip_norm: Option<f32>,
        warmup_steps: u64,
        total_steps: Option<u64>,
        end_lr: f32,
        device: &str,
        precision: &str,
        threads: Option<usize>,
    ) -> PyResult<PyTrainer> {
        let g = loss.borrow();
        let graph = &g.graph;
        let leaf = |id: NodeId| graph.node(id).and_then(|n| n.leaf_name()).unwrap_or_default().to_string();
        let declared: Vec<(String, Vec<usize>)> =
            graph.params().into_iter().map(|p| (leaf(p), graph.dims(p).to_vec())).collect();
        let inputs: Vec<(String, DType)> = graph.inputs().into_iter().map(|i| (leaf(i), graph.dtype(i))).collect();
        let mut init = Vec::with_capacity(params.len());
        let named = named_arrays("param", Some(params.as_any()), None, |_| Some(DType::F32))?;
        for (name, t) in views(py, "param", &named)? {
            if let Some((_, dims)) = declared.iter().find(|(n, _)| *n == name).filter(|(_, d)| d.as_slice() != t.dims())
            {
                return Err(crate::to_py(rlx::Error::shape(format!(
                    "param '{name}' is {dims:?}, its initial array is {:?}",
                    t.dims()
                ))));
            }
            init.push((name.to_string(), t.to_f32_vec()));
        }
        let trainer = detached(py, || {
            let rule = rule(optimizer, weight_decay, momentum, nesterov)?;
            let schedule = match total_steps {
                Some(total) => Schedule::WarmupCosine {
                    init: 0.0,
                    peak: lr,
                    warmup: warmup_steps,
                    decay_steps: total,
                    end: end_lr,
                },
                None if warmup_steps > 0 => {
                    return Err(rlx::Error::input("warmup_steps needs total_steps (the end of the cosine decay)"));
                }
                None => Schedule::Constant(lr),
            };
            let mut options = CompileOptions::from_env()?;
            options.precision = PrecisionPolicy::parse(precision)?;
            options.threads = threads_arg(threads)?.or(options.threads);
            let session = Session::new(Device::from_name(device)?)?;
            let mut t = GraphTrainer::new(&session, graph, init, rule, schedule, &options)?;
            if let Some(c) = clip_norm {
                if !(c.is_finite() && c > 0.0) {
                    return Err(rlx::Error::input(format!("clip_norm must be a positive number, got {c}")));
                }
                t.optimizer.clip_norm = Some(c);
            }
            Ok(t)
        })?;
        let params = trainer
            .names()
            .iter()
            .map(|n| declared.iter().find(|(d, _)| d == n).cloned().unwrap_or_else(|| (n.clone(), Vec::new())))
            .collect();
        Ok(PyTrainer { trainer: Mutex::new(trainer), params, inputs })
    }

    /// One update on a batch (the loss graph's inputs by name, as a dict or keywords);
    /// returns the batch's loss before the update.
    #[pyo3(signature = (inputs = None, **kwargs))]
    fn step(
        &self,
        py: Python<'_>,
        inputs: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<f32> {
        let named =
            named_arrays("input", inputs, kwargs, |name| self.inputs.iter().find(|(n, _)| n == name).map(|(_, d)| *d))?;
        let views: Vec<(&str, TensorRef)> = views(py, "input", &named)?;
        let trainer = &self.trainer;
        detached(py, || lock(trainer).step(&views))
    }

    /// The current params (f32 master copies) by name.
    #[getter]
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        // Copied out with the GIL released (a step on another thread may hold the
        // trainer), then made arrays without the lock.
        let trainer = &self.trainer;
        let params = &self.params;
        let tensors = detached(py, || {
            let t = lock(trainer);
            params
                .iter()
                .zip(&t.params)
                .map(|((_, dims), values)| HostTensor::from_f32(dims, values))
                .collect::<rlx::Result<Vec<_>>>()
        })?;
        let d = PyDict::new(py);
        for ((name, _), tensor) in self.params.iter().zip(tensors) {
            d.set_item(name, tensor_to_py(py, tensor)?)?;
        }
        Ok(d)
    }

    /// Updates applied so far.
    #[getter]
    fn steps(&self, py: Python<'_>) -> u64 {
        let trainer = &self.trainer;
        py.detach(|| lock(trainer).optimizer.state.step)
    }

    /// The learning rate of the next update.
    #[getter]
    fn lr(&self, py: Python<'_>) -> f32 {
        let trainer = &self.trainer;
        py.detach(|| {
            let t = lock(trainer);
            t.optimizer.schedule.rate(t.optimizer.state.step)
        })
    }

    /// The optimizer (hyper-parameters, step, moments) as JSON, for checkpoints.
    fn optimizer_json(&self, py: Python<'_>) -> PyResult<String> {
        let trainer = &self.trainer;
        detached(py, || lock(trainer).optimizer.to_json())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTrainer>()
}
