//! Shared test harness: a seeded RNG, one-op graph evaluation through the public API,
//! independent f64 oracles (rounding, erf), and tolerance-aware comparison.
//!
//! Nothing here calls RLX's kernels or conversion routines: expected values are computed
//! from the input values in f64 and rounded to the output dtype by `round_oracle`, which
//! finds the nearest representable value by search over the format's bit patterns.

#![allow(dead_code)]

use rlx::prelude::*;
pub use rlx_oracle::{Half, Rng, decode_small_float, erf, erfc, round_half};

pub const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
pub const INTS: [DType; 4] = [DType::I8, DType::I32, DType::I64, DType::U8];

/// The device the op tests run on: `RLX_TEST_DEVICE` (`cpu`, the default, or `gpu`),
/// so every oracle below also checks the GPU backend.
pub fn test_device() -> Device {
    let name = std::env::var("RLX_TEST_DEVICE").unwrap_or_else(|_| "cpu".into());
    Device::from_name(&name).unwrap_or_else(|e| panic!("RLX_TEST_DEVICE: {e}"))
}

/// Range of an integer dtype.
pub fn int_range(dtype: DType) -> (i64, i64) {
    match dtype {
        DType::I8 => (-128, 127),
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        DType::I64 => (i64::MIN, i64::MAX),
        DType::U8 => (0, 255),
        DType::Bool => (0, 1),
        other => panic!("{other} is not an integer type"),
    }
}

/// `n` values representable in `dtype`: floats uniform in [lo, hi) rounded to the
/// dtype, integers uniform over [lo, hi] clipped to the type's range.
pub fn values(rng: &mut Rng, dtype: DType, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n)
        .map(|_| {
            if dtype.is_float() {
                round_oracle(rng.uniform(lo, hi), dtype)
            } else {
                let (tlo, thi) = int_range(dtype);
                let (a, b) = ((lo as i64).max(tlo), (hi as i64).min(thi));
                rng.int(a, b) as f64
            }
        })
        .collect()
}

/// `x` rounded to nearest-even in `dtype` (f16/bf16 by search, in rlx-oracle).
pub fn round_oracle(x: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F32 => x as f32 as f64, // Rust's f64 -> f32 `as` is correctly rounded
        DType::F16 => round_half(x, Half::F16),
        DType::BF16 => round_half(x, Half::BF16),
        _ => x,
    }
}

/// One input of a one-op graph.
#[derive(Clone)]
pub struct In {
    pub dtype: DType,
    pub dims: Vec<usize>,
    pub values: Vec<f64>,
}

pub fn input(dtype: DType, dims: &[usize], values: Vec<f64>) -> In {
    assert_eq!(values.len(), dims.iter().product::<usize>(), "test bug: values for {dims:?}");
    In { dtype, dims: dims.to_vec(), values }
}

/// A random input in [lo, hi).
pub fn rand_input(rng: &mut Rng, dtype: DType, dims: &[usize], lo: f64, hi: f64) -> In {
    let n = dims.iter().product();
    In { dtype, dims: dims.to_vec(), values: values(rng, dtype, n, lo, hi) }
}

/// Builds a graph with inputs x0, x1, ... and the op `build` adds, compiles it for the
/// CPU and runs it through `run_typed`.
pub fn eval(ins: &[In], build: impl FnOnce(&mut Graph, &[NodeId]) -> Result<NodeId>) -> Result<HostTensor> {
    let mut g = Graph::new("op_test");
    let mut ids = Vec::new();
    for (i, x) in ins.iter().enumerate() {
        ids.push(g.input(&format!("x{i}"), x.dtype, &x.dims)?);
    }
    let out = build(&mut g, &ids)?;
    g.set_outputs(&[out])?;
    let mut compiled = Session::new(test_device())?.compile_with(&g, &CompileOptions::default())?;
    let tensors: Vec<HostTensor> =
        ins.iter().map(|x| HostTensor::from_f64_as(x.dtype, &x.dims, &x.values)).collect::<Result<_>>()?;
    let names: Vec<String> = (0..ins.len()).map(|i| format!("x{i}")).collect();
    let feed: Vec<(&str, &HostTensor)> = names.iter().map(|n| n.as_str()).zip(&tensors).collect();
    let mut outs = compiled.run_typed(&feed)?;
    Ok(outs.remove(0))
}

/// `eval` that must succeed.
pub fn eval_ok(ins: &[In], build: impl FnOnce(&mut Graph, &[NodeId]) -> Result<NodeId>) -> HostTensor {
    eval(ins, build).unwrap_or_else(|e| panic!("eval failed: {e}"))
}

