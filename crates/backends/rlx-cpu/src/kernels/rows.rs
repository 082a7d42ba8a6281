//! Row kernels: the inner loops of softmax, log-softmax, layer / RMS norm and the fused
//! activations (SwiGLU, bias + GELU), over contiguous rows of f32.
//!
//! Each is multiversioned (see `arch`): the caller picks the arm once per op call and the
//! whole row loop runs inside it. Reductions keep 16 independent accumulator lanes,
//! combined in a fixed order, so they vectorize and every arm gives the same bits.

use crate::multiversion;
use crate::vmath;

const LANES: usize = 16;

/// Sum of `lanes` in a fixed pairwise order.
#[inline(always)]
fn fold_lanes(mut lanes: [f32; LANES]) -> f32 {
    let mut width = LANES / 2;
    while width > 0 {
        for i in 0..width {
            lanes[i] += lanes[i + width];
        }
        width /= 2;
    }
    lanes[0]
}

/// Sum of `f(x)` over a row, 16 lanes at a time.
#[inline(always)]
fn sum_map(row: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0f32; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v);
        }
    }
    for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
        *a += f(v);
    }
    fold_lanes(acc)
}

/// Row maximum; NaN if the row holds a NaN; -inf for an empty row.
#[inline(always)]
fn max_nan(row: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let mut chunks = row.chunks_exact(LANES);
    // `v > a || v != v` keeps a NaN once seen: NaN > anything is false.
    let step = |a: f32, v: f32| if v > a || v.is_nan() { v } else { a };
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = step(*a, v);
        }
    }
    for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
        *a = step(*a, v);
    }
    acc.iter().fold(f32::NEG_INFINITY, |m, &v| step(m, v))
}

multiversion! {
    /// Softmax of each `len`-long row of `x` into `out`.
    pub fn softmax_rows(x: &[f32], out: &mut [f32], len: usize) {
        if len == 0 {
            return;
        }
        for (row, o) in x.chunks_exact(len).zip(out.chunks_exact_mut(len)) {
            let m = max_nan(row);
            for (o, &v) in o.iter_mut().zip(row) {
                *o = vmath::exp(v - m);
            }
            let inv = 1.0 / sum_map(o, |e| e);
            o.iter_mut().for_each(|e| *e *= inv);
        }
    }
}

multiversion! {
    /// Log-softmax of each row. The log-sum-exp uses the accurate `ln` (it feeds losses).
    pub fn log_softmax_rows(x: &[f32], out: &mut [f32], len: usize) {
        if len == 0 {
            return;
        }
        for (row, o) in x.chunks_exact(len).zip(out.chunks_exact_mut(len)) {
            let m = max_nan(row);
            let lse = sum_map(row, |v| vmath::exp(v - m)).ln();
            for (o, &v) in o.iter_mut().zip(row) {
                *o = v - m - lse;
            }
        }
    }
}

multiversion! {
    /// LayerNorm of each row: `(x - mean) / sqrt(var + eps) * gamma + beta`.
    pub fn layer_norm_rows(x: &[f32], out: &mut [f32], len: usize, eps: f32, gamma: Option<&[f32]>, beta: Option<&[f32]>) {
        if len == 0 {
            return;
        }
        let n = len as f32;
        for (row, o) in x.chunks_exact(len).zip(out.chunks_exact_mut(len)) {
            let mean = sum_map(row, |v| v) / n;
            let var = sum_map(row, |v| (v - mean) * (v - mean)) / n;
            let inv = 1.0 / (var + eps).sqrt();
            for (o, &v) in o.iter_mut().zip(row) {
                *o = (v - mean) * inv;
            }
            affine(o, gamma, beta);
        }
    }
}

multiversion! {
    /// RMSNorm of each row: `x / sqrt(mean(x^2) + eps) * gamma`.
    pub fn rms_norm_rows(x: &[f32], out: &mut [f32], len: usize, eps: f32, gamma: Option<&[f32]>) {
        if len == 0 {
            return;
        }
        let n = len as f32;
        for (row, o) in x.chunks_exact(len).zip(out.chunks_exact_mut(len)) {
            let inv = 1.0 / (sum_map(row, |v| v * v) / n + eps).sqrt();
            for (o, &v) in o.iter_mut().zip(row) {
                *o = v * inv;
            }
            affine(o, gamma, None);
        }
    }
}

#[inline(always)]
fn affine(o: &mut [f32], gamma: Option<&[f32]>, beta: Option<&[f32]>) {
    if let Some(g) = gamma {
        o.iter_mut().zip(g).for_each(|(o, &g)| *o *= g);
    }
    if let Some(b) = beta {
        o.iter_mut().zip(b).for_each(|(o, &b)| *o += b);
    }
}

multiversion! {
    /// SwiGLU: `out = up * silu(gate)`, elementwise over equal-length slices.
    pub fn swiglu_rows(gate: &[f32], up: &[f32], out: &mut [f32]) {
        for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
            *o = u * vmath::silu(g);
        }
    }
}

multiversion! {
    /// Bias + GELU (erf form) over rows of `len`: `out = gelu(x + bias)`.
    pub fn bias_gelu_rows(x: &[f32], bias: &[f32], out: &mut [f32], len: usize) {
        if len == 0 {
            return;
        }
        for (row, o) in x.chunks_exact(len).zip(out.chunks_exact_mut(len)) {
            for ((o, &v), &b) in o.iter_mut().zip(row).zip(bias) {
                *o = vmath::gelu(v + b);
            }
        }
    }
}
