//! tanh on AVX-512, table-driven: a degree-5 polynomial on each of 32 intervals of |x|,
//! its coefficients looked up with one `vpermt2ps` each, instead of the other arms'
//! e^(2|x|) and IEEE division. 19 operations a vector against ~31 and a `vdivps`: on Intel,
//! whose 512-bit operations share ports 0 and 5, the rational form ran at 0.58-0.81x
//! NumPy's tanh (2026-12-05), this one at 1.15-1.16x (2026-12-06).
//!
//! The intervals are read off the bits of a = |x|: bits >> 21 is the exponent and two
//! mantissa bits, four intervals a binade over [2^-4, 16); a < 2^-4 takes interval 0
//! (max(a, 2^-4)), whose polynomial is odd-like with c0 = 0 and c1 = 1, so tiny and
//! subnormal a give a itself. `vpermt2ps` reads the index's low 5 bits only, so the
//! tables are stored rotated by 492 mod 32 (492 = bits(2^-4) >> 21) instead of the index
//! being offset. On interval j, tanh(a) = c0 + t*(c1 + t*(... + t*c5)) with t = a - b
//! (exact: b/2 <= a <= 2b); b is the f32 near the interval's middle whose tanh lies
//! nearest an f32, so c0 = f32(tanh b) errs by ~0.001 ulp. From CUT on the result is
//! exactly 1. `tools/vmath/tanh_table.py` fits the table (its `--rust` output is below)
//! and measures the kernel over every f32: relative error <= 8.93e-8.
//!
//! Its bits differ from the AVX2 and portable arms' (each within docs/vmath.md's bound);
//! the slice, in-place and leaf-sum kernels all take it, so one arm gives one answer.

use super::avx512::IntervalPoly;
use std::arch::x86_64::*;

/// The least f32 whose tanh rounds to 1.
const CUT: f32 = f32::from_bits(0x41102cb4);

