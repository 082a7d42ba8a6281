//! Matmul against block-quantized weights (semantics in `rlx_ir::ops::quant_matmul`).
//!
//! Paths, by the op's activations and the number of activation rows `m`:
//! - **8-bit activations** (decode): each activation row is quantized once to 8 bits per
//!   block of 32, then every weight row is an integer dot product per block, scaled in
//!   f32. On AVX-512 VNNI or AVX2, Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q2_K / Q3_K / Q4_K /
//!   Q5_K / Q6_K weights are read repacked 16 rows side by side (`q8_packed`); on the
//!   portable arm, the row loops here; other schemes (and Q2_K / Q3_K there) decode each
//!   weight block to f32 and dot it with the quantized row.
//! - **16-bit activations** (prompts): the integer GEMM of `quant_gemm` on AVX-512 VNNI,
//!   and on AVX2 for weights with a repacked copy or past a few rows; a short prompt's
//!   rows (up to `split_rows`) dot a repacked weight in place (`q8_packed`), the same
//!   integers and f32 steps. Elsewhere the rows are quantized, restored to f32 and take
//!   the f32 paths below.
//! - **GEMV** (`m <= 8`, f32 activations): each weight block decoded into registers and
//!   dotted with every row; float weights (F32, F16, BF16) by runs of 32 values.
//! - **direct tiles** (`8 < m <= 128`, f32 activations, AVX2 and AVX-512): `DOT_TILE` weight rows
//!   decoded to f32 at a time and dotted with every activation row in register tiles,
//!   nothing packed (a short prompt no longer pays the GEMM's packing of every weight).
//! - **tiled GEMM** (larger `m`, f32 activations, prefill): up to `TILE_ROWS` weight rows
//!   decoded to f32 at a time, then the packed f32 GEMM over all `m` rows, so each
//!   decoded weight is used `m` times.
//!
//! A SwiGLU's gate and up products over one `x` (`swiglu_dequant_into`) quantize `x` once
//! and compute each column chunk's gate, up and `up * silu(gate)` on one worker: SmolLM2's
//! 8-row decode step, 1 thread, 491.8-496.5 -> 539.6-543.8 tok/s (Intel Xeon, model 207),
//! where each product quantized `x` and the SwiGLU read both products back.
//!
//! Threads split output columns (whole weight rows); every output element is computed as
//! on one thread, so results are bit-identical for any thread count. Arms may differ in
//! the last bits (lane order of the f32 sums); each is checked against an f64 oracle.

use super::matmul::Gemm;
use super::q8_packed::{self, Packed};
use super::quant_gemm;
use crate::arena::{Args, Out, out_mut};
use crate::features::{Arm, features};
use crate::multiversion;
use rayon::prelude::*;
use rlx_ir::ActivationQuant;
use rlx_ir::quant::{QuantScheme, dequantize_block};
use rlx_ir::{Error, Result};
use std::sync::Arc;

/// Values per activation quantization block (llama.cpp's Q8_0 / Q8_1 block).
pub const Q8_BLOCK: usize = 32;

/// Activation rows up to which a quantized product runs on one worker beside other such
/// products (the program's side-by-side runs, the unfused SwiGLU's two products) instead
/// of splitting its columns: a split costs ~3-5 us of hand-off, on 2 threads as much as a
/// 192-row product takes on one.
pub const SIDE_BY_SIDE_ROWS: usize = 8;

/// Activation rows up to which f32 products decode each weight block once into
/// registers for all rows (GEMV) rather than a tile for the GEMM: a 5-token prompt took
/// 150 ms through tiles, as each call decoded every weight of the model to f32.
const GEMV_ROWS: usize = 8;

/// Activation rows up to which an f32 product decodes a few weight rows at a time and
/// dots them with every activation row directly (both run along `k`: nothing to pack);
/// more rows go through the packed GEMM, whose packing of every decoded weight costs the
/// same for 9 rows as for 500. SmolLM2 prompts, 2 threads (AMD EPYC): see
/// docs/performance.md.
const DOT_ROWS: usize = 128;

/// 16-bit activation rows up to which a product on repacked weights (`q8_packed`) dots
/// them in place, each 16-bit value split into two bytes for `vpdpbusd`, rather than
/// unpacking the weights into `quant_gemm`'s panels (same bits either way). SmolLM2's
/// Q4_1 576 x 1536, 1 thread (AMD EPYC): 1 row 78 -> 29 us, 12 rows 176 -> 139, 32 rows
/// 374 -> 340, 48 rows 543 -> 510, 64 rows even; its Q8_0 head (49152 rows), 1 row (the
/// prompt's last): 5.2 -> 1.1 ms. At 2 threads the two are within noise from 24 rows on.
const SPLIT_ROWS: usize = 32;

/// [`SPLIT_ROWS`] on AVX2 without VNNI, where the in-place kernel multiplies 16-bit values
/// (`vpmaddwd`, as the panels do) and the panels' register tiles win from ~24 rows. AVX2
/// arm of an AMD EPYC Zen 4, one product, best of 100-200 calls, in place -> panels:
/// SmolLM2's Q4_1 1536 x 576, 1 thread, 1 row 65 -> 109 us, 8 rows 156 -> 174, 16 rows
/// 285 -> 284, 24 rows 432-551 -> 420-517; 2 threads, 16 rows 154-158 -> 146-206, 24 rows
/// 231-311 -> 192-204, 32 rows 523 -> 291; its Q8_0 head (49152 x 576), 1 thread, 1 row
/// 2.0 -> 5.1 ms, 8 rows 5.2 -> 8.2, 16 rows 10.8 -> 12.4, 32 rows 19.9-20.5 -> 19.0-19.6.
const AVX2_SPLIT_ROWS: usize = 16;

/// Rows up to which a 16-bit product on `arm` dots a repacked weight in place.
fn split_rows(arm: Arm) -> usize {
    if quant_gemm::vnni(arm) { SPLIT_ROWS } else { AVX2_SPLIT_ROWS }
}

/// 16-bit activation rows up to which a host with AVX2 and no VNNI restores them to f32
/// (the GEMV) rather than unpacking a weight without a repacked copy into the integer
/// GEMM's panels. Past it every row count takes the panels, so a prompt prefilled in
/// pieces of more rows than this gets the bits of the prompt whole (what `rlx serve`'s
/// chunks and prompt cache rely on; with VNNI, or a repacked weight, it holds for any
/// pieces). SmolLM2, 2 threads, AMD EPYC Zen 3: a 9-token prompt whose last row's Q8_0
/// head went through panels unpacked from the file's blocks (the whole head for one row)
/// took 220-270 ms, 130-150 restored; pp512 328-426 -> 470-774 tok/s in panels.
///
/// A weight with a repacked copy (a model's) always takes the integer path, reading that
/// copy (in place up to [`AVX2_SPLIT_ROWS`] rows, else filling the panels from it): the
/// restored rows' GEMV read the file's blocks, whose pages the repacking had
/// released, and a short prompt brought them back (Gemma 3 270M on the AVX2 arm, peak RSS
/// 588 -> 348 MiB), and the panels were as fast or faster (AVX2 arm on an AMD EPYC Zen 4,
/// 2 threads, restored -> panels: the 262144-row Q8_0 head 1 row 17-20 -> 16-22 ms, 8 rows
/// 64-67 -> 30-31 ms; Q5_0 2048 x 640 1 / 8 rows 0.51-0.53 / 1.18-1.30 -> 0.12-0.14 /
/// 0.20-0.25 ms; Q4_K 640 x 2048 0.36-0.45 / 2.3-3.1 -> 0.10-0.11 / 0.16-0.27 ms).
const AVX2_GEMM_ROWS: usize = GEMV_ROWS;

/// 16-bit activation values from which a product quantizes its rows on all threads
/// rather than on the calling one (~0.5 ns a value; a hand-off costs ~3-5 us). SmolLM2's
/// 512-token prompt, 2 threads, best of 6 (Intel Xeon, model 207): 453 -> 427 ms.
const PARALLEL_QUANTIZE: usize = 1 << 16;

/// Weight rows decoded at a time by `dot_tiles` (k = 1536: 384 KiB of f32, in L2).
const DOT_TILE: usize = 64;

/// Weight rows decoded per GEMM tile (3 MiB of f32 at k = 1536). Measured on SmolLM2
/// pp512, 1 / 2 threads: 256 rows 498 / 662 tok/s, 512 rows 509 / 761, 1024 rows 477 /
/// 735 (and 2.5 MiB more scratch). Fixed (not derived from the thread count) so that the
/// GEMM sees the same shapes whatever the threads.
const TILE_ROWS: usize = 512;

#[derive(Clone, Debug)]
pub struct QuantMatMulPlan {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub scheme: QuantScheme,
    pub activations: ActivationQuant,
    pub threads: usize,
    /// The weight repacked for `q8_packed`, when it is a param (set before each run);
    /// otherwise 8-bit products on those kernels repack it per call. 16-bit products read
    /// it too when present.
    pub packed: Option<Arc<Packed>>,
}

impl QuantMatMulPlan {
    /// The plan for `x` (dims `[.., k]`) times weights `w` (dims `[n, row_bytes]`).
    pub fn new(
        x: &[usize],
        w: &[usize],
        scheme: QuantScheme,
        activations: ActivationQuant,
        threads: usize,
    ) -> QuantMatMulPlan {
        let k = *x.last().unwrap_or(&0);
        let m = x[..x.len().saturating_sub(1)].iter().product();
        QuantMatMulPlan { m, k, n: w[0], scheme, activations, threads, packed: None }
    }

    fn row_bytes(&self) -> usize {
        self.k / self.scheme.block_size() * self.scheme.block_bytes()
    }
}

pub fn dequant_matmul(p: &QuantMatMulPlan, arm: Arm, ins: &Args, out: &mut Out) -> Result<()> {
    dequant_matmul_into(p, arm, ins.get(0)?, ins.get(1)?, out_mut(out)?)
}

/// `out [m, n] = x [m, k] @ W^T` for the `n` weight rows packed in `w`, on `arm` (capped at
/// what the host has) and the current pool's threads.
pub fn dequant_matmul_into(p: &QuantMatMulPlan, arm: Arm, x: &[f32], w: &[u8], out: &mut [f32]) -> Result<()> {
    check_operands(p, x, w, out)?;
    let arm = arm.min(Arm::best());
    if p.m == 0 || p.n == 0 {
        return Ok(());
    }
    match p.activations {
        ActivationQuant::Q8 => q8_matmul(p, arm, x, w, out),
        ActivationQuant::Q16 => q16_matmul(p, arm, x, w, out),
        ActivationQuant::F32 => f32_matmul(p, arm, x, w, out),
    }
    Ok(())
}

