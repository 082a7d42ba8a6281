//! ln and ln_1p on AVX-512, table-driven: no division. u = m * 2^e with m in [0.75, 1.5)
//! from `vgetmantps` / `vgetexpps` (subnormals included); m's top bits pick one of 32
//! intervals, whose `c` (6 significant bits, 1 beside m = 1) makes r = m * c - 1 exact
//! (one FMA), and ln u = e ln2 - ln c + ln1p(r) with ln1p(r) = r + r^2 P(r), |r| <= 1/32.
//! `H = e * LN2_HI15 + T_HI` is exact (both multiples of 2^-15); `H + r` keeps its rounding
//! error (Fast2Sum, |H| >= |r| wherever H is not 0), and the small terms join that error:
//! the result is within 6.03e-8 of ln relative (6.12e-8 for ln_1p), where the
//! division-based core of the other arms reaches 8.2e-8. 22 vector operations for ln (26 with the
//! division before), 33 for ln_1p (37): on Intel the loops are bound by their count (ports
//! 0 and 5), not by the divider. Special values (zeros, infinities, negatives, NaN) come
//! from one `vfixupimmps` each.
//!
//! ln_1p(x) = ln(u) + err/u for u = 1 + x and err its rounding error (exact, TwoSum), with
//! err/u = err * c * 2^-e / (1 + r) taken as err * c * 2^-e * (1 - r): the dropped r^2
//! (<= 2^-10) of a term at most 2^-19 of the result is below 2^-29 of it. Near x = 0 the
//! interval is c = 1, e = 0: r = u - 1 and the correction make x's own terms exactly.
//!
//! `tools/vmath/log_table.py` fits the tables (its `--rust` output is below) and
//! simulates the kernel over every f32 of ln's [2^-30, 2^30] and ln_1p's [-0.999, -2^-14]
//! and [2^-14, 1e6]. Its bits differ from the AVX2 arm's (each within docs/vmath.md's
//! bounds); the slice, in-place and leaf-sum kernels all run it.

use super::avx512::Table;
use super::bits;
use std::arch::x86_64::*;

// tools/vmath/log_table.py --rust
const INVC: [u32; 32] = [
    0x3f800000, 0x3f740000, 0x3f6c0000, 0x3f680000, 0x3f600000, 0x3f5c0000, 0x3f540000, 0x3f500000, 0x3f4c0000,
    0x3f440000, 0x3f400000, 0x3f3c0000, 0x3f380000, 0x3f340000, 0x3f300000, 0x3f2c0000, 0x3fa80000, 0x3fa40000,
    0x3fa40000, 0x3fa00000, 0x3f9c0000, 0x3f980000, 0x3f980000, 0x3f940000, 0x3f900000, 0x3f900000, 0x3f8c0000,
    0x3f880000, 0x3f880000, 0x3f840000, 0x3f840000, 0x3f800000,
];
const T_HI: [u32; 32] = [
    0x00000000, 0x3d44a000, 0x3da6a000, 0x3dc9a000, 0x3e08c000, 0x3e1b3000, 0x3e412000, 0x3e54a000, 0x3e688000,
    0x3e88bc00, 0x3e934c00, 0x3e9e1400, 0x3ea91400, 0x3eb45800, 0x3ebfd800, 0x3ecb9c00, 0xbe8b3c00, 0xbe7dc800,
    0xbe7dc800, 0xbe648000, 0xbe4a9000, 0xbe2ff800, 0xbe2ff800, 0xbe14a800, 0xbdf14000, 0xbdf14000, 0xbdb78000,
    0xbd786000, 0xbd786000, 0xbcfc0000, 0xbcfc0000, 0x00000000,
];
const T_LO: [u32; 32] = [
    0x00000000, 0x36aa14a0, 0xb76ea2e0, 0xb721a2a7, 0xb762fbb0, 0xb4d3fa9c, 0xb6fa6ab9, 0xb6161ba9, 0x36dfc995,
    0x3668227e, 0xb6ef7659, 0xb7362333, 0x37381ce3, 0xb75f058e, 0xb5b884fd, 0x370d0c4d, 0x370d5151, 0xb6436af2,
    0xb6436af2, 0x35838656, 0xb73539e9, 0xb6c1c29e, 0xb6c1c29e, 0xb725f040, 0x377891d5, 0x377891d5, 0xb7528ae5,
    0x37679ff7, 0x37679ff7, 0xb726c39e, 0xb726c39e, 0x00000000,
];
const LOG1P_P: [f32; 4] = bits([0xbf000000, 0x3eaaaae5, 0xbe8007f0, 0x3e47e95e]);
const LN2_HI15: f32 = f32::from_bits(0x3f317200);
const LN2_LO15: f32 = f32::from_bits(0x35bfbe8e);

