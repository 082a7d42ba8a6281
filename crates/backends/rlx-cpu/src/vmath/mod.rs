//! Vector math: f32 transcendentals as branch-free polynomials in plain Rust.
//!
//! No libm call, no branch, no table: every function is straight-line f32 (and, for the
//! trig argument reduction past |x| = 6000, f64) arithmetic with selects, so a loop over
//! a slice auto-vectorizes on baseline SSE2 and NEON, and the `multiversion!` slice
//! kernels below recompile the same code for AVX2 and AVX-512 with identical results.
//! The one branch is per chunk of 512 values ([`map_split`]): sin, cos and tan skip the
//! f64 reduction for a chunk that needs none of it.
//!
//! The algorithms and coefficients come from tools/vmath (fit.py fits them, check.py
//! simulates these exact f32 operations against mpmath/float64; algorithms.md specifies
//! them). Rust never contracts `a * b + c` into an FMA and never reassociates, so this
//! code computes exactly what check.py measured. Bounds (docs/vmath.md): exp 9.8e-8 rel,
//! log 8.2e-8 rel, ln_1p 8.2e-8 rel, sin/cos 8.3e-8 abs for |x| <= 1e6, tan 1.3e-7 rel,
//! atan 1.0e-7 abs, tanh 1.03e-7 rel, sigmoid 1.8e-7 rel, erf 7.5e-8 abs.

// `!(x >= 0.0)` is deliberate throughout: it is true for NaN, which must take the NaN path.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

const LOG2E: f32 = f32::from_bits(0x3fb8aa3b);
const LN2_HI: f32 = f32::from_bits(0x3f318000);
const LN2_LO: f32 = f32::from_bits(0xb95e8083);
/// f32(ln 2).
const LN2: f32 = f32::from_bits(0x3f317218);
const MAGIC: f32 = f32::from_bits(0x4b400000);
const EXP_HI: f32 = 89.0;
const EXP_LO: f32 = -104.0;
const TWO23: f32 = 8388608.0;
const PIO2_HI: f32 = f32::from_bits(0x3fc90fdb);
const PIO2_LO: f32 = f32::from_bits(0xb33bbd2e);
const PIO4_HI: f32 = f32::from_bits(0x3f490fdb);
const PIO4_LO: f32 = f32::from_bits(0xb2bbbd2e);
const TAN3PI8: f32 = f32::from_bits(0x401a827a);
const TANPI8: f32 = f32::from_bits(0x3ed413cd);
const TANH_CUT: f32 = 0.71875;
const TANH_EXP_MAX: f32 = 20.0;
const ERF_CUT: f32 = 1.0;
const ERFC_CUT: f32 = 0.75;
const ERFC_YMAX: f32 = 10.5;
const GELU_XMAX: f32 = f32::from_bits(0x416ccccd);
const FRAC_1_SQRT2: f32 = f32::from_bits(0x3f3504f3);
const GT_K0: f32 = f32::from_bits(0x3fcc422a);
const GT_K1: f32 = f32::from_bits(0x3d922279);

const TWO_OVER_PI: f32 = f32::from_bits(0x3f22f983);
/// pi/2 = C1 + C2 + C3 + C4 + 8.3e-20, each part the remainder truncated (so all are
/// positive and a -0 stays -0): C1 to 2^-11, C2 to 2^-23, C3 to 2^-34 (12, 12 and 11
/// significant bits, so k * Ci is exact for |k| < 2^12), C4 the remainder rounded to f32.
const PIO2_C1: f32 = f32::from_bits(0x3fc90000);
const PIO2_C2: f32 = f32::from_bits(0x39fda000);
const PIO2_C3: f32 = f32::from_bits(0x33a22000);
const PIO2_C4: f32 = f32::from_bits(0x2c34611a);
/// The f32 reduction's range: k = round(x * 2/pi) stays under 2^12 (up to 6433).
const SHORT_RANGE: f32 = 6000.0;

const TWO_OVER_PI_D: f64 = std::f64::consts::FRAC_2_PI;
const MAGIC_D: f64 = 6755399441055744.0;
const PIO2_HI_D: f64 = f64::from_bits(0x3ff921fb54000000);
const PIO2_LO_D: f64 = 9.920935796805404e-10;

