//! Derivatives against independent oracles: central finite differences in f64 for every
//! differentiable op (first and second order, table-driven in `ops.rs`), composition
//! (`compose.rs`), and JAX's values (`jax.rs`, fixtures from tools/autodiff).

mod compose;
mod jax;
mod mixed;
mod ops;
mod scan;

use rlx::prelude::*;
use rlx_oracle::Rng;

/// One input of a case: float values in `[lo, hi)` or given exactly (both
/// differentiated), or fixed integers.
#[derive(Clone)]
pub enum Spec {
    Float { dims: Vec<usize>, lo: f64, hi: f64 },
    Exact { dims: Vec<usize>, values: Vec<f64> },
    Int { dims: Vec<usize>, values: Vec<i64> },
}

pub fn exact(dims: &[usize], values: &[f64]) -> Spec {
    Spec::Exact { dims: dims.to_vec(), values: values.to_vec() }
}

pub fn float(dims: &[usize], lo: f64, hi: f64) -> Spec {
    Spec::Float { dims: dims.to_vec(), lo, hi }
}

pub fn int(dims: &[usize], values: &[i64]) -> Spec {
    Spec::Int { dims: dims.to_vec(), values: values.to_vec() }
}

pub type Build = Box<dyn Fn(&mut Graph, &[NodeId]) -> Result<NodeId>>;

/// The values fed for each input: floats drawn from the spec, integers as given.
pub fn draw(rng: &mut Rng, specs: &[Spec]) -> Vec<HostTensor> {
    draw_as(rng, specs, DType::F64)
}

/// `draw` with float inputs of `dtype`.
pub fn draw_as(rng: &mut Rng, specs: &[Spec], dtype: DType) -> Vec<HostTensor> {
    specs
        .iter()
        .map(|s| match s {
            Spec::Float { dims, lo, hi } => {
                let n: usize = dims.iter().product();
                let v: Vec<f64> = (0..n).map(|_| rng.uniform(*lo, *hi)).collect();
                HostTensor::from_f64_as(dtype, dims, &v).unwrap()
            }
            Spec::Exact { dims, values } => HostTensor::from_f64_as(dtype, dims, values).unwrap(),
            Spec::Int { dims, values } => HostTensor::from_i64(dims, values).unwrap(),
        })
        .collect()
}

/// `L = sum(op(inputs) * W)` with fixed random weights W: a scalar whose gradient
/// exercises every output element of the op. Inputs are named `x0`, `x1`, ...
pub fn scalar_graph(specs: &[Spec], build: &Build, seed: u64) -> Graph {
    scalar_graph_as(specs, build, seed, DType::F64)
}

/// `scalar_graph` with float inputs (and weights) of `dtype`.
pub fn scalar_graph_as(specs: &[Spec], build: &Build, seed: u64, dtype: DType) -> Graph {
    let mut g = Graph::new("case");
    let ids: Vec<NodeId> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| match s {
            Spec::Float { dims, .. } | Spec::Exact { dims, .. } => g.input(&format!("x{i}"), dtype, dims).unwrap(),
            Spec::Int { dims, .. } => g.input(&format!("x{i}"), DType::I64, dims).unwrap(),
        })
        .collect();
    let y = build(&mut g, &ids).unwrap();
    let dims = g.dims(y).to_vec();
    let mut rng = Rng::new(seed);
    let w: Vec<f64> = (0..dims.iter().product()).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let w = g.constant_tensor(HostTensor::from_f64_as(dtype, &dims, &w).unwrap()).unwrap();
    let yw = g.mul(y, w).unwrap();
    let axes: Vec<usize> = (0..dims.len()).collect();
    let loss = if axes.is_empty() { yw } else { g.reduce(ReduceOp::Sum, yw, &axes, false).unwrap() };
    g.set_outputs(&[loss]).unwrap();
    g
}

/// Compiles `g` for the CPU and runs it on `feed` (name, tensor); all outputs as f64.
pub struct Runner {
    compiled: CompiledGraph,
}

impl Runner {
    pub fn new(g: &Graph) -> Runner {
        let compiled =
            Session::new(Device::Cpu).unwrap().compile(g).unwrap_or_else(|e| panic!("compile {}: {e}", g.name()));
        Runner { compiled }
    }

    pub fn run(&mut self, feed: &[(String, HostTensor)]) -> Vec<Vec<f64>> {
        let refs: Vec<(&str, &HostTensor)> = feed.iter().map(|(n, t)| (n.as_str(), t)).collect();
        self.compiled.run_typed(&refs).unwrap().iter().map(|t| t.to_f64_vec()).collect()
    }
}

pub fn named(values: &[HostTensor]) -> Vec<(String, HostTensor)> {
    values.iter().enumerate().map(|(i, t)| (format!("x{i}"), t.clone())).collect()
}

/// `t` with element `j` moved by `delta` (an f64 tensor).
pub fn nudged(t: &HostTensor, j: usize, delta: f64) -> HostTensor {
    let mut v = t.to_f64_vec();
    v[j] += delta;
    HostTensor::from_f64_as(DType::F64, t.dims(), &v).unwrap()
}

/// `t + s * d` (f64 tensors of one shape).
pub fn axpy(t: &HostTensor, s: f64, d: &HostTensor) -> HostTensor {
    let v: Vec<f64> = t.to_f64_vec().iter().zip(d.to_f64_vec()).map(|(a, b)| a + s * b).collect();
    HostTensor::from_f64_as(DType::F64, t.dims(), &v).unwrap()
}

/// Asserts `got` is within `tol * (1 + |want|)` of `want`, elementwise.
pub fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: {g} vs finite difference {w} (tol {tol:e})");
    }
}
