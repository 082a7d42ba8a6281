//! Scaled dot-product attention with GQA (semantics in `rlx_ir::ops::attention`).
//!
//! f32 (and widened f16/bf16) runs per query head and block of query rows as two GEMMs
//! around a row softmax: `S = Q Kᵀ` over the keys the block can see, scale + mask + softmax
//! in place, `O = P V` written straight into the output. The scalar loop this replaced
//! spent ~3 s of a 512-token SmolLM2 prefill in attention; f64 keeps the plain loop (the
//! exact reference path). One query row per head (a decode step) skips the GEMM calls:
//! dots, softmax and the weighted sum of V rows run as three vector loops per head. A
//! packed half cache is widened by half_gemm's converters (F16C inline; `half`'s slice
//! conversion made an out-of-line call per 8 values: 4% of an 8-row SmolLM2 decode step).

use super::half_gemm;
use super::matmul::Gemm;
use super::rows;
use crate::arena::{Args, Out, out_mut};
use crate::buffer::{Class, Float};
use crate::features::Arm;
use crate::with_float;
use rayon::prelude::*;
use rlx_ir::shape::broadcast_strides;
use rlx_ir::{Error, Result};

#[derive(Clone, Debug)]
pub struct AttentionPlan {
    pub b: usize,
    pub hq: usize,
    pub hkv: usize,
    pub sq: usize,
    pub skv: usize,
    pub d: usize,
    pub dv: usize,
    pub scale: f64,
    pub causal: bool,
    /// The causal length is operand 3, read at run time (a KV cache's filled part).
    pub causal_len: bool,
    /// A causal query sees only this many keys, its own included (sliding window).
    pub window: Option<usize>,
    /// Strides of the bias over `[b, hq, sq, skv]` when there is one.
    pub bias_strides: Option<Vec<usize>>,
}

/// Query rows per task: S for 64 rows of a 2048-key cache is 512 KiB, inside L2.
///
/// A prompt's row `i` is computed in the block of rows `64 * (i / 64)..`: the `gemm`
/// crate's products (Q Kᵀ, P V) sum in orders that depend on their shapes, so a prompt
/// prefilled in pieces that start at multiples of this (`rlx serve`'s 256-token chunks,
/// its reuse of cached prompt rows) gets the bits of the prompt prefilled whole, and
/// one split elsewhere may not.
pub const ROW_BLOCK: usize = 64;

/// Multiply-adds below which a prompt's attention stays on one thread. A SmolLM2 decode
/// step (9 heads x ~100 keys x 128 = 115K) cost 35 us split across 2 threads and 25 us on
/// one (8 rows a step, AMD EPYC, before workers stayed awake through a run).
const MIN_PARALLEL_MACS: usize = 1 << 22;

/// Multiply-adds from which a decode step's attention (one query row a head) runs on all
/// workers: SmolLM2 (9 heads, 128 multiply-adds a key) from ~450 keys. Its attention per
/// token, 2 threads, Intel Xeon (model 207): at ~500 keys 1.17-1.24 -> 1.01-1.08 ms over an
/// f16 cache and 2.68-2.94 -> 1.66-1.78 over an f32 one; at ~950 keys 5.6-6.4 -> 3.1-3.4 ms
/// over an f32 cache (the f16 cache's figures at [`half16`]'s `split_keys`). The 8-row
/// step's calls run side by side, one worker each, and never split.
const MIN_DECODE_SPLIT_MACS: usize = 1 << 19;

impl AttentionPlan {
    pub fn new(
        q: &[usize],
        k: &[usize],
        v: &[usize],
        bias: Option<&[usize]>,
        scale: Option<f32>,
        mask: rlx_ir::MaskKind,
    ) -> AttentionPlan {
        let full = [q[0], q[1], q[2], k[2]];
        AttentionPlan {
            b: q[0],
            hq: q[1],
            hkv: k[1],
            sq: q[2],
            skv: k[2],
            d: q[3],
            dv: v[3],
            scale: scale.map_or(1.0 / (q[3] as f64).sqrt(), f64::from),
            causal: mask == rlx_ir::MaskKind::Causal || mask.has_len(),
            causal_len: mask.has_len(),
            window: mask.window(),
            bias_strides: bias.map(|d| broadcast_strides(d, &full)),
        }
    }

    /// End of the keys visible to query row `i` when the first `len` keys are filled.
    fn visible(&self, i: usize, len: usize) -> usize {
        if self.causal { i + len - self.sq + 1 } else { len }
    }

    /// Start of the keys visible to query row `i` (0 without a sliding window).
    fn first_visible(&self, i: usize, len: usize) -> usize {
        self.window.map_or(0, |w| self.visible(i, len).saturating_sub(w))
    }
}