const EXP_P: [f32; 5] = bits([0x3efffffc, 0x3e2aaa47, 0x3d2aadcc, 0x3c091ded, 0x3ab428b4]);
const LOG_P: [f32; 3] = bits([0x3f2aaabd, 0x3eccaf6c, 0x3e98f029]);
const SIN_P: [f32; 3] = bits([0xbe2aaaa0, 0x3c0882df, 0xb94c6e8b]);
const COS_P: [f32; 4] = bits([0xbf000000, 0x3d2aaaa5, 0xbab60617, 0x37ccf568]);
const TAN_P: [f32; 7] = bits([0x3eaaaab0, 0x3e0886d4, 0x3d5d6b97, 0x3cae6fde, 0x3c310f79, 0x3903591c, 0x3b8ed6eb]);
const ATAN_P: [f32; 5] = bits([0xbeaaaaa4, 0x3e4cc892, 0xbe11d6f7, 0x3dd8c6e5, 0xbd781e28]);
const TANH_P: [f32; 5] = bits([0xbeaaaa6a, 0x3e087abc, 0xbd5b18b3, 0x3ca324c3, 0xbba33ec3]);
const ERF_P: [f32; 7] = bits([0x3e0375d4, 0xbec0939f, 0x3de71678, 0xbcdbfc2c, 0x3ba9ffc9, 0xba51e4ae, 0x38a476f7]);
const ERFC_G: [f32; 10] = bits([
    0x3f106edb, 0x3f10673d, 0x3e91e6e0, 0xbea51b32, 0xbeb4d4b5, 0xc00765d4, 0x410af93d, 0xc14cff85, 0x4112c172,
    0xc02c3df8,
]);

const fn bits<const N: usize>(b: [u32; N]) -> [f32; N] {
    let mut out = [0f32; N];
    let mut i = 0;
    while i < N {
        out[i] = f32::from_bits(b[i]);
        i += 1;
    }
    out
}

/// How `a * b + c` is evaluated: two roundings ([`Exact`], the portable arm, the
/// arithmetic tools/vmath/check.py simulates) or one ([`Fused`], the AVX2/AVX-512 arms,
/// where `mul_add` is a single vfmadd instruction). The fused arms differ from the
/// portable one in the last bits; each arm is checked against the f64 oracle separately.
pub trait Ops: Copy {
    /// Whether `fma` rounds once (the AVX2 and AVX-512 arms).
    const FUSED: bool;
    fn fma(a: f32, b: f32, c: f32) -> f32;
}

/// Separate multiply and add.
#[derive(Clone, Copy, Debug)]
pub struct Exact;

