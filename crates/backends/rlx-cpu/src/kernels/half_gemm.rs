//! Matrix products of f16 / bf16 operands with f32 accumulation (the matmul family's
//! kernel when its operands are half; semantics in `rlx_ir::ops::matmul`).
//!
//! An operand is either widened (an activation: f32 words holding values of the format)
//! or packed (a weight the width policy kept in 2 bytes); the slot says which, never the
//! dtype. Arms, picked at run time:
//! - **AMX** (bf16): both operands converted to bf16 tiles as they are packed (exact: a
//!   widened bf16 value is a bf16 value), `tdpbf16ps` on 32x32 blocks of 2x2 tiles with
//!   f32 accumulators. AMX treats subnormal inputs as zero, so a product whose operands
//!   hold any bf16 subnormal takes the convert arm instead (exact); results below 2^-126
//!   flush to zero, like every accumulation on this arm (absolute error <= 2^-126 per sum).
//!   Figures: `docs/performance.md` (`rlx bench kernels`). No AVX-512-BF16 (`vdpbf16ps`)
//!   arm: on this Sapphire Rapids core it issues at half the FMA rate (measured 103 vs
//!   207 GFLOP/s register-bound), so it loses to the f32 GEMM; AMX is 14x the FMA peak.
//! - **convert** (f16, bf16 without AMX, small products): packed operands widened to f32
//!   panel by panel (KC = 1024 rows of k at a time; f16 through F16C when present), each
//!   panel multiplied by the f32 GEMM and accumulated. Exact products, f32 sums.
//!
//! Both arms compute each output element in an order fixed by the shapes alone, so the
//! result is bit-identical for every thread count.

use super::matmul::Gemm;
use crate::features::features;
use crate::threads::with_scratch;
use half::{bf16, f16};
use rayon::prelude::*;
use rlx_ir::DType;

