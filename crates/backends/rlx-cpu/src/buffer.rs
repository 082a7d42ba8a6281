//! Storage classes and the element traits kernels are generic over.

use rlx_ir::{DType, Error, Result};

/// The storage class of a tensor in the arena: what Rust type its elements are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    F32,
    F64,
    I8,
    I32,
    I64,
    U8,
    /// Packed 2-byte f16 (`half::f16`): only the kernels `Target::CPU.packed_operand`
    /// names read it; every other kernel's typed access refuses it.
    F16,
    /// Packed 2-byte bf16 (`half::bf16`), likewise.
    BF16,
}

impl Class {
    /// The class holding `dtype` at `elem_bytes` per element (the width policy's answer):
    /// f16/bf16 widened to 4 bytes live in f32, at 2 bytes packed; bool is u8 (0 or 1).
    pub fn for_storage(dtype: DType, elem_bytes: usize) -> Result<Class> {
        Ok(match (dtype, elem_bytes) {
            (DType::F32, 4) | (DType::F16 | DType::BF16, 4) => Class::F32,
            (DType::F16, 2) => Class::F16,
            (DType::BF16, 2) => Class::BF16,
            (DType::F64, 8) => Class::F64,
            (DType::I8, 1) => Class::I8,
            (DType::I32, 4) => Class::I32,
            (DType::I64, 8) => Class::I64,
            (DType::U8 | DType::Bool, 1) => Class::U8,
            (d, b) => {
                return Err(Error::unsupported(format!("the CPU backend cannot store {d} at {b} bytes per element")));
            }
        })
    }

    pub fn size_bytes(self) -> usize {
        match self {
            Class::F64 | Class::I64 => 8,
            Class::F32 | Class::I32 => 4,
            Class::F16 | Class::BF16 => 2,
            Class::I8 | Class::U8 => 1,
        }
    }

    /// Whether this is a packed 2-byte half class.
    pub fn is_packed_half(self) -> bool {
        matches!(self, Class::F16 | Class::BF16)
    }
}

/// An element type a storage class holds.
pub trait Elem: Copy + Default + PartialOrd + Send + Sync + std::fmt::Debug + 'static {
    const CLASS: Class;
}

impl Elem for f32 {
    const CLASS: Class = Class::F32;
}
impl Elem for f64 {
    const CLASS: Class = Class::F64;
}
impl Elem for i8 {
    const CLASS: Class = Class::I8;
}
impl Elem for i32 {
    const CLASS: Class = Class::I32;
}
impl Elem for i64 {
    const CLASS: Class = Class::I64;
}
impl Elem for u8 {
    const CLASS: Class = Class::U8;
}
impl Elem for half::f16 {
    const CLASS: Class = Class::F16;
}
impl Elem for half::bf16 {
    const CLASS: Class = Class::BF16;
}