impl Ops for Exact {
    const FUSED: bool = false;
    #[inline(always)]
    fn fma(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// Fused multiply-add. Only for code compiled with the `fma` target feature: elsewhere
/// `mul_add` is a libm call.
#[derive(Clone, Copy, Debug)]
pub struct Fused;

impl Ops for Fused {
    const FUSED: bool = true;
    #[inline(always)]
    fn fma(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

/// `c[0] + x*(c[1] + x*(... + x*c[N-1]))`, innermost first.
#[inline(always)]
fn horner<O: Ops, const N: usize>(x: f32, c: &[f32; N]) -> f32 {
    let mut p = c[N - 1];
    let mut i = N - 1;
    while i > 0 {
        i -= 1;
        p = O::fma(p, x, c[i]);
    }
    p
}

#[inline(always)]
fn sel(m: bool, a: f32, b: f32) -> f32 {
    if m { a } else { b }
}

#[inline(always)]
fn ibits(x: f32) -> i32 {
    x.to_bits() as i32
}

#[inline(always)]
fn from_ibits(i: i32) -> f32 {
    f32::from_bits(i as u32)
}

#[inline(always)]
fn fabs(x: f32) -> f32 {
    from_ibits(ibits(x) & 0x7fffffff)
}

#[inline(always)]
fn sign(x: f32) -> i32 {
    ibits(x) & (0x80000000u32 as i32)
}

#[inline(always)]
fn or_sign(v: f32, s: i32) -> f32 {
    from_ibits(ibits(v) | s)
}

/// 2^k (k in [-151, 128]) applied to `p` in two steps, so each factor stays normal and a
/// subnormal result rounds once.
#[inline(always)]
fn scale2(p: f32, ki: i32) -> f32 {
    let k1 = ki >> 1;
    let k2 = ki.wrapping_sub(k1);
    let s1 = from_ibits(k1.wrapping_add(127) << 23);
    let s2 = from_ibits(k2.wrapping_add(127) << 23);
    (p * s1) * s2
}

#[inline(always)]
fn exp_poly<O: Ops>(r: f32) -> f32 {
    let p = horner::<O, _>(r, &EXP_P);
    let p = O::fma(p, r, 1.0);
    O::fma(p, r, 1.0)
}

/// e^x, relative error <= 9.8e-8; overflow to +inf above 88.7228, subnormal results
/// rounded once, 0 below -103.97, NaN propagates.
#[inline(always)]
pub fn exp_with<O: Ops>(x: f32) -> f32 {
    let x = sel(x > EXP_HI, EXP_HI, x);
    let x = sel(x < EXP_LO, EXP_LO, x);
    let t = x * LOG2E + MAGIC;
    let kf = t - MAGIC;
    let ki = ibits(t).wrapping_sub(ibits(MAGIC));
    let r = (x - kf * LN2_HI) - kf * LN2_LO;
    scale2(exp_poly::<O>(r), ki)
}

/// e^(hi + lo) for `hi` with no bits below 2^-17 and small `lo <= 0` (erfc, gelu).
#[inline(always)]
fn exp_hl<O: Ops>(hi: f32, lo: f32) -> f32 {
    let hi = sel(hi < EXP_LO, EXP_LO, hi);
    let t = (hi + lo) * LOG2E + MAGIC;
    let kf = t - MAGIC;
    let ki = ibits(t).wrapping_sub(ibits(MAGIC));
    let r = (hi - kf * LN2_HI) + (lo - kf * LN2_LO);
    scale2(exp_poly::<O>(r), ki)
}

/// The log core: ln(xs) + corr for a positive normal `xs` (with exponent adjust `eadj`).
#[inline(always)]
fn log_core<O: Ops>(xs: f32, eadj: i32, corr: f32) -> f32 {
    let ix = ibits(xs).wrapping_add(0x004afb0d);
    let e = (ix >> 23) - 127 + eadj;
    let m = from_ibits((ix & 0x007fffff).wrapping_add(0x3f3504f3));
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let r = z * horner::<O, _>(z, &LOG_P);
    let hfsq = (0.5 * f) * f;
    let ef = e as f32;
    let inner = f - (hfsq - (s * (hfsq + r) + (ef * LN2_LO + corr)));
    ef * LN2_HI + inner
}

/// Natural log, relative error <= 8.2e-8 including subnormal inputs; log(0) = -inf,
/// log(x < 0) = NaN.
#[inline(always)]
pub fn log_with<O: Ops>(x: f32) -> f32 {
    let sub = x < f32::MIN_POSITIVE;
    let xs = sel(sub, x * TWO23, x);
    let eadj = if sub { -23 } else { 0 };
    let r = log_core::<O>(xs, eadj, 0.0);
    let r = sel(x == f32::INFINITY, f32::INFINITY, r);
    let r = sel(x == 0.0, f32::NEG_INFINITY, r);
    sel(!(x >= 0.0), f32::NAN, r)
}

/// ln(1 + x), relative error <= 8.2e-8, exact for tiny x (sign of zero kept).
#[inline(always)]
pub fn ln_1p_with<O: Ops>(x: f32) -> f32 {
    let u = 1.0 + x;
    let err = sel(x > 1.0, 1.0 - (u - x), x - (u - 1.0));
    let corr = err / u;
    let r = log_core::<O>(u, 0, corr);
    let r = sel(x == f32::INFINITY, f32::INFINITY, r);
    let r = sel(x == -1.0, f32::NEG_INFINITY, r);
    let r = sel(!(x >= -1.0), f32::NAN, r);
    sel(x == 0.0, x, r)
}

/// x - k*pi/2 in f64, as f32 high part `rh` and NEGATED low part `rn`, and k: for every
/// x (accurate to 2^-50 for |x| < 2.6e7), at twice the cost of [`reduce_short`].
#[inline(always)]
fn reduce_wide(x: f32) -> (f32, f32, i32) {
    let xd = x as f64;
    let t = xd * TWO_OVER_PI_D + MAGIC_D;
    let kd = t - MAGIC_D;
    let q = (t.to_bits() as u32) as i32;
    let rd = (xd - kd * PIO2_HI_D) - kd * PIO2_LO_D;
    let rh = rd as f32;
    let rn = ((rh as f64) - rd) as f32;
    (rh, rn, q)
}

/// [`reduce_wide`]'s result in f32 for |x| <= SHORT_RANGE (Cody-Waite in four parts,
/// tools/vmath/algorithms.md): `x - k*(C1 + C2)` is exact (Sterbenz, then a multiple of
/// 2^-24 under 1), the subtraction of `k*C3` keeps its rounding error (Fast2Sum: either
/// |a| >= |b| or the difference is exact), and `k*C4` goes into the low part. The pair is
/// within 8e-16 of x - k*pi/2, and within 6.5e-9 of it relatively where it is smallest
/// (tools/vmath/trig_short_range.py), which tan's relative bound needs. The fused arms
/// use FMAs where the products are exact (same values, fewer instructions); only k's
/// rounding at a tie and rn's last bit can differ from the portable arm.
#[inline(always)]
fn reduce_short<O: Ops>(x: f32) -> (f32, f32, i32) {
    let t = O::fma(x, TWO_OVER_PI, MAGIC);
    let k = t - MAGIC;
    let q = ibits(t).wrapping_sub(ibits(MAGIC));
    let a = O::fma(-k, PIO2_C2, O::fma(-k, PIO2_C1, x));
    let b = k * PIO2_C3;
    let rh = a - b;
    let rn = O::fma(k, PIO2_C4, -((a - rh) - b));
    (rh, rn, q)
}

/// sin (`offset` 0) or cos (`offset` 1) from a reduced argument.
#[inline(always)]
fn sin_cos_reduced<O: Ops>((rh, rn, q): (f32, f32, i32), offset: i32) -> f32 {
    let q = q.wrapping_add(offset);
    let z = rh * rh;
    let s = rh - (rn - rh * (z * horner::<O, _>(z, &SIN_P)));
    let c = 1.0 + (z * horner::<O, _>(z, &COS_P) + rh * rn);
    let v = sel((q & 1) != 0, c, s);
    from_ibits(ibits(v) ^ ((q & 2) << 30))
}

/// tan from a reduced argument.
#[inline(always)]
fn tan_reduced<O: Ops>((rh, rn, q): (f32, f32, i32)) -> f32 {
    let z = rh * rh;
    let y = rh * (z * horner::<O, _>(z, &TAN_P));
    let t = rh - (O::fma(rn, z, rn) - y);
    sel((q & 1) != 0, -1.0 / t, t)
}

/// sin x through the f32 reduction, and whether that was valid for x (|x| <= SHORT_RANGE).
#[inline(always)]
fn sin_short<O: Ops>(x: f32) -> (f32, bool) {
    (sin_cos_reduced::<O>(reduce_short::<O>(x), 0), fabs(x) <= SHORT_RANGE)
}

/// cos x through the f32 reduction, and whether that was valid for x.
#[inline(always)]
fn cos_short<O: Ops>(x: f32) -> (f32, bool) {
    (sin_cos_reduced::<O>(reduce_short::<O>(x), 1), fabs(x) <= SHORT_RANGE)
}

/// tan x through the f32 reduction, and whether that was valid for x (|x| <= SHORT_RANGE).
#[inline(always)]
fn tan_short<O: Ops>(x: f32) -> (f32, bool) {
    (tan_reduced::<O>(reduce_short::<O>(x)), fabs(x) <= SHORT_RANGE)
}

/// sin x, absolute error <= 8.3e-8 for |x| <= 1e6.
#[inline(always)]
pub fn sin_with<O: Ops>(x: f32) -> f32 {
    let (short, ok) = sin_short::<O>(x);
    sel(ok, short, sin_cos_reduced::<O>(reduce_wide(x), 0))
}

/// cos x, absolute error <= 8.2e-8 for |x| <= 1e6.
#[inline(always)]
pub fn cos_with<O: Ops>(x: f32) -> f32 {
    let (short, ok) = cos_short::<O>(x);
    sel(ok, short, sin_cos_reduced::<O>(reduce_wide(x), 1))
}

/// tan x, relative error <= 1.3e-7 for |x| <= 1e6, finite near the poles.
#[inline(always)]
pub fn tan_with<O: Ops>(x: f32) -> f32 {
    let (short, ok) = tan_short::<O>(x);
    sel(ok, short, tan_reduced::<O>(reduce_wide(x)))
}

/// atan x, absolute error <= 1.0e-7 over all f32; atan(+-inf) = +-pi/2.
#[inline(always)]
pub fn atan_with<O: Ops>(x: f32) -> f32 {
    let sg = sign(x);
    let a = fabs(x);
    let big = a > TAN3PI8;
    let mid = a > TANPI8;
    let num = sel(big, -1.0, sel(mid, a - 1.0, a));
    let den = sel(big, a, sel(mid, a + 1.0, 1.0));
    let t = num / den;
    let oh = sel(big, PIO2_HI, sel(mid, PIO4_HI, 0.0));
    let ol = sel(big, PIO2_LO, sel(mid, PIO4_LO, 0.0));
    let z = t * t;
    let r = oh + (t + (t * (z * horner::<O, _>(z, &ATAN_P)) + ol));
    or_sign(r, sg)
}

/// tanh's e^y for y = 2|x| (>= 0, or NaN), as `(p, k)` with e^y = p * 2^k:
/// [`exp_with`]'s operations without what y never needs (the low clamp, the two-step
/// scaling by 2^k). y is clamped at 20, past which tanh is exactly 1 either way (k <=
/// 29). The portable arm's `p` and `k` are exp_with's. The fused arms reduce with one FMA
/// by f32(ln 2) instead of two: its error (1.9e-9 per unit of k) moves e^y by at most
/// k * 1.9e-9 relative, which tanh damps below 3e-9; the two-part reduction is there for
/// exp's own 1-ulp bound.
#[inline(always)]
fn exp_tanh<O: Ops>(y: f32) -> (f32, i32) {
    let y = sel(y > TANH_EXP_MAX, TANH_EXP_MAX, y);
    let t = O::fma(y, LOG2E, MAGIC);
    let kf = t - MAGIC;
    let ki = ibits(t).wrapping_sub(ibits(MAGIC));
    let r = if O::FUSED { O::fma(-kf, LN2, y) } else { O::fma(-kf, LN2_LO, O::fma(-kf, LN2_HI, y)) };
    (exp_poly::<O>(r), ki)
}

/// tanh x, relative error <= 1.03e-7 (every f32, every arm); exactly +-1 for |x| >= 9.010914.
///
/// Past the cut, tanh = 1 - 2 / (p * 2^k + 1), computed as 1 - 2^(1-k) / (p + 2^-k):
/// scaling by a power of two commutes with rounding (no result here is subnormal), so the
/// bits are the same, and the multiply by 2^k leaves the FMA pipes (the powers of two are
/// integer operations). With the fused arms' one-FMA reduction, their multiplies and FMAs
/// went from 17 to 15 a vector (AVX-512: 2375-2630 -> 2578-2869 Melem/s, AMD EPYC).
#[inline(always)]
pub fn tanh_with<O: Ops>(x: f32) -> f32 {
    let sg = sign(x);
    let a = fabs(x);
    let z = a * a;
    let ps = a + a * (z * horner::<O, _>(z, &TANH_P));
    let (p, k) = exp_tanh::<O>(a + a);
    let two_to_minus_k = from_ibits(127i32.wrapping_sub(k) << 23);
    let two_to_one_minus_k = from_ibits(128i32.wrapping_sub(k) << 23);
    let pb = 1.0 - two_to_one_minus_k / (p + two_to_minus_k);
    or_sign(sel(a < TANH_CUT, ps, pb), sg)
}

/// 1 / (1 + e^-x), relative error <= 1.8e-7, no overflow for any x.
#[inline(always)]
pub fn sigmoid_with<O: Ops>(x: f32) -> f32 {
    let e = exp_with::<O>(-fabs(x));
    let n = sel(x < 0.0, e, 1.0);
    n / (1.0 + e)
}

#[inline(always)]
fn erf_small<O: Ops>(a: f32) -> f32 {
    a + a * horner::<O, _>(a * a, &ERF_P)
}

/// -(v^2) as hi + lo with `hi` exact (12-bit split).
#[inline(always)]
fn neg_sq_split(v: f32) -> (f32, f32) {
    let vh = from_ibits(ibits(v) & (0xfffff000u32 as i32));
    let vl = v - vh;
    (-(vh * vh), -(vl * (v + vh)))
}

#[inline(always)]
fn erfc_big<O: Ops>(a: f32, hi: f32, lo: f32) -> f32 {
    let t = 1.0 / (1.0 + a);
    exp_hl::<O>(hi, lo) * (t * horner::<O, _>(t, &ERFC_G))
}

/// erf x, absolute error <= 7.5e-8 over all f32, relative <= 9e-8 for |x| < 1.
#[inline(always)]
pub fn erf_with<O: Ops>(x: f32) -> f32 {
    let sg = sign(x);
    let a = fabs(x);
    let ps = erf_small::<O>(a);
    let ac = sel(a > ERFC_YMAX, ERFC_YMAX, a);
    let (hi, lo) = neg_sq_split(ac);
    let pb = 1.0 - erfc_big::<O>(ac, hi, lo);
    or_sign(sel(a < ERF_CUT, ps, pb), sg)
}

/// erfc x, relative error <= 3.2e-7 for |x| <= 9.1.
#[inline(always)]
pub fn erfc_with<O: Ops>(x: f32) -> f32 {
    let a = fabs(x);
    let neg = x < 0.0;
    let ps = erf_small::<O>(a);
    let ac = sel(a > ERFC_YMAX, ERFC_YMAX, a);
    let (hi, lo) = neg_sq_split(ac);
    let e = erfc_big::<O>(ac, hi, lo);
    let small = sel(neg, 1.0 + ps, 1.0 - ps);
    let big = sel(neg, 2.0 - e, e);
    sel(a < ERFC_CUT, small, big)
}

/// GELU, erf form: x * Phi(x); relative error <= 3.8e-7 wherever Phi(x) is normal.
#[inline(always)]
pub fn gelu_with<O: Ops>(x: f32) -> f32 {
    let neg = x < 0.0;
    let ax = fabs(x);
    let a = ax * FRAC_1_SQRT2;
    let ps = erf_small::<O>(a);
    let xc = sel(ax > GELU_XMAX, GELU_XMAX, ax);
    let (hi, lo) = neg_sq_split(xc);
    let (hi, lo) = (hi * 0.5, lo * 0.5);
    let ac = sel(a > ERFC_YMAX, ERFC_YMAX, a);
    let e = erfc_big::<O>(ac, hi, lo);
    let (hps, he) = (0.5 * ps, 0.5 * e);
    let small = sel(neg, 0.5 - hps, 0.5 + hps);
    let big = sel(neg, he, 1.0 - he);
    let phi = sel(a < ERFC_CUT, small, big);
    sel(x == f32::NEG_INFINITY, -0.0, x * phi)
}

/// GELU, tanh form, as x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)).
#[inline(always)]
pub fn gelu_tanh_with<O: Ops>(x: f32) -> f32 {
    sel(x == f32::NEG_INFINITY, -0.0, x * sigmoid_with::<O>(x * (GT_K0 + GT_K1 * (x * x))))
}

/// x * sigmoid(x); silu(-inf) = -0.
#[inline(always)]
pub fn silu_with<O: Ops>(x: f32) -> f32 {
    sel(x == f32::NEG_INFINITY, -0.0, x * sigmoid_with::<O>(x))
}

/// ln(1 + e^x) = max(x, 0) + ln_1p(e^-|x|), no overflow.
#[inline(always)]
pub fn softplus_with<O: Ops>(x: f32) -> f32 {
    sel(x > 0.0, x, 0.0) + ln_1p_with::<O>(exp_with::<O>(-fabs(x)))
}

/// x * tanh(softplus(x)); mish(-inf) = -0.
#[inline(always)]
pub fn mish_with<O: Ops>(x: f32) -> f32 {
    sel(x == f32::NEG_INFINITY, -0.0, x * tanh_with::<O>(softplus_with::<O>(x)))
}

/// ln(sigmoid(x)) = -softplus(-x).
#[inline(always)]
pub fn log_sigmoid_with<O: Ops>(x: f32) -> f32 {
    -softplus_with::<O>(-x)
}

/// [`exp_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    exp_with::<Exact>(x)
}

/// [`log_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn log(x: f32) -> f32 {
    log_with::<Exact>(x)
}

/// [`ln_1p_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn ln_1p(x: f32) -> f32 {
    ln_1p_with::<Exact>(x)
}

/// [`sin_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn sin(x: f32) -> f32 {
    sin_with::<Exact>(x)
}