/// A matrix operand of a half matmul, as its slot stores it.
#[derive(Clone, Copy, Debug)]
pub enum Operand<'a> {
    /// f32 words holding f16/bf16 values (the CPU's activations).
    Wide(&'a [f32]),
    /// Packed 2-byte halves (a weight the width policy kept packed).
    F16(&'a [f16]),
    BF16(&'a [bf16]),
}

impl<'a> Operand<'a> {
    pub fn len(&self) -> usize {
        match self {
            Operand::Wide(x) => x.len(),
            Operand::F16(x) => x.len(),
            Operand::BF16(x) => x.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements from `start` on.
    pub fn from(self, start: usize) -> Operand<'a> {
        match self {
            Operand::Wide(x) => Operand::Wide(&x[start..]),
            Operand::F16(x) => Operand::F16(&x[start..]),
            Operand::BF16(x) => Operand::BF16(&x[start..]),
        }
    }

    /// Element `i` as f32 (exact).
    #[inline(always)]
    fn get(&self, i: usize) -> f32 {
        match self {
            Operand::Wide(x) => x[i],
            Operand::F16(x) => rlx_ir::f16_bits_to_f32(x[i].to_bits()),
            Operand::BF16(x) => x[i].to_f32(),
        }
    }
}

/// `a [m, k] @ b [k, n]`, each operand read with (row, column) element strides.
#[derive(Clone, Copy, Debug)]
pub struct Product<'a> {
    pub dims: (usize, usize, usize),
    pub a: Operand<'a>,
    pub sa: (usize, usize),
    pub b: Operand<'a>,
    pub sb: (usize, usize),
}

/// Rows below which AMX's 16-row tiles waste more than they win (a decode GEMV reads its
/// weight once either way; the convert arm streams it through the f32 kernel).
const AMX_MIN_ROWS: usize = 16;

/// Which arm `gemm` takes for a product of `dtype` operands with `m` rows.
pub fn arm_for(dtype: DType, m: usize) -> &'static str {
    if dtype == DType::BF16 && m >= AMX_MIN_ROWS && features().amx_bf16 { "amx" } else { "convert" }
}

/// `c = a b` for operands of `dtype` (f16 or bf16) into `c [m, n]` with rows `c_row`
/// apart, f32 sums.
pub fn gemm(dtype: DType, p: Product, c: &mut [f32], c_row: usize, threads: usize) {
    if arm_for(dtype, p.dims.0) == "amx" && amx::gemm(p, c, c_row, threads) {
        return;
    }
    convert_gemm(p, c, c_row, threads)
}

/// Rows of k per widened panel. The f32 GEMM blocks k itself; each extra panel is one
/// more pass over c (measured at 1024^3, 1 thread: KC 256 -> 90 GFLOP/s, 1024 -> 112).
const KC: usize = 1024;

/// The convert arm (also the reference the AMX arm is tested against).
pub fn convert_gemm(p: Product, c: &mut [f32], c_row: usize, threads: usize) {
    let Product { dims: (m, k, n), a, sa, b, sb } = p;
    if let (Operand::Wide(a), Operand::Wide(b)) = (a, b) {
        return f32::gemm(m, k, n, a, sa, b, sb, c, c_row, threads);
    }
    let kc_max = KC.min(k);
    // Per-worker scratch, reused across calls (fresh 4 MiB panels cost their page faults
    // on every call).
    with_scratch::<f32, _>((m + n) * kc_max, |scratch| {
        let (pa, pb) = scratch.split_at_mut(m * kc_max);
        let mut p0 = 0;
        loop {
            let kc = KC.min(k - p0);
            let (a_panel, a_strides) = match a {
                Operand::Wide(x) => (&x[(p0 * sa.1).min(x.len())..], sa),
                packed => (widen_panel(packed, (m, kc), sa, (0, p0), pa), (kc, 1)),
            };
            let (b_panel, b_strides) = match b {
                Operand::Wide(x) => (&x[(p0 * sb.0).min(x.len())..], sb),
                packed => (widen_panel(packed, (kc, n), sb, (p0, 0), pb), (n, 1)),
            };
            f32::gemm_acc(m, kc, n, a_panel, a_strides, b_panel, b_strides, c, c_row, threads, p0 > 0);
            p0 += kc;
            if p0 >= k {
                break;
            }
        }
    })
}

/// The `rows x cols` block at `(r0, c0)` of a strided operand, widened into the front of
/// `dst` (row-major), which it returns.
fn widen_panel<'d>(
    x: Operand,
    (rows, cols): (usize, usize),
    (rs, cs): (usize, usize),
    (r0, c0): (usize, usize),
    dst: &'d mut [f32],
) -> &'d [f32] {
    let dst = &mut dst[..rows * cols];
    for (i, row) in dst.chunks_exact_mut(cols.max(1)).take(rows).enumerate() {
        let start = (r0 + i) * rs + c0 * cs;
        match x {
            Operand::F16(h) if cs == 1 => widen_f16(&h[start..start + cols], row),
            Operand::BF16(h) if cs == 1 => widen_bf16(&h[start..start + cols], row),
            _ => row.iter_mut().enumerate().for_each(|(j, o)| *o = x.get(start + j * cs)),
        }
    }
    dst
}

/// bf16 -> f32 is a 16-bit shift (the compiler vectorizes it for any baseline).
pub fn widen_bf16(src: &[bf16], dst: &mut [f32]) {
    dst.iter_mut().zip(src).for_each(|(o, h)| *o = f32::from_bits((h.to_bits() as u32) << 16));
}

