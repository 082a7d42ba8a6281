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
//!   Figures: `docs/performance.md` (`rlx bench kernels`).
//! - **AVX-512 BF16** (bf16 without AMX): the same packed tiles, each 32x32 block as four
//!   8-row x 32-column register blocks of `vdpbf16ps` (a pair of k per instruction into
//!   f32 lanes; each product of two bf16 is exact in f32, so a pair is two roundings in a
//!   fixed order, like two FMAs). Same subnormal rule as AMX: inputs are read as zero and
//!   outputs flush (`vdpbf16ps` ignores MXCSR), so subnormal operands take the convert arm.
//!   Where AMX exists it wins (14x the FMA peak); on Sapphire Rapids `vdpbf16ps` issues
//!   at half the FMA rate (103 vs 207 GFLOP/s register-bound) and would lose to the f32
//!   GEMM, but on Zen 4 it issues at 1.6-2x the FMA rate (a register-bound loop: 173-228
//!   vs 111-116 GFLOP/s, AMD EPYC, 2026-12-03), so there it beats widening.
//! - **convert** (f16, bf16 without AMX, small products): packed operands widened to f32
//!   panel by panel (KC = 1024 rows of k at a time; f16 through F16C when present), each
//!   panel multiplied by the f32 GEMM and accumulated. Exact products, f32 sums.
//!
//! Every arm computes each output element in an order fixed by the shapes alone, so the
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

/// Rows below which the tiled arms' 16-row tiles waste more than they win (a decode GEMV
/// reads its weight once either way; the convert arm streams it through the f32 kernel).
const TILED_MIN_ROWS: usize = 16;

/// Which arm `gemm` takes for a product of `dtype` operands with `m` rows: `amx`,
/// `avx512-bf16` or `convert`.
pub fn arm_for(dtype: DType, m: usize) -> &'static str {
    let f = features();
    match () {
        _ if dtype != DType::BF16 || m < TILED_MIN_ROWS => "convert",
        _ if f.amx_bf16 => "amx",
        // By vendor: vdpbf16ps issues at 1.6-2x the FMA rate on AMD Zen 4, at half of it
        // on Intel Sapphire / Emerald Rapids (85 vs 175 GFLOP/s a core, CPUID model 207,
        // 2026-12-06: without AMX granted, widening to the f32 GEMM wins; Cooper Lake, the
        // other Intel part with AVX512_BF16, is unmeasured).
        _ if f.avx512bf16 && f.has_avx512() && f.amd => "avx512-bf16",
        _ => "convert",
    }
}

/// The arm products of `dtype` with 16 or more rows take here, and why, for `rlx info`.
pub fn arm_reason(dtype: DType) -> &'static str {
    match arm_for(dtype, TILED_MIN_ROWS) {
        "amx" => "amx (tdpbf16ps tiles: AMX granted to this process)",
        "avx512-bf16" => "avx512-bf16 (vdpbf16ps, no AMX: 1.5x the f32 GEMM on Zen 4)",
        _ if dtype == DType::F16 => "convert (widened to f32 panels for the f32 GEMM: no f16 dot instruction used)",
        _ if features().avx512bf16 => {
            "convert (widened to f32 panels for the f32 GEMM: no AMX, and Intel's vdpbf16ps runs at half the FMA rate)"
        }
        _ => "convert (widened to f32 panels for the f32 GEMM: no AMX, no AVX512_BF16)",
    }
}

pub use tiled::Tiles;

/// Whether products of `dtype` with `m` rows take a tiled arm (which reads a weight
/// packed once as [`Tiles`]).
pub fn tiled_for(dtype: DType, m: usize) -> bool {
    arm_for(dtype, m) != "convert"
}

/// `c = a b` for operands of `dtype` (f16 or bf16) into `c [m, n]` with rows `c_row`
/// apart, f32 sums. `tiles`, when given, is `b` packed for the tiled arms already.
pub fn gemm(dtype: DType, p: Product, tiles: Option<&Tiles>, c: &mut [f32], c_row: usize, threads: usize) {
    let engine = match arm_for(dtype, p.dims.0) {
        "amx" => Some(tiled::Engine::Amx),
        "avx512-bf16" => Some(tiled::Engine::Dpbf16),
        _ => None,
    };
    if engine.is_some_and(|e| tiled::gemm(e, p, tiles, c, c_row, threads)) {
        return;
    }
    convert_gemm(p, c, c_row, threads)
}

