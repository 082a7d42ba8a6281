//! gelu (erf form) on AVX-512, table-driven: x * Phi(x) with Phi from one exp and a
//! degree-5 polynomial looked up by |x|, instead of the other arms' erf polynomial and
//! erfc (an exp, a rational in 1 / (1 + a) and its `vdivps`) side by side.
//!
//! With a = |x| and Q(a) = Phi(-a) (the upper tail), Phi(x) = Q(a) for x < 0 and 1 - Q(a)
//! for x >= 0, and Q(a) = e^(-a^2/2) * g(a) where g (= erfcx(a / sqrt 2) / 2) is smooth:
//! 1/2 at 0, ~1/(a sqrt(2 pi)) far out. a (clamped at XMAX, past which Q < 2^-160) is
//! split into 32 intervals by its top bits as tanh's kernel does (four a binade over
//! [2^-4, 16); interval 0 also takes [0, 2^-4)); on each, g = c0 + t*(c1 + ... + t*c5)
//! with t = a - b, each coefficient one `vpermt2ps`. -a^2/2 is hi + lo exactly (a split
//! at 12 bits), e^(hi + lo) = 2^k e^r as the exp kernels reduce it, and `vscalefps`
//! applies 2^k to e^r * g with one rounding, subnormal Q included.
//!
//! `tools/vmath/gelu_table.py` fits the table (its `--rust` output is below) and
//! simulates the kernel over every f32 of [-12.9, 6] (from 6 on gelu(x) = x):
//! relative error <= 2.561e-7 where gelu is a normal f32 (the other arms: 3.8e-7), within
//! half the least subnormal where it is not.
//!
//! Its bits differ from the AVX2 and portable arms' (each within docs/vmath.md's bound);
//! the slice, in-place and leaf-sum kernels all take it, so one arm gives one answer.

use super::avx512::IntervalPoly;
use super::{EXP_P, GELU_XMAX, LN2_HI, LN2_LO, LOG2E, MAGIC};
use std::arch::x86_64::*;

/// Where e^(hi + lo)'s reduction is clamped (as the other exp kernels clamp it).
const EXP_FLOOR: f32 = -104.0;

