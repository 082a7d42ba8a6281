//! Shared test harness: a seeded RNG, one-op graph evaluation through the public API,
//! independent f64 oracles (rounding, erf), and tolerance-aware comparison.
//!
//! Nothing here calls RLX's kernels or conversion routines: expected values are computed
//! from the input values in f64 and rounded to the output dtype by `round_oracle`, which
//! finds the nearest representable value by search over the format's bit patterns.

#![allow(dead_code)]

use rlx::prelude::*;
use std::sync::OnceLock;

pub const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
pub const INTS: [DType; 4] = [DType::I8, DType::I32, DType::I64, DType::U8];

/// SplitMix64: deterministic, dependency-free.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }
    /// Uniform integer in [lo, hi].
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (hi as i128 - lo as i128 + 1) as u128;
        (lo as i128 + (self.next_u64() as u128 % span) as i128) as i64
    }
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

/// The sorted finite values of a 16-bit float format, decoded bit pattern by pattern.
fn table(dtype: DType) -> &'static [(f64, u16)] {
    static F16: OnceLock<Vec<(f64, u16)>> = OnceLock::new();
    static BF16: OnceLock<Vec<(f64, u16)>> = OnceLock::new();
    let build = |decode: fn(u16) -> f64| {
        let mut v: Vec<(f64, u16)> = (0..=u16::MAX).map(|b| (decode(b), b)).filter(|(x, _)| x.is_finite()).collect();
        v.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        v.dedup_by(|a, b| a.0 == b.0); // +0 / -0
        v
    };
    match dtype {
        DType::F16 => F16.get_or_init(|| build(|b| decode_small_float(b, 5, 10))),
        DType::BF16 => BF16.get_or_init(|| build(|b| decode_small_float(b, 8, 7))),
        _ => unreachable!(),
    }
}

/// Value of a 16-bit IEEE-style bit pattern with the given field widths.
pub fn decode_small_float(bits: u16, exp_bits: u32, mant_bits: u32) -> f64 {
    let sign = if bits >> 15 == 1 { -1.0 } else { 1.0 };
    let e = ((bits >> mant_bits) & ((1 << exp_bits) - 1)) as i32;
    let m = (bits & ((1 << mant_bits) - 1)) as f64;
    let bias = (1 << (exp_bits - 1)) - 1;
    let scale = 2f64.powi(mant_bits as i32);
    if e == (1 << exp_bits) - 1 {
        return if m == 0.0 { sign * f64::INFINITY } else { f64::NAN };
    }
    if e == 0 {
        return sign * m / scale * 2f64.powi(1 - bias);
    }
    sign * (1.0 + m / scale) * 2f64.powi(e - bias)
}

/// `x` rounded to nearest-even in `dtype`, by search (independent of RLX's converters).
pub fn round_oracle(x: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F64 => x,
        DType::F32 => x as f32 as f64, // Rust's f64 -> f32 `as` is correctly rounded
        DType::F16 | DType::BF16 => {
            if !x.is_finite() {
                return x;
            }
            let t = table(dtype);
            let max = t[t.len() - 1].0;
            // Overflow threshold: max + half an ulp of max rounds to infinity.
            let prev = t[t.len() - 2].0;
            let limit = max + (max - prev) / 2.0;
            if x.abs() >= limit {
                return if x > 0.0 { f64::INFINITY } else { f64::NEG_INFINITY };
            }
            let i = t.partition_point(|&(v, _)| v < x);
            let cand: Vec<(f64, u16)> =
                [i.checked_sub(1), Some(i)].into_iter().flatten().filter_map(|j| t.get(j).copied()).collect();
            let best = cand
                .iter()
                .min_by(|a, b| {
                    let (da, db) = ((a.0 - x).abs(), (b.0 - x).abs());
                    da.partial_cmp(&db).unwrap().then((a.1 & 1).cmp(&(b.1 & 1)))
                })
                .unwrap();
            if best.0 == 0.0 && x.is_sign_negative() { -0.0 } else { best.0 }
        }
        _ => x,
    }
}

/// One input of a one-op graph.
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
    let mut compiled = Session::new(Device::Cpu)?.compile_with(&g, &CompileOptions::default())?;
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

/// erf in f64, independent of libm: Taylor series for |x| <= 1.5, 1 - erfc beyond.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.abs() > 1.5 {
        return x.signum() * (1.0 - erfc(x.abs()));
    }
    let mut term = x;
    let mut sum = x;
    for n in 1..400 {
        term *= -x * x / n as f64;
        let add = term / (2 * n + 1) as f64;
        sum += add;
        if add.abs() < 1e-18 * sum.abs() {
            break;
        }
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

/// erfc in f64 with full relative accuracy in the tail: Laplace's continued fraction
/// for x >= 1.5 (measured against mpmath: < 4e-16 relative there), 1 - erf below.
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < 1.5 {
        return if x <= -1.5 { 2.0 - erfc(-x) } else { 1.0 - erf(x) };
    }
    if x > 27.0 {
        return 0.0;
    }
    // erfc(a) = exp(-a^2)/sqrt(pi) / (a + (1/2)/(a + 1/(a + (3/2)/(a + ...))))
    let mut f = x;
    for k in (1..400).rev() {
        f = x + (k as f64 / 2.0) / f;
    }
    (-x * x).exp() / std::f64::consts::PI.sqrt() / f
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
