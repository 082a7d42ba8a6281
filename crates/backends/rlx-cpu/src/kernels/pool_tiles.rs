//! Max pools whose windows tile the input: stride equal to the window, no padding, every
//! window inside the input (the 2 x 2 / 2 pools of most CNNs). Each input value lies in
//! at most one window, so the gradient routing writes each position once.
//!
//! The per-plane loops here are the reference; on AVX-512 the f32 kernels fold sixteen
//! windows at a time, their taps gathered through a table of offsets, and give the same
//! bits (same tap order, same rule for NaN and ties). The digits CNN's two pools and two
//! routings took 0.9 of its 3.4 ms training step in the scalar loops, which branch per tap
//! on the data (batch 64, 1 thread, AMD EPYC); 0.2-0.3 ms in these kernels.

use super::conv::Geometry;
use crate::buffer::Float;

/// Whether the pool's windows tile its input (see the module doc).
pub(super) fn tiles(g: &Geometry) -> bool {
    g.stride == [g.kh, g.kw]
        && g.pad == [0, 0]
        && g.dilation == [1, 1]
        && g.kh * g.kw > 0
        && g.oh * g.kh <= g.h
        && g.ow * g.kw <= g.w
}

/// Whether `v` replaces `best` as a window's maximum: the first NaN wins, then the first
/// strictly larger value (a tie keeps the earlier tap), as `Num::max_nan` folds.
#[inline(always)]
fn replaces<T: Float>(v: T, best: T) -> bool {
    !best.is_nan() && (v.is_nan() || v > best)
}

/// One plane of a tiled pool: each output is its window's maximum (`avg = None`) or mean,
/// taps folded in the direct loop's order (ky, then kx) from the same identity. `window`
/// is `[kh, kw]`, passed as constants for 2 x 2 so that the loops unroll.
#[inline(always)]
pub(super) fn pool_plane<T: Float>(g: &Geometry, [kh, kw]: [usize; 2], avg: Option<bool>, src: &[T], out: &mut [T]) {
    for (y, row) in out.chunks_exact_mut(g.ow).enumerate() {
        let lines = &src[y * kh * g.w..];
        for (xo, o) in row.iter_mut().enumerate() {
            let mut acc = if avg.is_some() { T::ZERO } else { T::MAX_ID };
            for ky in 0..kh {
                for &v in &lines[ky * g.w + xo * kw..][..kw] {
                    acc = if avg.is_some() { acc + v } else { acc.max_nan(v) };
                }
            }
            // No padding: both average conventions divide by the whole window.
            *o = if avg.is_some() { acc / T::from_usize(kh * kw) } else { acc };
        }
    }
}

/// One plane of `max_pool_route` on a tiled pool. `select = false`: `dst` is like the
/// input, zero, and each window's first maximum receives `0 + grad` (the accumulation
/// onto zero of the general path). `select = true`: `dst` is like the output and takes
/// `v` (like the input) at each window's first maximum.
#[inline(always)]
pub(super) fn route_plane<T: Float>(
    g: &Geometry,
    [kh, kw]: [usize; 2],
    select: bool,
    src: &[T],
    v: &[T],
    dst: &mut [T],
) {
    for y in 0..g.oh {
        for xo in 0..g.ow {
            let first = y * kh * g.w + xo * kw;
            let (mut at, mut best) = (first, src[first]);
            for ky in 0..kh {
                let line = first + ky * g.w;
                for (i, &value) in src[line..line + kw].iter().enumerate() {
                    if replaces(value, best) {
                        (at, best) = (line + i, value);
                    }
                }
            }
            let o = y * g.ow + xo;
            if select {
                dst[o] = v[at];
            } else {
                dst[at] += v[o];
            }
        }
    }
}

/// What an AVX-512 tiled kernel computes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Fold {
    /// The windows' maxima (`max_pool2d`).
    Max,
    /// `max_pool2d_grad`: the output gradient routed to each window's maximum.
    Route,
    /// `max_pool2d_select`: the value at each window's maximum.
    Select,
}