/// `out = (x @ Wu^T) * silu(x @ Wg^T)` (`gate` receives `x @ Wg^T`), the products of
/// `gate_plan` and `up_plan` over the same `x`. With 8-bit activations and both weights on
/// `q8_packed`, `x` is quantized once and each column chunk computes its gate and up
/// columns and their SwiGLU on one worker; otherwise the two products, then the SwiGLU.
/// Each value is computed as `dequant_matmul_into` and the unfused SwiGLU compute it
/// (`up * silu(gate)` per element): the same bits either way.
pub fn swiglu_dequant_into(
    (gate_plan, up_plan): (&QuantMatMulPlan, &QuantMatMulPlan),
    arm: Arm,
    x: &[f32],
    (wg, wu): (&[u8], &[u8]),
    gate: &mut [f32],
    out: &mut [f32],
) -> Result<()> {
    check_operands(gate_plan, x, wg, gate)?;
    check_operands(up_plan, x, wu, out)?;
    let arm = arm.min(Arm::best());
    let activations = up_plan.activations;
    let (m, n) = (up_plan.m, up_plan.n);
    // Both products on `q8_packed`, as `dequant_matmul_into` would run them apart: 8-bit
    // rows, or 16-bit rows dotted in place (a prompt of up to `split_rows` tokens; the
    // two weights' schemes alike, so one split serves both).
    let fused = gate_plan.activations == activations
        && (gate_plan.m, gate_plan.k, gate_plan.n) == (m, up_plan.k, n)
        && match activations {
            ActivationQuant::Q8 => {
                q8_packed::available(gate_plan.scheme, arm) && q8_packed::available(up_plan.scheme, arm)
            }
            ActivationQuant::Q16 => {
                m <= split_rows(arm)
                    && gate_plan.scheme == up_plan.scheme
                    && q8_packed::available_q16(up_plan.scheme, arm)
            }
            ActivationQuant::F32 => false,
        };
    if !fused {
        // A few rows: the two products side by side, one worker each.
        if up_plan.m <= SIDE_BY_SIDE_ROWS && crate::threads::current() > 1 {
            let inline = |p, w, o| crate::threads::inline(|| dequant_matmul_into(p, arm, x, w, o));
            let (g, u) = rayon::join(|| inline(gate_plan, wg, gate), || inline(up_plan, wu, &mut *out));
            g.and(u)?;
        } else {
            dequant_matmul_into(gate_plan, arm, x, wg, gate)?;
            dequant_matmul_into(up_plan, arm, x, wu, out)?;
        }
        crate::threads::par_chunks(out, |start, chunk| {
            super::rows::swiglu_inplace(arm, &gate[start..start + chunk.len()], chunk)
        });
        return Ok(());
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let gates = super::SharedOut::new(gate);
    // Each column chunk's gate and up columns (`dot(weights, first group, outs)`), then
    // their SwiGLU, on one worker.
    let mut columns = |dot: &GroupsDot| {
        with_packed(gate_plan, wg, |gate_weights| {
            with_packed(up_plan, wu, |up_weights| {
                par_column_chunks(up_plan, out, |j0, outs| {
                    let len = outs[0].len();
                    // SAFETY: `gate` holds m * n elements (checked); columns j0..j0 + len of
                    // each row belong to this chunk alone, as in `out`.
                    let mut gate_rows: Vec<&mut [f32]> =
                        (0..m).map(|i| unsafe { std::slice::from_raw_parts_mut(gates.at(i * n + j0), len) }).collect();
                    dot(gate_weights, j0 / q8_packed::ROWS, &mut gate_rows);
                    dot(up_weights, j0 / q8_packed::ROWS, outs);
                    for (g, o) in gate_rows.iter().zip(outs.iter_mut()) {
                        super::rows::swiglu_inplace(arm, g, o);
                    }
                })
            })
        })
    };
    if activations == ActivationQuant::Q16 {
        with_q16_rows(up_plan, arm, x, true, |_, rows| {
            columns(&|weights, g0, outs| q8_packed::dot_groups_q16(weights, arm, g0, rows, outs))
        });
    } else {
        with_q8_rows(up_plan, arm, x, Layout::Natural, |rows| {
            columns(&|weights, g0, outs| q8_packed::dot_groups(weights, arm, g0, rows, outs))
        });
    }
    Ok(())
}

/// `dot(weights, first group, outs)`: the columns of `outs` from the weight's groups on.
type GroupsDot<'a> = dyn Fn(&Packed, usize, &mut [&mut [f32]]) + Sync + 'a;

/// `x`, `w` and `out` have the sizes of `p`'s product, and its activations can be
/// quantized.
fn check_operands(p: &QuantMatMulPlan, x: &[f32], w: &[u8], out: &[f32]) -> Result<()> {
    if x.len() != p.m * p.k || w.len() != p.n * p.row_bytes() || out.len() != p.m * p.n {
        return Err(Error::internal(format!(
            "dequant_matmul: x {} / w {} bytes / out {} elements do not match [m {}, k {}] x [n {}] {}",
            x.len(),
            w.len(),
            out.len(),
            p.m,
            p.k,
            p.n,
            p.scheme.name()
        )));
    }
    if p.activations != ActivationQuant::F32 && !p.k.is_multiple_of(Q8_BLOCK) {
        return Err(Error::shape(format!("{:?} activations need k a multiple of 32, got {}", p.activations, p.k)));
    }
    Ok(())
}

/// The product with f32 activations, by the number of rows.
fn f32_matmul(p: &QuantMatMulPlan, arm: Arm, x: &[f32], w: &[u8], out: &mut [f32]) {
    if p.m <= GEMV_ROWS {
        gemv_rows(p, arm, x, w, out);
    } else if p.m <= DOT_ROWS && arm >= Arm::Avx2 && features().has_avx2_fma() {
        dot_tiles(p, arm, x, w, out);
    } else {
        tiled_gemm(p, arm, x, w, out);
    }
}

/// Runs `f(row, first_column, out_chunk)` over chunks of each output row, in parallel
/// when the work is worth it. Chunks are whole columns, so every element is computed as
/// on one thread.
fn par_columns(p: &QuantMatMulPlan, out: &mut [f32], f: impl Fn(usize, usize, &mut [f32]) + Sync) {
    let (threads, chunk) = column_chunks(p);
    if threads <= 1 || p.n * p.k < 1 << 16 {
        out.chunks_mut(p.n)
            .enumerate()
            .for_each(|(i, row)| row.chunks_mut(chunk).enumerate().for_each(|(c, o)| f(i, c * chunk, o)));
        return;
    }
    out.par_chunks_mut(p.n).enumerate().for_each(|(i, row)| {
        row.par_chunks_mut(chunk).enumerate().for_each(|(c, o)| f(i, c * chunk, o));
    });
}

/// Threads and columns per chunk: ~4 chunks per thread balance uneven cores; 16 columns
/// keep each chunk a cache line of output. (Chunk boundaries never change a result.)
fn column_chunks(p: &QuantMatMulPlan) -> (usize, usize) {
    let threads = crate::threads::current().min(p.threads);
    (threads, p.n.div_ceil(threads * 4).next_multiple_of(16).max(16))
}

/// Runs `f(first_column, outs)` over the chunks of [`par_columns`], `outs[i]` the chunk's
/// columns of output row `i`: every row of a chunk in one call.
fn par_column_chunks(p: &QuantMatMulPlan, out: &mut [f32], f: impl Fn(usize, &mut [&mut [f32]]) + Sync) {
    let (threads, chunk) = column_chunks(p);
    // Each chunk writes only its own columns of each row (below).
    let base = super::SharedOut::new(out);
    let (m, n) = (p.m, p.n);
    let run = |c: usize| {
        let j0 = c * chunk;
        let len = chunk.min(n - j0);
        // SAFETY: `out` holds m * n elements; columns j0..j0 + len of each row belong to
        // chunk `c` alone, and the calls end before `out`'s borrow does.
        let mut outs: Vec<&mut [f32]> =
            (0..m).map(|i| unsafe { std::slice::from_raw_parts_mut(base.at(i * n + j0), len) }).collect();
        f(j0, &mut outs);
    };
    let chunks = n.div_ceil(chunk);
    if threads <= 1 || p.n * p.k < 1 << 16 {
        (0..chunks).for_each(run);
    } else {
        (0..chunks).into_par_iter().for_each(run);
    }
}

// ---------------------------------------------------------------------------------------
// q8 activations

/// How a quantized activation row is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// Blocks in order, each in element order.
    Natural,
    /// Pairs of blocks `a, b` stored as `a[0..16], b[0..16], a[16..32], b[16..32]`: the
    /// order in which two blocks of 4-bit weights come out of one 32-byte load split into
    /// low and high nibbles, so the weights need no shuffle.
    NibblePairs,
}

/// The activation layout `scheme`'s row kernels read (`q8_packed` reads Natural).
fn layout_for(scheme: QuantScheme) -> Layout {
    match scheme {
        QuantScheme::Q4_0 | QuantScheme::Q4_1 => Layout::NibblePairs,
        _ => Layout::Natural,
    }
}

/// Where elements `0..16` and `16..32` of block `b` (of `nb`) sit in a laid-out row.
#[inline(always)]
fn halves(layout: Layout, b: usize, nb: usize) -> (usize, usize) {
    if layout == Layout::NibblePairs && b / 2 * 2 + 1 < nb {
        let (base, second) = (b / 2 * 64, (b % 2) * 16);
        (base + second, base + 32 + second)
    } else {
        (b * 32, b * 32 + 16)
    }
}

/// A row quantized to 8 bits per block: values `q`, per-block scale `d` and `s = d * sum(q)`;
/// for the repacked products that take them the sum of each 16 values (`sums16`, empty
/// otherwise: `q8_packed::takes_sums16`).
pub(super) struct Q8Row<'a> {
    pub(super) q: &'a [i8],
    pub(super) d: &'a [f32],
    pub(super) s: &'a [f32],
    pub(super) sums16: &'a [i32],
}

/// Quantizes `x` (whole blocks) into `q` / `d` / `s` laid out as `layout`:
/// `d = max|x| / 127`, `q = round(x / d)` half away from zero (llama.cpp's `x * (1/d)`).
pub fn quantize_q8_row(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [f32], pairs: bool) {
    let layout = if pairs { Layout::NibblePairs } else { Layout::Natural };
    let nb = x.len() / Q8_BLOCK;
    for b in 0..nb {
        let xs = &x[b * Q8_BLOCK..][..Q8_BLOCK];
        let amax = xs.iter().fold(0f32, |m, &v| if v.abs() > m || v.is_nan() { v.abs() } else { m });
        let scale = amax / 127.0;
        let inv = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        let (lo, hi) = halves(layout, b, nb);
        let mut sum = 0i32;
        for (j, &v) in xs.iter().enumerate() {
            let qv = (v * inv).round() as i8; // saturating cast; |v * inv| <= 127 + rounding
            q[if j < 16 { lo + j } else { hi + j - 16 }] = qv;
            sum += qv as i32;
        }
        d[b] = scale;
        s[b] = scale * sum as f32;
    }
}

/// [`quantize_q8_row`] or a vector arm of it (the same bits).
pub type QuantizeFn = fn(&[f32], &mut [i8], &mut [f32], &mut [f32], bool);

/// The activation quantizer for `arm`: on AVX-512 and AVX2 one block of 32 per few
/// instructions, where the portable loop pays a `roundf` call per value (it ran serially
/// before every 8-bit matmul: ~150K values a SmolLM2 token and row). AMD EPYC Zen 3, 1
/// thread: portable 6.0-6.9 ns a value, `quantize_q16_row_loop`'s way vectorized by the compiler 1.9,
/// `x86::quantize_q8_row_avx2` 0.7.
pub fn quantize_kernel(arm: Arm) -> QuantizeFn {
    #[cfg(target_arch = "x86_64")]
    if arm >= Arm::Avx512 && features().has_avx512() {
        // SAFETY: the features were just checked.
        return |x, q, d, s, pairs| unsafe { x86::quantize_q8_row_avx512(x, q, d, s, pairs) };
    }
    #[cfg(target_arch = "x86_64")]
    if arm >= Arm::Avx2 && features().has_avx2_fma() {
        // SAFETY: the features were just checked.
        return |x, q, d, s, pairs| unsafe { x86::quantize_q8_row_avx2(x, q, d, s, pairs) };
    }
    let _ = arm;
    quantize_q8_row
}