// tools/vmath/gelu_table.py --degree 5 --rust
const GELU_B: [u32; 32] = [
    0x400ff812, 0x402ff0f3, 0x40500c87, 0x40700366, 0x408ff060, 0x40b00b76, 0x40d003de, 0x40f009fa, 0x410ff10f,
    0x412ff8cf, 0x414ff6e7, 0x41665f66, 0x00000000, 0x3daff796, 0x3dd007f3, 0x3deffd81, 0x3e0ff577, 0x3e3008e8,
    0x3e500580, 0x3e6ff1b0, 0x3e8ff834, 0x3eaffba6, 0x3ecff6c7, 0x3ef0029c, 0x3f100fcc, 0x3f2ffc1e, 0x3f5001e8,
    0x3f700ae8, 0x3f8ffe9e, 0x3fb00551, 0x3fd00f8c, 0x3fefffca,
];
const GELU_C0: [u32; 32] = [
    0x3e1d5db0, 0x3e05e635, 0x3de84d71, 0x3dccdec5, 0x3dadbebc, 0x3d9006fd, 0x3d75ce9f, 0x3d5628ad, 0x3d33788c,
    0x3d136055, 0x3cf9f9b0, 0x3ce1e6c0, 0x3f000000, 0x3eef5a70, 0x3eec8128, 0x3ee9b7e2, 0x3ee5a304, 0x3ee05959,
    0x3edb4474, 0x3ed660b4, 0x3ecf5994, 0x3ec68a13, 0x3ebe54ac, 0x3eb6a61c, 0x3eac099d, 0x3e9f75b6, 0x3e94524a,
    0x3e8a7053, 0x3e7b3983, 0x3e5ed8bc, 0x3e47a9f0, 0x3e3485b7,
];
const GELU_C1: [u32; 32] = [
    0xbd5a141a, 0xbd21aafa, 0xbcf77dfb, 0xbcc2e98b, 0xbc8e0cb9, 0xbc45750c, 0xbc10d23b, 0xbbdcebb7, 0xbb9bdfcb,
    0xbb52fe36, 0xbb181667, 0xbaf8aa7b, 0xbecc422a, 0xbeb7b160, 0xbeb43c21, 0xbeb0dee6, 0xbeabf99a, 0xbea5b0db,
    0xbe9fb715, 0xbe9a067f, 0xbe91f420, 0xbe880463, 0xbe7de663, 0xbe6d46bc, 0xbe56e447, 0xbe3d474f, 0xbe277c66,
    0xbe14e5ec, 0xbdfbccad, 0xbdcc221e, 0xbda7efda, 0xbd8c13d1,
];
const GELU_C2: [u32; 32] = [
    0x3c8ae432, 0x3c365103, 0x3bf9577e, 0x3bb109bd, 0x3b601a52, 0x3b03da4b, 0x3aa7497e, 0x3a60624c, 0x3a05dd01,
    0x3995de25, 0x39380515, 0x39083aae, 0x3e800025, 0x3e5f91ea, 0x3e5a325f, 0x3e54fdf8, 0x3e4d75ae, 0x3e43dd84,
    0x3e3ad26d, 0x3e324955, 0x3e264f24, 0x3e17c9b9, 0x3e0ac429, 0x3dfe11d9, 0x3ddf258d, 0x3dbccd43, 0x3da08e41,
    0x3d8942c0, 0x3d5b2f65, 0x3d24fa06, 0x3cfcb360, 0x3cc4ccfa,
];
const GELU_C3: [u32; 32] = [
    0xbba4f55e, 0xbb41f5ff, 0xbaef36d7, 0xba9a4a86, 0xba2b1da2, 0xb9abd78f, 0xb93da35c, 0xb8e08ab1, 0xb86378bf,
    0xb7d34f93, 0xb75d6fd3, 0xb7149999, 0xbe083521, 0xbde74606, 0xbde01c0e, 0xbddb5fcd, 0xbdd1f0f5, 0xbdc64f71,
    0xbdbb4dbf, 0xbdb11e53, 0xbda37edb, 0xbd929690, 0xbd83acd1, 0xbd6d0bd5, 0xbd4ad24f, 0xbd25dc03, 0xbd0851c9,
    0xbce17277, 0xbcab5a86, 0xbc71dfe6, 0xbc2dfd4d, 0xbbff0e63,
];
const GELU_C4: [u32; 32] = [
    0x3ab9975b, 0x3a450956, 0x39dca319, 0x3981fcfe, 0x39002fa0, 0x385cb9ac, 0x37d48649, 0x375ea590, 0x36c21bf5,
    0x36156cec, 0x35858611, 0x35217ce7, 0x3d80ccf2, 0x3d5d2f88, 0x3d49dfd0, 0x3d49fba7, 0x3d3f0237, 0x3d327553,
    0x3d26c26c, 0x3d1dc9f1, 0x3d0f5578, 0x3cfd339f, 0x3ce01b30, 0x3cc69fb8, 0x3ca633d0, 0x3c83e183, 0x3c52758e,
    0x3c28eb62, 0x3bf62b73, 0x3ba3fdfa, 0x3b5efe84, 0x3b1ab980,
];
const GELU_C5: [u32; 32] = [
    0xb9c3c420, 0xb93cbb28, 0xb8c35a81, 0xb852682c, 0xb7b75e4a, 0xb709a8cd, 0xb668111d, 0xb5d82ca4, 0xb52041fa,
    0xb44eaf19, 0xb39e0600, 0xb31aac9d, 0xbcdeaebb, 0xc09b11b1, 0xc102dee1, 0x3f856454, 0xbe298815, 0xbe80bad3,
    0xbf03b312, 0xbf15800d, 0x3c233cd9, 0xbbf33eb9, 0xbc84a1ed, 0x3b9768cb, 0xbbe3c2e1, 0xbbab6289, 0xbbb96875,
    0xbb7621b1, 0xbb2275ae, 0xbacaad03, 0xba86fb74, 0xba38f9ec,
];

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
fn gelu_avx512(x: __m512) -> __m512 {
    let g_of = IntervalPoly::load(&GELU_B, [&GELU_C0, &GELU_C1, &GELU_C2, &GELU_C3, &GELU_C4, &GELU_C5]);
    // A NaN lane takes XMAX here (vminps returns its second operand): its Q is finite, and
    // x * Phi is x's NaN.
    let a = _mm512_min_ps(_mm512_abs_ps(x), _mm512_set1_ps(GELU_XMAX));
    let g = g_of.eval(a);
    // -a^2/2 = hi + lo: the 12-bit head's square is exact, so is halving it.
    let head = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0xfffff000u32 as i32)));
    let tail = _mm512_sub_ps(a, head);
    let minus_half = _mm512_set1_ps(-0.5);
    let hi = _mm512_max_ps(_mm512_mul_ps(_mm512_mul_ps(head, head), minus_half), _mm512_set1_ps(EXP_FLOOR));
    let lo = _mm512_mul_ps(_mm512_mul_ps(tail, _mm512_add_ps(a, head)), minus_half);
    let magic = _mm512_set1_ps(MAGIC);
    let k = _mm512_sub_ps(_mm512_fmadd_ps(_mm512_add_ps(hi, lo), _mm512_set1_ps(LOG2E), magic), magic);
    let r =
        _mm512_add_ps(_mm512_fnmadd_ps(k, _mm512_set1_ps(LN2_HI), hi), _mm512_fnmadd_ps(k, _mm512_set1_ps(LN2_LO), lo));
    let mut p = _mm512_set1_ps(EXP_P[4]);
    for &coefficient in EXP_P[..4].iter().rev() {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(coefficient));
    }
    let one = _mm512_set1_ps(1.0);
    p = _mm512_fmadd_ps(p, r, one);
    p = _mm512_fmadd_ps(p, r, one);
    let q = _mm512_scalef_ps(_mm512_mul_ps(p, g), k);
    let upper = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_setzero_ps());
    let y = _mm512_mul_ps(x, _mm512_mask_blend_ps(upper, q, _mm512_sub_ps(one, q)));
    // gelu(-inf) = -0, not -inf * 0.
    let minus_inf = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(x, _mm512_set1_ps(f32::NEG_INFINITY));
    _mm512_mask_blend_ps(minus_inf, y, _mm512_set1_ps(-0.0))
}

map_avx512!(gelu_map_avx512, gelu_avx512);