/// [`cos_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn cos(x: f32) -> f32 {
    cos_with::<Exact>(x)
}

/// [`tan_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn tan(x: f32) -> f32 {
    tan_with::<Exact>(x)
}

/// [`atan_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn atan(x: f32) -> f32 {
    atan_with::<Exact>(x)
}

/// [`tanh_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    tanh_with::<Exact>(x)
}

/// [`sigmoid_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    sigmoid_with::<Exact>(x)
}

/// [`erf_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    erf_with::<Exact>(x)
}

/// [`erfc_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn erfc(x: f32) -> f32 {
    erfc_with::<Exact>(x)
}

/// [`gelu_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    gelu_with::<Exact>(x)
}

/// [`gelu_tanh_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    gelu_tanh_with::<Exact>(x)
}

/// [`silu_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    silu_with::<Exact>(x)
}

/// [`softplus_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn softplus(x: f32) -> f32 {
    softplus_with::<Exact>(x)
}

/// [`mish_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn mish(x: f32) -> f32 {
    mish_with::<Exact>(x)
}

/// [`log_sigmoid_with`] with separate multiply and add (the portable arm's arithmetic).
#[inline(always)]
pub fn log_sigmoid(x: f32) -> f32 {
    log_sigmoid_with::<Exact>(x)
}