fn q8_matmul(p: &QuantMatMulPlan, arm: Arm, x: &[f32], w: &[u8], out: &mut [f32]) {
    let packed = q8_packed::available(p.scheme, arm);
    let layout = if packed { Layout::Natural } else { layout_for(p.scheme) };
    with_q8_rows(p, arm, x, layout, |rows| {
        if packed {
            // Chunks are whole multiples of 16 columns (`column_chunks`): whole groups.
            return with_packed(p, w, |weights| {
                par_column_chunks(p, out, |j0, outs| {
                    q8_packed::dot_groups(weights, arm, j0 / q8_packed::ROWS, rows, outs)
                })
            });
        }
        let rb = p.row_bytes();
        if !has_integer_rows(p.scheme) {
            // Each weight row decoded once for all the activation rows.
            let arm = arm.min(Arm::best());
            return par_column_chunks(p, out, |j0, outs| {
                rows_decoded(arm, p.scheme, &w[j0 * rb..][..outs[0].len() * rb], rows, outs)
            });
        }
        let dot = dot_kernel(p.scheme, arm);
        par_columns(p, out, |i, j0, o| dot(p.scheme, &w[j0 * rb..][..o.len() * rb], &rows[i], o))
    })
}

/// `f` of `x`'s `m` rows quantized to 8 bits in `layout` (in this thread's scratch), with
/// the scaled sums `p.scheme`'s dot kernels take.
fn with_q8_rows<R>(p: &QuantMatMulPlan, arm: Arm, x: &[f32], layout: Layout, f: impl FnOnce(&[Q8Row]) -> R) -> R {
    let (m, k) = (p.m, p.k);
    let nb = k / Q8_BLOCK;
    // Some repacked products take the quants' sums by 16 (in integers).
    let sums16 = if q8_packed::takes_sums16(p.scheme, arm) { 2 * m * nb } else { 0 };
    // Scratch: the m quantized rows (k bytes each) after 2 * m * nb floats of scales and
    // the sums by 16.
    let floats = 2 * m * nb + sums16 + (m * k).div_ceil(4);
    crate::threads::with_scratch::<f32, _>(floats, |scratch| {
        let (scales, rest) = scratch.split_at_mut(2 * m * nb);
        let (sums, bytes) = rest.split_at_mut(sums16);
        // SAFETY: i32 has f32's size and alignment, and every bit pattern is valid.
        let sums = unsafe { std::slice::from_raw_parts_mut(sums.as_mut_ptr().cast::<i32>(), sums16) };
        let (d, s) = scales.split_at_mut(m * nb);
        // SAFETY: i8 has alignment 1 and every bit pattern is valid; `bytes` holds
        // at least m * k bytes.
        let q = unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<i8>(), m * k) };
        let quantize = quantize_kernel(arm);
        for i in 0..m {
            let (qi, di, si) = (&mut q[i * k..][..k], &mut d[i * nb..][..nb], &mut s[i * nb..][..nb]);
            quantize(&x[i * k..][..k], qi, di, si, layout == Layout::NibblePairs);
        }
        for (sum, values) in sums.iter_mut().zip(q.chunks_exact(16)) {
            *sum = values.iter().map(|&v| v as i32).sum();
        }
        let (q, d, s, sums) = (&*q, &*d, &*s, &*sums);
        let per_row = sums16 / m.max(1);
        let rows: Vec<Q8Row> = (0..m)
            .map(|i| Q8Row {
                q: &q[i * k..][..k],
                d: &d[i * nb..][..nb],
                s: &s[i * nb..][..nb],
                sums16: &sums[i * per_row..][..per_row],
            })
            .collect();
        f(&rows)
    })
}

/// Runs `f` with the weight repacked for `q8_packed`: the param's copy (`p.packed`), or
/// one made for this call.
fn with_packed<R>(p: &QuantMatMulPlan, w: &[u8], f: impl FnOnce(&Packed) -> R) -> R {
    match &p.packed {
        Some(weights) => f(weights),
        None => f(&Packed::new(p.scheme, w, p.n, p.k, None)),
    }
}

/// The product with 16-bit activations: with AVX-512 VNNI the integer GEMM where it runs
/// the scheme, for any number of rows (one thread, AMD EPYC Zen 4, Gemma 3 270M's shapes,
/// ms, GEMM / f32 kernels on restored rows: 1 row Q5_0 0.45 / 0.56, Q6_K 0.35 / 1.03, Q4_1
/// 0.39 / 0.22; 2 rows Q6_K 0.37 / 1.65; 8 rows Q6_K 0.55 / 7.98, Q4_1 0.46 / 0.88); with
/// AVX2 alone the integer GEMM past [`AVX2_GEMM_ROWS`] rows or on a repacked weight;
/// otherwise each row is quantized, restored to f32 (`q * d`, rounded) and multiplied on
/// the f32 path.
fn q16_matmul(p: &QuantMatMulPlan, arm: Arm, x: &[f32], w: &[u8], out: &mut [f32]) {
    let (m, k) = (p.m, p.k);
    let nb = k / Q8_BLOCK;
    let repacked = p.packed.is_some() && q8_packed::available(p.scheme, arm);
    if quant_gemm::available(p.scheme, arm) && (quant_gemm::vnni(arm) || m > AVX2_GEMM_ROWS || repacked) {
        return q16_gemm(p, arm, x, w, out);
    }
    let (mut q, mut d, mut s) = (vec![0i16; k], vec![0f32; nb], vec![0f32; nb]);
    let mut restored = vec![0f32; m * k];
    for (row, x) in restored.chunks_exact_mut(k).zip(x.chunks_exact(k)) {
        quantize_q16_row(arm, x, &mut q, &mut d, &mut s);
        for (b, (row, q)) in row.chunks_exact_mut(Q8_BLOCK).zip(q.chunks_exact(Q8_BLOCK)).enumerate() {
            for (v, &q) in row.iter_mut().zip(q) {
                *v = q as f32 * d[b];
            }
        }
    }
    f32_matmul(p, arm, &restored, w, out)
}

/// [`q16_matmul`] through [`quant_gemm`]: the rows quantized, with the sums of their
/// quants per weight group; up to [`split_rows`] of them dotted with the repacked weight
/// in place.
fn q16_gemm(p: &QuantMatMulPlan, arm: Arm, x: &[f32], w: &[u8], out: &mut [f32]) {
    let split = p.m <= split_rows(arm) && q8_packed::available_q16(p.scheme, arm);
    with_q16_rows(p, arm, x, split, |acts, rows| {
        if split {
            return with_packed(p, w, |weights| {
                par_column_chunks(p, out, |j0, outs| {
                    q8_packed::dot_groups_q16(weights, arm, j0 / q8_packed::ROWS, rows, outs)
                })
            });
        }
        let packed = p.packed.as_deref().filter(|_| q8_packed::available(p.scheme, arm));
        quant_gemm::gemm(arm, p.scheme, &acts, (w, packed), p.n, p.threads, out);
    })
}

/// `f` of `x`'s `m` rows quantized to 16 bits (in this thread's scratch) as
/// [`quant_gemm::Acts`], and with `split`, also split into bytes for `p.scheme`'s
/// [`q8_packed::dot_groups_q16`] (no rows otherwise).
fn with_q16_rows<R>(
    p: &QuantMatMulPlan,
    arm: Arm,
    x: &[f32],
    split: bool,
    f: impl FnOnce(quant_gemm::Acts, &[q8_packed::Q16Row]) -> R,
) -> R {
    let (m, k) = (p.m, p.k);
    let nb = k / Q8_BLOCK;
    let group = quant_gemm::group_size(p.scheme).unwrap_or(Q8_BLOCK);
    let groups = k / group;
    // Scratch: m * nb scales, m * nb sums, m * groups group terms, m * k values, and for
    // `split` on the kernel that reads bytes their m * k high and m * k low bytes.
    let read_bytes = split && q8_packed::q16_reads_bytes(arm);
    let values = (m * k).div_ceil(2);
    let floats = 2 * m * nb + m * groups + values + if read_bytes { values } else { 0 };
    crate::threads::with_scratch::<f32, _>(floats, |scratch| {
        let (d, rest) = scratch.split_at_mut(m * nb);
        let (s, rest) = rest.split_at_mut(m * nb);
        let (ds, rest) = rest.split_at_mut(m * groups);
        let (values, bytes) = rest.split_at_mut(values);
        // SAFETY: the scratch is 8-aligned, so `values` (a whole number of f32s) is
        // 2-aligned; it holds at least m * k i16 and every bit pattern is valid.
        let q = unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<i16>(), m * k) };
        // Each row is quantized on its own: the same bits on any thread.
        if p.threads > 1 && m * k >= PARALLEL_QUANTIZE {
            x.par_chunks_exact(k)
                .zip(q.par_chunks_exact_mut(k))
                .zip(d.par_chunks_exact_mut(nb).zip(s.par_chunks_exact_mut(nb)))
                .zip(ds.par_chunks_exact_mut(groups))
                .for_each(|(((x, q), (d, s)), ds)| quantize_q16_with_groups(arm, group, x, q, d, s, ds));
        } else {
            x.chunks_exact(k)
                .zip(q.chunks_exact_mut(k))
                .zip(d.chunks_exact_mut(nb).zip(s.chunks_exact_mut(nb)))
                .zip(ds.chunks_exact_mut(groups))
                .for_each(|(((x, q), (d, s)), ds)| quantize_q16_with_groups(arm, group, x, q, d, s, ds));
        }
        if split {
            let (hi, lo): (&[i8], &[u8]) = if read_bytes {
                // SAFETY: `bytes` holds 2 m k bytes (m k / 2 f32s, rounded up); i8 and u8
                // have alignment 1 and every bit pattern is valid.
                let (hi, lo) = unsafe {
                    let bytes = std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<u8>(), 2 * m * k);
                    let (hi, lo) = bytes.split_at_mut(m * k);
                    (std::slice::from_raw_parts_mut(hi.as_mut_ptr().cast::<i8>(), m * k), lo)
                };
                q8_packed::split_q16(p.scheme, q, hi, lo);
                (hi, lo)
            } else {
                (&[], &[])
            };
            let (q, d, ds) = (&*q, &*d, &*ds);
            // Row i's range in a slice of `len` values a row.
            let part = |i: usize, len: usize| i * len..(i + 1) * len;
            let rows: Vec<q8_packed::Q16Row> = (0..m)
                .map(|i| q8_packed::Q16Row {
                    q: &q[part(i, k)],
                    hi: hi.get(part(i, k)).unwrap_or_default(),
                    lo: lo.get(part(i, k)).unwrap_or_default(),
                    d: &d[part(i, nb)],
                    ds: &ds[part(i, nb)],
                })
                .collect();
            return f(quant_gemm::Acts { m, k, q, d, ds }, &rows);
        }
        f(quant_gemm::Acts { m, k, q, d, ds }, &[])
    })
}

/// Quantizes `x` (whole blocks of 32) to 16 bits: `d = max|x| / 32767` (NaN if a value
/// is), `q = round(x * (1 / d))` half away from zero, saturated (a NaN product gives 0),
/// `s = d * sum(q)`; on `arm`, capped at what the host has (every arm gives the same bits).
/// On AVX-512 a block takes a few instructions; the compiler's vectorization of the
/// loop below took ~1.8 ns a value there, and the calling thread quantizes while the
/// others wait. SmolLM2 prompts, 2 threads, best of 6 (Intel Xeon, model 207): 12
/// tokens 17.6 -> 14.4 ms, 100 tokens 115 -> 88 ms, 512 tokens 576 -> 453 ms.
pub fn quantize_q16_row(arm: Arm, x: &[f32], q: &mut [i16], d: &mut [f32], s: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if arm >= Arm::Avx512 && features().has_avx512() {
        // SAFETY: the features were just checked; the slices are checked inside.
        return unsafe { x86::quantize_q16_row_avx512(x, q, d, s) };
    }
    #[cfg(target_arch = "x86_64")]
    if arm >= Arm::Avx2 && features().has_avx2_fma() {
        // SAFETY: the features were just checked; the slices are checked inside.
        return unsafe { x86::quantize_q16_row_avx2(x, q, d, s) };
    }
    quantize_q16_row_loop(arm, x, q, d, s)
}