// tools/vmath/tanh_table.py --degree 5 --rust
const TANH_B: [u32; 32] = [
    0x400ff913, 0x402ff3f9, 0x40500e3c, 0x40700b93, 0x408ff0a1, 0x40aff45f, 0x40cff794, 0x40f01000, 0x4108265a,
    0x41200000, 0x41400000, 0x41600000, 0x00000000, 0x3daff1a0, 0x3dcffef3, 0x3deff173, 0x3e0ff907, 0x3e300350,
    0x3e500d6b, 0x3e700b9c, 0x3e900e3e, 0x3eb00034, 0x3ecff7d5, 0x3ef00b3f, 0x3f100c58, 0x3f2ffe3e, 0x3f500e7e,
    0x3f6ffcad, 0x3f900aae, 0x3faff78f, 0x3fd00924, 0x3feff4c0,
];
const TANH_C0: [u32; 32] = [
    0x3f7a5eb7, 0x3f7de9bd, 0x3f7f3b94, 0x3f7fb7a6, 0x3f7fefc4, 0x3f7ffdce, 0x3f7fffb4, 0x3f7ffff6, 0x3f7fffff,
    0x3f800000, 0x3f800000, 0x3f800000, 0x00000000, 0x3daf8324, 0x3dcf48a1, 0x3deed9ef, 0x3e0f0812, 0x3e2e4cbb,
    0x3e4d3c6f, 0x3e6bbe2d, 0x3e8c5ef9, 0x3ea96191, 0x3ec53cfc, 0x3edfe04e, 0x3f028d5a, 0x3f18aace, 0x3f2bcc77,
    0x3f3bea94, 0x3f4f35b9, 0x3f613882, 0x3f6ce61e, 0x3f743a4a,
];
const TANH_C1: [u32; 32] = [
    0x3d322df8, 0x3c850561, 0x3bc420ab, 0x3b109f92, 0x3a01dc61, 0x388c8001, 0x371800a1, 0x35a3adbc, 0x3430a5b6,
    0x00000000, 0x00000000, 0x00000000, 0x3f800000, 0x3f7e1eae, 0x3f7d60a6, 0x3f7c8498, 0x3f7b0160, 0x3f78953a,
    0x3f75b762, 0x3f726e95, 0x3f6cc1ff, 0x3f63fb82, 0x3f5a0245, 0x3f4f0ddd, 0x3f3d6c23, 0x3f24f4b9, 0x3f0cb536,
    0x3eec1eea, 0x3eb09027, 0x3e676e7c, 0x3e131ba7, 0x3db806ad,
];
const TANH_C2: [u32; 32] = [
    0xbd2e4185, 0xbc83edcf, 0xbbc386af, 0xbb1073f2, 0xba01aa8d, 0xb88c5164, 0xb717cf37, 0xb5c01c30, 0xb506ae29,
    0x00000000, 0x00000000, 0x00000000, 0x32f9e364, 0xbdae3925, 0xbdcd2902, 0xbdeb9a41, 0xbe0c3dae, 0xbe293fef,
    0xbe44fdd9, 0xbe5f3f9d, 0xbe81d1ec, 0xbe96d7eb, 0xbea7f7ae, 0xbeb5127e, 0xbec132f9, 0xbec4beb8, 0xbebcdadb,
    0xbead52f5, 0xbe8ee9df, 0xbe4b9b7f, 0xbe0821d8, 0xbdaf904d,
];
const TANH_C3: [u32; 32] = [
    0x3cde12e2, 0x3c2d09c5, 0x3b819160, 0x3ac02d3b, 0x39acdfa8, 0x383b24ec, 0x36ca78fa, 0x35563ef3, 0x338f55bf,
    0x00000000, 0x00000000, 0x00000000, 0xbeaaab1b, 0xbea60a42, 0xbea3f37f, 0xbea11fc3, 0xbe9da6c1, 0xbe977286,
    0xbe8fdeff, 0xbe88054e, 0xbe7478fd, 0xbe4c1a77, 0xbe212f43, 0xbdeb7c4e, 0xbd5e23c5, 0x3c6bd493, 0x3d83b44c,
    0x3dc21173, 0x3de3497b, 0x3dcbf76b, 0x3d99e146, 0x3d544c82,
];
const TANH_C4: [u32; 32] = [
    0xbc4b115f, 0xbba8e95d, 0xbb0168ca, 0xba41869e, 0xb9350431, 0xb7c43111, 0xb6544df1, 0x348b4850, 0x35873093,
    0x00000000, 0x00000000, 0x00000000, 0x38efc142, 0x3d63e939, 0x3d855976, 0x3d9b2f1a, 0x3db567e0, 0x3dd7d63e,
    0x3df66367, 0x3e091d97, 0x3e197996, 0x3e27fe0b, 0x3e2e069f, 0x3e2c1d8e, 0x3e1ce685, 0x3df4a3c3, 0x3da37c29,
    0x3d31a1d9, 0x3b6d28d5, 0xbcacdadd, 0xbccdd3e9, 0xbcaade41,
];
const TANH_C5: [u32; 32] = [
    0x3b825c3a, 0x3afaf2bf, 0x3a4a07fb, 0x39997c2d, 0x388f290e, 0x371b9db5, 0x35a897e4, 0x34702702, 0x3446b4aa,
    0x00000000, 0x00000000, 0x00000000, 0x3e07332e, 0x410568b1, 0x40a79e08, 0xc0fd7d48, 0x3f3bab3e, 0x3f57d3ff,
    0xbf859412, 0x3f226cc7, 0x3d348c9f, 0xbc8a4949, 0xbd557aca, 0xbb05b08a, 0xbd2191e7, 0xbd85abba, 0xbd7684e2,
    0xbd5349c5, 0xbd0359f4, 0xbc1beb83, 0x3ab2143d, 0x3b962837,
];

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
fn tanh_avx512(x: __m512) -> __m512 {
    // The tables stay in registers across the loop: 14 of the 32.
    let poly = IntervalPoly::load(&TANH_B, [&TANH_C0, &TANH_C1, &TANH_C2, &TANH_C3, &TANH_C4, &TANH_C5]);
    let a = _mm512_abs_ps(x);
    let p = poly.eval(a);
    // NaN compares false and keeps p, which t made NaN.
    let p = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GE_OQ>(a, _mm512_set1_ps(CUT)), p, _mm512_set1_ps(1.0));
    // p | (x & sign bit): 0xf8 is A | (B & C).
    let sign = _mm512_set1_epi32(i32::MIN);
    _mm512_castsi512_ps(_mm512_ternarylogic_epi32::<0xf8>(_mm512_castps_si512(p), _mm512_castps_si512(x), sign))
}

map_avx512!(tanh_map_avx512, tanh_avx512);