/// Arithmetic with the IR's semantics: IEEE for floats, wrapping for integers,
/// `x / 0 = 0` for integers, NaN-propagating max/min.
pub trait Num: Elem {
    const ZERO: Self;
    const ONE: Self;
    /// Identity of max (-inf or the type's minimum) and of min.
    const MAX_ID: Self;
    const MIN_ID: Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn pow(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn abs(self) -> Self;
    fn is_nan(self) -> bool;
    fn to_i64(self) -> i64;
    /// A float value converted to this storage holding dtype `to`: narrower floats round
    /// to nearest even once; integers truncate and saturate (NaN -> 0, Rust's `as`); bool
    /// is `x != 0`.
    fn from_float(v: f64, to: DType) -> Self;
    /// An integer converted to this storage holding `to`: floats correctly rounded (one
    /// rounding even for i64 -> bf16), integers wrap, bool is `x != 0`.
    fn from_int(v: i64, to: DType) -> Self;
    /// max/min that return NaN when either side is NaN.
    fn max_nan(self, o: Self) -> Self {
        if self.is_nan() || o.is_nan() {
            if self.is_nan() { self } else { o }
        } else if o > self {
            o
        } else {
            self
        }
    }
    fn min_nan(self, o: Self) -> Self {
        if self.is_nan() || o.is_nan() {
            if self.is_nan() { self } else { o }
        } else if o < self {
            o
        } else {
            self
        }
    }
}

macro_rules! impl_num_float {
    ($t:ty) => {
        impl Num for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const MAX_ID: Self = <$t>::NEG_INFINITY;
            const MIN_ID: Self = <$t>::INFINITY;
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn sub(self, o: Self) -> Self {
                self - o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn div(self, o: Self) -> Self {
                self / o
            }
            fn pow(self, o: Self) -> Self {
                self.powf(o)
            }
            fn neg(self) -> Self {
                -self
            }
            fn abs(self) -> Self {
                self.abs()
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_float(v: f64, to: DType) -> Self {
                rlx_ir::round_to_float_dtype(v, to) as $t
            }
            fn from_int(v: i64, to: DType) -> Self {
                rlx_ir::i64_to_float_bits(to, v) as $t
            }
        }
    };
}
impl_num_float!(f32);
impl_num_float!(f64);

macro_rules! impl_num_int {
    ($t:ty) => {
        impl Num for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const MAX_ID: Self = <$t>::MIN;
            const MIN_ID: Self = <$t>::MAX;
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn div(self, o: Self) -> Self {
                if o == 0 { 0 } else { self.wrapping_div(o) }
            }
            #[allow(unused_comparisons)]
            fn pow(self, o: Self) -> Self {
                if o < 0 {
                    // The real result truncated toward zero.
                    if self == 1 {
                        1
                    } else if self == 0 {
                        0
                    } else if self.wrapping_add(1) == 0 {
                        // base -1: sign follows the exponent's parity.
                        if o.wrapping_rem(2) == 0 { 1 } else { self }
                    } else {
                        0
                    }
                } else {
                    // Wrapping exponentiation by squaring.
                    let (mut acc, mut base, mut e): ($t, $t, u64) = (1, self, o as u64);
                    while e > 0 {
                        if e & 1 == 1 {
                            acc = acc.wrapping_mul(base);
                        }
                        base = base.wrapping_mul(base);
                        e >>= 1;
                    }
                    acc
                }
            }
            fn neg(self) -> Self {
                self.wrapping_neg()
            }
            #[allow(unused_comparisons)]
            fn abs(self) -> Self {
                if self < 0 { self.wrapping_neg() } else { self }
            }
            fn is_nan(self) -> bool {
                false
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_float(v: f64, to: DType) -> Self {
                if to == DType::Bool { (v != 0.0) as $t } else { v as $t }
            }
            fn from_int(v: i64, to: DType) -> Self {
                if to == DType::Bool { (v != 0) as $t } else { v as $t }
            }
        }
    };
}
impl_num_int!(i8);
impl_num_int!(i32);
impl_num_int!(i64);
impl_num_int!(u8);

/// Float functions. Kernels for f32/f16/bf16 run in f32, for f64 in f64.
pub trait Float:
    Num
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
    + std::ops::AddAssign
    + std::ops::MulAssign
{
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn from_usize(n: usize) -> Self;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn ln_1p(self) -> Self;
    fn sqrt(self) -> Self;
    fn tanh(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn tan(self) -> Self;
    fn atan(self) -> Self;
    fn erf(self) -> Self;
    fn erfc(self) -> Self;
    fn is_infinite(self) -> bool;
}

macro_rules! impl_float {
    ($t:ty, $erf:path, $erfc:path) => {
        impl Float for $t {
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_usize(n: usize) -> Self {
                n as $t
            }
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            fn tan(self) -> Self {
                <$t>::tan(self)
            }
            fn atan(self) -> Self {
                <$t>::atan(self)
            }
            fn erf(self) -> Self {
                $erf(self)
            }
            fn erfc(self) -> Self {
                $erfc(self)
            }
            fn is_infinite(self) -> bool {
                <$t>::is_infinite(self)
            }
        }
    };
}
impl_float!(f32, libm::erff, libm::erfcf);
impl_float!(f64, libm::erf, libm::erfc);

/// Runs `$body` with `$T` bound to the Rust type of storage class `$class`.
#[macro_export]
macro_rules! with_class {
    ($class:expr, $T:ident => $body:expr) => {
        match $class {
            $crate::buffer::Class::F32 => {
                type $T = f32;
                $body
            }
            $crate::buffer::Class::F64 => {
                type $T = f64;
                $body
            }
            $crate::buffer::Class::I8 => {
                type $T = i8;
                $body
            }
            $crate::buffer::Class::I32 => {
                type $T = i32;
                $body
            }
            $crate::buffer::Class::I64 => {
                type $T = i64;
                $body
            }
            $crate::buffer::Class::U8 => {
                type $T = u8;
                $body
            }
            packed @ ($crate::buffer::Class::F16 | $crate::buffer::Class::BF16) => Err(rlx_ir::Error::internal(
                format!("this kernel cannot read packed {packed:?} storage (the width policy must widen its operand)"),
            )),
        }
    };
}

/// Runs `$body` with `$T` = f32 or f64; any other class is an internal error.
#[macro_export]
macro_rules! with_float {
    ($class:expr, $T:ident => $body:expr) => {
        match $class {
            $crate::buffer::Class::F32 => {
                type $T = f32;
                $body
            }
            $crate::buffer::Class::F64 => {
                type $T = f64;
                $body
            }
            other => Err(rlx_ir::Error::internal(format!("float kernel on {other:?} storage"))),
        }
    };
}