/// Values per chunk of a split kernel ([`map_split`]): a leaf block of the pairwise sum.
/// Each chunk costs ~60 instructions of loop set-up (constants broadcast again, the
/// check); at 64 values that was a quarter of the work. 64 -> 512: tan 1923-2312 ->
/// 2411-2650 Melem/s, sin 2170-2608 -> 2651-2863 (AVX-512, AMD EPYC, interleaved runs).
/// A chunk holding one value past the f32 reduction's range pays for both paths.
const SPLIT_CHUNK: usize = rlx_ir::ops::reduce::SUM_BLOCK;

/// `out[i] = with(x[i])` for a function whose `with` selects, per value, between a fast
/// path and a slow one (sin, cos, tan: the f32 or the f64 argument reduction): each
/// chunk takes `short`'s values when every value in it had the fast path valid, else
/// `with`'s. A value's bits never depend on its neighbours; a chunk pays for the slow
/// path only when one of its values needs it.
#[inline(always)]
fn map_split(x: &[f32], out: &mut [f32], short: impl Fn(f32) -> (f32, bool), with: impl Fn(f32) -> f32) {
    for (oc, xc) in out.chunks_mut(SPLIT_CHUNK).zip(x.chunks(SPLIT_CHUNK)) {
        let mut all_short = true;
        for (o, &v) in oc.iter_mut().zip(xc) {
            let (r, ok) = short(v);
            *o = r;
            all_short &= ok;
        }
        if !all_short {
            for (o, &v) in oc.iter_mut().zip(xc) {
                *o = with(v);
            }
        }
    }
}