pub fn attention(p: &AttentionPlan, class: Class, arm: Arm, ins: &Args, out: &mut Out) -> Result<()> {
    let len = if p.causal_len {
        let len = ins.index(3, 0)?;
        if len < p.sq as i64 || len > p.skv as i64 {
            return Err(Error::runtime(format!(
                "causal length {len} must lie in [sq, skv] = [{}, {}] (the cache holds {} keys)",
                p.sq, p.skv, p.skv
            )));
        }
        len as usize
    } else {
        p.skv
    };
    if class == Class::F32 {
        let bias: Option<&[f32]> = if p.bias_strides.is_some() { Some(ins.get(3)?) } else { None };
        let (q, out) = (ins.get(0)?, out_mut(out)?);
        if p.sq == 1
            && bias.is_none()
            && let Some(arm) = half16::fits(p, arm, ins)?
        {
            let (k, v): (&[half::f16], &[half::f16]) = (ins.get(1)?, ins.get(2)?);
            half16::decode_heads(p, arm, len, q, k, v, out);
            return Ok(());
        }
        if matches!(ins.slot(1)?.class, Class::F16 | Class::BF16) {
            // A packed half cache: the filled rows widened once per call, then the f32 path.
            // The buffer is taken out of the thread's slot while in use: a worker waiting
            // in the parallel part may steal another program's attention and come here
            // again (it then widens into a buffer of its own).
            let mut wide = WIDE.with(|w| std::mem::take(&mut *w.borrow_mut()));
            let (k, v) = widen_kv(p, len, ins, &mut wide)?;
            attention_f32(p, len, arm, q, k, v, bias, out);
            WIDE.with(|w| {
                let mut slot = w.borrow_mut();
                if slot.capacity() < wide.capacity() {
                    *slot = wide;
                }
            });
            return Ok(());
        }
        attention_f32(p, len, arm, q, ins.get(1)?, ins.get(2)?, bias, out);
        return Ok(());
    }
    with_float!(class, T => {
        let bias: Option<&[T]> = if p.bias_strides.is_some() { Some(ins.get(3)?) } else { None };
        attention_typed::<T>(p, len, ins.get(0)?, ins.get(1)?, ins.get(2)?, bias, out_mut(out)?);
        Ok(())
    })
}

thread_local! {
    /// Widened K and V of a half cache, kept between calls (a decode step would otherwise
    /// allocate and fault in megabytes per layer).
    static WIDE: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The first `len` rows of each K and V head (packed f16 / bf16 operands 1 and 2) widened
/// into `wide`, laid out as the operands (rows past `len` are never read).
fn widen_kv<'w>(p: &AttentionPlan, len: usize, ins: &Args, wide: &'w mut Vec<f32>) -> Result<(&'w [f32], &'w [f32])> {
    let (kn, vn) = (p.b * p.hkv * p.skv * p.d, p.b * p.hkv * p.skv * p.dv);
    if wide.len() < kn + vn {
        wide.resize(kn + vn, 0.0);
    }
    let (k, v) = wide.split_at_mut(kn);
    for (operand, dst, width) in [(1, &mut k[..], p.d), (2, &mut v[..vn], p.dv)] {
        let rows = p.skv * width;
        let filled = len * width;
        match ins.slot(operand)?.class {
            Class::F16 => {
                let src: &[half::f16] = ins.get(operand)?;
                for (d, s) in dst.chunks_exact_mut(rows).zip(src.chunks_exact(rows)) {
                    half_gemm::widen_f16(&s[..filled], &mut d[..filled]);
                }
            }
            Class::BF16 => {
                let src: &[half::bf16] = ins.get(operand)?;
                for (d, s) in dst.chunks_exact_mut(rows).zip(src.chunks_exact(rows)) {
                    half_gemm::widen_bf16(&s[..filled], &mut d[..filled]);
                }
            }
            other => return Err(Error::internal(format!("attention: K/V storage {other:?} with a half cache"))),
        }
    }
    Ok((&k[..kn], &v[..vn]))
}

#[allow(clippy::too_many_arguments)]
fn attention_f32(
    p: &AttentionPlan,
    len: usize,
    arm: Arm,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let (d, dv, group) = (p.d, p.dv, p.hq / p.hkv);
    let head_out = p.sq * dv;
    if head_out == 0 {
        return;
    }
    let scale = p.scale as f32;
    if p.sq == 1 && bias.is_none() {
        return decode_heads(p, len, arm, q, k, v, out);
    }
    // Rows `r0..r0 + o.len() / dv` of query head `bh`: together they see keys
    // `lo..hi`, row `i` the part `first_visible(i)..visible(i)` of it.
    let block = |bh: usize, r0: usize, o: &mut [f32]| {
        let rows = o.len() / dv;
        let (b, h) = (bh / p.hq, bh % p.hq);
        let kv = (b * p.hkv + h / group) * p.skv;
        let (lo, hi) = (p.first_visible(r0, len), p.visible(r0 + rows - 1, len));
        let keys = hi - lo;
        if keys == 0 {
            o.fill(0.0); // no keys (skv = 0): the plain loop's empty sum
            return;
        }
        let (kh, vh) = (&k[(kv + lo) * d..][..keys * d], &v[(kv + lo) * dv..][..keys * dv]);
        let qb = &q[((b * p.hq + h) * p.sq + r0) * d..][..rows * d];
        let seen = |i: usize| (p.first_visible(r0 + i, len) - lo, p.visible(r0 + i, len) - lo);
        crate::threads::with_scratch::<f32, _>(2 * rows * keys, |scratch| {
            let (s, probs) = scratch.split_at_mut(rows * keys);
            // S = Q Kᵀ: K [keys, d] read transposed.
            f32::gemm(rows, d, keys, qb, (d, 1), kh, (1, d), s, keys, 1);
            for (i, (srow, prow)) in s.chunks_exact_mut(keys).zip(probs.chunks_exact_mut(keys)).enumerate() {
                let (from, to) = seen(i);
                srow[from..to].iter_mut().for_each(|x| *x *= scale);
                if let (Some(bias), Some(st)) = (bias, &p.bias_strides) {
                    let at = b * st[0] + h * st[1] + (r0 + i) * st[2] + (lo + from) * st[3];
                    srow[from..to].iter_mut().enumerate().for_each(|(j, x)| *x += bias[at + j * st[3]]);
                }
                rows::softmax_rows(arm, &srow[from..to], &mut prow[from..to], to - from);
                prow[..from].fill(0.0);
                prow[to..].fill(0.0);
            }
            // O = P V. A non-finite V row that some row of the block does not see would
            // reach it as 0 * inf = NaN; then each row takes only its own keys.
            let (shared_from, shared_to) = (seen(rows - 1).0, seen(0).1);
            let finite = |rows: &[f32]| rows.iter().all(|v| v.is_finite());
            if finite(&vh[..shared_from * dv]) && finite(&vh[shared_to * dv..]) {
                f32::gemm(rows, keys, dv, probs, (keys, 1), vh, (dv, 1), o, dv, 1);
            } else {
                for (i, orow) in o.chunks_exact_mut(dv).enumerate() {
                    let (from, to) = seen(i);
                    let (pr, vr) = (&probs[i * keys + from..i * keys + to], &vh[from * dv..to * dv]);
                    f32::gemm(1, to - from, dv, pr, (to - from, 1), vr, (dv, 1), orow, dv, 1);
                }
            }
        })
    };
    let macs = p.b * p.hq * p.sq * len * (d + dv);
    if crate::threads::current() > 1 && macs >= MIN_PARALLEL_MACS {
        out.par_chunks_mut(head_out).enumerate().for_each(|(bh, head)| {
            head.par_chunks_mut(ROW_BLOCK * dv).enumerate().for_each(|(blk, o)| block(bh, blk * ROW_BLOCK, o));
        });
    } else {
        for (bh, head) in out.chunks_mut(head_out).enumerate() {
            head.chunks_mut(ROW_BLOCK * dv).enumerate().for_each(|(blk, o)| block(bh, blk * ROW_BLOCK, o));
        }
    }
}