/// Asserts exact equality of values (NaN equals NaN; +0 equals -0), dims and dtype.
pub fn assert_exact(got: &HostTensor, dtype: DType, dims: &[usize], expected: &[f64], what: &str) {
    assert_eq!(got.dtype(), dtype, "{what}: dtype");
    assert_eq!(got.dims(), dims, "{what}: dims");
    let g = got.to_f64_vec();
    assert_eq!(g.len(), expected.len(), "{what}: length");
    for (i, (&a, &e)) in g.iter().zip(expected).enumerate() {
        assert!(a == e || (a.is_nan() && e.is_nan()), "{what}: element {i}: got {a:e}, expected {e:e}");
    }
}

/// Exact check of integer results through i64 (f64 would lose i64 precision).
pub fn assert_exact_i64(got: &HostTensor, dtype: DType, dims: &[usize], expected: &[i64], what: &str) {
    assert_eq!(got.dtype(), dtype, "{what}: dtype");
    assert_eq!(got.dims(), dims, "{what}: dims");
    assert_eq!(got.to_i64_vec(), expected, "{what}");
}

/// Asserts |got - expected| <= tol(i) element by element, or got == expected rounded to
/// the dtype; NaN only matches NaN and an infinity only the same infinity.
pub fn assert_close(
    got: &HostTensor,
    dtype: DType,
    dims: &[usize],
    expected: &[f64],
    tol: impl Fn(usize) -> f64,
    what: &str,
) {
    assert_eq!(got.dtype(), dtype, "{what}: dtype");
    assert_eq!(got.dims(), dims, "{what}: dims");
    let g = got.to_f64_vec();
    assert_eq!(g.len(), expected.len(), "{what}: length");
    for (i, (&a, &e)) in g.iter().zip(expected).enumerate() {
        // The exact value rounded to the format is always acceptable (overflow included).
        let ok = if a == round_oracle(e, dtype) {
            true
        } else if e.is_nan() || a.is_nan() {
            e.is_nan() && a.is_nan()
        } else if e.is_infinite() || a.is_infinite() {
            a == e
        } else {
            (a - e).abs() <= tol(i)
        };
        assert!(ok, "{what}: element {i}: got {a:e}, expected {e:e} (diff {:e}, tol {:e})", (a - e).abs(), tol(i));
    }
}

/// Unit roundoff of the arithmetic a kernel does for `dtype` (f32 for the half types).
pub fn compute_u(dtype: DType) -> f64 {
    if dtype == DType::F64 { 2f64.powi(-53) } else { 2f64.powi(-24) }
}

/// Error bound of a computed value: `k` rounding errors of the compute type on a
/// quantity of size `scale`, plus the final rounding to `dtype` (one unit roundoff of the
/// result for f16/bf16). Derived, never a flat bound.
pub fn bound(dtype: DType, k: f64, scale: f64, result: f64) -> f64 {
    let store = if dtype.is_half() { dtype.unit_roundoff() * 2.0 * result.abs() } else { 0.0 };
    k * compute_u(dtype) * scale + store + min_subnormal(dtype)
}

/// Spacing of the format near zero: results that underflow are off by up to this much.
pub fn min_subnormal(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-24),
        DType::BF16 => 2f64.powi(-133),
        DType::F32 => 2f64.powi(-149),
        _ => 2f64.powi(-1074),
    }
}

/// Flat index into a tensor of `dims` read at output multi-index `out_index` under
/// NumPy broadcasting.
pub fn broadcast_index(dims: &[usize], out_index: &[usize]) -> usize {
    let lead = out_index.len() - dims.len();
    let idx: Vec<usize> = dims.iter().enumerate().map(|(i, &d)| if d == 1 { 0 } else { out_index[lead + i] }).collect();
    ravel(&idx, dims)
}

/// Row-major index of a multi-index.
pub fn ravel(index: &[usize], dims: &[usize]) -> usize {
    index.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// Multi-index of a row-major position.
pub fn unravel(mut flat: usize, dims: &[usize]) -> Vec<usize> {
    let mut index = vec![0; dims.len()];
    for k in (0..dims.len()).rev() {
        if dims[k] > 0 {
            index[k] = flat % dims[k];
            flat /= dims[k];
        }
    }
    index
}

/// Value of `x` (dims `dims`) at output multi-index `out_index` under NumPy broadcasting.
pub fn broadcast_read(values: &[f64], dims: &[usize], out_index: &[usize]) -> f64 {
    values[broadcast_index(dims, out_index)]
}