/// The body of a slice (`map`), in-place (`inplace`) or leaf-sum (`sum`) kernel: a plain
/// loop over `$with` (short `_`), or [`map_split`] with the function's short path.
macro_rules! map_values {
    (map, _, $with:ident, $O:ident, $x:ident, $out:ident) => {
        for (o, &v) in $out.iter_mut().zip($x) {
            *o = $crate::vmath::$with::<$O>(v);
        }
    };
    (map, $short:ident, $with:ident, $O:ident, $x:ident, $out:ident) => {
        $crate::vmath::map_split($x, $out, $crate::vmath::$short::<$O>, $crate::vmath::$with::<$O>)
    };
    (inplace, _, $with:ident, $O:ident, $values:ident) => {
        for v in $values.iter_mut() {
            *v = $crate::vmath::$with::<$O>(*v);
        }
    };
    (inplace, $short:ident, $with:ident, $O:ident, $values:ident) => {
        for chunk in $values.chunks_mut($crate::vmath::SPLIT_CHUNK) {
            let mut copy = [0f32; $crate::vmath::SPLIT_CHUNK];
            let x = &mut copy[..chunk.len()];
            x.copy_from_slice(chunk);
            $crate::vmath::map_split(x, chunk, $crate::vmath::$short::<$O>, $crate::vmath::$with::<$O>);
        }
    };
    (sum, _, $with:ident, $O:ident, $x:ident) => {
        $crate::kernels::rows::sum_map($x, $crate::vmath::$with::<$O>)
    };
    // The values first, then the same lane order (`sum_map` of the identity).
    (sum, $short:ident, $with:ident, $O:ident, $x:ident) => {{
        let mut values = [0f32; rlx_ir::ops::reduce::SUM_BLOCK];
        let values = &mut values[..$x.len()];
        $crate::vmath::map_split($x, values, $crate::vmath::$short::<$O>, $crate::vmath::$with::<$O>);
        $crate::kernels::rows::sum_map(values, |v| v)
    }};
}