/// [`quantize_q16_row`] of `x`, with `ds` the terms of the weights' groups of `group`
/// values: `d * sum(q)` over each (the blocks' `s` when a group is a block).
#[allow(clippy::too_many_arguments)]
fn quantize_q16_with_groups(
    arm: Arm,
    group: usize,
    x: &[f32],
    q: &mut [i16],
    d: &mut [f32],
    s: &mut [f32],
    ds: &mut [f32],
) {
    quantize_q16_row(arm, x, q, d, s);
    if group == Q8_BLOCK {
        ds.copy_from_slice(s);
    } else {
        for (gi, t) in ds.iter_mut().enumerate() {
            let sum: i32 = q[gi * group..][..group].iter().map(|&v| v as i32).sum();
            *t = d[gi * group / Q8_BLOCK] * sum as f32;
        }
    }
}

multiversion! {
    /// [`quantize_q16_row`]'s definition, written without `round` (a libm call per value
    /// where SSE4.1 is not assumed) so that the AVX2 arm vectorizes it, with the same
    /// bits: the magnitude's bits are maxed as integers (a NaN's exceed infinity's), and
    /// the product is truncated, then stepped away from zero when the dropped part is at
    /// least 1/2 (exact below 2^23).
    fn quantize_q16_row_loop(x: &[f32], q: &mut [i16], d: &mut [f32], s: &mut [f32]) {
        for (b, (xs, qs)) in x.chunks_exact(Q8_BLOCK).zip(q.chunks_exact_mut(Q8_BLOCK)).enumerate() {
            let amax = f32::from_bits(xs.iter().fold(0u32, |m, &v| m.max(v.to_bits() & 0x7FFF_FFFF)));
            let scale = amax / 32767.0;
            let inv = if scale != 0.0 { 1.0 / scale } else { 0.0 };
            let mut sum = 0i32;
            for (qv, &v) in qs.iter_mut().zip(xs) {
                let t = v * inv;
                let r = (t as i32).clamp(-32768, 32767);
                let dropped = t - r as f32;
                let r = (r + (dropped >= 0.5) as i32 - (dropped <= -0.5) as i32).clamp(-32768, 32767);
                *qv = r as i16;
                sum += r;
            }
            d[b] = scale;
            s[b] = scale * sum as f32;
        }
    }
}

/// `out[j] = W[j] . a` for the `out.len()` weight rows in the bytes.
type DotFn = fn(QuantScheme, &[u8], &Q8Row, &mut [f32]);

/// Whether `scheme` has an integer row kernel ([`dot_kernel`]); the others take
/// [`rows_decoded`].
fn has_integer_rows(scheme: QuantScheme) -> bool {
    q8_packed::SCHEMES.contains(&scheme) && !matches!(scheme, QuantScheme::Q2K | QuantScheme::Q3K)
}

/// The dot products of weight rows with a q8 row, for a scheme with an integer row kernel
/// ([`has_integer_rows`]) on `arm`, where `q8_packed` does not take the product: on the
/// portable arm (every x86 CPU with AVX2 has F16C, and `q8_packed` runs these schemes
/// there).
fn dot_kernel(scheme: QuantScheme, arm: Arm) -> DotFn {
    match scheme {
        QuantScheme::Q4_0 | QuantScheme::Q4_1 | QuantScheme::Q8_0 => |s, w, a, o| each_row(s, w, a, o, dot_portable),
        // Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.
        _ => match arm.min(Arm::best()) {
            Arm::Avx512 => |s, w, a, o| dot_rows_unpacked(Arm::Avx512, s, w, a, o),
            Arm::Avx2 => |s, w, a, o| dot_rows_unpacked(Arm::Avx2, s, w, a, o),
            Arm::Portable => |s, w, a, o| dot_rows_unpacked(Arm::Portable, s, w, a, o),
        },
    }
}

/// Adds `scale[l] * (a[2l] b[2l] + a[2l+1] b[2l+1])` to `acc[l]` for the 16 lanes of one
/// block of 32 8-bit integer pairs: the products widen and pair-sum to 32 bits
/// (`vpmaddwd`), convert and fuse into f32 lanes, so no block ends in a horizontal sum
/// (one per row instead: those sums were a third of the time).
#[inline(always)]
fn madd_block(a: &[i8], b: &[i8], scale: &[f32; 16], acc: &mut [f32; 16]) {
    let (a, b) = (&a[..32], &b[..32]);
    for l in 0..16 {
        let pair = a[2 * l] as i32 * b[2 * l] as i32 + a[2 * l + 1] as i32 * b[2 * l + 1] as i32;
        acc[l] += scale[l] * pair as f32;
    }
}

/// A block's quants as small integers, element order: [`quant_gemm::quants`] less the
/// offsets, Q5_0 `q - 16`, Q5_1 `q`, Q4_K / Q5_K `q` (their offsets are the sub-block
/// mins), Q6_K `q - 32`.
#[inline(always)]
fn unpack_block(scheme: QuantScheme, b: &[u8], q: &mut [i8; 256]) {
    let bs = scheme.block_size();
    let mut u = [0u8; 256];
    quant_gemm::quants(scheme, b, &mut u[..bs]);
    let offset = match scheme {
        QuantScheme::Q5_0 => 16,
        QuantScheme::Q6K => 32,
        _ => 0,
    };
    for (q, &u) in q[..bs].iter_mut().zip(&u[..bs]) {
        *q = u as i8 - offset; // u < 64
    }
}

/// `out[j] = W[j] . a` for Q5_0 / Q5_1 / Q4_K / Q5_K / Q6_K weight rows: each block's
/// quants unpacked to 8-bit integers, then per 32 values one `madd_block` against the
/// activation row's block, the scales applied per lane (Natural layout).
#[inline(always)]
fn rows_unpacked(
    scheme: QuantScheme,
    w: &[u8],
    a: &Q8Row,
    out: &mut [f32],
    madd_block: impl Fn(&[i8], &[i8], &[f32; 16], &mut [f32; 16]),
) {
    let (bs, bb) = (scheme.block_size(), scheme.block_bytes());
    let rb = w.len() / out.len().max(1);
    let mut q = [0i8; 256];
    for (o, row) in out.iter_mut().zip(w.chunks_exact(rb.max(1))) {
        let mut acc = [0f32; 16];
        // Terms of the blocks' minimums (Q5_1, Q4_K, Q5_K), one per block.
        let mut mins = 0f32;
        for (c, wb) in row.chunks_exact(bb).enumerate() {
            unpack_block(scheme, wb, &mut q);
            let base = c * bs;
            let first = base / Q8_BLOCK;
            let aq = &a.q[base..base + bs];
            match scheme {
                QuantScheme::Q5_0 | QuantScheme::Q5_1 => {
                    madd_block(&q, aq, &[f16_at(wb, 0) * a.d[c]; 16], &mut acc);
                    if scheme == QuantScheme::Q5_1 {
                        mins += f16_at(wb, 2) * a.s[c];
                    }
                }
                QuantScheme::Q4K | QuantScheme::Q5K => {
                    let (d, dmin) = (f16_at(wb, 0), f16_at(wb, 2));
                    let (sc, mn) = rlx_ir::quant::k_scale_min(&wb[4..16]);
                    for j in 0..8 {
                        let scale = d * sc[j] as f32 * a.d[first + j];
                        madd_block(&q[j * 32..], &aq[j * 32..], &[scale; 16], &mut acc);
                        mins -= dmin * mn[j] as f32 * a.s[first + j];
                    }
                }
                _ => {
                    // Two 16-value sub-blocks per activation block: lanes 0-7 hold
                    // the first's pairs, 8-15 the second's.
                    let (scales, d) = (&wb[192..208], f16_at(wb, 208));
                    for j in 0..8 {
                        let da = d * a.d[first + j];
                        let (s0, s1) = (da * (scales[2 * j] as i8) as f32, da * (scales[2 * j + 1] as i8) as f32);
                        let scale = std::array::from_fn(|l| if l < 8 { s0 } else { s1 });
                        madd_block(&q[j * 32..], &aq[j * 32..], &scale, &mut acc);
                    }
                }
            }
        }
        *o = acc.iter().sum::<f32>() + mins;
    }
}

multiversion! {
    /// [`rows_unpacked`] with the plain-Rust `madd_block`.
    fn dot_rows_unpacked(scheme: QuantScheme, w: &[u8], a: &Q8Row, out: &mut [f32]) {
        rows_unpacked(scheme, w, a, out, madd_block)
    }
}

/// The arm the q8 dot kernels take on this host, for `rlx info`.
pub fn q8_arm_name() -> &'static str {
    if q8_packed::available_q16(QuantScheme::Q4_1, Arm::best()) {
        "avx512-vnni (vpdpbusd, 16 rows repacked)"
    } else if q8_packed::available(QuantScheme::Q4_1, Arm::best()) {
        "avx2 (vpmaddubsw, 16 rows repacked)"
    } else {
        "portable"
    }
}

/// The arm the 16-bit activation products (prompts) take on this host, for `rlx info`.
pub fn q16_arm_name() -> &'static str {
    let arm = Arm::best();
    if quant_gemm::available(QuantScheme::Q4_1, arm) && quant_gemm::vnni(arm) {
        "avx512-vnni (vpdpwssd panels; up to 32 rows on the repacked weight)"
    } else if quant_gemm::available(QuantScheme::Q4_1, arm) {
        "avx2 (vpmaddwd panels past 8 rows; fewer restored to f32)"
    } else {
        "restored to f32"
    }
}

/// A one-row dot applied to each row.
fn each_row(scheme: QuantScheme, w: &[u8], a: &Q8Row, out: &mut [f32], dot: fn(QuantScheme, &[u8], &Q8Row) -> f32) {
    let rb = w.len() / out.len().max(1);
    for (o, row) in out.iter_mut().zip(w.chunks_exact(rb.max(1))) {
        *o = dot(scheme, row, a);
    }
}

#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    rlx_ir::f16_bits_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Integer dot of one block of 4-bit weights (16 bytes, low nibbles first) with its
/// quantized activations at `lo` / `hi`.
#[inline(always)]
fn nibble_isum(qs: &[u8], a: &[i8], lo: usize, hi: usize) -> i32 {
    let mut sum = 0i32;
    for j in 0..16 {
        sum += (qs[j] & 0xF) as i32 * a[lo + j] as i32 + (qs[j] >> 4) as i32 * a[hi + j] as i32;
    }
    sum
}

/// `(weights, block)`'s contribution for Q4_0 / Q4_1 / Q8_0, from the block's bytes; the
/// activations are laid out as `layout`.
#[inline(always)]
fn block_term(scheme: QuantScheme, layout: Layout, wb: &[u8], a: &Q8Row, b: usize, nb: usize) -> f32 {
    let (lo, hi) = halves(layout, b, nb);
    match scheme {
        QuantScheme::Q4_0 => {
            // w = d (q - 8): sum = d da (sum q qa) - 8 d (da sum qa).
            let dw = f16_at(wb, 0);
            dw * a.d[b] * nibble_isum(&wb[2..18], a.q, lo, hi) as f32 - 8.0 * dw * a.s[b]
        }
        QuantScheme::Q4_1 => {
            // w = d q + m: sum = d da (sum q qa) + m (da sum qa).
            let (dw, mw) = (f16_at(wb, 0), f16_at(wb, 2));
            dw * a.d[b] * nibble_isum(&wb[4..20], a.q, lo, hi) as f32 + mw * a.s[b]
        }
        _ => {
            let dw = f16_at(wb, 0);
            let isum: i32 = wb[2..34].iter().zip(&a.q[b * 32..][..32]).map(|(&w, &x)| w as i8 as i32 * x as i32).sum();
            dw * a.d[b] * isum as f32
        }
    }
}

