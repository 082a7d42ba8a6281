//! Element types and the conversions between them.
//!
//! Every conversion to a narrower float rounds to nearest, ties to even, in ONE step.
//! The `half` crate is used for storage types and exact widening; its f64 -> f16/bf16
//! path drops the low 32 mantissa bits before rounding (a double rounding: 1 + 2^-11 +
//! 2^-40 comes out as 1.0 in f16 instead of 1.0009766), so narrowing from f64 goes
//! through [`round_f64_to_small_float`] here instead.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    F64,
    F16,
    BF16,
    I8,
    I32,
    I64,
    U8,
    Bool,
}

impl DType {
    pub const ALL: [DType; 9] =
        [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I8, DType::I32, DType::I64, DType::U8, DType::Bool];

    /// Bytes per element in host (packed) form.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// The lowercase name used in messages and in the JSON graph format.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I8 => "i8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::Bool => "bool",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// f16 and bf16: stored in 2 bytes, computed in f32.
    pub const fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    pub const fn is_int(self) -> bool {
        matches!(self, DType::I8 | DType::I32 | DType::I64 | DType::U8)
    }

    pub const fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I32 | DType::I64)
    }

    /// Unit roundoff (half an ulp of 1.0) of a float type; 0 for exact types.
    pub const fn unit_roundoff(self) -> f64 {
        match self {
            DType::F64 => 1.1102230246251565e-16, // 2^-53
            DType::F32 => 5.960464477539063e-8,   // 2^-24
            DType::F16 => 4.8828125e-4,           // 2^-11
            DType::BF16 => 3.90625e-3,            // 2^-8
            _ => 0.0,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Rounds `x` to a binary float format with `exp_bits` exponent bits and `mant_bits`
/// stored mantissa bits (IEEE layout, with subnormals and infinities), to nearest with
/// ties to even, and returns the format's bit pattern. NaN stays NaN (quiet, sign kept).
pub const fn round_f64_to_small_float(x: f64, exp_bits: u32, mant_bits: u32) -> u32 {
    let bits = x.to_bits();
    let sign = ((bits >> 63) as u32) << (exp_bits + mant_bits);
    let exp_field = ((bits >> 52) & 0x7ff) as i64;
    let frac = bits & ((1u64 << 52) - 1);
    let inf = ((1u32 << exp_bits) - 1) << mant_bits;
    if exp_field == 0x7ff {
        if frac == 0 {
            return sign | inf;
        }
        // Quiet NaN carrying the top payload bits.
        let payload = (frac >> (52 - mant_bits)) as u32;
        return sign | inf | (1 << (mant_bits - 1)) | payload;
    }
    if exp_field == 0 {
        // f64 zero or subnormal: below 2^-1022, far under any small format's range.
        return sign;
    }
    let bias = (1i64 << (exp_bits - 1)) - 1;
    let emin = 1 - bias;
    let e = exp_field - 1023; // unbiased exponent of x
    let sig = frac | (1u64 << 52); // 53-bit significand, value = sig * 2^(e-52)
    // Drop this many low bits of `sig` to land on the target's quantum.
    let shift = if e >= emin { 52 - mant_bits as i64 } else { 52 - mant_bits as i64 + (emin - e) };
    let rounded = if shift >= 64 {
        0
    } else {
        let shift = shift as u32;
        let kept = sig >> shift;
        let rest = sig & ((1u64 << shift) - 1);
        let half = 1u64 << (shift - 1);
        if rest > half || (rest == half && (kept & 1) == 1) { kept + 1 } else { kept }
    };
    let magnitude = if e >= emin {
        // `rounded` carries the hidden bit; a carry out of the mantissa bumps the exponent.
        (((e - emin) as u64) << mant_bits) + rounded
    } else {
        rounded
    };
    if magnitude >= inf as u64 { sign | inf } else { sign | magnitude as u32 }
}

/// f64 -> f16, one correctly rounded step.
pub fn f64_to_f16(x: f64) -> half::f16 {
    half::f16::from_bits(round_f64_to_small_float(x, 5, 10) as u16)
}

/// f64 -> bf16, one correctly rounded step.
pub fn f64_to_bf16(x: f64) -> half::bf16 {
    half::bf16::from_bits(round_f64_to_small_float(x, 8, 7) as u16)
}

/// f16 bits -> f32, exactly, without a call or a table: a normal half's exponent rebiased
/// in the integer bits, a subnormal's mantissa converted to f32 and scaled by 2^-24 (both
/// normal numbers), infinities and NaNs patched (payload kept). Inlined into kernels that
/// decode block scales (`half`'s conversion cost ~10 ms per SmolLM2 token in the f32 GEMV,
/// two scales per 32 weights). Scaling the shifted bits by 2^112 instead multiplied a
/// subnormal f32 for every subnormal half, a microcode assist on Intel cores: Gemma 3
/// 270M's Q6_K `ffn_down` scales are subnormal halves, and its 9 products of 640 x 2048
/// took 0.48 ms each in a decode step, against 0.15 ms for the Q4_K ones (Intel Xeon,
/// model 207, 1 thread).
#[inline(always)]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let magnitude = match h & 0x7C00 {
        0x7C00 => ((h & 0x03FF) << 13) | 0x7F80_0000,
        0 => ((h & 0x03FF) as f32 * f32::from_bits(0x3380_0000)).to_bits(), // x 2^-24
        _ => ((h & 0x7FFF) << 13) + ((127 - 15) << 23),
    };
    f32::from_bits(magnitude | sign)
}