/// Defines the multiversioned slice kernels `$slice(arm, x, out)`,
/// `$inplace(arm, values)` and `$sum(arm, x)` for each scalar function. `$fast`, when
/// given, is the AVX-512 arm's hand-scheduled map, which all three then run (ln's, ln_1p's,
/// tanh's and gelu's are table-driven, with bits of their own: see `log_avx512`,
/// `tanh_avx512`, `gelu_avx512`);
/// `$short`, when not `_`, is the function's fast path for [`map_split`].
macro_rules! slice_kernels {
    ($(($name:literal, $f:ident, $with:ident, $slice:ident, $inplace:ident, $sum:ident, $fast:expr, $short:tt)),* $(,)?) => {
        $(
            #[doc(hidden)]
            pub mod $slice {
                crate::multiversion_ops! {
                    /// The multiversioned loop over the scalar function.
                    pub fn generic<O>(x: &[f32], out: &mut [f32]) {
                        map_values!(map, $short, $with, O, x, out)
                    }
                }
                crate::multiversion_ops! {
                    /// The multiversioned in-place loop over the scalar function.
                    pub fn inplace<O>(values: &mut [f32]) {
                        map_values!(inplace, $short, $with, O, values)
                    }
                }
                crate::multiversion_ops! {
                    /// The leaf sum over the scalar function, the values added as they are
                    /// made, never stored.
                    pub fn sum<O>(x: &[f32]) -> f32 {
                        map_values!(sum, $short, $with, O, x)
                    }
                }
            }
            #[doc = concat!("`out[i] = ", $name, "(x[i])`.")]
            pub fn $slice(arm: crate::arch::Arm, x: &[f32], out: &mut [f32]) {
                if let Some(map) = avx512_map($fast, arm) {
                    let n = x.len().min(out.len());
                    // SAFETY: `avx512_map` checked the CPU; both slices hold n values.
                    return unsafe { map(x.as_ptr(), out.as_mut_ptr(), n) };
                }
                $slice::generic(arm, x, out)
            }
            #[doc = concat!("`v[i] = ", $name, "(v[i])`.")]
            pub fn $inplace(arm: crate::arch::Arm, values: &mut [f32]) {
                if let Some(map) = avx512_map($fast, arm) {
                    let p = values.as_mut_ptr();
                    // SAFETY: `avx512_map` checked the CPU; the map reads each lane before writing it.
                    return unsafe { map(p, p, values.len()) };
                }
                $slice::inplace(arm, values)
            }
            #[doc = concat!("The sum of `", $name, "(x[i])` in the lane order of one leaf block of")]
            /// the pairwise sum (`x.len() <= SUM_BLOCK`): the bits of `$slice` followed
            /// by `reduce`'s sum.
            pub fn $sum(arm: crate::arch::Arm, x: &[f32]) -> f32 {
                #[cfg(target_arch = "x86_64")]
                if let Some(map) = avx512_map($fast, arm) {
                    // SAFETY: `avx512_map` checked the CPU.
                    return unsafe { avx512::leaf_sum(map, x) };
                }
                $slice::sum(arm, x)
            }
        )*

        /// Every slice kernel, by name (benchmarks and tests iterate this), with its
        /// portable scalar, its leaf-sum kernel and its in-place kernel.
        pub const SLICE_FUNCTIONS: &[(&str, SliceFn, fn(f32) -> f32, SumFn, InplaceFn)] =
            &[$(($name, $slice, $f, $sum, $inplace)),*];
    };
}

