//! Vector math: f32 transcendentals as branch-free polynomials in plain Rust.
//!
//! PLACEHOLDER: the scalar functions below still call libm; the polynomial versions
//! replace them (docs/vmath.md).

use crate::multiversion;

#[inline(always)]
pub fn exp(x: f32) -> f32 {
    x.exp()
}

#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

#[inline(always)]
pub fn silu(x: f32) -> f32 {
    if x == f32::NEG_INFINITY { 0.0 } else { x * sigmoid(x) }
}

#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    if x == f32::NEG_INFINITY { 0.0 } else { 0.5 * x * libm::erfcf(-x * std::f32::consts::FRAC_1_SQRT_2) }
}

multiversion! {
    /// `out[i] = exp(x[i])`.
    pub fn exp_slice(x: &[f32], out: &mut [f32]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = exp(v);
        }
    }
}

/// Every slice kernel, by name (benchmarks and tests iterate this).
/// A multiversioned slice kernel: `out[i] = f(x[i])` on the given arm.
pub type SliceFn = fn(crate::arch::Arm, &[f32], &mut [f32]);

pub const SLICE_FUNCTIONS: &[(&str, SliceFn)] = &[("exp", exp_slice)];