/// The f32 kernel of a tiled max pool on AVX-512 (`x` the input; `v` the routed or
/// selected operand, unused for [`Fold::Max`]; `out` the op's output). Returns false,
/// having done nothing, where the host lacks AVX-512 or the geometry does not tile or
/// does not fit the gather's 32-bit offsets: the caller runs the per-plane loops.
pub(super) fn max_pool_f32(g: &Geometry, fold: Fold, x: &[f32], v: &[f32], out: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if crate::features::features().has_avx512() && tiles(g) && g.oh * g.ow > 0 {
        return avx512::run(g, fold, x, v, out);
    }
    let _ = (g, fold, x, v, out);
    false
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Fold, Geometry};
    use crate::threads::MIN_PARALLEL_ELEMS;
    use rayon::prelude::*;
    use std::arch::x86_64::*;

    /// Windows folded per vector.
    const LANES: usize = 16;

    /// Offsets of every window's taps over `planes` consecutive planes: tap `t` of window
    /// `j` (windows in output order) at `offsets[t * span + j]`, from the first plane's
    /// start, `span = planes * pooled`.
    struct Table {
        offsets: Vec<i32>,
        span: usize,
        planes: usize,
    }

    impl Table {
        /// Planes per table: one where a plane has at least [`LANES`] windows (its last
        /// vector masked), else as many as make `span` a multiple of [`LANES`], so that
        /// no lane idles (the digits CNN's 2 x 2 outputs: 4 planes a vector).
        fn new(g: &Geometry) -> Option<Table> {
            let pooled = g.oh * g.ow;
            let planes = if pooled >= LANES { 1 } else { LANES / gcd(pooled, LANES) };
            let plane = g.h * g.w;
            if planes.checked_mul(plane).is_none_or(|n| n > i32::MAX as usize) {
                return None;
            }
            let span = planes * pooled;
            let mut offsets = vec![0; g.kh * g.kw * span];
            for ky in 0..g.kh {
                for kx in 0..g.kw {
                    let tap = &mut offsets[(ky * g.kw + kx) * span..][..span];
                    for (j, o) in tap.iter_mut().enumerate() {
                        let (p, w) = (j / pooled, j % pooled);
                        let (y, xo) = (w / g.ow, w % g.ow);
                        *o = (p * plane + (y * g.kh + ky) * g.w + xo * g.kw + kx) as i32;
                    }
                }
            }
            Some(Table { offsets, span, planes })
        }
    }

    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 { a } else { gcd(b, a % b) }
    }

    pub(super) fn run(g: &Geometry, fold: Fold, x: &[f32], v: &[f32], out: &mut [f32]) -> bool {
        let Some(table) = Table::new(g) else { return false };
        let (plane, pooled) = (g.h * g.w, g.oh * g.ow);
        // Each group of `table.planes` planes is one task writing only its own part of
        // `out`: bit-identical for every thread count.
        let out_per_plane = if fold == Fold::Route { plane } else { pooled };
        let chunk = table.planes * out_per_plane;
        let group = |i: usize, dst: &mut [f32]| {
            let planes = dst.len() / out_per_plane;
            let (x, first) = (&x[i * table.planes * plane..][..planes * plane], i * table.planes);
            if fold == Fold::Route {
                dst.fill(0.0);
            }
            if planes < table.planes {
                // The planes after the last whole group: the per-plane loops.
                for p in 0..planes {
                    let src = &x[p * plane..][..plane];
                    let dst = &mut dst[p * out_per_plane..][..out_per_plane];
                    match fold {
                        Fold::Max => super::pool_plane(g, [g.kh, g.kw], None, src, dst),
                        Fold::Route => {
                            super::route_plane(g, [g.kh, g.kw], false, src, &v[(first + p) * pooled..][..pooled], dst)
                        }
                        Fold::Select => {
                            super::route_plane(g, [g.kh, g.kw], true, src, &v[(first + p) * plane..][..plane], dst)
                        }
                    }
                }
                return;
            }
            let v = match fold {
                Fold::Max => &[][..],
                Fold::Route => &v[first * pooled..][..table.span],
                Fold::Select => &v[first * plane..][..planes * plane],
            };
            // SAFETY: the host has AVX-512 F (checked by the caller); every offset in the
            // table lies inside `planes * plane` (the windows lie inside their planes, by
            // `tiles`), which `x`, `v` (select) and `dst` (route) hold, and the vectors
            // run over `table.span` windows, which `dst` (max, select) and `v` (route) hold.
            unsafe { fold_group(g.kh * g.kw, &table, fold, x, v, dst) };
        };
        if crate::threads::current() > 1 && out.len() >= MIN_PARALLEL_ELEMS / 8 {
            out.par_chunks_mut(chunk).enumerate().for_each(|(i, dst)| group(i, dst));
        } else {
            out.chunks_mut(chunk).enumerate().for_each(|(i, dst)| group(i, dst));
        }
        true
    }

    /// One group of planes: sixteen windows at a time, taps gathered in order, the running
    /// maximum replaced where `replaces` would (`best` not NaN, and the tap NaN or larger:
    /// `_CMP_NLE_UQ`), the winning tap's offset carried beside it.
    #[target_feature(enable = "avx512f")]
    unsafe fn fold_group(taps: usize, table: &Table, fold: Fold, x: &[f32], v: &[f32], dst: &mut [f32]) {
        let span = table.span;
        for j in (0..span).step_by(LANES) {
            let lanes: __mmask16 = if span - j >= LANES { 0xffff } else { (1u16 << (span - j)) - 1 };
            // SAFETY (whole body): see `run`; lanes past the span are masked off.
            unsafe {
                let mut at = _mm512_maskz_loadu_epi32(lanes, table.offsets.as_ptr().add(j));
                let mut best = _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), lanes, at, x.as_ptr());
                for t in 1..taps {
                    let offsets = _mm512_maskz_loadu_epi32(lanes, table.offsets.as_ptr().add(t * span + j));
                    let tap = _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), lanes, offsets, x.as_ptr());
                    let take =
                        _mm512_cmp_ps_mask::<_CMP_ORD_Q>(best, best) & _mm512_cmp_ps_mask::<_CMP_NLE_UQ>(tap, best);
                    best = _mm512_mask_blend_ps(take, best, tap);
                    at = _mm512_mask_blend_epi32(take, at, offsets);
                }
                match fold {
                    Fold::Max => _mm512_mask_storeu_ps(dst.as_mut_ptr().add(j), lanes, best),
                    Fold::Select => {
                        let picked = _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), lanes, at, v.as_ptr());
                        _mm512_mask_storeu_ps(dst.as_mut_ptr().add(j), lanes, picked);
                    }
                    Fold::Route => {
                        // 0 + grad, as the general path's accumulation onto zero (-0 -> +0).
                        let grad = _mm512_add_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(lanes, v.as_ptr().add(j)));
                        _mm512_mask_i32scatter_ps::<4>(dst.as_mut_ptr(), lanes, at, grad);
                    }
                }
            }
        }
    }
}