#[cfg(target_arch = "x86_64")]
#[macro_use]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod gelu_avx512;
#[cfg(target_arch = "x86_64")]
mod log_avx512;
#[cfg(target_arch = "x86_64")]
mod tanh_avx512;

/// A function's hand-scheduled AVX-512 kernel, where the target has one.
#[cfg(target_arch = "x86_64")]
type Avx512Map = Option<avx512::Map>;
#[cfg(not(target_arch = "x86_64"))]
type Avx512Map = Option<unsafe fn(*const f32, *mut f32, usize)>;

/// ln's, ln_1p's, tanh's and gelu's AVX-512 kernels, in that order.
#[cfg(target_arch = "x86_64")]
const AVX512_MAPS: [Avx512Map; 4] = [
    Some(log_avx512::log_map_avx512),
    Some(log_avx512::ln_1p_map_avx512),
    Some(tanh_avx512::tanh_map_avx512),
    Some(gelu_avx512::gelu_map_avx512),
];
#[cfg(not(target_arch = "x86_64"))]
const AVX512_MAPS: [Avx512Map; 4] = [None, None, None, None];

/// `map` when `arm` runs as AVX-512 on this CPU: the kernel's features are there.
#[inline(always)]
fn avx512_map(map: Avx512Map, arm: crate::arch::Arm) -> Avx512Map {
    map.filter(|_| arm.min(crate::arch::Arm::best()) == crate::arch::Arm::Avx512)
}

/// A multiversioned slice kernel: `out[i] = f(x[i])` on the given arm.
pub type SliceFn = fn(crate::arch::Arm, &[f32], &mut [f32]);

/// A multiversioned in-place kernel: `v[i] = f(v[i])` on the given arm.
pub type InplaceFn = fn(crate::arch::Arm, &mut [f32]);

/// A multiversioned leaf sum: the pairwise sum of `f(x[i])` over at most `SUM_BLOCK` values.
pub type SumFn = fn(crate::arch::Arm, &[f32]) -> f32;

slice_kernels![
    ("exp", exp, exp_with, exp_slice, exp_inplace, exp_sum, None, _),
    ("log", log, log_with, log_slice, log_inplace, log_sum, AVX512_MAPS[0], _),
    ("ln_1p", ln_1p, ln_1p_with, ln_1p_slice, ln_1p_inplace, ln_1p_sum, AVX512_MAPS[1], _),
    ("sin", sin, sin_with, sin_slice, sin_inplace, sin_sum, None, sin_short),
    ("cos", cos, cos_with, cos_slice, cos_inplace, cos_sum, None, cos_short),
    ("tan", tan, tan_with, tan_slice, tan_inplace, tan_sum, None, tan_short),
    ("atan", atan, atan_with, atan_slice, atan_inplace, atan_sum, None, _),
    ("tanh", tanh, tanh_with, tanh_slice, tanh_inplace, tanh_sum, AVX512_MAPS[2], _),
    ("sigmoid", sigmoid, sigmoid_with, sigmoid_slice, sigmoid_inplace, sigmoid_sum, None, _),
    ("erf", erf, erf_with, erf_slice, erf_inplace, erf_sum, None, _),
    ("erfc", erfc, erfc_with, erfc_slice, erfc_inplace, erfc_sum, None, _),
    ("gelu", gelu, gelu_with, gelu_slice, gelu_inplace, gelu_sum, AVX512_MAPS[3], _),
    ("gelu_tanh", gelu_tanh, gelu_tanh_with, gelu_tanh_slice, gelu_tanh_inplace, gelu_tanh_sum, None, _),
    ("silu", silu, silu_with, silu_slice, silu_inplace, silu_sum, None, _),
    ("softplus", softplus, softplus_with, softplus_slice, softplus_inplace, softplus_sum, None, _),
    ("mish", mish, mish_with, mish_slice, mish_inplace, mish_sum, None, _),
    ("log_sigmoid", log_sigmoid, log_sigmoid_with, log_sigmoid_slice, log_sigmoid_inplace, log_sigmoid_sum, None, _),
];