/// ln(u) + err/u for positive normal or subnormal `u` (`err` none: ln alone).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
fn core_avx512(u: __m512, err: Option<__m512>) -> __m512 {
    let one = _mm512_set1_ps(1.0);
    let m = _mm512_getmant_ps::<_MM_MANT_NORM_P75_1P5, _MM_MANT_SIGN_ZERO>(u);
    // getexp is floor(log2 u); a mantissa under 1 stands for one binade up.
    let e = _mm512_getexp_ps(u);
    let e = _mm512_mask_add_ps(e, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(m, one), e, one);
    let index = _mm512_srli_epi32::<18>(_mm512_castps_si512(m));
    let c = Table::load(&INVC).get(index);
    let r = _mm512_fmsub_ps(m, c, one);
    let p = _mm512_fmadd_ps(_mm512_set1_ps(LOG1P_P[3]), r, _mm512_set1_ps(LOG1P_P[2]));
    let p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LOG1P_P[1]));
    let p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LOG1P_P[0]));
    let h = _mm512_fmadd_ps(e, _mm512_set1_ps(LN2_HI15), Table::load(&T_HI).get(index));
    let mut low = _mm512_fmadd_ps(e, _mm512_set1_ps(LN2_LO15), Table::load(&T_LO).get(index));
    if let Some(err) = err {
        let scaled = _mm512_scalef_ps(_mm512_mul_ps(err, c), _mm512_sub_ps(_mm512_setzero_ps(), e));
        low = _mm512_add_ps(low, _mm512_fnmadd_ps(r, scaled, scaled));
    }
    let sum = _mm512_add_ps(h, r);
    let sum_err = _mm512_sub_ps(r, _mm512_sub_ps(sum, h));
    let tail = _mm512_fmadd_ps(_mm512_mul_ps(r, r), p, low);
    _mm512_add_ps(sum, _mm512_add_ps(sum_err, tail))
}

/// `vfixupimmps` response tables (4 bits per class of the classified input, from the
/// low bits: QNaN, SNaN, +-0, +1, -inf, +inf, negative, positive). Responses: 0 keeps the
/// computed value, 1 gives the input itself, 2 its quieted NaN, 3 the default NaN, 4 -inf,
/// 5 +inf. One instruction stands for the other arms' three compare-and-select pairs.
const fn fixup_table(responses: [u32; 8]) -> i32 {
    let mut table = 0;
    let mut class = 0;
    while class < 8 {
        table |= responses[class] << (4 * class);
        class += 1;
    }
    table as i32
}

/// ln's special values, classified on its input: ln(+-0) = -inf, ln(+inf) = +inf, NaN for
/// NaN, -inf and negative inputs; a positive input (+1 included) keeps the computed value.
const LOG_SPECIALS: i32 = fixup_table([2, 2, 4, 0, 3, 5, 3, 0]);

/// ln_1p(x) = ln(u) for u = 1 + x, classified on u: u = 0 (x = -1) gives -inf, u = +inf
/// gives +inf, a negative u (x < -1), -inf or NaN gives NaN.
const LN_1P_U_SPECIALS: i32 = LOG_SPECIALS;

/// ln_1p(+-0) = +-0 (the sign of zero kept), classified on x.
const LN_1P_ZERO: i32 = fixup_table([0, 0, 1, 0, 0, 0, 0, 0]);

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
fn log_avx512(x: __m512) -> __m512 {
    let r = core_avx512(x, None);
    _mm512_fixupimm_ps::<0>(r, x, _mm512_set1_epi32(LOG_SPECIALS))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
fn ln_1p_avx512(x: __m512) -> __m512 {
    let one = _mm512_set1_ps(1.0);
    let u = _mm512_add_ps(one, x);
    // err = (1 - (u - t)) + (x - t), t = u - 1: the exact rounding error of 1 + x (TwoSum).
    let t = _mm512_sub_ps(u, one);
    let err = _mm512_add_ps(_mm512_sub_ps(one, _mm512_sub_ps(u, t)), _mm512_sub_ps(x, t));
    let r = core_avx512(u, Some(err));
    let r = _mm512_fixupimm_ps::<0>(r, u, _mm512_set1_epi32(LN_1P_U_SPECIALS));
    _mm512_fixupimm_ps::<0>(r, x, _mm512_set1_epi32(LN_1P_ZERO))
}

map_avx512!(log_map_avx512, log_avx512);
map_avx512!(ln_1p_map_avx512, ln_1p_avx512);