/// [`attention_f32`] for one query row per head: per head, the scaled dots with the keys
/// it sees, their softmax, and the probability-weighted sum of the V rows.
fn decode_heads(p: &AttentionPlan, len: usize, arm: Arm, q: &[f32], k: &[f32], v: &[f32], out: &mut [f32]) {
    let (d, dv, group) = (p.d, p.dv, p.hq / p.hkv);
    let (first, visible) = (p.first_visible(0, len), p.visible(0, len));
    let keys = visible - first;
    let scale = p.scale as f32;
    let head = |bh: usize, o: &mut [f32]| {
        if keys == 0 {
            o.fill(0.0); // no keys: the empty sum
            return;
        }
        let (b, h) = (bh / p.hq, bh % p.hq);
        let kv = (b * p.hkv + h / group) * p.skv + first;
        crate::threads::with_scratch::<f32, _>(2 * keys, |scratch| {
            let (scores, probs) = scratch.split_at_mut(keys);
            scaled_dots(arm, &q[bh * d..][..d], &k[kv * d..][..keys * d], scale, scores);
            rows::softmax_rows(arm, scores, probs, keys);
            weighted_rows(arm, probs, &v[kv * dv..][..keys * dv], o);
        })
    };
    if crate::threads::current() > 1 && p.b * p.hq * keys * (d + dv) >= MIN_DECODE_SPLIT_MACS {
        out.par_chunks_mut(dv).enumerate().for_each(|(bh, o)| head(bh, o));
    } else {
        out.chunks_mut(dv).enumerate().for_each(|(bh, o)| head(bh, o));
    }
}

/// Lanes of the dot products' accumulators (one AVX-512 register; fewer registers per
/// step on the narrower arms, the same sums in the same order).
const LANES: usize = 16;

/// Output values the weighted sum of V rows keeps in registers per pass over the keys.
const V_BLOCK: usize = 64;

/// The sum of a dot product's lanes, halved pairwise (lane `l` plus lane `l + 8`, then
/// `+ 4`, ...): a 4-deep chain. Summing the 16 lanes in order made a 16-deep chain per key,
/// ~75% of a decode step's attention time (perf, AMD EPYC).
#[inline(always)]
fn lane_sum(acc: [f32; LANES]) -> f32 {
    let mut half = [0f32; LANES / 2];
    for l in 0..LANES / 2 {
        half[l] = acc[l] + acc[l + LANES / 2];
    }
    let mut quarter = [0f32; LANES / 4];
    for l in 0..LANES / 4 {
        quarter[l] = half[l] + half[l + LANES / 4];
    }
    (quarter[0] + quarter[2]) + (quarter[1] + quarter[3])
}

crate::multiversion! {
    /// `scores[j] = (q . k_j) * scale` for the rows `k_j` of `k`, each `q.len()` long:
    /// per key, 16 lane sums over the row in order, then [`lane_sum`], then the tail.
    pub fn scaled_dots(q: &[f32], k: &[f32], scale: f32, scores: &mut [f32]) {
        let d = q.len();
        for (s, row) in scores.iter_mut().zip(k.chunks_exact(d)) {
            let mut acc = [0f32; LANES];
            let (mut qs, mut ks) = (q.chunks_exact(LANES), row.chunks_exact(LANES));
            for (a, b) in (&mut qs).zip(&mut ks) {
                for l in 0..LANES {
                    acc[l] += a[l] * b[l];
                }
            }
            let tail = qs.remainder().iter().zip(ks.remainder()).fold(0.0, |t, (a, b)| t + a * b);
            *s = (lane_sum(acc) + tail) * scale;
        }
    }
}