/// Rows of k per widened panel. The f32 GEMM blocks k itself; each extra panel is one
/// more pass over c (measured at 1024^3, 1 thread: KC 256 -> 90 GFLOP/s, 1024 -> 112).
const KC: usize = 1024;

/// The convert arm (also the reference the tiled arms are tested against).
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

/// The tiled arms: both operands packed into bf16 tiles, multiplied by AMX or by
/// `vdpbf16ps`.
mod tiled {
    use super::*;
    use crate::kernels::SharedOut;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Engine {
        Amx,
        Dpbf16,
    }

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
        /// The slice as widened f32 words, when it is one.
        fn as_wide(x: &[Self]) -> Option<&[f32]>;
    }
    impl Bf16Source for f32 {
        #[inline(always)]
        fn bits(self) -> u16 {
            (self.to_bits() >> 16) as u16
        }
        fn as_wide(x: &[f32]) -> Option<&[f32]> {
            Some(x)
        }
    }
    impl Bf16Source for bf16 {
        #[inline(always)]
        fn bits(self) -> u16 {
            self.to_bits()
        }
        fn as_wide(_: &[bf16]) -> Option<&[f32]> {
            None
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
    #[inline(always)]
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
    #[inline(always)]
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

    /// [`pack_a_rows`] and [`pack_b_cols`] compiled for AVX-512, which every CPU with a
    /// tiled engine has (the baseline build runs their loops as SSE2; 1-3% of the char
    /// transformer's bf16 training step, AMD EPYC), a transposed widened `a` through
    /// [`pack_transposed_avx512`].
    ///
    /// # Safety
    /// The CPU has AVX-512 (F, BW, VL, DQ).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    unsafe fn pack_rows_avx512<T: Bf16Source>(
        a: &[T],
        rows: std::ops::Range<usize>,
        k: usize,
        sa: (usize, usize),
        kp: usize,
        dst: &mut [bf16],
    ) -> bool {
        if let (Some(wide), (1, cs)) = (T::as_wide(a), sa)
            && cs != 1
        {
            // SAFETY: the caller's; a block has at most 16 rows, and `a` holds its rows of
            // k steps at these strides.
            return unsafe { pack_transposed_avx512(wide, rows, (k, cs, kp), dst) };
        }
        pack_a_rows(a, rows, k, sa, kp, dst)
    }

    /// # Safety
    /// As [`pack_rows_avx512`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    unsafe fn pack_cols_avx512<T: Bf16Source>(
        b: &[T],
        cols: std::ops::Range<usize>,
        k: usize,
        sb: (usize, usize),
        kp: usize,
        dst: &mut [bf16],
    ) -> bool {
        pack_b_cols(b, cols, k, sb, kp, dst)
    }

    /// [`pack_a_rows`] for a transposed `a` of widened bf16 (a weight gradient's `x^T`:
    /// row `i`, step `p` at `a[i + p * cs]`), in registers: per 32 steps, each pair of
    /// steps' 16 rows loaded as one vector and merged into (p, p + 1) pairs, then each
    /// row's 16 pairs gathered back from the 16 x 16 block (one 64-byte tile row). The
    /// scalar loop moves one value at a time. Packing `a` in the char transformer's bf16
    /// training step: 13.8% of it with that loop, 8.6% with a prefetch 16 steps ahead
    /// added to it, 3.6% with this kernel (AMD EPYC). Same values in the same places.
    ///
    /// # Safety
    /// As [`pack_rows_avx512`]; `rows` holds at most 16 rows, `a` every element read.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    unsafe fn pack_transposed_avx512(
        a: &[f32],
        rows: std::ops::Range<usize>,
        (k, cs, kp): (usize, usize, usize),
        dst: &mut [bf16],
    ) -> bool {
        use std::arch::x86_64::*;
        let (first, len) = (rows.start, rows.len());
        assert!(len <= TR && dst.len() >= TR * kp && (k == 0 || a.len() >= first + len + (k - 1) * cs));
        let live: __mmask16 = ((1u32 << len) - 1) as u16;
        let mut flag: __mmask16 = 0;
        let (exponent, top) = (_mm512_set1_epi32(0x7f80_0000), _mm512_set1_epi32(0x007f_0000));
        let high = _mm512_set1_epi32(0xffff_0000u32 as i32);
        // Lane j of row r's gather: pair j of the block, row r.
        let across = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
        let mut block = [0u32; TR * TR];
        for chunk in 0..kp / TK {
            for j in 0..TK / 2 {
                let p = chunk * TK + 2 * j;
                // SAFETY: steps p and p + 1 below k read `len` values from first + p * cs,
                // inside `a` (asserted); steps past k read nothing (zeros: padding).
                let load = |p: usize| unsafe {
                    if p < k {
                        _mm512_maskz_loadu_ps(live, a.as_ptr().add(first + p * cs))
                    } else {
                        _mm512_setzero_ps()
                    }
                };
                let (x0, x1) = (_mm512_castps_si512(load(p)), _mm512_castps_si512(load(p + 1)));
                for x in [x0, x1] {
                    // A bf16 subnormal: exponent zero, a mantissa bit set.
                    let sub = _mm512_testn_epi32_mask(x, exponent) & _mm512_test_epi32_mask(x, top);
                    flag |= sub;
                }
                let pair = _mm512_or_si512(_mm512_srli_epi32::<16>(x0), _mm512_and_si512(x1, high));
                // SAFETY: `block` holds 16 x 16 words; pair j is its row j.
                unsafe { _mm512_storeu_si512(block.as_mut_ptr().add(j * TR).cast(), pair) };
            }
            for r in 0..TR {
                // SAFETY: indices r + 16 j < 256 lie in `block`; tile row r of this chunk
                // is 32 bf16 (64 bytes) of `dst` at (chunk * TR + r) * TK.
                unsafe {
                    let row = _mm512_i32gather_epi32::<4>(
                        _mm512_add_epi32(across, _mm512_set1_epi32(r as i32)),
                        block.as_ptr().cast(),
                    );
                    _mm512_storeu_si512(dst.as_mut_ptr().add((chunk * TR + r) * TK).cast(), row);
                }
            }
        }
        flag != 0
    }

    /// Runs `block(index, dst)` over `count` blocks of `len` elements of `dst` (in
    /// parallel when `threads > 1`); whether any block found a subnormal.
    fn pack_blocks(
        dst: &mut [bf16],
        (count, len): (usize, usize),
        threads: usize,
        block: impl Fn((usize, &mut [bf16])) -> bool + Sync + Send,
    ) -> bool {
        let dst = &mut dst[..count * len];
        if threads > 1 {
            dst.par_chunks_mut(len).enumerate().map(block).reduce(|| false, |x, y| x | y)
        } else {
            dst.chunks_mut(len).enumerate().map(block).fold(false, |x, y| x | y)
        }
    }

    /// Packs `a [m, k]` in 16-row blocks of `kp` into `ap`; whether it holds a subnormal.
    fn pack_a<A: Bf16Source>(
        (m, k, kp): (usize, usize, usize),
        (a, sa): (&[A], (usize, usize)),
        ap: &mut [bf16],
        threads: usize,
    ) -> bool {
        #[cfg(target_arch = "x86_64")]
        let avx512 = features().has_avx512();
        pack_blocks(ap, (m.div_ceil(TR), TR * kp), threads, |(blk, dst)| {
            let rows = blk * TR..m.min((blk + 1) * TR);
            #[cfg(target_arch = "x86_64")]
            if avx512 {
                // SAFETY: features() reported AVX-512.
                return unsafe { pack_rows_avx512(a, rows, k, sa, kp, dst) };
            }
            pack_a_rows(a, rows, k, sa, kp, dst)
        })
    }

    /// Packs `b [k, n]` in 16-column blocks of `kp` into `bp`; whether it holds a
    /// subnormal.
    fn pack_b<B: Bf16Source>(
        (k, n, kp): (usize, usize, usize),
        (b, sb): (&[B], (usize, usize)),
        bp: &mut [bf16],
        threads: usize,
    ) -> bool {
        #[cfg(target_arch = "x86_64")]
        let avx512 = features().has_avx512();
        pack_blocks(bp, (n.div_ceil(TR), TR * kp), threads, |(blk, dst)| {
            let cols = blk * TR..n.min((blk + 1) * TR);
            #[cfg(target_arch = "x86_64")]
            if avx512 {
                // SAFETY: features() reported AVX-512.
                return unsafe { pack_cols_avx512(b, cols, k, sb, kp, dst) };
            }
            pack_b_cols(b, cols, k, sb, kp, dst)
        })
    }

    /// Padded dims of a product: rows and columns to whole output blocks, k to whole
    /// tile rows.
    fn padded((m, k, n): (usize, usize, usize)) -> (usize, usize, usize) {
        (m.next_multiple_of(BLOCK), k.next_multiple_of(TK).max(TK), n.next_multiple_of(BLOCK))
    }

    /// A `[k, n]` bf16 weight packed once as the tiled arms read `b` (a param's, kept
    /// until its bytes change, as `packed_gemm` keeps f32 weights): a product of a few
    /// rows had spent longer packing the weight than multiplying (the MLP 768-3072-768
    /// at batch 32 in bf16: 72 GFLOP/s, below its f32 rate).
    pub struct Tiles {
        k: usize,
        n: usize,
        /// Whether the weight holds a subnormal: its products take the convert arm.
        subnormal: bool,
        data: Vec<bf16>,
    }

    impl std::fmt::Debug for Tiles {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Tiles({} x {} bf16)", self.k, self.n)
        }
    }

    impl Tiles {
        /// Packs `b [k, n]` read with element strides `sb`; None for an f16 operand.
        pub fn pack(b: Operand, (k, n): (usize, usize), sb: (usize, usize)) -> Option<Tiles> {
            let (_, kp, np) = padded((0, k, n));
            let mut data = vec![bf16::ZERO; np * kp];
            let subnormal = match b {
                Operand::Wide(b) => pack_b((k, n, kp), (b, sb), &mut data, 1),
                Operand::BF16(b) => pack_b((k, n, kp), (b, sb), &mut data, 1),
                Operand::F16(_) => return None,
            };
            Some(Tiles { k, n, subnormal, data })
        }
    }

    /// False (nothing written) when an operand holds a subnormal, or is f16: the caller
    /// takes the convert arm. `tiles`, when given, is `b` packed already.
    pub fn gemm(
        engine: Engine,
        p: Product,
        tiles: Option<&Tiles>,
        c: &mut [f32],
        c_row: usize,
        threads: usize,
    ) -> bool {
        let Product { dims: (m, k, n), a, sa, b, sb } = p;
        if m == 0 || n == 0 {
            return true;
        }
        if tiles.is_some_and(|t| t.subnormal || (t.k, t.n) != (k, n)) {
            return false;
        }
        let c = &mut c[..(m - 1) * c_row + n];
        let (mp, kp, np) = padded((m, k, n));
        let b_len = if tiles.is_some() { 0 } else { np * kp };
        // Per-worker scratch, reused across calls; the tiles' padding must read as zero.
        // Without padding the packing writes every element (zeroing 4 MiB per 1024^3 call
        // took 3% of it, on the calling thread).
        with_scratch::<bf16, _>(mp * kp + b_len, |scratch| {
            if (mp, kp, np) != (m, k, n) {
                scratch.fill(bf16::ZERO);
            }
            let (ap, bp) = scratch.split_at_mut(mp * kp);
            let subnormal = match a {
                Operand::Wide(a) => pack_a((m, k, kp), (a, sa), ap, threads),
                Operand::BF16(a) => pack_a((m, k, kp), (a, sa), ap, threads),
                Operand::F16(_) => return false,
            } || match (tiles, b) {
                (Some(_), _) => false,
                (None, Operand::Wide(b)) => pack_b((k, n, kp), (b, sb), bp, threads),
                (None, Operand::BF16(b)) => pack_b((k, n, kp), (b, sb), bp, threads),
                (None, Operand::F16(_)) => return false,
            };
            if subnormal {
                return false;
            }
            let (ap, bp) = (&*ap, tiles.map_or(&*bp, |t| &t.data[..]));
            let (row_blocks, col_blocks) = (mp / BLOCK, np / BLOCK);
            // A task is a row block times a span of column blocks: whole row blocks when
            // there are enough for the workers, else each row block's columns split too
            // (a product of 32 rows had run on one thread).
            let parts =
                if threads > 1 && row_blocks < threads { threads.div_ceil(row_blocks).min(col_blocks) } else { 1 };
            let span = col_blocks.div_ceil(parts);
            let parts = col_blocks.div_ceil(span);
            let out = SharedOut::new(c);
            let task = |t: usize| {
                let (rb, first) = (t / parts, (t % parts) * span);
                let mut tile = [0f32; BLOCK * BLOCK];
                if engine == Engine::Amx {
                    configure_amx();
                }
                for cb in first..col_blocks.min(first + span) {
                    let a0 = &ap[rb * 2 * TR * kp..];
                    let b0 = &bp[cb * 2 * TR * kp..];
                    // SAFETY: a0 holds two 16-row tile columns of kp and b0 two 16-column
                    // blocks of kp rows (the packed layouts above); AMX tiles are
                    // configured above, and arm_for chose each engine from features().
                    unsafe {
                        match engine {
                            Engine::Amx => block_amx(a0.as_ptr(), b0.as_ptr(), kp, tile.as_mut_ptr()),
                            Engine::Dpbf16 => block_dpbf16_avx512(a0.as_ptr(), b0.as_ptr(), kp, tile.as_mut_ptr()),
                        }
                    }
                    let valid_rows = BLOCK.min(m - rb * BLOCK);
                    let (j0, cols) = (cb * BLOCK, BLOCK.min(n - cb * BLOCK));
                    for (r, t) in tile.chunks_exact(BLOCK).take(valid_rows).enumerate() {
                        // SAFETY: row rb * BLOCK + r < m and columns j0..j0 + cols <= n of
                        // `c` (m rows of c_row >= n, checked by the slice above); each
                        // (row block, column block) is written by one task only.
                        unsafe {
                            let at = out.at((rb * BLOCK + r) * c_row + j0);
                            std::ptr::copy_nonoverlapping(t.as_ptr(), at, cols);
                        }
                    }
                }
                if engine == Engine::Amx {
                    release_amx();
                }
            };
            let tasks = row_blocks * parts;
            if threads > 1 && tasks > 1 {
                (0..tasks).into_par_iter().for_each(task);
            } else {
                (0..tasks).for_each(task);
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

    /// Rows of a `vdpbf16ps` register block: 8 rows x 2 vectors of 16 columns is 16
    /// accumulators, plus two B vectors and a broadcast A pair, of the 32 zmm registers.
    const DP_ROWS: usize = 8;

    /// One 32 x 32 output block over all of k, as [`block_amx`] computes it, with
    /// `vdpbf16ps`: per 8-row group, each pair of k broadcasts one A pair per row against
    /// the B block's two 16-column vectors of that pair.
    ///
    /// # Safety
    /// The CPU has AVX-512F and AVX512_BF16; `a`, `b` and `out` as for [`block_amx`].
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn block_dpbf16_avx512(a: *const bf16, b: *const bf16, kp: usize, out: *mut f32) {
        use std::arch::x86_64::{
            __m512bh, __m512i, _mm512_dpbf16_ps, _mm512_loadu_si512, _mm512_set1_epi32, _mm512_setzero_ps,
            _mm512_storeu_ps,
        };
        let pairs = kp / 2;
        // The second column block starts 16 * kp bf16 on; a pair of k is 16 columns x 2.
        let b1 = unsafe { b.add(TR * kp) };
        for group in 0..BLOCK / DP_ROWS {
            // Rows 0-15 live in the first 16-row tile column, 16-31 in the second.
            let (tile_col, row0) = (group * DP_ROWS / TR, group * DP_ROWS % TR);
            let a_col = unsafe { a.add(tile_col * TR * kp) };
            let mut acc = [[_mm512_setzero_ps(); 2]; DP_ROWS];
            for pair in 0..pairs {
                // SAFETY: pair < kp / 2: inside both packed blocks (caller's contract).
                let (bv0, bv1): (__m512bh, __m512bh) = unsafe {
                    (
                        std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                            b.add(pair * 2 * TR) as *const __m512i
                        )),
                        std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                            b1.add(pair * 2 * TR) as *const __m512i
                        )),
                    )
                };
                // A's tile of this pair, then the pair within a 32-wide tile row.
                let (tile, within) = (2 * pair / TK, 2 * pair % TK);
                let a_tile = unsafe { a_col.add(tile * TR * TK + within) };
                for (r, row_acc) in acc.iter_mut().enumerate() {
                    // SAFETY: row0 + r < 16 rows of this tile, within + 1 < 32; any bits
                    // are a valid __m512bh.
                    let av = unsafe {
                        let bits = (a_tile.add((row0 + r) * TK) as *const i32).read_unaligned();
                        std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(bits))
                    };
                    row_acc[0] = _mm512_dpbf16_ps(row_acc[0], av, bv0);
                    row_acc[1] = _mm512_dpbf16_ps(row_acc[1], av, bv1);
                }
            }
            for (r, row_acc) in acc.iter().enumerate() {
                // SAFETY: out holds 32 x 32 f32; row group * 8 + r < 32.
                unsafe {
                    let row = out.add((group * DP_ROWS + r) * BLOCK);
                    _mm512_storeu_ps(row, row_acc[0]);
                    _mm512_storeu_ps(row.add(TR), row_acc[1]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values exact in bf16 (up to 8 significant bits), spread over [-4, 4].
    fn bf16_values(n: usize, seed: u64) -> Vec<f32> {
        (0..n).map(|i| ((((i as u64 * 2_654_435_761 + seed) % 511) as f32) - 255.0) / 64.0).collect()
    }

    /// A transposed `a` holding bf16 subnormals (one per row, against a large `b`) takes
    /// the convert arm: the tiled arms would read them as zero. 17 rows: two blocks, the
    /// second of one row.
    #[test]
    fn a_transposed_operand_with_subnormals_counts_them() {
        let (m, k, n) = (17, 40, 16);
        let tiny = 2f32.powi(-130);
        // a [m, k] stored as [k, m]: row i holds its subnormal at step i % k.
        let mut at = vec![0f32; k * m];
        for i in 0..m {
            at[(i % k) * m + i] = tiny * (1 + i % 3) as f32;
        }
        let b = vec![2f32.powi(100); k * n];
        let mut c = vec![f32::NAN; m * n];
        let p = Product { dims: (m, k, n), a: Operand::Wide(&at), sa: (1, m), b: Operand::Wide(&b), sb: (n, 1) };
        gemm(DType::BF16, p, None, &mut c, n, 1);
        for i in 0..m {
            let want = (tiny as f64) * (1 + i % 3) as f64 * 2f64.powi(100);
            assert!(
                c[i * n..(i + 1) * n].iter().all(|&v| v as f64 == want),
                "row {i}: {:?} vs {want}",
                &c[i * n..][..n]
            );
        }
    }

    /// Every bf16 arm this CPU takes (the tiled one from 16 rows) against an f64 sum:
    /// each product of two bf16 is exact in f32, so the error is the f32 summation's,
    /// at most k roundings of the running magnitude: `k u sum |a b|`, u = 2^-24.
    #[test]
    fn bf16_products_match_an_f64_reference_on_every_operand_kind() {
        eprintln!("bf16 arm from 16 rows: {}", arm_for(DType::BF16, 16));
        if features().avx512bf16 && features().has_avx512() && features().amd && !features().amx_bf16 {
            assert_eq!(arm_for(DType::BF16, 16), "avx512-bf16");
        }
        for (m, k, n) in [(16, 1, 1), (17, 3, 33), (33, 1000, 17), (64, 64, 64), (100, 257, 65), (3, 17, 5)] {
            let (a, b) = (bf16_values(m * k, 1), bf16_values(k * n, 7));
            let (a16, b16): (Vec<bf16>, Vec<bf16>) =
                (a.iter().map(|&v| bf16::from_f32(v)).collect(), b.iter().map(|&v| bf16::from_f32(v)).collect());
            // b also as its transpose [n, k], read with strides (1, k).
            let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
            // a as its transpose [k, m] (a weight gradient's `x^T`), read with strides (1, m).
            let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
            let cases = [
                (Operand::Wide(&a), (k, 1), Operand::Wide(&b), (n, 1)),
                (Operand::Wide(&a), (k, 1), Operand::BF16(&b16), (n, 1)),
                (Operand::BF16(&a16), (k, 1), Operand::BF16(&b16), (n, 1)),
                (Operand::BF16(&a16), (k, 1), Operand::Wide(&bt), (1, k)),
                (Operand::Wide(&at), (1, m), Operand::Wide(&b), (n, 1)),
            ];
            for (case, (oa, sa, ob, sb)) in cases.into_iter().enumerate() {
                for threads in [1, 2] {
                    let mut c = vec![f32::NAN; m * n];
                    gemm(DType::BF16, Product { dims: (m, k, n), a: oa, sa, b: ob, sb }, None, &mut c, n, threads);
                    for i in 0..m {
                        for j in 0..n {
                            let terms = (0..k).map(|p| a[i * k + p] as f64 * b[p * n + j] as f64);
                            let (exact, mag) = terms.fold((0.0, 0.0), |(s, g), t| (s + t, g + t.abs()));
                            let got = c[i * n + j] as f64;
                            let bound = k as f64 * 2f64.powi(-24) * mag;
                            assert!(
                                (got - exact).abs() <= bound,
                                "[{m},{k},{n}] case {case} ({i},{j}): {got} vs {exact}"
                            );
                        }
                    }
                }
            }
        }
    }
}