fn dot_portable(scheme: QuantScheme, w: &[u8], a: &Q8Row) -> f32 {
    let (bb, nb) = (scheme.block_bytes(), a.d.len());
    (0..nb).map(|b| block_term(scheme, layout_for(scheme), &w[b * bb..][..bb], a, b, nb)).sum()
}

multiversion! {
    /// `outs[i][j] = W[j] . acts[i]` for the schemes without an integer row kernel (Q2_K,
    /// Q3_K, the float ones): each weight row decoded to f32 a run of up to 256 values at
    /// a time, once for all the activation rows, and dotted with each dequantized row in 16
    /// lane sums (the Natural layout; 16 values share an activation scale), the same per
    /// row whatever the others. One row at a time, each decoded block dotted in one
    /// sum of dependent adds, ran Q3_K 4096 x 4096 at 57.8 ms a row (AMD EPYC Zen 4, 1
    /// thread; 8 rows 8x that). Activation rows go [`ROWS_PASS`] at a time, their lane
    /// sums on the stack.
    fn rows_decoded(scheme: QuantScheme, w: &[u8], acts: &[Q8Row], outs: &mut [&mut [f32]]) {
        let (bs, bb) = (scheme.block_size(), scheme.block_bytes());
        let blocks_per_run = (256 / bs).max(1);
        let rb = w.len() / outs.first().map_or(1, |o| o.len()).max(1);
        let mut values = [0f32; 256];
        for (acts, outs) in acts.chunks(ROWS_PASS).zip(outs.chunks_mut(ROWS_PASS)) {
            for (j, row) in w.chunks_exact(rb.max(1)).enumerate() {
                let mut acc = [[0f32; 16]; ROWS_PASS];
                for (r, run) in row.chunks(blocks_per_run * bb).enumerate() {
                    let n = run.len() / bb * bs;
                    if scheme.is_float() {
                        decode_floats(scheme, run, &mut values[..n]);
                    } else {
                        for (block, v) in run.chunks_exact(bb).zip(values.chunks_exact_mut(bs)) {
                            dequantize_block(scheme, block, v);
                        }
                    }
                    let first = r * blocks_per_run * bs;
                    for (a, acc) in acts.iter().zip(acc.iter_mut()) {
                        for (c, v) in values[..n].chunks_exact(16).enumerate() {
                            let at = first + 16 * c;
                            let (q, d) = (&a.q[at..at + 16], a.d[at / Q8_BLOCK]);
                            for l in 0..16 {
                                acc[l] += v[l] * (q[l] as f32 * d);
                            }
                        }
                    }
                }
                for (out, acc) in outs.iter_mut().zip(&acc) {
                    out[j] = acc.iter().sum();
                }
            }
        }
    }
}