crate::multiversion! {
    /// `out = sum_j probs[j] v_j` over the rows `v_j` of `v`, each `out.len()` long, each
    /// output summed over `j` in order. `V_BLOCK` outputs at a time stay in registers for
    /// the whole pass (accumulating in `out` itself went through memory on every key).
    pub fn weighted_rows(probs: &[f32], v: &[f32], out: &mut [f32]) {
        let dv = out.len();
        for (b, o) in out.chunks_mut(V_BLOCK).enumerate() {
            let mut acc = [0f32; V_BLOCK];
            let width = o.len();
            for (&pj, row) in probs.iter().zip(v.chunks_exact(dv)) {
                let row = &row[b * V_BLOCK..][..width];
                if width == V_BLOCK {
                    for l in 0..V_BLOCK {
                        acc[l] += pj * row[l];
                    }
                } else {
                    acc.iter_mut().zip(row).for_each(|(a, &x)| *a += pj * x);
                }
            }
            o.copy_from_slice(&acc[..width]);
        }
    }
}

fn attention_typed<T: Float>(
    p: &AttentionPlan,
    len: usize,
    q: &[T],
    k: &[T],
    v: &[T],
    bias: Option<&[T]>,
    out: &mut [T],
) {
    let group = p.hq / p.hkv;
    let scale = T::from_f64(p.scale);
    let head_out = p.sq * p.dv;
    if head_out == 0 {
        return;
    }
    // One task per (batch, query head): heads are independent.
    let per_head = |bh: usize, out: &mut [T]| {
        crate::threads::with_scratch::<T, _>(p.skv, |scores| {
            let (b, h) = (bh / p.hq, bh % p.hq);
            let kbase = (b * p.hkv + h / group) * p.skv;
            for (i, orow) in out.chunks_exact_mut(p.dv).enumerate() {
                let qrow = &q[((b * p.hq + h) * p.sq + i) * p.d..][..p.d];
                let (first, visible) = (p.first_visible(i, len), p.visible(i, len));
                let mut max = T::MAX_ID;
                for (j, s) in scores.iter_mut().enumerate().take(visible).skip(first) {
                    let krow = &k[(kbase + j) * p.d..][..p.d];
                    let dot = qrow.iter().zip(krow).fold(T::ZERO, |a, (&x, &y)| a + x * y);
                    let mut score = dot * scale;
                    if let (Some(bias), Some(st)) = (bias, &p.bias_strides) {
                        score += bias[b * st[0] + h * st[1] + i * st[2] + j * st[3]];
                    }
                    *s = score;
                    max = max.max_nan(score);
                }
                let mut sum = T::ZERO;
                for s in scores.iter_mut().take(visible).skip(first) {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                orow.fill(T::ZERO);
                for (j, &s) in scores.iter().enumerate().take(visible).skip(first) {
                    let w = s / sum;
                    let vrow = &v[(kbase + j) * p.dv..][..p.dv];
                    orow.iter_mut().zip(vrow).for_each(|(o, &x)| *o += w * x);
                }
            }
        })
    };
    if crate::threads::current() > 1 && p.b * p.hq > 1 {
        out.par_chunks_mut(head_out).enumerate().for_each(|(bh, o)| per_head(bh, o));
    } else {
        out.chunks_mut(head_out).enumerate().for_each(|(bh, o)| per_head(bh, o));
    }
}

/// A decode step (one query row per head) over a packed f16 cache on AVX-512 or AVX2: the
/// K and V rows are widened in registers as the loops read them, and the query heads that
/// share a K/V head (GQA) run together, so each cache row is read and widened once a step.
/// The widen-then-read path spent ~6% of an 8-row SmolLM2 decode step widening whole
/// caches on AVX-512; on AVX2 (AMD EPYC Zen 3), where it also ran on one thread, SmolLM2
/// tg128 after 896 cached tokens went from 77.9 to 121.1 tok/s on 1 thread and from 91.8 to 149.6 on 2.
///
/// Same bits as [`decode_heads`] on the widened cache, on every arm: each dot is the 16
/// lane sums of `q * k` (a multiply, then an add) over the row in order, halved pairwise as
/// [`lane_sum`] does, plus the empty tail, times the scale; each output of the weighted
/// sum adds `p_j * v_j` over the keys in order from zero (tested against that path).
mod half16 {
    use super::{AttentionPlan, MIN_DECODE_SPLIT_MACS};
    use crate::arena::Args;
    use crate::buffer::Class;
    use crate::features::{Arm, features};
    use half::f16;
    use rayon::prelude::*;
    use rlx_ir::Result;

    /// Query heads per pass over a K/V head (their accumulators stay in registers).
    const HEADS: usize = 4;

    /// Keys per dot task of [`split_keys`] (a multiple of the 16 a lane-sum block holds).
    const KEY_BLOCK: usize = 256;
    /// Output columns per weighted-sum task of [`split_keys`]: 32 f16 values, one cache
    /// line of each V row.
    const COLUMN_BLOCK: usize = 32;

    /// The arm this path takes the step on (`Avx512` or `Avx2`, with F16C), if it does: f16
    /// K and V, rows of whole vectors.
    pub(super) fn fits(p: &AttentionPlan, arm: Arm, ins: &Args) -> Result<Option<Arm>> {
        let arm = arm.min(Arm::best());
        let fits = cfg!(target_arch = "x86_64")
            && arm >= Arm::Avx2
            && features().f16c
            && p.d.is_multiple_of(16)
            && p.dv.is_multiple_of(64)
            && ins.slot(1)?.class == Class::F16
            && ins.slot(2)?.class == Class::F16;
        Ok(fits.then_some(arm))
    }

    /// `scores[h * keys + j] = (q_h . k_j) * scale` (rows `scores.1` apart from `scores.0`)
    /// for the `q.len() / d` query rows, V's rows prefetched as K's are read.
    ///
    /// # Safety
    /// `arm` came from [`fits`]; the slices are as `x86::dots_avx512` requires.
    unsafe fn dots(
        arm: Arm,
        q: &[f32],
        (k, d): (&[f16], usize),
        (v, dv): (&[f16], usize),
        scale: f32,
        scores: (*mut f32, usize),
    ) {
        // SAFETY: as the caller guarantees.
        unsafe {
            if arm == Arm::Avx512 {
                x86::dots_avx512(q, k, d, v, dv, scale, scores)
            } else {
                x86::dots_avx2(q, k, d, v, dv, scale, scores)
            }
        }
    }

    /// `out[h][c] = sum_j probs[h * keys + j] v_j[c]` for `heads.0` heads and the columns
    /// `heads.1`.
    ///
    /// # Safety
    /// `arm` came from [`fits`]; the slices are as `x86::weighted_avx512` requires.
    unsafe fn weighted(
        arm: Arm,
        probs: &[f32],
        keys: usize,
        (v, dv): (&[f16], usize),
        heads: (usize, std::ops::Range<usize>),
        out: *mut f32,
    ) {
        // SAFETY: as the caller guarantees.
        unsafe {
            if arm == Arm::Avx512 {
                x86::weighted_avx512(probs, keys, v, dv, heads, out)
            } else {
                x86::weighted_avx2(probs, keys, v, dv, heads, out)
            }
        }
    }

    pub(super) fn decode_heads(
        p: &AttentionPlan,
        arm: Arm,
        len: usize,
        q: &[f32],
        k: &[f16],
        v: &[f16],
        out: &mut [f32],
    ) {
        let (d, dv, group) = (p.d, p.dv, p.hq / p.hkv);
        let (first, visible) = (p.first_visible(0, len), p.visible(0, len));
        let keys = visible - first;
        if keys == 0 {
            return out.fill(0.0); // no keys: the empty sum
        }
        if crate::threads::current() > 1 && p.b * p.hq * keys * (d + dv) >= MIN_DECODE_SPLIT_MACS {
            return split_keys(p, arm, (first, keys), q, k, v, out);
        }
        // The query heads of K/V head `kv` (`b * hkv + h`): their outputs are contiguous.
        for (kv, o) in out.chunks_mut(group * dv).enumerate() {
            let at = kv * p.skv + first;
            let (kh, vh) = (&k[at * d..][..keys * d], &v[at * dv..][..keys * dv]);
            for (h0, o) in (0..group).step_by(HEADS).zip(o.chunks_mut(HEADS * dv)) {
                let heads = o.len() / dv;
                let qh = &q[(kv * group + h0) * d..][..heads * d];
                crate::threads::with_scratch::<f32, _>(2 * heads * keys, |scratch| {
                    let (scores, probs) = scratch.split_at_mut(heads * keys);
                    // SAFETY: `fits` chose the arm; the slices hold `heads` query rows of d,
                    // `keys` K rows of d and V rows of dv, `heads` rows of scores and of
                    // output.
                    unsafe { dots(arm, qh, (kh, d), (vh, dv), p.scale as f32, (scores.as_mut_ptr(), keys)) };
                    for (s, pr) in scores.chunks_exact(keys).zip(probs.chunks_exact_mut(keys)) {
                        crate::kernels::rows::softmax_rows(arm, s, pr, keys);
                    }
                    // SAFETY: as above.
                    unsafe { weighted(arm, probs, keys, (vh, dv), (heads, 0..dv), o.as_mut_ptr()) };
                });
            }
        }
    }

    /// [`decode_heads`] on all workers, for a call too long for one: the dots by blocks of
    /// [`KEY_BLOCK`] keys, then each head's softmax and weighted sum by blocks of
    /// [`COLUMN_BLOCK`] output columns (each task the softmax of its K/V head's query
    /// heads, which the other column blocks compute again). Splitting by K/V heads alone
    /// left SmolLM2's 3 on 2 workers 2 : 1, and one worker reading the cache drew ~9 GB/s,
    /// its prefetches waiting for fill buffers (Intel Xeon, model 207). Its decode at
    /// ~950 positions, 2 threads: attention 1.90-2.18 -> 1.41-1.60 ms a token, 188-214 ->
    /// 228-235 tok/s. Every dot, softmax and output sum is the same chain as in the loop
    /// above: the same bits.
    fn split_keys(
        p: &AttentionPlan,
        arm: Arm,
        (first, keys): (usize, usize),
        q: &[f32],
        k: &[f16],
        v: &[f16],
        out: &mut [f32],
    ) {
        // Every (query head, key) score is written by the dots before any is read.
        crate::threads::with_scratch::<f32, _>(p.b * p.hq * keys, |scores| {
            let (d, dv, group, kv_heads) = (p.d, p.dv, p.hq / p.hkv, p.b * p.hkv);
            let key_blocks = keys.div_ceil(KEY_BLOCK);
            let shared = crate::kernels::SharedOut::new(scores);
            (0..kv_heads * key_blocks).into_par_iter().for_each(|task| {
                let (kv, j0) = (task / key_blocks, task % key_blocks * KEY_BLOCK);
                let n = KEY_BLOCK.min(keys - j0);
                let at = kv * p.skv + first + j0;
                let (kh, vh) = (&k[at * d..][..n * d], &v[at * dv..][..n * dv]);
                for h0 in (0..group).step_by(HEADS) {
                    let heads = HEADS.min(group - h0);
                    let qh = &q[(kv * group + h0) * d..][..heads * d];
                    // SAFETY: `fits` chose the arm; the task writes keys j0..j0 + n of its
                    // heads' rows of `scores` (rows of `keys`), which no other task writes.
                    unsafe {
                        let rows = shared.at((kv * group + h0) * keys + j0);
                        dots(arm, qh, (kh, d), (vh, dv), p.scale as f32, (rows, keys));
                    }
                }
            });
            let blocks = dv / COLUMN_BLOCK;
            let shared = crate::kernels::SharedOut::new(out);
            (0..kv_heads * blocks).into_par_iter().for_each(|task| {
                let (kv, c0) = (task / blocks, task % blocks * COLUMN_BLOCK);
                let vh = &v[(kv * p.skv + first) * dv..][..keys * dv];
                for h0 in (0..group).step_by(HEADS) {
                    let heads = HEADS.min(group - h0);
                    let row = (kv * group + h0) * keys;
                    crate::threads::with_scratch::<f32, _>(heads * keys, |probs| {
                        let s = &scores[row..][..heads * keys];
                        for (s, pr) in s.chunks_exact(keys).zip(probs.chunks_exact_mut(keys)) {
                            crate::kernels::rows::softmax_rows(arm, s, pr, keys);
                        }
                        // SAFETY: as above; the task writes columns c0.. of its heads' output
                        // rows, which no other task writes.
                        unsafe {
                            let o = shared.at((kv * group + h0) * dv);
                            weighted(arm, probs, keys, (vh, dv), (heads, c0..c0 + COLUMN_BLOCK), o);
                        }
                    });
                }
            });
        })
    }

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use super::HEADS;
        use half::f16;
        use std::arch::x86_64::*;

        /// K and V rows are prefetched this many rows ahead of their use: a decode step's
        /// cache rows were evicted by the weights streamed since the last step, and the
        /// hardware prefetchers do not ramp up within one head's few KiB of rows.
        const PREFETCH_ROWS: usize = 8;

        /// Prefetches the `len` f16 values at `at` into L1 (a prefetch never faults, so
        /// rows past the end of the cache are harmless).
        #[inline(always)]
        fn prefetch_row(at: *const f16, len: usize) {
            for line in (0..len).step_by(32) {
                // SAFETY: a prefetch of any address is defined (no access is made).
                unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(line) as *const i8) };
            }
        }

        /// `scores[h * keys + j] = (q_h . k_j) * scale` for the `q.len() / d` query rows;
        /// V's rows (`v`, rows of `dv`) are prefetched as K's are read, for the weighted sum.
        /// Each (head, key) leaves its 16 lane sums; those of 16 keys are then reduced
        /// together ([`lane_sums`]): ~3 operations a dot where reducing each key's alone took
        /// ~10 in a 24-cycle chain. A K/V head of 80 keys and 3 query heads, 1.30-1.36 ->
        /// 0.93 us (Intel Xeon, model 207); a SmolLM2 step's attention call 6.5-8.2 -> 5.6-6.6 us.
        ///
        /// Query row h's scores go to `scores.0 + h * scores.1` (rows `scores.1` apart).
        ///
        /// # Safety
        /// The host has AVX-512 F/DQ and F16C; `d` is a multiple of 16; `k` holds whole rows
        /// of `d`; `scores` addresses one writable value per (query row, K row).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
        pub unsafe fn dots_avx512(
            q: &[f32],
            k: &[f16],
            d: usize,
            v: &[f16],
            dv: usize,
            scale: f32,
            scores: (*mut f32, usize),
        ) {
            let (heads, keys) = (q.len() / d, k.len() / d);
            // Per head, the lane sums of a block's keys (lanes past a short block's keys
            // hold stale values, reduced into lanes the store leaves out).
            let mut lanes = [[_mm512_setzero_ps(); 16]; HEADS];
            // SAFETY (whole body): reads stay in rows of `q` and `k`, writes in `scores`.
            unsafe {
                for j in 0..PREFETCH_ROWS.min(keys) {
                    prefetch_row(k.as_ptr().add(j * d), d);
                }
                for j0 in (0..keys).step_by(16) {
                    let n = (keys - j0).min(16);
                    for (i, j) in (j0..j0 + n).enumerate() {
                        let row = k.as_ptr().add(j * d) as *const __m256i;
                        prefetch_row(k.as_ptr().wrapping_add((j + PREFETCH_ROWS) * d), d);
                        prefetch_row(v.as_ptr().wrapping_add(j * dv), dv);
                        let mut acc = [_mm512_setzero_ps(); HEADS];
                        for c in 0..d / 16 {
                            let kc = _mm512_cvtph_ps(_mm256_loadu_si256(row.add(c)));
                            for (h, acc) in acc.iter_mut().enumerate().take(heads) {
                                let qc = _mm512_loadu_ps(q.as_ptr().add(h * d + c * 16));
                                *acc = _mm512_add_ps(*acc, _mm512_mul_ps(qc, kc));
                            }
                        }
                        for (h, &acc) in acc.iter().enumerate().take(heads) {
                            lanes[h][i] = acc;
                        }
                    }
                    let keep: __mmask16 = if n == 16 { !0 } else { (1u16 << n) - 1 };
                    for (h, lanes) in lanes.iter().enumerate().take(heads) {
                        let dots = _mm512_add_ps(lane_sums(lanes), _mm512_setzero_ps());
                        let out = scores.0.add(h * scores.1 + j0);
                        _mm512_mask_storeu_ps(out, keep, _mm512_mul_ps(dots, _mm512_set1_ps(scale)));
                    }
                }
            }
        }

        /// Lane j: [`super::super::lane_sum`] of `a[j]` (lane `l` plus lane `l + 8`, then
        /// `+ 4`, then `(0 + 2) + (1 + 3)`), the same additions, 16 vectors at a time: each
        /// stage adds the two halves of every key's remaining lanes, two keys' halves a
        /// vector (stage 1: 256-bit halves, stage 2: 128-bit, stages 3 and 4 within 128-bit
        /// lanes), and a permutation puts key j in lane j.
        #[inline(always)]
        unsafe fn lane_sums(a: &[__m512; 16]) -> __m512 {
            // SAFETY: the caller has AVX-512 F.
            unsafe {
                // [x's lanes 0-7 + 8-15, y's lanes 0-7 + 8-15].
                let s1: [__m512; 8] = std::array::from_fn(|i| {
                    let (x, y) = (a[2 * i], a[2 * i + 1]);
                    _mm512_add_ps(
                        _mm512_shuffle_f32x4::<0b01_00_01_00>(x, y),
                        _mm512_shuffle_f32x4::<0b11_10_11_10>(x, y),
                    )
                });
                // Keys 4i..4i + 4, 4 lanes each: lanes 0-3 + 4-7.
                let s2: [__m512; 4] = std::array::from_fn(|i| {
                    let (x, y) = (s1[2 * i], s1[2 * i + 1]);
                    _mm512_add_ps(
                        _mm512_shuffle_f32x4::<0b10_00_10_00>(x, y),
                        _mm512_shuffle_f32x4::<0b11_01_11_01>(x, y),
                    )
                });
                // 128-bit lane m: keys 8i + m and 8i + 4 + m, (0 + 2) and (1 + 3) each.
                let s3: [__m512; 2] = std::array::from_fn(|i| {
                    let (x, y) = (s2[2 * i], s2[2 * i + 1]);
                    _mm512_add_ps(_mm512_shuffle_ps::<0b01_00_01_00>(x, y), _mm512_shuffle_ps::<0b11_10_11_10>(x, y))
                });
                // 128-bit lane m: keys m, 4 + m, 8 + m, 12 + m.
                let (x, y) = (s3[0], s3[1]);
                let sums =
                    _mm512_add_ps(_mm512_shuffle_ps::<0b10_00_10_00>(x, y), _mm512_shuffle_ps::<0b11_01_11_01>(x, y));
                let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
                _mm512_permutexvar_ps(order, sums)
            }
        }

        /// `out[h][c] = sum_j probs[h * keys + j] v_j[c]` for `heads.0` heads (output rows `dv`
        /// apart at `out`) and the columns `heads.1`, up to 64 of every head per pass over
        /// the V rows.
        ///
        /// # Safety
        /// The host has AVX-512 F and F16C; the columns are whole vectors of 16 inside
        /// `dv`; `v` holds `keys` rows of `dv`; `probs` one value per (head, key); `out`
        /// addresses the heads' rows of `dv` writable values.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
        pub unsafe fn weighted_avx512(
            probs: &[f32],
            keys: usize,
            v: &[f16],
            dv: usize,
            (heads, columns): (usize, std::ops::Range<usize>),
            out: *mut f32,
        ) {
            // SAFETY (whole body): reads stay in `probs` and the rows of `v`, writes in the
            // heads' columns of `out`.
            unsafe {
                for block in columns.clone().step_by(64) {
                    let vectors = (columns.end - block).min(64) / 16;
                    let mut acc = [[_mm512_setzero_ps(); 4]; HEADS];
                    for j in 0..keys {
                        let row = v.as_ptr().add(j * dv + block) as *const __m256i;
                        let mut vc = [_mm512_setzero_ps(); 4];
                        for (c, x) in vc.iter_mut().enumerate().take(vectors) {
                            *x = _mm512_cvtph_ps(_mm256_loadu_si256(row.add(c)));
                        }
                        for (h, acc) in acc.iter_mut().enumerate().take(heads) {
                            let pj = _mm512_set1_ps(*probs.get_unchecked(h * keys + j));
                            for (a, &x) in acc.iter_mut().zip(&vc).take(vectors) {
                                *a = _mm512_add_ps(*a, _mm512_mul_ps(pj, x));
                            }
                        }
                    }
                    for (h, acc) in acc.iter().enumerate().take(heads) {
                        for (c, &a) in acc.iter().enumerate().take(vectors) {
                            _mm512_storeu_ps(out.add(h * dv + block + c * 16), a);
                        }
                    }
                }
            }
        }

        /// [`dots_avx512`] on AVX2: each (head, key)'s 16 lane sums as two registers (lanes
        /// 0-7 and 8-15), whose sum is the pairwise halving's first step; the other steps
        /// over 8 keys at a time ([`lane_sums_avx2`]). The same operations in the same
        /// order: the same bits.
        ///
        /// # Safety
        /// As `dots_avx512`, with AVX2 and F16C in place of AVX-512.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn dots_avx2(
            q: &[f32],
            k: &[f16],
            d: usize,
            v: &[f16],
            dv: usize,
            scale: f32,
            scores: (*mut f32, usize),
        ) {
            let (heads, keys) = (q.len() / d, k.len() / d);
            let mut lanes = [[_mm256_setzero_ps(); 8]; HEADS];
            // SAFETY (whole body): reads stay in rows of `q` and `k`, writes in `scores`.
            unsafe {
                for j in 0..PREFETCH_ROWS.min(keys) {
                    prefetch_row(k.as_ptr().add(j * d), d);
                }
                for j0 in (0..keys).step_by(8) {
                    let n = (keys - j0).min(8);
                    for (i, j) in (j0..j0 + n).enumerate() {
                        let row = k.as_ptr().add(j * d) as *const __m128i;
                        prefetch_row(k.as_ptr().wrapping_add((j + PREFETCH_ROWS) * d), d);
                        prefetch_row(v.as_ptr().wrapping_add(j * dv), dv);
                        let mut acc = [[_mm256_setzero_ps(); 2]; HEADS];
                        for c in 0..d / 16 {
                            let kc = [
                                _mm256_cvtph_ps(_mm_loadu_si128(row.add(2 * c))),
                                _mm256_cvtph_ps(_mm_loadu_si128(row.add(2 * c + 1))),
                            ];
                            for (h, acc) in acc.iter_mut().enumerate().take(heads) {
                                for (half, (a, &kc)) in acc.iter_mut().zip(&kc).enumerate() {
                                    let qc = _mm256_loadu_ps(q.as_ptr().add(h * d + c * 16 + 8 * half));
                                    *a = _mm256_add_ps(*a, _mm256_mul_ps(qc, kc));
                                }
                            }
                        }
                        for (h, acc) in acc.iter().enumerate().take(heads) {
                            lanes[h][i] = _mm256_add_ps(acc[0], acc[1]);
                        }
                    }
                    for (h, lanes) in lanes.iter().enumerate().take(heads) {
                        let dots = _mm256_add_ps(lane_sums_avx2(lanes), _mm256_setzero_ps());
                        let mut values = [0f32; 8];
                        _mm256_storeu_ps(values.as_mut_ptr(), _mm256_mul_ps(dots, _mm256_set1_ps(scale)));
                        std::ptr::copy_nonoverlapping(values.as_ptr(), scores.0.add(h * scores.1 + j0), n);
                    }
                }
            }
        }

        /// Lane j: the rest of [`super::super::lane_sum`] of key j's 8 halved lanes `a[j]`
        /// (lane `l` plus `l + 4`, then `(0 + 2) + (1 + 3)`), 8 keys at a time as
        /// [`lane_sums`] does 16.
        #[inline(always)]
        unsafe fn lane_sums_avx2(a: &[__m256; 8]) -> __m256 {
            // SAFETY: the caller has AVX.
            unsafe {
                // [x's lanes 0-3 + 4-7, y's lanes 0-3 + 4-7].
                let s1: [__m256; 4] = std::array::from_fn(|i| {
                    let (x, y) = (a[2 * i], a[2 * i + 1]);
                    _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(x, y), _mm256_permute2f128_ps::<0x31>(x, y))
                });
                // 128-bit lane m: keys 4i + m and 4i + 2 + m, (0 + 2) and (1 + 3) each.
                let s2: [__m256; 2] = std::array::from_fn(|i| {
                    let (x, y) = (s1[2 * i], s1[2 * i + 1]);
                    _mm256_add_ps(_mm256_shuffle_ps::<0b01_00_01_00>(x, y), _mm256_shuffle_ps::<0b11_10_11_10>(x, y))
                });
                // 128-bit lane m: keys m, 2 + m, 4 + m, 6 + m.
                let (x, y) = (s2[0], s2[1]);
                let sums =
                    _mm256_add_ps(_mm256_shuffle_ps::<0b10_00_10_00>(x, y), _mm256_shuffle_ps::<0b11_01_11_01>(x, y));
                _mm256_permutevar8x32_ps(sums, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
            }
        }

        /// [`weighted_avx512`] on AVX2: up to 16 columns of every head per pass over the V
        /// rows (16 of the 16 registers hold 4 heads' accumulators at 32 columns).
        ///
        /// # Safety
        /// As `weighted_avx512`, with AVX2 and F16C in place of AVX-512.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn weighted_avx2(
            probs: &[f32],
            keys: usize,
            v: &[f16],
            dv: usize,
            (heads, columns): (usize, std::ops::Range<usize>),
            out: *mut f32,
        ) {
            // SAFETY (whole body): reads stay in `probs` and the rows of `v`, writes in the
            // heads' columns of `out`.
            unsafe {
                for block in columns.clone().step_by(16) {
                    let vectors = (columns.end - block).min(16) / 8;
                    let mut acc = [[_mm256_setzero_ps(); 2]; HEADS];
                    for j in 0..keys {
                        let row = v.as_ptr().add(j * dv + block) as *const __m128i;
                        let mut vc = [_mm256_setzero_ps(); 2];
                        for (c, x) in vc.iter_mut().enumerate().take(vectors) {
                            *x = _mm256_cvtph_ps(_mm_loadu_si128(row.add(c)));
                        }
                        for (h, acc) in acc.iter_mut().enumerate().take(heads) {
                            let pj = _mm256_set1_ps(*probs.get_unchecked(h * keys + j));
                            for (a, &x) in acc.iter_mut().zip(&vc).take(vectors) {
                                *a = _mm256_add_ps(*a, _mm256_mul_ps(pj, x));
                            }
                        }
                    }
                    for (h, acc) in acc.iter().enumerate().take(heads) {
                        for (c, &a) in acc.iter().enumerate().take(vectors) {
                            _mm256_storeu_ps(out.add(h * dv + block + c * 8), a);
                        }
                    }
                }
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    mod x86 {
        use half::f16;
        pub unsafe fn dots_avx512(_: &[f32], _: &[f16], _: usize, _: &[f16], _: usize, _: f32, _: (*mut f32, usize)) {
            unreachable!("fits() is false off x86-64")
        }
        pub use dots_avx512 as dots_avx2;
        pub use weighted_avx512 as weighted_avx2;
        pub unsafe fn weighted_avx512(
            _: &[f32],
            _: usize,
            _: &[f16],
            _: usize,
            _: (usize, std::ops::Range<usize>),
            _: *mut f32,
        ) {
            unreachable!("fits() is false off x86-64")
        }
    }
}