/// f32 -> f16 (exact widening to f64 first, so still one rounding).
pub fn f32_to_f16(x: f32) -> half::f16 {
    f64_to_f16(x as f64)
}

/// f32 -> bf16, round to nearest even; NaN stays a quiet NaN.
pub fn f32_to_bf16(x: f32) -> half::bf16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return half::bf16::from_bits(((bits >> 16) as u16) | 0x0040);
    }
    let lsb = (bits >> 16) & 1;
    half::bf16::from_bits((bits.wrapping_add(0x7fff + lsb) >> 16) as u16)
}

/// i64 -> f64 rounding to odd: exact below 2^53, otherwise the low bit records stickiness,
/// so a later rounding to <= 51 bits is still correct (no double-rounding error).
pub fn i64_to_f64_round_to_odd(x: i64) -> f64 {
    let mag = x.unsigned_abs();
    let used = 64 - mag.leading_zeros();
    let value = if used <= 53 {
        mag as f64
    } else {
        let shift = used - 53;
        let kept = (mag >> shift) | u64::from(mag & ((1u64 << shift) - 1) != 0);
        kept as f64 * (2f64).powi(shift as i32)
    };
    if x < 0 { -value } else { value }
}

/// Rounds a float value already in f64 to the float `dtype` and widens it back,
/// i.e. the value a tensor of that dtype holds. Exact for f64.
pub fn round_to_float_dtype(x: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F32 => x as f32 as f64,
        DType::F16 => f64_to_f16(x).to_f64(),
        DType::BF16 => f64_to_bf16(x).to_f64(),
        _ => x,
    }
}

/// The f32 `x` rounded to f16/bf16 precision and widened back (identity for other dtypes).
/// This is how the CPU stores f16/bf16 activations: f32 slots holding representable values.
#[inline]
pub fn round_f32_to_dtype(x: f32, dtype: DType) -> f32 {
    match dtype {
        DType::F16 => f32_to_f16(x).to_f32(),
        DType::BF16 => f32_to_bf16(x).to_f32(),
        _ => x,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_bits_convert_exactly() {
        for bits in 0..=u16::MAX {
            let want = half::f16::from_bits(bits).to_f32();
            let got = f16_bits_to_f32(bits);
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{bits:#06x}: {got} vs {want}");
        }
    }

    #[test]
    fn f64_rounding_is_single_step() {
        // Just above the f16 halfway point between 1 and 1 + 2^-10: must round up.
        let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(f64_to_f16(x).to_f64(), 1.0 + 2f64.powi(-10));
        // Exact tie rounds to even (down).
        assert_eq!(f64_to_f16(1.0 + 2f64.powi(-11)).to_f64(), 1.0);
        let y = 1.0 + 2f64.powi(-8) + 2f64.powi(-45);
        assert_eq!(f64_to_bf16(y).to_f64(), 1.0 + 2f64.powi(-7));
    }

    #[test]
    fn f16_edges() {
        assert_eq!(f64_to_f16(65504.0).to_f64(), 65504.0);
        assert_eq!(f64_to_f16(65519.99).to_f64(), 65504.0);
        assert!(f64_to_f16(65520.0).is_infinite());
        assert_eq!(f64_to_f16(2f64.powi(-24)).to_bits(), 1);
        assert_eq!(f64_to_f16(2f64.powi(-25)).to_bits(), 0); // tie to even (0)
        assert_eq!(f64_to_f16(2f64.powi(-25) * 1.0001).to_bits(), 1);
        assert_eq!(f64_to_f16(-0.0).to_bits(), 0x8000);
        assert!(f64_to_f16(f64::NAN).is_nan());
        assert_eq!(f64_to_f16(f64::NEG_INFINITY).to_bits(), 0xfc00);
        // Subnormal rounding that carries into the smallest normal.
        let just_below_min_normal = 2f64.powi(-14) - 2f64.powi(-26);
        assert_eq!(f64_to_f16(just_below_min_normal).to_bits(), 0x0400);
    }

    #[test]
    fn i64_round_to_odd_avoids_double_rounding() {
        // 2^60 + 2^52 + 1 is just above the bf16 tie between 2^60 and 2^60 + 2^53.
        let x: i64 = (1 << 60) + (1 << 52) + 1;
        let direct = f64_to_bf16(i64_to_f64_round_to_odd(x)).to_f64();
        assert_eq!(direct, 2f64.powi(60) + 2f64.powi(53));
        assert_eq!(i64_to_f64_round_to_odd(-5), -5.0);
        assert_eq!(i64_to_f64_round_to_odd(i64::MIN), -(2f64.powi(63)));
    }
}