/// f16 -> f32, eight at a time with F16C's `vcvtph2ps` when the CPU has it.
pub fn widen_f16(src: &[f16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if features().f16c && features().avx {
        // SAFETY: features() detected F16C and AVX.
        return unsafe { widen_f16_f16c(src, dst) };
    }
    dst.iter_mut().zip(src).for_each(|(o, h)| *o = rlx_ir::f16_bits_to_f32(h.to_bits()));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
fn widen_f16_f16c(src: &[f16], dst: &mut [f32]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm256_cvtph_ps, _mm256_storeu_ps};
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n elements of both slices.
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    for j in i..n {
        dst[j] = rlx_ir::f16_bits_to_f32(src[j].to_bits());
    }
}

/// The AMX arm.
mod amx {
    use super::*;

    /// bf16 per tile row (64 bytes), and rows per tile.
    const TK: usize = 32;
    const TR: usize = 16;
    /// Output block: 2 x 2 tiles.
    const BLOCK: usize = 32;

    /// An element AMX reads as bf16 bits: a widened bf16 value (f32 words whose low 16
    /// bits are zero, the arena's invariant for bf16 values, so truncation is exact) or a
    /// packed bf16.
    trait Bf16Source: Copy + Send + Sync {
        fn bits(self) -> u16;
    }
    impl Bf16Source for f32 {
        #[inline(always)]
        fn bits(self) -> u16 {
            (self.to_bits() >> 16) as u16
        }
    }
    impl Bf16Source for bf16 {
        #[inline(always)]
        fn bits(self) -> u16 {
            self.to_bits()
        }
    }

    /// 1 when `bits` is a bf16 subnormal (AMX would read it as zero); branch-free so the
    /// packing loops vectorize.
    #[inline(always)]
    fn subnormal(bits: u16) -> u16 {
        ((bits & 0x7f80 == 0) & (bits & 0x007f != 0)) as u16
    }

    /// Packs rows `rows` of `a [m, k]` (strides `(rs, cs)`) into 16 x 32 tiles,
    /// `[m / 16][kp / 32][16][32]`, zero padded; `dst` starts at the first row's block.
    /// Returns whether an element is subnormal.
    fn pack_a_rows<T: Bf16Source>(
        a: &[T],
        rows: std::ops::Range<usize>,
        k: usize,
        (rs, cs): (usize, usize),
        kp: usize,
        dst: &mut [bf16],
    ) -> bool {
        let mut flag = 0u16;
        let first = rows.start;
        let at = |i: usize, p: usize| ((((i - first) / TR) * (kp / TK) + p / TK) * TR + i % TR) * TK + p % TK;
        if cs == 1 {
            for i in rows {
                let src = &a[i * rs..i * rs + k];
                for (ks, chunk) in src.chunks(TK).enumerate() {
                    let d = &mut dst[at(i, ks * TK)..][..chunk.len()];
                    for (d, &x) in d.iter_mut().zip(chunk) {
                        let bits = x.bits();
                        flag |= subnormal(bits);
                        *d = bf16::from_bits(bits);
                    }
                }
            }
        } else {
            // Column-major (a transposed operand): walk k outside so reads are contiguous.
            for p in 0..k {
                for i in rows.clone() {
                    let bits = a[i * rs + p * cs].bits();
                    flag |= subnormal(bits);
                    dst[at(i, p)] = bf16::from_bits(bits);
                }
            }
        }
        flag != 0
    }

    /// Packs columns `cols` of `b [k, n]` in AMX's pair-interleaved layout,
    /// `[n / 16][kp / 2][16][2]` (one B tile, 16 pairs of k x 16 columns, is 1 KiB of
    /// consecutive bytes); `dst` starts at the first column's block.
    fn pack_b_cols<T: Bf16Source>(
        b: &[T],
        cols: std::ops::Range<usize>,
        k: usize,
        (rs, cs): (usize, usize),
        kp: usize,
        dst: &mut [bf16],
    ) -> bool {
        let mut flag = 0u16;
        let first = cols.start;
        let at = |p: usize, j: usize| ((((j - first) / TR) * (kp / 2) + p / 2) * TR + j % TR) * 2 + p % 2;
        if rs == 1 {
            // b stored [n, k] (the x @ W^T layout): each column's k values are contiguous.
            for j in cols {
                for (p, &x) in b[j * cs..j * cs + k].iter().enumerate() {
                    let bits = x.bits();
                    flag |= subnormal(bits);
                    dst[at(p, j)] = bf16::from_bits(bits);
                }
            }
        } else if cs == 1 {
            // Row-major b [k, n] (the weight layout): one pair of rows gives 32
            // consecutive destination bf16, written in order (measured: 22% -> 6% of a
            // 1024^3 call).
            let width = cols.len();
            for (pair, d) in dst.chunks_exact_mut(2 * TR).take(k.div_ceil(2)).enumerate() {
                let r0 = &b[2 * pair * rs + first..][..width];
                for (t, &x) in r0.iter().enumerate() {
                    d[2 * t] = bf16::from_bits(x.bits());
                }
                if 2 * pair + 1 < k {
                    let r1 = &b[(2 * pair + 1) * rs + first..][..width];
                    for (t, &x) in r1.iter().enumerate() {
                        d[2 * t + 1] = bf16::from_bits(x.bits());
                    }
                }
                for h in &d[..2 * width] {
                    flag |= subnormal(h.to_bits());
                }
            }
        } else {
            for p in 0..k {
                let row = &b[p * rs..];
                for j in cols.clone() {
                    let bits = row[j * cs].bits();
                    flag |= subnormal(bits);
                    dst[at(p, j)] = bf16::from_bits(bits);
                }
            }
        }
        flag != 0
    }

    /// Packs both operands (in parallel blocks when `threads > 1`); false on a subnormal.
    fn pack<A: Bf16Source, B: Bf16Source>(
        (m, k, n): (usize, usize, usize),
        (a, sa): (&[A], (usize, usize)),
        (b, sb): (&[B], (usize, usize)),
        (kp, ap, bp): (usize, &mut [bf16], &mut [bf16]),
        threads: usize,
    ) -> bool {
        let a_block =
            |(blk, dst): (usize, &mut [bf16])| pack_a_rows(a, blk * TR..m.min((blk + 1) * TR), k, sa, kp, dst);
        let b_block =
            |(blk, dst): (usize, &mut [bf16])| pack_b_cols(b, blk * TR..n.min((blk + 1) * TR), k, sb, kp, dst);
        let block = TR * kp;
        let (a_blocks, b_blocks) = (m.div_ceil(TR), n.div_ceil(TR));
        let subnormal = if threads > 1 {
            ap[..a_blocks * block].par_chunks_mut(block).enumerate().map(a_block).reduce(|| false, |x, y| x | y)
                | bp[..b_blocks * block].par_chunks_mut(block).enumerate().map(b_block).reduce(|| false, |x, y| x | y)
        } else {
            ap[..a_blocks * block].chunks_mut(block).enumerate().map(a_block).fold(false, |x, y| x | y)
                | bp[..b_blocks * block].chunks_mut(block).enumerate().map(b_block).fold(false, |x, y| x | y)
        };
        !subnormal
    }

    /// False (nothing written) when an operand holds a subnormal, or is f16: the caller
    /// takes the convert arm.
    pub fn gemm(p: Product, c: &mut [f32], c_row: usize, threads: usize) -> bool {
        let Product { dims: (m, k, n), a, sa, b, sb } = p;
        if m == 0 || n == 0 {
            return true;
        }
        let c = &mut c[..(m - 1) * c_row + n];
        let (mp, kp, np) = (m.next_multiple_of(BLOCK), k.next_multiple_of(TK).max(TK), n.next_multiple_of(BLOCK));
        // Per-worker scratch, reused across calls; the tiles' padding must read as zero.
        with_scratch::<bf16, _>((mp + np) * kp, |scratch| {
            scratch.fill(bf16::ZERO);
            let (ap, bp) = scratch.split_at_mut(mp * kp);
            let bufs = (kp, &mut *ap, &mut *bp);
            let packed = match (a, b) {
                (Operand::Wide(a), Operand::Wide(b)) => pack((m, k, n), (a, sa), (b, sb), bufs, threads),
                (Operand::Wide(a), Operand::BF16(b)) => pack((m, k, n), (a, sa), (b, sb), bufs, threads),
                (Operand::BF16(a), Operand::Wide(b)) => pack((m, k, n), (a, sa), (b, sb), bufs, threads),
                (Operand::BF16(a), Operand::BF16(b)) => pack((m, k, n), (a, sa), (b, sb), bufs, threads),
                _ => false,
            };
            if !packed {
                return false;
            }
            let (ap, bp) = (&*ap, &*bp);
            let row_block = |rb: usize, rows: &mut [f32]| {
                let mut tile = [0f32; BLOCK * BLOCK];
                configure_amx();
                for cb in 0..np / BLOCK {
                    let a0 = &ap[rb * 2 * TR * kp..];
                    let b0 = &bp[cb * 2 * TR * kp..];
                    // SAFETY: tiles configured above; a0 holds two 16-row tile columns of
                    // kp and b0 two 16-column blocks of kp rows (the packed layouts above).
                    unsafe { block_amx(a0.as_ptr(), b0.as_ptr(), kp, tile.as_mut_ptr()) };
                    let valid_rows = BLOCK.min(m - rb * BLOCK);
                    let (j0, cols) = (cb * BLOCK, BLOCK.min(n - cb * BLOCK));
                    for (r, t) in tile.chunks_exact(BLOCK).take(valid_rows).enumerate() {
                        rows[r * c_row + j0..r * c_row + j0 + cols].copy_from_slice(&t[..cols]);
                    }
                }
                release_amx();
            };
            let chunk = BLOCK * c_row;
            if threads > 1 && mp / BLOCK > 1 {
                c.par_chunks_mut(chunk).enumerate().for_each(|(rb, rows)| row_block(rb, rows));
            } else {
                c.chunks_mut(chunk).enumerate().for_each(|(rb, rows)| row_block(rb, rows));
            }
            true
        })
    }

    /// Tile palette 1: tmm0-3 the 2 x 2 accumulator tiles (16 x 16 f32), tmm4-5 the A
    /// tiles (16 x 32 bf16), tmm6-7 the B tiles (16 pairs x 16 columns); 64 bytes a row.
    // Out of line: the ISA gate admits AMX only inside `*_amx` symbols.
    #[inline(never)]
    fn configure_amx() {
        #[repr(C, align(64))]
        struct Config([u8; 64]);
        let mut cfg = Config([0; 64]);
        cfg.0[0] = 1;
        for t in 0..8 {
            cfg.0[16 + 2 * t] = 64; // bytes per row
            cfg.0[48 + t] = TR as u8; // rows
        }
        // SAFETY: only reached when features() reported AMX granted for this process.
        unsafe { std::arch::asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly)) };
    }

    // Out of line: the ISA gate admits AMX only inside `*_amx` symbols.
    #[inline(never)]
    fn release_amx() {
        // SAFETY: as above.
        unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) };
    }

    /// One 32 x 32 output block over all of k: C(2 x 2 tiles) = sum over k steps of
    /// A(2 tiles) x B(2 tiles); stored row-major (32 f32 a row) into `out`.
    ///
    /// # Safety
    /// Tiles configured by `configure_amx`; `a` points at two consecutive 16-row tile
    /// columns (`2 * 16 * kp` bf16), `b` at two consecutive 16-column blocks
    /// (`2 * 16 * kp` bf16), `out` at 32 x 32 f32.
    // Out of line: the ISA gate admits AMX only inside `*_amx` symbols.
    #[inline(never)]
    unsafe fn block_amx(a: *const bf16, b: *const bf16, kp: usize, out: *mut f32) {
        let (tile_bytes, row) = (TR * TK * 2, 64usize);
        let steps = kp / TK;
        // The second row-tile column and column block start 16 * kp bf16 further on.
        let (a1, b1) = unsafe { (a.add(TR * kp), b.add(TR * kp)) };
        unsafe {
            std::arch::asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            );
            for s in 0..steps {
                let off = s * tile_bytes;
                std::arch::asm!(
                    "tileloadd tmm4, [{a0} + {row}*1]",
                    "tileloadd tmm5, [{a1} + {row}*1]",
                    "tileloadd tmm6, [{b0} + {row}*1]",
                    "tileloadd tmm7, [{b1} + {row}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    a0 = in(reg) (a as *const u8).add(off),
                    a1 = in(reg) (a1 as *const u8).add(off),
                    b0 = in(reg) (b as *const u8).add(off),
                    b1 = in(reg) (b1 as *const u8).add(off),
                    row = in(reg) row,
                    options(nostack, readonly)
                );
            }
            let stride = BLOCK * 4;
            let o = out as *mut u8;
            std::arch::asm!(
                "tilestored [{c00} + {stride}*1], tmm0",
                "tilestored [{c01} + {stride}*1], tmm1",
                "tilestored [{c10} + {stride}*1], tmm2",
                "tilestored [{c11} + {stride}*1], tmm3",
                c00 = in(reg) o,
                c01 = in(reg) o.add(TR * 4),
                c10 = in(reg) o.add(TR * stride),
                c11 = in(reg) o.add(TR * stride + TR * 4),
                stride = in(reg) stride,
                options(nostack)
            );
        }
    }
}
