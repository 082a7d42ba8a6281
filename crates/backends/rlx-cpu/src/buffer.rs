//! Typed storage for one tensor, and the element traits kernels are generic over.
//!
//! f16 and bf16 tensors live WIDENED in f32 buffers whose values are always representable
//! in the declared format: every kernel writing one rounds on store (see
//! `program::Step::round_to`), and the boundary converts by value. So a kernel never
//! reads a half tensor as packed 2-byte words, and element counts always come from shapes.

use rlx_ir::{DType, Error, HostTensor, Result, encode_le, f32_to_bf16, f32_to_f16};

/// The storage class of a buffer: what Rust type its elements are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    F32,
    F64,
    I8,
    I32,
    I64,
    U8,
}

impl Class {
    /// F16/BF16 widen to F32; Bool is stored as U8 (0 or 1).
    pub fn of(dtype: DType) -> Class {
        match dtype {
            DType::F32 | DType::F16 | DType::BF16 => Class::F32,
            DType::F64 => Class::F64,
            DType::I8 => Class::I8,
            DType::I32 => Class::I32,
            DType::I64 => Class::I64,
            DType::U8 | DType::Bool => Class::U8,
        }
    }
}

#[derive(Clone, Debug)]
pub enum Buffer {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I8(Vec<i8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
}

impl Default for Buffer {
    fn default() -> Self {
        Buffer::U8(Vec::new())
    }
}

impl Buffer {
    pub fn zeros(dtype: DType, len: usize) -> Buffer {
        match Class::of(dtype) {
            Class::F32 => Buffer::F32(vec![0.0; len]),
            Class::F64 => Buffer::F64(vec![0.0; len]),
            Class::I8 => Buffer::I8(vec![0; len]),
            Class::I32 => Buffer::I32(vec![0; len]),
            Class::I64 => Buffer::I64(vec![0; len]),
            Class::U8 => Buffer::U8(vec![0; len]),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Buffer::F32(v) => v.len(),
            Buffer::F64(v) => v.len(),
            Buffer::I8(v) => v.len(),
            Buffer::I32(v) => v.len(),
            Buffer::I64(v) => v.len(),
            Buffer::U8(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Overwrites this buffer (of `t`'s dtype class and length) with `t`'s values.
    pub fn load(&mut self, t: &HostTensor) -> Result<()> {
        let b = t.bytes();
        if self.len() != t.len() {
            return Err(Error::internal(format!("load: buffer of {} for a tensor of {}", self.len(), t.len())));
        }
        match (self, t.dtype()) {
            (Buffer::F32(v), DType::F32) => fill(v, b, f32::from_le_bytes),
            (Buffer::F32(v), DType::F16) => fill(v, b, |c| half::f16::from_le_bytes(c).to_f32()),
            (Buffer::F32(v), DType::BF16) => fill(v, b, |c| half::bf16::from_le_bytes(c).to_f32()),
            (Buffer::F64(v), DType::F64) => fill(v, b, f64::from_le_bytes),
            (Buffer::I8(v), DType::I8) => fill(v, b, i8::from_le_bytes),
            (Buffer::I32(v), DType::I32) => fill(v, b, i32::from_le_bytes),
            (Buffer::I64(v), DType::I64) => fill(v, b, i64::from_le_bytes),
            (Buffer::U8(v), DType::U8 | DType::Bool) => v.copy_from_slice(b),
            (_, d) => return Err(Error::internal(format!("load: {d} tensor into a mismatched buffer"))),
        }
        Ok(())
    }

    /// The buffer as a host tensor of `dtype` (`dtype`'s class must be this buffer's).
    pub fn to_host(&self, dtype: DType, dims: &[usize]) -> Result<HostTensor> {
        let bytes: Vec<u8> = match (self, dtype) {
            (Buffer::F32(v), DType::F32) => encode_le(v, f32::to_le_bytes),
            (Buffer::F32(v), DType::F16) => encode_le(v, |x| f32_to_f16(x).to_le_bytes()),
            (Buffer::F32(v), DType::BF16) => encode_le(v, |x| f32_to_bf16(x).to_le_bytes()),
            (Buffer::F64(v), DType::F64) => encode_le(v, f64::to_le_bytes),
            (Buffer::I8(v), DType::I8) => v.iter().map(|&x| x as u8).collect(),
            (Buffer::I32(v), DType::I32) => encode_le(v, i32::to_le_bytes),
            (Buffer::I64(v), DType::I64) => encode_le(v, i64::to_le_bytes),
            (Buffer::U8(v), DType::U8 | DType::Bool) => v.clone(),
            (_, d) => return Err(Error::internal(format!("to_host: {d} from a mismatched buffer"))),
        };
        HostTensor::from_bytes(dtype, dims, bytes)
    }
}

fn fill<T, const N: usize>(dst: &mut [T], src: &[u8], decode: impl Fn([u8; N]) -> T) {
    for (d, c) in dst.iter_mut().zip(src.chunks_exact(N)) {
        *d = decode(c.try_into().expect("chunks_exact yields N bytes"));
    }
}

/// An element type a buffer can hold.
pub trait Elem: Copy + Default + PartialOrd + Send + Sync + std::fmt::Debug + 'static {
    fn slice(b: &Buffer) -> Option<&[Self]>;
    fn slice_mut(b: &mut Buffer) -> Option<&mut [Self]>;
}

macro_rules! impl_elem {
    ($t:ty, $v:ident) => {
        impl Elem for $t {
            fn slice(b: &Buffer) -> Option<&[Self]> {
                if let Buffer::$v(v) = b { Some(v) } else { None }
            }
            fn slice_mut(b: &mut Buffer) -> Option<&mut [Self]> {
                if let Buffer::$v(v) = b { Some(v) } else { None }
            }
        }
    };
}
impl_elem!(f32, F32);
impl_elem!(f64, F64);
impl_elem!(i8, I8);
impl_elem!(i32, I32);
impl_elem!(i64, I64);
impl_elem!(u8, U8);

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

/// A step's operands: indices into the program's buffers, in the op's operand order.
#[derive(Clone, Copy)]
pub struct Args<'a> {
    pub bufs: &'a [Buffer],
    pub ids: &'a [usize],
}

impl<'a> Args<'a> {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Operand `i`'s buffer.
    pub fn buf(&self, i: usize) -> Result<&'a Buffer> {
        self.ids
            .get(i)
            .and_then(|&id| self.bufs.get(id))
            .ok_or_else(|| Error::internal(format!("operand {i} of {} is missing", self.ids.len())))
    }

    /// Operand `i` as a typed slice (types were checked at compile, so a mismatch is a bug).
    pub fn get<T: Elem>(&self, i: usize) -> Result<&'a [T]> {
        T::slice(self.buf(i)?)
            .ok_or_else(|| Error::internal(format!("operand {i} is not {} storage", std::any::type_name::<T>())))
    }
}

pub fn out_mut<T: Elem>(b: &mut Buffer) -> Result<&mut [T]> {
    T::slice_mut(b).ok_or_else(|| Error::internal(format!("output buffer is not {}", std::any::type_name::<T>())))
}

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

/// Reads element `i` of an integer buffer as i64 (index operands of gather, rope, ...).
pub fn index_at(b: &Buffer, i: usize) -> Option<i64> {
    match b {
        Buffer::I8(v) => v.get(i).map(|&x| x as i64),
        Buffer::I32(v) => v.get(i).map(|&x| x as i64),
        Buffer::I64(v) => v.get(i).copied(),
        Buffer::U8(v) => v.get(i).map(|&x| x as i64),
        _ => None,
    }
}
