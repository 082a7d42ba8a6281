//! Independent f64 references for RLX's tests.
//!
//! Nothing here calls RLX: the 16-bit formats are decoded from their bit layout and
//! rounding is a nearest-value search over every pattern; erf/erfc are series and
//! continued fractions checked against mpmath; the GGML block formats (`quant`) are
//! decoded field by field in f64. Test suites compare RLX's results with
//! these, never with RLX's own converters or kernels.

use std::sync::OnceLock;

pub mod quant;

/// A 16-bit float format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Half {
    /// IEEE binary16: 5 exponent bits, 10 mantissa bits.
    F16,
    /// bfloat16: 8 exponent bits, 7 mantissa bits.
    BF16,
}

/// SplitMix64: deterministic, dependency-free.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }
    /// Uniform integer in [lo, hi].
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (hi as i128 - lo as i128 + 1) as u128;
        (lo as i128 + (self.next_u64() as u128 % span) as i128) as i64
    }
}

/// The sorted finite values of a 16-bit float format, decoded bit pattern by pattern.
fn table(format: Half) -> &'static [(f64, u16)] {
    static F16: OnceLock<Vec<(f64, u16)>> = OnceLock::new();
    static BF16: OnceLock<Vec<(f64, u16)>> = OnceLock::new();
    let build = |decode: fn(u16) -> f64| {
        let mut v: Vec<(f64, u16)> = (0..=u16::MAX).map(|b| (decode(b), b)).filter(|(x, _)| x.is_finite()).collect();
        v.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        v.dedup_by(|a, b| a.0 == b.0); // +0 / -0
        v
    };
    match format {
        Half::F16 => F16.get_or_init(|| build(|b| decode_small_float(b, 5, 10))),
        Half::BF16 => BF16.get_or_init(|| build(|b| decode_small_float(b, 8, 7))),
    }
}

/// Value of a 16-bit IEEE-style bit pattern with the given field widths.
pub fn decode_small_float(bits: u16, exp_bits: u32, mant_bits: u32) -> f64 {
    let sign = if bits >> 15 == 1 { -1.0 } else { 1.0 };
    let e = ((bits >> mant_bits) & ((1 << exp_bits) - 1)) as i32;
    let m = (bits & ((1 << mant_bits) - 1)) as f64;
    let bias = (1 << (exp_bits - 1)) - 1;
    let scale = 2f64.powi(mant_bits as i32);
    if e == (1 << exp_bits) - 1 {
        return if m == 0.0 { sign * f64::INFINITY } else { f64::NAN };
    }
    if e == 0 {
        return sign * m / scale * 2f64.powi(1 - bias);
    }
    sign * (1.0 + m / scale) * 2f64.powi(e - bias)
}

/// `x` rounded in a 16-bit `format`, by search over its values.
pub fn round_half(x: f64, format: Half) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let t = table(format);
    let max = t[t.len() - 1].0;
    // Overflow threshold: max + half an ulp of max rounds to infinity.
    let limit = max + (max - t[t.len() - 2].0) / 2.0;
    if x.abs() >= limit {
        return if x > 0.0 { f64::INFINITY } else { f64::NEG_INFINITY };
    }
    let i = t.partition_point(|&(v, _)| v < x);
    let best = [i.checked_sub(1), Some(i)]
        .into_iter()
        .flatten()
        .filter_map(|j| t.get(j).copied())
        .min_by(|a, b| {
            let (da, db) = ((a.0 - x).abs(), (b.0 - x).abs());
            // Equal distance: the even bit pattern wins.
            da.total_cmp(&db).then((a.1 & 1).cmp(&(b.1 & 1)))
        })
        .map_or(x, |(v, _)| v);
    if best == 0.0 && x.is_sign_negative() { -0.0 } else { best }
}

/// erf in f64, independent of libm: Taylor series for |x| <= 1.5, 1 - erfc beyond.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.abs() > 1.5 {
        return x.signum() * (1.0 - erfc(x.abs()));
    }
    let mut term = x;
    let mut sum = x;
    for n in 1..400 {
        term *= -x * x / n as f64;
        let add = term / (2 * n + 1) as f64;
        sum += add;
        if add.abs() < 1e-18 * sum.abs() {
            break;
        }
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

/// erfc in f64 with full relative accuracy in the tail: Laplace's continued fraction
/// for x >= 1 (1000 terms; against mpmath < 4e-16 relative there), 1 - erf below.
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < 1.0 {
        return if x <= -1.0 { 2.0 - erfc(-x) } else { 1.0 - erf(x) };
    }
    if x > 27.0 {
        return 0.0;
    }
    // erfc(a) = exp(-a^2)/sqrt(pi) / (a + (1/2)/(a + 1/(a + (3/2)/(a + ...))))
    let mut f = x;
    for k in (1..1000).rev() {
        f = x + (k as f64 / 2.0) / f;
    }
    (-x * x).exp() / std::f64::consts::PI.sqrt() / f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::excessive_precision)] // mpmath's digits, kept as printed
    fn erf_and_erfc_match_mpmath() {
        // (x, erfc(x), erf(x)) from mpmath at 30 digits.
        let table = [
            (0.1, 0.88753708398171510160, 0.11246291601828489220),
            (0.5, 0.47950012218695346232, 0.52049987781304653768),
            (1.0, 0.15729920705028513066, 0.84270079294971486934),
            (1.49, 0.035102135156795788985, 0.96489786484320421101),
            (1.51, 0.032723251871288363061, 0.96727674812871163694),
            (2.0, 0.0046777349810472658379, 0.99532226501895273416),
            (3.0, 0.000022090496998585441373, 0.99997790950300141456),
            (5.0, 1.5374597944280348502e-12, 0.99999999999846254021),
            (10.0, 2.0884875837625447570e-45, 1.0),
        ];
        for (x, c, e) in table {
            assert!((erfc(x) - c).abs() <= 4e-16 * c, "erfc({x}) = {} want {c}", erfc(x));
            assert!((erf(x) - e).abs() <= 4e-16, "erf({x})");
            assert!((erf(-x) + e).abs() <= 4e-16, "erf(-{x})");
        }
    }

    #[test]
    fn half_rounding_by_search() {
        assert_eq!(round_half(1.0 + 2f64.powi(-11), Half::F16), 1.0); // tie to even
        assert_eq!(round_half(1.0 + 3.0 * 2f64.powi(-11), Half::F16), 1.0 + 2f64.powi(-9)); // tie to even (up)
        assert_eq!(round_half(65519.9, Half::F16), 65504.0);
        assert_eq!(round_half(65520.0, Half::F16), f64::INFINITY);
        assert_eq!(round_half(2f64.powi(-25), Half::F16), 0.0);
        assert_eq!(round_half(2f64.powi(-25) * 1.01, Half::F16), 2f64.powi(-24));
        assert_eq!(round_half(1.0 + 2f64.powi(-8), Half::BF16), 1.0);
        assert_eq!(round_half(-3.0e38, Half::BF16), -(1.0 + 98.0 / 128.0) * 2f64.powi(127));
        assert_eq!(decode_small_float(0x3c00, 5, 10), 1.0);
        assert_eq!(decode_small_float(0x0001, 5, 10), 2f64.powi(-24));
        assert_eq!(decode_small_float(0x3f80, 8, 7), 1.0);
    }
}