/// Activation rows per pass of [`rows_decoded`] (each weight row decoded once a pass).
const ROWS_PASS: usize = 8;

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The vector arms: the activation quantizers, the f32 GEMV of one row and the direct
    //! tiles (the 8-bit products' are in `q8_packed`).

    use super::{Layout, Q8_BLOCK, QuantScheme, halves};
    use std::arch::x86_64::*;

    /// `v` rounded half away from zero (truncated, then stepped away from zero when the
    /// dropped part is at least 1/2: exact, as `f32::round`), saturated to `[lo, hi]` in
    /// f32 (as `as i8` or `as i32` then `clamp` do: |v| exceeds the range only where the
    /// inverse scale overflows, from a denormal scale, and there it is infinite), NaN
    /// giving 0, as i32 lanes.
    ///
    /// # Safety
    /// The caller has AVX-512 F/DQ.
    #[inline(always)]
    unsafe fn round_saturated(v: __m512, lo: f32, hi: f32) -> __m512i {
        // SAFETY: as the caller guarantees.
        unsafe {
            let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
            let away = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5));
            let sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(i32::MIN));
            let step = _mm512_or_ps(_mm512_set1_ps(1.0), _mm512_castsi512_ps(sign));
            let r = _mm512_mask_add_ps(t, away, t, step);
            let r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
            _mm512_maskz_cvtps_epi32(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(v, v), r)
        }
    }

    /// [`round_saturated`] on AVX2: the rounding by a truncation and a masked step, the
    /// NaN lanes cleared after the conversion.
    ///
    /// # Safety
    /// The caller has AVX2.
    #[inline(always)]
    unsafe fn round_saturated_avx2(v: __m256, lo: f32, hi: f32) -> __m256i {
        // SAFETY: as the caller guarantees.
        unsafe {
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
            let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
            let away = _mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_and_ps(_mm256_sub_ps(v, t), magnitude), _mm256_set1_ps(0.5));
            let sign = _mm256_andnot_ps(magnitude, v);
            let step = _mm256_and_ps(away, _mm256_or_ps(_mm256_set1_ps(1.0), sign));
            let r = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(t, step), _mm256_set1_ps(lo)), _mm256_set1_ps(hi));
            let ordered = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_ORD_Q>(v, v));
            _mm256_and_si256(_mm256_cvtps_epi32(r), ordered)
        }
    }

    /// The sum of the 8 lanes.
    ///
    /// # Safety
    /// The caller has AVX2.
    #[inline(always)]
    unsafe fn hsum_epi32(v: __m256i) -> i32 {
        // SAFETY: as the caller guarantees.
        unsafe {
            let x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
            let x = _mm_add_epi32(x, _mm_shuffle_epi32::<0b01_00_11_10>(x));
            _mm_cvtsi128_si32(_mm_add_epi32(x, _mm_shuffle_epi32::<0b10_11_00_01>(x)))
        }
    }

    /// [`super::quantize_q8_row`] on AVX2, bit for bit: as the AVX-512 arm, 8 lanes a
    /// vector; the four vectors of i32 narrowed with saturation (exact: they are in
    /// range) and put back in order.
    ///
    /// # Safety
    /// As `quantize_q8_row_avx512`, the host having AVX2.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn quantize_q8_row_avx2(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [f32], pairs: bool) {
        let layout = if pairs { Layout::NibblePairs } else { Layout::Natural };
        let nb = x.len() / Q8_BLOCK;
        assert!(q.len() >= nb * Q8_BLOCK && d.len() >= nb && s.len() >= nb);
        // SAFETY: every load reads a block of `x` and every store writes 16 bytes at a
        // block half of `q` (sizes checked above); the caller has the features.
        unsafe {
            let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
            for b in 0..nb {
                let at = x.as_ptr().add(b * Q8_BLOCK);
                let xs: [__m256; 4] = [
                    _mm256_loadu_ps(at),
                    _mm256_loadu_ps(at.add(8)),
                    _mm256_loadu_ps(at.add(16)),
                    _mm256_loadu_ps(at.add(24)),
                ];
                let unordered = _mm256_or_ps(
                    _mm256_or_ps(
                        _mm256_cmp_ps::<_CMP_UNORD_Q>(xs[0], xs[0]),
                        _mm256_cmp_ps::<_CMP_UNORD_Q>(xs[1], xs[1]),
                    ),
                    _mm256_or_ps(
                        _mm256_cmp_ps::<_CMP_UNORD_Q>(xs[2], xs[2]),
                        _mm256_cmp_ps::<_CMP_UNORD_Q>(xs[3], xs[3]),
                    ),
                );
                let amax = if _mm256_movemask_ps(unordered) != 0 {
                    f32::NAN
                } else {
                    let m = _mm256_max_ps(
                        _mm256_max_ps(_mm256_and_ps(xs[0], magnitude), _mm256_and_ps(xs[1], magnitude)),
                        _mm256_max_ps(_mm256_and_ps(xs[2], magnitude), _mm256_and_ps(xs[3], magnitude)),
                    );
                    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
                    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
                    _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)))
                };
                let scale = amax / 127.0;
                let inv = _mm256_set1_ps(if scale != 0.0 { 1.0 / scale } else { 0.0 });
                // (Loops, not closures: a closure would not inherit the target features.)
                let mut n = [_mm256_setzero_si256(); 4];
                for (n, &v) in n.iter_mut().zip(&xs) {
                    *n = round_saturated_avx2(_mm256_mul_ps(v, inv), -128.0, 127.0);
                }
                let sum = _mm256_add_epi32(_mm256_add_epi32(n[0], n[1]), _mm256_add_epi32(n[2], n[3]));
                // packs work within 128-bit lanes: [0-3 8-11 | 4-7 12-15] per pair, then
                // bytes [0-3 8-11 16-19 24-27 | 4-7 12-15 20-23 28-31]; a dword
                // permutation restores the order.
                let words = [_mm256_packs_epi32(n[0], n[1]), _mm256_packs_epi32(n[2], n[3])];
                let bytes = _mm256_packs_epi16(words[0], words[1]);
                let bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                let (lo, hi) = halves(layout, b, nb);
                _mm_storeu_si128(q.as_mut_ptr().add(lo) as *mut __m128i, _mm256_castsi256_si128(bytes));
                _mm_storeu_si128(q.as_mut_ptr().add(hi) as *mut __m128i, _mm256_extracti128_si256::<1>(bytes));
                d[b] = scale;
                s[b] = scale * hsum_epi32(sum) as f32;
            }
        }
    }

    /// [`super::quantize_q16_row`] on AVX2, bit for bit with its loop, as the AVX-512 arm.
    ///
    /// # Safety
    /// The host has AVX2.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn quantize_q16_row_avx2(x: &[f32], q: &mut [i16], d: &mut [f32], s: &mut [f32]) {
        let nb = x.len() / Q8_BLOCK;
        assert!(x.len() == nb * Q8_BLOCK && q.len() >= x.len() && d.len() >= nb && s.len() >= nb);
        // SAFETY: every load reads a block of `x` and every store writes 16 values of
        // `q` inside that block (sizes checked above); the caller has the features.
        unsafe {
            let magnitude = _mm256_set1_epi32(i32::MAX);
            for b in 0..nb {
                let at = x.as_ptr().add(b * Q8_BLOCK);
                let xs: [__m256; 4] = [
                    _mm256_loadu_ps(at),
                    _mm256_loadu_ps(at.add(8)),
                    _mm256_loadu_ps(at.add(16)),
                    _mm256_loadu_ps(at.add(24)),
                ];
                let mut bits = [_mm256_setzero_si256(); 4];
                for (bits, &v) in bits.iter_mut().zip(&xs) {
                    *bits = _mm256_and_si256(_mm256_castps_si256(v), magnitude);
                }
                let m = _mm256_max_epu32(_mm256_max_epu32(bits[0], bits[1]), _mm256_max_epu32(bits[2], bits[3]));
                let m = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256::<1>(m));
                let m = _mm_max_epu32(m, _mm_shuffle_epi32::<0b01_00_11_10>(m));
                let m = _mm_max_epu32(m, _mm_shuffle_epi32::<0b10_11_00_01>(m));
                let scale = f32::from_bits(_mm_cvtsi128_si32(m) as u32) / 32767.0;
                let inv = _mm256_set1_ps(if scale != 0.0 { 1.0 / scale } else { 0.0 });
                let mut n = [_mm256_setzero_si256(); 4];
                for (n, &v) in n.iter_mut().zip(&xs) {
                    *n = round_saturated_avx2(_mm256_mul_ps(v, inv), -32768.0, 32767.0);
                }
                let sum = _mm256_add_epi32(_mm256_add_epi32(n[0], n[1]), _mm256_add_epi32(n[2], n[3]));
                for (h, pair) in [(n[0], n[1]), (n[2], n[3])].into_iter().enumerate() {
                    // packs within 128-bit lanes: [0-3 8-11 | 4-7 12-15]; 64-bit lanes restore it.
                    let words = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(pair.0, pair.1));
                    _mm256_storeu_si256(q.as_mut_ptr().add(b * Q8_BLOCK + 16 * h) as *mut __m256i, words);
                }
                d[b] = scale;
                s[b] = scale * hsum_epi32(sum) as f32;
            }
        }
    }

    /// [`super::quantize_q16_row`] on AVX-512, bit for bit with its loop: the magnitudes'
    /// bits maxed as integers, the scale and its inverse in the same scalar operations,
    /// then per value the product rounded and saturated ([`round_saturated`]).
    ///
    /// # Safety
    /// The host has AVX-512 F/BW/VL/DQ.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
    pub unsafe fn quantize_q16_row_avx512(x: &[f32], q: &mut [i16], d: &mut [f32], s: &mut [f32]) {
        let nb = x.len() / Q8_BLOCK;
        assert!(x.len() == nb * Q8_BLOCK && q.len() >= x.len() && d.len() >= nb && s.len() >= nb);
        // SAFETY: every load reads a block of `x` and every store writes 16 values of
        // `q` inside that block (sizes checked above); the caller has the features.
        unsafe {
            let magnitude = _mm512_set1_epi32(i32::MAX);
            for b in 0..nb {
                let at = b * Q8_BLOCK;
                let xs = [_mm512_loadu_ps(x.as_ptr().add(at)), _mm512_loadu_ps(x.as_ptr().add(at + 16))];
                let bits = |v: __m512| _mm512_and_si512(_mm512_castps_si512(v), magnitude);
                let amax = f32::from_bits(_mm512_reduce_max_epu32(_mm512_max_epu32(bits(xs[0]), bits(xs[1]))));
                let scale = amax / 32767.0;
                let inv = _mm512_set1_ps(if scale != 0.0 { 1.0 / scale } else { 0.0 });
                let mut sum = _mm512_setzero_si512();
                for (h, &xh) in xs.iter().enumerate() {
                    let n = round_saturated(_mm512_mul_ps(xh, inv), -32768.0, 32767.0);
                    sum = _mm512_add_epi32(sum, n);
                    _mm256_storeu_si256(q.as_mut_ptr().add(at + 16 * h) as *mut __m256i, _mm512_cvtepi32_epi16(n));
                }
                d[b] = scale;
                s[b] = scale * _mm512_reduce_add_epi32(sum) as f32;
            }
        }
    }

    /// [`super::quantize_q8_row`] on AVX-512, bit for bit: the block's largest magnitude
    /// (NaN if any value is NaN), the scale and its inverse in the same scalar operations,
    /// then per value the product rounded and saturated to i8 ([`round_saturated`]).
    ///
    /// # Safety
    /// The host has AVX-512 F/BW/VL/DQ; `x.len()` is a multiple of 32; `q` holds
    /// `x.len()` values, `d` and `s` one per block.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
    pub unsafe fn quantize_q8_row_avx512(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [f32], pairs: bool) {
        let layout = if pairs { Layout::NibblePairs } else { Layout::Natural };
        let nb = x.len() / Q8_BLOCK;
        assert!(q.len() >= nb * Q8_BLOCK && d.len() >= nb && s.len() >= nb);
        // SAFETY: every load reads a block of `x` and every store writes 16 bytes at a
        // block half of `q` (sizes checked above); the caller has the features.
        unsafe {
            for b in 0..nb {
                let xs =
                    [_mm512_loadu_ps(x.as_ptr().add(b * Q8_BLOCK)), _mm512_loadu_ps(x.as_ptr().add(b * Q8_BLOCK + 16))];
                let unordered =
                    _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(xs[0], xs[0]) | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(xs[1], xs[1]);
                let amax = if unordered != 0 {
                    f32::NAN
                } else {
                    _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(xs[0]), _mm512_abs_ps(xs[1])))
                };
                let scale = amax / 127.0;
                let inv = _mm512_set1_ps(if scale != 0.0 { 1.0 / scale } else { 0.0 });
                let (lo, hi) = halves(layout, b, nb);
                let mut sum = _mm512_setzero_si512();
                for (h, at) in [(0, lo), (1, hi)] {
                    let n = round_saturated(_mm512_mul_ps(xs[h], inv), -128.0, 127.0);
                    sum = _mm512_add_epi32(sum, n);
                    _mm_storeu_si128(q.as_mut_ptr().add(at) as *mut __m128i, _mm512_cvtsepi32_epi8(n));
                }
                d[b] = scale;
                s[b] = scale * _mm512_reduce_add_epi32(sum) as f32;
            }
        }
    }

    /// `gemv_f32` for one activation row and the 32-value schemes (Q4_0, Q4_1, Q8_0), bit
    /// for bit: the same `q * d (+ m)` per weight, `lane += w * x` (not fused) into the same
    /// 32 lanes, the lanes summed in order. The compiler kept the generic loop's lanes in
    /// memory: Gemma 3's 262144-row Q8_0 head ran at 3.5 GB/s in every prompt pass.
    ///
    /// # Safety
    /// The host has AVX-512 F/BW/VL/DQ; `rows` holds `out.len()` rows of `k / 32` blocks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    pub unsafe fn gemv_row_avx512(scheme: QuantScheme, k: usize, rows: &[u8], x: &[f32], out: &mut [f32]) {
        let rb = k / 32 * scheme.block_bytes();
        let mut groups = out.chunks_exact_mut(4);
        let mut at = 0;
        // SAFETY: each call gets whole rows of `rows`; features as the caller guarantees.
        unsafe {
            for o in &mut groups {
                gemv_rows_32::<4>(scheme, &rows[at..][..4 * rb], rb, x, o);
                at += 4 * rb;
            }
            for o in groups.into_remainder().chunks_exact_mut(1) {
                gemv_rows_32::<1>(scheme, &rows[at..][..rb], rb, x, o);
                at += rb;
            }
        }
    }

    /// [`gemv_f32`]'s float-scheme rows (F32, F16, BF16) against one activation row, with
    /// its bits: per run of 32 values two vectors of lane sums (`lane += w * x`, a
    /// multiply then an add), the tail's lanes as the generic loop adds them, each row's 32
    /// lanes summed in order. The generic loop stored each decoded run and read it back,
    /// and ran an F16 SmolLM2 at a fifth of llama.cpp's decode rate.
    ///
    /// # Safety
    /// The host has AVX-512 F/BW/VL/DQ and F16C; `rows` holds whole rows of `k` values,
    /// `x` `k` values.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
    pub unsafe fn gemv_float_row_avx512(scheme: QuantScheme, k: usize, rows: &[u8], x: &[f32], out: &mut [f32]) {
        let bb = scheme.block_bytes();
        let rb = k * bb;
        assert!(rows.len() >= out.len() * rb && x.len() >= k);
        let whole = k / 32;
        // SAFETY (whole body): loads stay within a row's `rb` bytes and `x`'s k values.
        unsafe {
            for (r, o) in out.iter_mut().enumerate() {
                let row = rows.as_ptr().add(r * rb);
                let (mut lo, mut hi) = (_mm512_setzero_ps(), _mm512_setzero_ps());
                for c in 0..whole {
                    let at = row.add(c * 32 * bb);
                    let (w0, w1) = match scheme {
                        QuantScheme::F32 => (_mm512_loadu_ps(at.cast()), _mm512_loadu_ps(at.add(64).cast())),
                        QuantScheme::F16 => (
                            _mm512_cvtph_ps(_mm256_loadu_si256(at.cast())),
                            _mm512_cvtph_ps(_mm256_loadu_si256(at.add(32).cast())),
                        ),
                        _ => {
                            // BF16: the bits widened to the f32's high half. (No closure: it
                            // would not inherit the target features.)
                            let (b0, b1) = (_mm256_loadu_si256(at.cast()), _mm256_loadu_si256(at.add(32).cast()));
                            (
                                _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(b0))),
                                _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(b1))),
                            )
                        }
                    };
                    let xs = x.as_ptr().add(c * 32);
                    lo = _mm512_add_ps(lo, _mm512_mul_ps(w0, _mm512_loadu_ps(xs)));
                    hi = _mm512_add_ps(hi, _mm512_mul_ps(w1, _mm512_loadu_ps(xs.add(16))));
                }
                let mut lanes = [0f32; 32];
                _mm512_storeu_ps(lanes.as_mut_ptr(), lo);
                _mm512_storeu_ps(lanes.as_mut_ptr().add(16), hi);
                *o = float_row_tail(scheme, k, std::slice::from_raw_parts(row, rb), x, lanes);
            }
        }
    }

    /// [`gemv_float_row_avx512`] on AVX2 with F16C, same bits: the 32 lanes in four
    /// vectors of 8. The generic loop left F16 rows to a scalar half-to-float per value
    /// (the multiversioned arm has no F16C): 23 tok/s of F16 SmolLM2 decode at 1 thread on
    /// Zen 4's AVX2 arm, a third of its AVX-512 rate.
    ///
    /// # Safety
    /// The host has AVX2, FMA and F16C; `rows` holds whole rows of `k` values, `x` `k` values.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn gemv_float_row_avx2(scheme: QuantScheme, k: usize, rows: &[u8], x: &[f32], out: &mut [f32]) {
        let bb = scheme.block_bytes();
        let rb = k * bb;
        assert!(rows.len() >= out.len() * rb && x.len() >= k);
        // SAFETY (whole body): loads stay within a row's `rb` bytes and `x`'s k values.
        unsafe {
            for (r, o) in out.iter_mut().enumerate() {
                let row = rows.as_ptr().add(r * rb);
                let mut acc = [_mm256_setzero_ps(); 4];
                for c in 0..k / 32 {
                    let at = row.add(c * 32 * bb);
                    let xs = x.as_ptr().add(c * 32);
                    for (j, acc) in acc.iter_mut().enumerate() {
                        let w = match scheme {
                            QuantScheme::F32 => _mm256_loadu_ps(at.add(j * 32).cast()),
                            QuantScheme::F16 => _mm256_cvtph_ps(_mm_loadu_si128(at.add(j * 16).cast())),
                            // BF16: the bits widened to the f32's high half.
                            _ => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(
                                at.add(j * 16).cast(),
                            )))),
                        };
                        *acc = _mm256_add_ps(*acc, _mm256_mul_ps(w, _mm256_loadu_ps(xs.add(j * 8))));
                    }
                }
                let mut lanes = [0f32; 32];
                for (j, acc) in acc.iter().enumerate() {
                    _mm256_storeu_ps(lanes.as_mut_ptr().add(j * 8), *acc);
                }
                *o = float_row_tail(scheme, k, std::slice::from_raw_parts(row, rb), x, lanes);
            }
        }
    }

    /// The float GEMVs' last run (the `k % 32` values past the whole runs) added to `lanes`
    /// as the generic loop adds it, then the 32 lanes summed in order.
    #[inline(always)]
    fn float_row_tail(scheme: QuantScheme, k: usize, row: &[u8], x: &[f32], mut lanes: [f32; 32]) -> f32 {
        let whole = k / 32 * 32;
        let mut w = [0f32; 32];
        super::decode_floats(scheme, &row[whole * scheme.block_bytes()..], &mut w);
        for ((lane, &w), &x) in lanes.iter_mut().zip(&w[..k - whole]).zip(&x[whole..k]) {
            *lane += w * x;
        }
        lanes.iter().sum()
    }

    /// [`gemv_row_avx512`] for `R` rows, one after another in address order; their lane
    /// sums (each a chain of 31 dependent adds, in lane order) run side by side.
    #[inline(always)]
    unsafe fn gemv_rows_32<const R: usize>(scheme: QuantScheme, rows: &[u8], rb: usize, x: &[f32], out: &mut [f32]) {
        let bb = scheme.block_bytes();
        // SAFETY (whole body): loads stay inside a block's bytes and `x`'s k values; the
        // caller has the features.
        unsafe {
            let low = _mm_set1_epi8(0x0F);
            let offset = _mm512_set1_epi32(if scheme == QuantScheme::Q4_0 { 8 } else { 0 });
            let mut lanes = [[0f32; 32]; R];
            for (r, row) in rows.chunks_exact(rb).enumerate() {
                let (mut lo, mut hi) = (_mm512_setzero_ps(), _mm512_setzero_ps());
                for (c, wb) in row.chunks_exact(bb).enumerate() {
                    let d = _mm512_set1_ps(super::f16_at(wb, 0));
                    let (q0, q1) = match scheme {
                        QuantScheme::Q8_0 => (
                            _mm512_cvtepi8_epi32(_mm_loadu_si128(wb[2..].as_ptr().cast())),
                            _mm512_cvtepi8_epi32(_mm_loadu_si128(wb[18..].as_ptr().cast())),
                        ),
                        _ => {
                            let at = if scheme == QuantScheme::Q4_1 { 4 } else { 2 };
                            let b = _mm_loadu_si128(wb[at..].as_ptr().cast());
                            (
                                _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(b, low)), offset),
                                _mm512_sub_epi32(
                                    _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16::<4>(b), low)),
                                    offset,
                                ),
                            )
                        }
                    };
                    let (mut w0, mut w1) =
                        (_mm512_mul_ps(_mm512_cvtepi32_ps(q0), d), _mm512_mul_ps(_mm512_cvtepi32_ps(q1), d));
                    if scheme == QuantScheme::Q4_1 {
                        let min = _mm512_set1_ps(super::f16_at(wb, 2));
                        (w0, w1) = (_mm512_add_ps(w0, min), _mm512_add_ps(w1, min));
                    }
                    let xs = x.as_ptr().add(c * 32);
                    lo = _mm512_add_ps(lo, _mm512_mul_ps(w0, _mm512_loadu_ps(xs)));
                    hi = _mm512_add_ps(hi, _mm512_mul_ps(w1, _mm512_loadu_ps(xs.add(16))));
                }
                _mm512_storeu_ps(lanes[r].as_mut_ptr(), lo);
                _mm512_storeu_ps(lanes[r].as_mut_ptr().add(16), hi);
            }
            // `Iterator::sum`'s order per row (what the generic loop returns).
            let mut sums: [f32; R] = std::array::from_fn(|r| lanes[r].iter().take(0).sum());
            for l in 0..32 {
                for (sum, lanes) in sums.iter_mut().zip(&lanes) {
                    *sum += lanes[l];
                }
            }
            out.copy_from_slice(&sums);
        }
    }

    /// `out[j * m + i] = tile_j . x_i` for the decoded weight rows of `tile` and the `m`
    /// rows of `x`, all `k` long: 4 weight rows x 4 activation rows at a time, 16 lanes
    /// each (16 accumulators: every load feeds 4 FMAs), lanes summed in order at the end.
    ///
    /// # Safety
    /// The host has AVX-512 F; `tile` holds whole rows of `k`, `x` `m` rows, `out`
    /// `rows * m` values.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    pub unsafe fn dot_rows_avx512(k: usize, m: usize, tile: &[f32], x: &[f32], out: &mut [f32]) {
        let rows = tile.len() / k;
        assert!(x.len() >= m * k && out.len() >= rows * m);
        let (t, xp) = (tile.as_ptr(), x.as_ptr());
        let mut j = 0;
        // SAFETY: every pointer below stays inside `tile` / `x` (checked sizes).
        unsafe {
            // `J` weight rows against every activation row, 4 at a time.
            macro_rules! rows {
                ($j:literal) => {{
                    let mut i = 0;
                    while i + 4 <= m {
                        pairs::<$j, 4>(k, m, t, xp, j, i, out);
                        i += 4;
                    }
                    while i < m {
                        pairs::<$j, 1>(k, m, t, xp, j, i, out);
                        i += 1;
                    }
                    j += $j;
                }};
            }
            while j < rows {
                if j + 4 <= rows { rows!(4) } else { rows!(1) }
            }
        }
    }

    /// `out[(j + a) * m + i + b] = tile_(j + a) . x_(i + b)` for `a < J`, `b < I`.
    // `a` and `b` are register-tile coordinates: indexing reads clearer than zipped iterators.
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    unsafe fn pairs<const J: usize, const I: usize>(
        k: usize,
        m: usize,
        t: *const f32,
        x: *const f32,
        j: usize,
        i: usize,
        out: &mut [f32],
    ) {
        // SAFETY (whole body): rows j..j + J of `t` and i..i + I of `x` exist (caller).
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); I]; J];
            let whole = k / 16 * 16;
            let mut c = 0;
            while c < whole {
                let mut wv = [_mm512_setzero_ps(); J];
                for a in 0..J {
                    wv[a] = _mm512_loadu_ps(t.add((j + a) * k + c));
                }
                for b in 0..I {
                    let xv = _mm512_loadu_ps(x.add((i + b) * k + c));
                    for a in 0..J {
                        acc[a][b] = _mm512_fmadd_ps(wv[a], xv, acc[a][b]);
                    }
                }
                c += 16;
            }
            for a in 0..J {
                for b in 0..I {
                    let mut lanes = [0f32; 16];
                    _mm512_storeu_ps(lanes.as_mut_ptr(), acc[a][b]);
                    let mut sum: f32 = lanes.iter().sum();
                    for c in whole..k {
                        sum += *t.add((j + a) * k + c) * *x.add((i + b) * k + c);
                    }
                    out[(j + a) * m + i + b] = sum;
                }
            }
        }
    }

    /// [`dot_rows_avx512`] on AVX2, with its bits: each output's 16 lane chains (lane `l`
    /// takes values `16 c + l`) run as the low 8 lanes over the row, then the high 8, in
    /// 4 weight rows x 2 activation rows of registers; the lanes are then summed in order.
    ///
    /// # Safety
    /// As `dot_rows_avx512`, the host having AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn tile_rows_avx2(k: usize, m: usize, tile: &[f32], x: &[f32], out: &mut [f32]) {
        let rows = tile.len() / k;
        assert!(x.len() >= m * k && out.len() >= rows * m);
        let (t, xp) = (tile.as_ptr(), x.as_ptr());
        let mut j = 0;
        // SAFETY: every pointer below stays inside `tile` / `x` (checked sizes).
        unsafe {
            macro_rules! rows {
                ($j:literal) => {{
                    let mut i = 0;
                    while i + 2 <= m {
                        pairs_avx2::<$j, 2>(k, m, t, xp, j, i, out);
                        i += 2;
                    }
                    if i < m {
                        pairs_avx2::<$j, 1>(k, m, t, xp, j, i, out);
                    }
                    j += $j;
                }};
            }
            while j < rows {
                if j + 4 <= rows { rows!(4) } else { rows!(1) }
            }
        }
    }

    /// [`pairs`] on AVX2: the 16 lanes as two passes of 8.
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    unsafe fn pairs_avx2<const J: usize, const I: usize>(
        k: usize,
        m: usize,
        t: *const f32,
        x: *const f32,
        j: usize,
        i: usize,
        out: &mut [f32],
    ) {
        // SAFETY (whole body): rows j..j + J of `t` and i..i + I of `x` exist (caller).
        unsafe {
            let whole = k / 16 * 16;
            let mut lanes = [[[0f32; 16]; I]; J];
            for half in 0..2 {
                let mut acc = [[_mm256_setzero_ps(); I]; J];
                let mut c = 8 * half;
                while c < whole {
                    let mut wv = [_mm256_setzero_ps(); J];
                    for a in 0..J {
                        wv[a] = _mm256_loadu_ps(t.add((j + a) * k + c));
                    }
                    for b in 0..I {
                        let xv = _mm256_loadu_ps(x.add((i + b) * k + c));
                        for a in 0..J {
                            acc[a][b] = _mm256_fmadd_ps(wv[a], xv, acc[a][b]);
                        }
                    }
                    c += 16;
                }
                for a in 0..J {
                    for b in 0..I {
                        _mm256_storeu_ps(lanes[a][b].as_mut_ptr().add(8 * half), acc[a][b]);
                    }
                }
            }
            for a in 0..J {
                for b in 0..I {
                    let mut sum: f32 = lanes[a][b].iter().sum();
                    for c in whole..k {
                        sum += *t.add((j + a) * k + c) * *x.add((i + b) * k + c);
                    }
                    out[(j + a) * m + i + b] = sum;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// f32 activations

multiversion! {
    /// `out[j * m + i] = x[i] . W[j]` for the weight rows in `rows` and the `m` rows of
    /// `x` (at most `GEMV_ROWS`): each weight block is decoded once, in registers, for all
    /// of them. Every weight is decoded exactly as `dequantize_block` does (`d * q + m`,
    /// multiply then add) before its product with `x`.
    fn gemv_f32(scheme: QuantScheme, k: usize, m: usize, rows: &[u8], x: &[f32], out: &mut [f32]) {
        // The row count as a constant, so the accumulators live in registers (with a
        // run-time count they lived on the stack: 18 -> 30 tok/s of f32 decode, 1 thread).
        match m {
            1 => gemv_rows_const::<1>(scheme, k, rows, x, out),
            2 => gemv_rows_const::<2>(scheme, k, rows, x, out),
            3 => gemv_rows_const::<3>(scheme, k, rows, x, out),
            4 => gemv_rows_const::<4>(scheme, k, rows, x, out),
            5 => gemv_rows_const::<5>(scheme, k, rows, x, out),
            6 => gemv_rows_const::<6>(scheme, k, rows, x, out),
            7 => gemv_rows_const::<7>(scheme, k, rows, x, out),
            _ => gemv_rows_const::<8>(scheme, k, rows, x, out),
        }
    }
}

/// `gemv_f32` for `M` activation rows (inlined into each arm).
#[inline(always)]
fn gemv_rows_const<const M: usize>(scheme: QuantScheme, k: usize, rows: &[u8], x: &[f32], out: &mut [f32]) {
    let (bs, bb) = (scheme.block_size(), scheme.block_bytes());
    let rb = k / bs * bb;
    let mut buf = [0f32; 256];
    if scheme.is_float() {
        // Runs of 32 values decoded at once into the 32 lanes (value by value, each a
        // block of its own, a row was one chain of dependent adds: an F16 SmolLM2
        // decoded 3 tokens a second).
        for (o, row) in out.chunks_exact_mut(M).zip(rows.chunks_exact(rb.max(1))) {
            let mut lanes = [[0f32; 32]; M];
            for (c, run) in row.chunks(32 * bb).enumerate() {
                let w = &mut buf[..run.len() / bb];
                decode_floats(scheme, run, w);
                for (i, lanes) in lanes.iter_mut().enumerate() {
                    let xs = &x[i * k + c * 32..][..w.len()];
                    for ((lane, &w), &xv) in lanes.iter_mut().zip(w.iter()).zip(xs) {
                        *lane += w * xv;
                    }
                }
            }
            for (o, lanes) in o.iter_mut().zip(&lanes) {
                *o = lanes.iter().sum();
            }
        }
        return;
    }
    for (o, row) in out.chunks_exact_mut(M).zip(rows.chunks_exact(rb)) {
        let mut lanes = [[0f32; 32]; M];
        for (c, wb) in row.chunks_exact(bb).enumerate() {
            // The 32-value formats: nibbles / bytes straight to f32 lanes.
            let (d, min, qs, nibbles) = match scheme {
                QuantScheme::Q4_0 => (f16_at(wb, 0), None, &wb[2..18], true),
                QuantScheme::Q4_1 => (f16_at(wb, 0), Some(f16_at(wb, 2)), &wb[4..20], true),
                QuantScheme::Q8_0 => (f16_at(wb, 0), None, &wb[2..34], false),
                _ => (0.0, None, &wb[..0], false),
            };
            if !qs.is_empty() {
                let mut w = [0f32; 32];
                if nibbles {
                    let offset = if min.is_some() { 0 } else { 8 };
                    for j in 0..16 {
                        w[j] = ((qs[j] & 0xF) as i32 - offset) as f32 * d;
                        w[j + 16] = ((qs[j] >> 4) as i32 - offset) as f32 * d;
                    }
                    if let Some(min) = min {
                        w.iter_mut().for_each(|v| *v += min);
                    }
                } else {
                    for j in 0..32 {
                        w[j] = (qs[j] as i8) as f32 * d;
                    }
                }
                for (i, lanes) in lanes.iter_mut().enumerate() {
                    let xs = &x[i * k + c * 32..][..32];
                    for l in 0..32 {
                        lanes[l] += w[l] * xs[l];
                    }
                }
                continue;
            }
            let vals = &mut buf[..bs];
            decode_block(scheme, wb, vals);
            for (i, lanes) in lanes.iter_mut().enumerate() {
                let xs = &x[i * k + c * bs..][..bs];
                for (e, (&v, &xv)) in vals.iter().zip(xs).enumerate() {
                    lanes[e % 32] += v * xv;
                }
            }
        }
        for (o, lanes) in o.iter_mut().zip(&lanes) {
            *o = lanes.iter().sum();
        }
    }
}

/// The values of a float scheme in `bytes`, each as `dequantize_block` decodes it, in a
/// loop that vectorizes where it is inlined.
#[inline(always)]
fn decode_floats(scheme: QuantScheme, bytes: &[u8], out: &mut [f32]) {
    match scheme {
        QuantScheme::F32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        QuantScheme::F16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = rlx_ir::f16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        _ => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = half::bf16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
    }
}

/// `dequantize_block`, bit for bit, with the 5-bit and K schemes unpacked as whole lanes
/// (inlined into each arm, so it vectorizes; the out-of-line scalar decoder took 500 ms
/// of a 6-token Gemma 3 prompt).
#[inline(always)]
fn decode_block(scheme: QuantScheme, wb: &[u8], out: &mut [f32]) {
    let mut q = [0i8; 256];
    match scheme {
        QuantScheme::Q5_0 => {
            unpack_block(scheme, wb, &mut q);
            let d = f16_at(wb, 0);
            out[..32].iter_mut().zip(&q).for_each(|(o, &q)| *o = d * q as f32);
        }
        QuantScheme::Q5_1 => {
            unpack_block(scheme, wb, &mut q);
            let (d, m) = (f16_at(wb, 0), f16_at(wb, 2));
            out[..32].iter_mut().zip(&q).for_each(|(o, &q)| *o = d * q as f32 + m);
        }
        QuantScheme::Q4K | QuantScheme::Q5K => {
            unpack_block(scheme, wb, &mut q);
            let (d, dmin) = (f16_at(wb, 0), f16_at(wb, 2));
            let (sc, mn) = rlx_ir::quant::k_scale_min(&wb[4..16]);
            for j in 0..8 {
                let (scale, min) = (d * sc[j] as f32, dmin * mn[j] as f32);
                let (o, q) = (&mut out[j * 32..][..32], &q[j * 32..][..32]);
                o.iter_mut().zip(q).for_each(|(o, &q)| *o = scale * q as f32 - min);
            }
        }
        QuantScheme::Q6K => {
            unpack_block(scheme, wb, &mut q);
            let (scales, d) = (&wb[192..208], f16_at(wb, 208));
            for i in 0..16 {
                let scale = d * (scales[i] as i8) as f32;
                let (o, q) = (&mut out[i * 16..][..16], &q[i * 16..][..16]);
                o.iter_mut().zip(q).for_each(|(o, &q)| *o = scale * q as f32);
            }
        }
        _ => dequantize_block(scheme, wb, out),
    }
}

/// The f32 product for up to `GEMV_ROWS` activation rows.
fn gemv_rows(p: &QuantMatMulPlan, arm: Arm, x: &[f32], w: &[u8], out: &mut [f32]) {
    let (m, rb) = (p.m, p.row_bytes());
    #[cfg(target_arch = "x86_64")]
    if m == 1
        && matches!(p.scheme, QuantScheme::Q4_0 | QuantScheme::Q4_1 | QuantScheme::Q8_0)
        && arm >= Arm::Avx512
        && features().has_avx512()
    {
        return by_weight_rows(p, out, 0, |first, o, _| {
            // SAFETY: AVX-512 F/BW/VL/DQ were just checked; the rows are whole blocks.
            unsafe { x86::gemv_row_avx512(p.scheme, p.k, &w[first * rb..][..o.len() * rb], x, o) }
        });
    }
    #[cfg(target_arch = "x86_64")]
    if m == 1 && p.scheme.is_float() && features().f16c {
        type FloatRows = unsafe fn(QuantScheme, usize, &[u8], &[f32], &mut [f32]);
        let kernel: Option<FloatRows> = if arm >= Arm::Avx512 && features().has_avx512() {
            Some(x86::gemv_float_row_avx512)
        } else if arm >= Arm::Avx2 && features().has_avx2_fma() {
            Some(x86::gemv_float_row_avx2)
        } else {
            None
        };
        if let Some(kernel) = kernel {
            return by_weight_rows(p, out, 0, |first, o, _| {
                // SAFETY: the kernel's features (F16C and its arm's) were just checked;
                // the rows are whole.
                unsafe { kernel(p.scheme, p.k, &w[first * rb..][..o.len() * rb], x, o) }
            });
        }
    }
    by_weight_rows(p, out, 0, |first, o, _| {
        gemv_f32(arm, p.scheme, p.k, m, &w[first * rb..][..o.len() / m * rb], x, o)
    });
}

/// Splits the weight rows across threads in chunks (as `par_columns` splits columns):
/// `task(first_row, o, scratch)` computes `o = [rows, m]` for the chunk's weight rows,
/// with `per_task` floats of scratch of its own. The gathered `[n, m]` is then transposed
/// into `out` `[m, n]` (for `m = 1` the tasks write `out` itself).
fn by_weight_rows(
    p: &QuantMatMulPlan,
    out: &mut [f32],
    per_task: usize,
    task: impl Fn(usize, &mut [f32], &mut [f32]) + Sync,
) {
    let (m, n) = (p.m, p.n);
    let (threads, chunk) = column_chunks(p);
    let per_task = per_task.max(1);
    let gathered = if m == 1 { 0 } else { n * m };
    crate::threads::with_scratch::<f32, _>(gathered + n.div_ceil(chunk) * per_task, |scratch| {
        let (tmp, own) = scratch.split_at_mut(gathered);
        let results: &mut [f32] = if m == 1 { &mut *out } else { tmp };
        let run = |(c, (o, s)): (usize, (&mut [f32], &mut [f32]))| task(c * chunk, o, s);
        if threads > 1 && n * p.k >= 1 << 16 {
            results.par_chunks_mut(chunk * m).zip(own.par_chunks_mut(per_task)).enumerate().for_each(run);
        } else {
            results.chunks_mut(chunk * m).zip(own.chunks_mut(per_task)).enumerate().for_each(run);
        }
        if m > 1 {
            for (j, col) in tmp.chunks_exact(m).enumerate() {
                for (i, &v) in col.iter().enumerate() {
                    out[i * n + j] = v;
                }
            }
        }
    })
}

multiversion! {
    /// Decodes whole weight rows into f32 rows of `k`.
    fn decode_rows(scheme: QuantScheme, k: usize, rows: &[u8], out: &mut [f32]) {
        if scheme.is_float() {
            return decode_floats(scheme, rows, out);
        }
        let (bs, bb) = (scheme.block_size(), scheme.block_bytes());
        for (wb, o) in rows.chunks_exact(bb).zip(out.chunks_exact_mut(bs)) {
            decode_block(scheme, wb, o);
        }
        let _ = k;
    }
}

/// The f32 product for `GEMV_ROWS < m <= DOT_ROWS` activation rows on AVX2 and AVX-512 (other
/// hosts take the tiled GEMM): each task decodes `DOT_TILE` of its weight rows at a time
/// and dots them with every activation row.
fn dot_tiles(p: &QuantMatMulPlan, arm: Arm, x: &[f32], w: &[u8], out: &mut [f32]) {
    let (m, k, rb) = (p.m, p.k, p.row_bytes());
    by_weight_rows(p, out, DOT_TILE * k, |first, o, buf| {
        let w = &w[first * rb..][..o.len() / m * rb];
        for (t, ws) in w.chunks(DOT_TILE * rb).enumerate() {
            let decoded = &mut buf[..ws.len() / rb * k];
            decode_rows(arm, p.scheme, k, ws, decoded);
            let o = &mut o[t * DOT_TILE * m..][..decoded.len() / k * m];
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the caller checked `arm >= Avx2` and AVX2 + FMA on the host; `arm`
            // is capped at what the host has.
            unsafe {
                if arm.min(Arm::best()) == Arm::Avx512 {
                    x86::dot_rows_avx512(k, m, decoded, x, o)
                } else {
                    x86::tile_rows_avx2(k, m, decoded, x, o)
                }
            };
            #[cfg(not(target_arch = "x86_64"))]
            unreachable!("dot_tiles runs on AVX2 and AVX-512 only");
        }
    });
}

/// `dequantize(w)`: the rows decoded to f32 (split across threads by rows: any split gives
/// the same bits).
pub fn dequantize(scheme: QuantScheme, k: usize, arm: Arm, ins: &Args, out: &mut Out) -> Result<()> {
    let (w, out): (&[u8], &mut [f32]) = (ins.get(0)?, out_mut(out)?);
    let rb = k / scheme.block_size() * scheme.block_bytes();
    if k == 0 || rb == 0 {
        return Ok(());
    }
    let per = (1usize << 14).div_ceil(k).max(1);
    if crate::threads::current() > 1 && out.len() >= 1 << 15 {
        out.par_chunks_mut(per * k).zip(w.par_chunks(per * rb)).for_each(|(o, s)| decode_rows(arm, scheme, k, s, o));
    } else {
        decode_rows(arm, scheme, k, w, out);
    }
    Ok(())
}

fn tiled_gemm(p: &QuantMatMulPlan, arm: Arm, x: &[f32], w: &[u8], out: &mut [f32]) {
    let (m, k, n, rb) = (p.m, p.k, p.n, p.row_bytes());
    let tile = TILE_ROWS.min(n);
    let threads = crate::threads::current().min(p.threads);
    crate::threads::with_scratch::<f32, _>(tile * k, |buf| {
        for j0 in (0..n).step_by(tile) {
            let rows = tile.min(n - j0);
            let dst = &mut buf[..rows * k];
            let src = &w[j0 * rb..][..rows * rb];
            // Decode in parallel by whole rows (elementwise: any split gives the same bits).
            if threads > 1 {
                let per = rows.div_ceil(threads * 4).max(1);
                dst.par_chunks_mut(per * k)
                    .zip(src.par_chunks(per * rb))
                    .for_each(|(o, s)| decode_rows(arm, p.scheme, k, s, o));
            } else {
                decode_rows(arm, p.scheme, k, src, dst);
            }
            // out[:, j0..j0 + rows] = x [m, k] @ tile^T; the tile [rows, k] read transposed.
            f32::gemm(m, k, rows, x, (k, 1), dst, (1, k), &mut out[j0..], n, threads);
        }
    })
}
