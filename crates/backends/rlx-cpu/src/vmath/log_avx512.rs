//! ln and ln_1p on AVX-512: the exponent and the mantissa of the input come from
//! `vgetexpps` / `vgetmantps` (one instruction each, subnormals included) instead of the
//! portable code's integer bit arithmetic and its subnormal pre-scaling, and the special
//! values (zeros, infinities, negatives, NaN) from one `vfixupimmps` instead of a compare
//! and a select each. Everything between is `log_core`'s arithmetic, operation for
//! operation, with the same FMAs as the other fused arms: the results are bit for bit the
//! AVX2 arm's (tests/vmath.rs checks it).

use super::{LN2_HI, LN2_LO, LOG_P};
use std::arch::x86_64::*;

/// The mantissa above which `log_core` halves it (and adds one to the exponent): the
/// portable code's `bits(x) + 0x004afb0d` carries into the exponent exactly there.
const SQRT2_BITS: u32 = 0x3fb504f3;

/// `log_core(m, e)`: ln(m * 2^e) + corr for m in [sqrt(1/2), sqrt(2)), e as f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
fn core_avx512(m: __m512, ef: __m512, corr: __m512) -> __m512 {
    let one = _mm512_set1_ps(1.0);
    let f = _mm512_sub_ps(m, one);
    let s = _mm512_div_ps(f, _mm512_add_ps(_mm512_set1_ps(2.0), f));
    let z = _mm512_mul_ps(s, s);
    let p = _mm512_fmadd_ps(_mm512_set1_ps(LOG_P[2]), z, _mm512_set1_ps(LOG_P[1]));
    let p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(LOG_P[0]));
    let r = _mm512_mul_ps(z, p);
    let hfsq = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5), f), f);
    let tail = _mm512_add_ps(_mm512_mul_ps(ef, _mm512_set1_ps(LN2_LO)), corr);
    let inner = _mm512_sub_ps(f, _mm512_sub_ps(hfsq, _mm512_add_ps(_mm512_mul_ps(s, _mm512_add_ps(hfsq, r)), tail)));
    _mm512_add_ps(_mm512_mul_ps(ef, _mm512_set1_ps(LN2_HI)), inner)
}

/// The mantissa of positive `x` in [sqrt(1/2), sqrt(2)) and its exponent, as `log_core`
/// splits it.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
fn split_avx512(x: __m512) -> (__m512, __m512) {
    let m = _mm512_getmant_ps::<_MM_MANT_NORM_1_2, _MM_MANT_SIGN_ZERO>(x);
    let e = _mm512_getexp_ps(x);
    let big = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(m, _mm512_set1_ps(f32::from_bits(SQRT2_BITS)));
    (_mm512_mask_mul_ps(m, big, m, _mm512_set1_ps(0.5)), _mm512_mask_add_ps(e, big, e, _mm512_set1_ps(1.0)))
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
    let (m, ef) = split_avx512(x);
    let r = core_avx512(m, ef, _mm512_setzero_ps());
    _mm512_fixupimm_ps::<0>(r, x, _mm512_set1_epi32(LOG_SPECIALS))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
fn ln_1p_avx512(x: __m512) -> __m512 {
    let one = _mm512_set1_ps(1.0);
    let u = _mm512_add_ps(one, x);
    // err = x > 1 ? 1 - (u - x) : x - (u - 1)
    let big = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, one);
    let err =
        _mm512_mask_blend_ps(big, _mm512_sub_ps(x, _mm512_sub_ps(u, one)), _mm512_sub_ps(one, _mm512_sub_ps(u, x)));
    let corr = _mm512_div_ps(err, u);
    let (m, ef) = split_avx512(u);
    let r = core_avx512(m, ef, corr);
    let r = _mm512_fixupimm_ps::<0>(r, u, _mm512_set1_epi32(LN_1P_U_SPECIALS));
    _mm512_fixupimm_ps::<0>(r, x, _mm512_set1_epi32(LN_1P_ZERO))
}

map_avx512!(log_map_avx512, log_avx512);
map_avx512!(ln_1p_map_avx512, ln_1p_avx512);
