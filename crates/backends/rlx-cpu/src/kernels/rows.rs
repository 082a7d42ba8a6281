//! Row kernels: the inner loops of softmax, log-softmax, layer / RMS norm and the fused
//! activations (SwiGLU, bias + GELU), over contiguous rows of f32.
//!
//! Each is multiversioned (see `arch`): the caller picks the arm once per op call and the
//! whole row loop runs inside it. Reductions keep 16 independent accumulator lanes,
//! combined in a fixed order, so they vectorize and every arm gives the same bits.

use crate::buffer::Float;
use crate::multiversion;
use crate::vmath;

pub(crate) const LANES: usize = rlx_ir::ops::reduce::SUM_LANES;

/// Sum of `lanes` in a fixed pairwise order (`lane[i] + lane[i + w]`, w = 8, 4, 2, 1):
/// the row kernels' and the reductions' (`reduce::pairwise_run`) lane tree.
#[inline(always)]
pub(crate) fn fold_lanes<T: Float>(mut lanes: [T; LANES]) -> T {
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
pub(crate) fn sum_map(row: &[f32], f: impl Fn(f32) -> f32) -> f32 {
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

/// One LayerNorm row.
#[inline(always)]
fn layer_norm_row(row: &[f32], o: &mut [f32], eps: f32, gamma: Option<&[f32]>, beta: Option<&[f32]>) {
    let n = row.len() as f32;
    let mean = sum_map(row, |v| v) / n;
    let var = sum_map(row, |v| (v - mean) * (v - mean)) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for (o, &v) in o.iter_mut().zip(row) {
        *o = (v - mean) * inv;
    }
    affine(o, gamma, beta);
}

/// One RMSNorm row.
#[inline(always)]
fn rms_norm_row(row: &[f32], o: &mut [f32], eps: f32, gamma: Option<&[f32]>) {
    let inv = 1.0 / (sum_map(row, |v| v * v) / row.len() as f32 + eps).sqrt();
    for (o, &v) in o.iter_mut().zip(row) {
        *o = v * inv;
    }
    affine(o, gamma, None);
}

multiversion! {
    /// LayerNorm of each row: `(x - mean) / sqrt(var + eps) * gamma + beta`.
    pub fn layer_norm_rows(x: &[f32], out: &mut [f32], len: usize, eps: f32, gamma: Option<&[f32]>, beta: Option<&[f32]>) {
        if len == 0 {
            return;
        }
        for (row, o) in x.chunks_exact(len).zip(out.chunks_exact_mut(len)) {
            layer_norm_row(row, o, eps, gamma, beta);
        }
    }
}

multiversion! {
    /// RMSNorm of each row: `x / sqrt(mean(x^2) + eps) * gamma`.
    pub fn rms_norm_rows(x: &[f32], out: &mut [f32], len: usize, eps: f32, gamma: Option<&[f32]>) {
        if len == 0 {
            return;
        }
        for (row, o) in x.chunks_exact(len).zip(out.chunks_exact_mut(len)) {
            rms_norm_row(row, o, eps, gamma);
        }
    }
}

multiversion! {
    /// Residual add then norm, row by row while the sum is in cache: `sum = a + b`,
    /// `out = norm(sum)` (RMS when `rms`, else LayerNorm with `beta`).
    #[allow(clippy::too_many_arguments)]
    pub fn add_norm_rows(a: &[f32], b: &[f32], sum: &mut [f32], out: &mut [f32], len: usize, eps: f32, rms: bool, gamma: Option<&[f32]>, beta: Option<&[f32]>) {
        if len == 0 {
            return;
        }
        let rows = a.chunks_exact(len).zip(b.chunks_exact(len)).zip(sum.chunks_exact_mut(len).zip(out.chunks_exact_mut(len)));
        for ((ra, rb), (s, o)) in rows {
            for ((s, &x), &y) in s.iter_mut().zip(ra).zip(rb) {
                *s = x + y;
            }
            if rms { rms_norm_row(s, o, eps, gamma) } else { layer_norm_row(s, o, eps, gamma, beta) }
        }
    }
}

multiversion! {
    /// `out = rms_norm(x) * gamma * silu(z)` per row; `silu_out`, when given, receives silu(z).
    #[allow(clippy::too_many_arguments)]
    pub fn rms_norm_mul_silu_rows(x: &[f32], z: &[f32], out: &mut [f32], silu_out: Option<&mut [f32]>, len: usize, eps: f32, gamma: Option<&[f32]>) {
        let mut silu_out = silu_out;
        if len == 0 {
            return;
        }
        for (r, (row, o)) in x.chunks_exact(len).zip(out.chunks_exact_mut(len)).enumerate() {
            rms_norm_row(row, o, eps, gamma);
            let zr = &z[r * len..(r + 1) * len];
            match silu_out.as_deref_mut() {
                Some(so) => {
                    for ((o, s), &zv) in o.iter_mut().zip(&mut so[r * len..(r + 1) * len]).zip(zr) {
                        *s = vmath::silu(zv);
                        *o *= *s;
                    }
                }
                None => o.iter_mut().zip(zr).for_each(|(o, &zv)| *o *= vmath::silu(zv)),
            }
        }
    }
}

multiversion! {
    /// `out = x / sqrt(sum(x^2) + eps)` per row (`x * (1 / sqrt(...))` when `rsqrt`);
    /// `denom`, when given, receives each row's sqrt (or its reciprocal).
    pub fn l2_norm_rows(x: &[f32], out: &mut [f32], denom: Option<&mut [f32]>, len: usize, eps: f32, rsqrt: bool) {
        let mut denom = denom;
        if len == 0 {
            return;
        }
        for (r, (row, o)) in x.chunks_exact(len).zip(out.chunks_exact_mut(len)).enumerate() {
            let root = (sum_map(row, |v| v * v) + eps).sqrt();
            let d = if rsqrt { 1.0 / root } else { root };
            if rsqrt {
                o.iter_mut().zip(row).for_each(|(o, &v)| *o = v * d);
            } else {
                o.iter_mut().zip(row).for_each(|(o, &v)| *o = v / d);
            }
            if let Some(dd) = denom.as_deref_mut() {
                dd[r] = d;
            }
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
    /// SwiGLU in place: `up_out = up_out * silu(gate)`.
    pub fn swiglu_inplace(gate: &[f32], up_out: &mut [f32]) {
        for (u, &g) in up_out.iter_mut().zip(gate) {
            *u *= vmath::silu(g);
        }
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
