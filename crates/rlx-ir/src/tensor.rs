//! [`HostTensor`]: an owned, row-major, little-endian tensor on the host, and
//! [`TensorRef`]: the same borrowed (a caller's buffer: a NumPy array, a mapped file),
//! which the runtime reads inputs from without copying them first.

use crate::dtype::{f64_to_bf16, f64_to_f16, i64_to_f64_round_to_odd};
use crate::shape::{checked_byte_len, fmt_dims, numel};
use crate::{DType, Error, Result};
use half::{bf16, f16};

/// An owned host tensor: row-major, little-endian bytes of `dtype`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostTensor {
    dtype: DType,
    dims: Vec<usize>,
    bytes: Vec<u8>,
}

impl HostTensor {
    pub fn from_f32(dims: &[usize], values: &[f32]) -> Result<HostTensor> {
        check_len("from_f32", dims, values.len())?;
        Ok(HostTensor::raw(DType::F32, dims, encode_le(values, |v| v.to_le_bytes())))
    }

    pub fn from_f64(dims: &[usize], values: &[f64]) -> Result<HostTensor> {
        check_len("from_f64", dims, values.len())?;
        Ok(HostTensor::raw(DType::F64, dims, encode_le(values, |v| v.to_le_bytes())))
    }

    pub fn from_i64(dims: &[usize], values: &[i64]) -> Result<HostTensor> {
        check_len("from_i64", dims, values.len())?;
        Ok(HostTensor::raw(DType::I64, dims, encode_le(values, |v| v.to_le_bytes())))
    }

    /// Takes `bytes` as the little-endian encoding of `dims` elements of `dtype`.
    /// A bool byte must be 0 or 1.
    pub fn from_bytes(dtype: DType, dims: &[usize], bytes: Vec<u8>) -> Result<HostTensor> {
        TensorRef::new(dtype, dims, &bytes)?;
        Ok(HostTensor::raw(dtype, dims, bytes))
    }

    /// f32 values converted to `dtype`: floats round to nearest even; integer and bool
    /// targets take only values they represent exactly (1.5 or 300 for u8 is an error).
    pub fn from_f32_as(dtype: DType, dims: &[usize], values: &[f32]) -> Result<HostTensor> {
        check_len("from_f32_as", dims, values.len())?;
        // Float targets cannot fail: convert in one pass.
        let bytes = match dtype {
            DType::F32 => Some(encode_le(values, f32::to_le_bytes)),
            DType::F64 => Some(encode_le(values, |v| (v as f64).to_le_bytes())),
            DType::F16 => Some(encode_le(values, |v| crate::f32_to_f16(v).to_le_bytes())),
            DType::BF16 => Some(encode_le(values, |v| crate::f32_to_bf16(v).to_le_bytes())),
            _ => None,
        };
        if let Some(bytes) = bytes {
            return Ok(HostTensor::raw(dtype, dims, bytes));
        }
        let mut bytes = Vec::with_capacity(values.len() * dtype.size_bytes());
        for (i, &v) in values.iter().enumerate() {
            encode_f64(dtype, v as f64, &mut bytes)
                .map_err(|why| Error::input(format!("from_f32_as: value {v} at index {i} {why}")))?;
        }
        Ok(HostTensor::raw(dtype, dims, bytes))
    }

    /// f64 values converted to `dtype` with the same rules as [`HostTensor::from_f32_as`].
    pub fn from_f64_as(dtype: DType, dims: &[usize], values: &[f64]) -> Result<HostTensor> {
        check_len("from_f64_as", dims, values.len())?;
        let mut bytes = Vec::with_capacity(values.len() * dtype.size_bytes());
        for (i, &v) in values.iter().enumerate() {
            encode_f64(dtype, v, &mut bytes)
                .map_err(|why| Error::input(format!("from_f64_as: value {v} at index {i} {why}")))?;
        }
        Ok(HostTensor::raw(dtype, dims, bytes))
    }

    /// All zeros (false for bool).
    pub fn zeros(dtype: DType, dims: &[usize]) -> Result<HostTensor> {
        let len = checked_byte_len("zeros", dtype, dims)?;
        Ok(HostTensor::raw(dtype, dims, vec![0; len]))
    }

    fn raw(dtype: DType, dims: &[usize], bytes: Vec<u8>) -> HostTensor {
        HostTensor { dtype, dims: dims.to_vec(), bytes }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.view().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// This tensor borrowed.
    pub fn view(&self) -> TensorRef<'_> {
        TensorRef { dtype: self.dtype, dims: &self.dims, bytes: &self.bytes }
    }

    /// Every dtype converted to f32 (integers and bools by value, f64 rounded to nearest).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        self.view().to_f32_vec()
    }

    /// Every dtype converted to f64 (exact for all but i64 beyond 2^53, which rounds).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.view().to_f64_vec()
    }

    /// Integer and bool tensors as i64 (exact); floats truncate toward zero, saturating.
    pub fn to_i64_vec(&self) -> Vec<i64> {
        self.view().to_i64_vec()
    }
}

/// A borrowed host tensor: row-major, little-endian bytes of `dtype`, checked like
/// [`HostTensor::from_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorRef<'a> {
    dtype: DType,
    dims: &'a [usize],
    bytes: &'a [u8],
}

impl<'a> TensorRef<'a> {
    /// `bytes` as `dims` elements of `dtype`: the length must match, a bool byte must be
    /// 0 or 1.
    pub fn new(dtype: DType, dims: &'a [usize], bytes: &'a [u8]) -> Result<TensorRef<'a>> {
        let want = checked_byte_len("from_bytes", dtype, dims)?;
        if bytes.len() != want {
            return Err(Error::input(format!(
                "from_bytes: {dtype}{} needs {want} bytes, got {}",
                fmt_dims(dims),
                bytes.len()
            )));
        }
        if dtype == DType::Bool
            && let Some(i) = bytes.iter().position(|&b| b > 1)
        {
            return Err(Error::input(format!("from_bytes: bool byte {} at offset {i} is not 0 or 1", bytes[i])));
        }
        Ok(TensorRef { dtype, dims, bytes })
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn dims(&self) -> &'a [usize] {
        self.dims
    }
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        numel(self.dims)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An owned copy.
    pub fn to_host(&self) -> HostTensor {
        HostTensor::raw(self.dtype, self.dims, self.bytes.to_vec())
    }

    /// Every dtype converted to f32 (integers and bools by value, f64 rounded to nearest).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        let mut values = Vec::with_capacity(self.len());
        self.extend_f32(&mut values);
        values
    }

    /// Appends the values [`TensorRef::to_f32_vec`] gives to `out` (a buffer reused run
    /// after run: no allocation once it is large enough).
    pub fn extend_f32(&self, out: &mut Vec<f32>) {
        match self.dtype {
            DType::F32 => out.extend(self.chunks::<4>().map(f32::from_le_bytes)),
            DType::F16 => out.extend(self.chunks::<2>().map(|b| f16::from_le_bytes(b).to_f32())),
            DType::BF16 => out.extend(self.chunks::<2>().map(|b| bf16::from_le_bytes(b).to_f32())),
            DType::I32 => out.extend(self.chunks::<4>().map(|b| i32::from_le_bytes(b) as f32)),
            DType::I64 => out.extend(self.chunks::<8>().map(|b| i64::from_le_bytes(b) as f32)),
            // f64 -> f32 `as` rounds to nearest even in one step.
            _ => out.extend(self.to_f64_vec().into_iter().map(|v| v as f32)),
        }
    }

    /// The values where they lie, without a copy: for an f32 tensor whose bytes are
    /// aligned for f32 (a compiled program's outputs are) on a little-endian host; None
    /// otherwise ([`TensorRef::extend_f32`] converts any tensor).
    pub fn as_f32(&self) -> Option<&'a [f32]> {
        if self.dtype != DType::F32 || cfg!(target_endian = "big") {
            return None;
        }
        // SAFETY: every bit pattern is an f32; `align_to` reinterprets only the aligned
        // middle, and a tensor whose bytes do not all fall in it is refused.
        let (head, values, tail) = unsafe { self.bytes.align_to::<f32>() };
        (head.is_empty() && tail.is_empty()).then_some(values)
    }

    /// Every dtype converted to f64 (exact for all but i64 beyond 2^53, which rounds).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self.dtype {
            DType::F64 => self.chunks::<8>().map(f64::from_le_bytes).collect(),
            DType::I64 => self.chunks::<8>().map(|b| i64::from_le_bytes(b) as f64).collect(),
            DType::I32 => self.chunks::<4>().map(|b| i32::from_le_bytes(b) as f64).collect(),
            DType::I8 => self.bytes.iter().map(|&b| b as i8 as f64).collect(),
            DType::U8 | DType::Bool => self.bytes.iter().map(|&b| b as f64).collect(),
            _ => self.to_f32_vec().into_iter().map(|v| v as f64).collect(),
        }
    }

    /// Integer and bool tensors as i64 (exact); floats truncate toward zero, saturating.
    pub fn to_i64_vec(&self) -> Vec<i64> {
        match self.dtype {
            DType::I64 => self.chunks::<8>().map(i64::from_le_bytes).collect(),
            DType::I32 => self.chunks::<4>().map(|b| i32::from_le_bytes(b) as i64).collect(),
            _ => self.to_f64_vec().into_iter().map(|v| v as i64).collect(),
        }
    }

    fn chunks<const N: usize>(&self) -> impl Iterator<Item = [u8; N]> + 'a {
        self.bytes.chunks_exact(N).map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            a
        })
    }
}

/// Little-endian bytes of `values`, `N` each. (A flat_map over `to_le_bytes` does not
/// vectorize; this loop is a plain copy on little-endian hosts.)
pub fn encode_le<T: Copy, const N: usize>(values: &[T], encode: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    let mut out = vec![0u8; values.len() * N];
    for (dst, &v) in out.chunks_exact_mut(N).zip(values) {
        dst.copy_from_slice(&encode(v));
    }
    out
}

fn check_len(what: &str, dims: &[usize], got: usize) -> Result<()> {
    let want = crate::shape::checked_numel(dims)
        .ok_or_else(|| Error::shape(format!("{what}: shape {} overflows usize", fmt_dims(dims))))?;
    if want != got {
        return Err(Error::input(format!("{what}: shape {} needs {want} values, got {got}", fmt_dims(dims))));
    }
    Ok(())
}

/// Appends `v` converted to `dtype`. Floats round to nearest even; integer and bool targets
/// take only values they represent exactly. The error text completes "value v at index i ...".
pub fn encode_f64(dtype: DType, v: f64, out: &mut Vec<u8>) -> std::result::Result<(), String> {
    let exact_int = |lo: f64, hi: f64| -> std::result::Result<f64, String> {
        if v.fract() == 0.0 && v >= lo && v <= hi { Ok(v) } else { Err(format!("is not representable as {dtype}")) }
    };
    match dtype {
        DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        DType::F64 => out.extend_from_slice(&v.to_le_bytes()),
        DType::F16 => out.extend_from_slice(&f64_to_f16(v).to_le_bytes()),
        DType::BF16 => out.extend_from_slice(&f64_to_bf16(v).to_le_bytes()),
        DType::I8 => out.push(exact_int(-128.0, 127.0)? as i8 as u8),
        DType::U8 => out.push(exact_int(0.0, 255.0)? as u8),
        DType::Bool => out.push(exact_int(0.0, 1.0)? as u8),
        DType::I32 => out.extend_from_slice(&(exact_int(-2147483648.0, 2147483647.0)? as i32).to_le_bytes()),
        // 2^63 itself is out of range; every f64 below it with fract 0 fits.
        DType::I64 => {
            let x = exact_int(-9.223372036854776e18, 9.223372036854775e18)?;
            out.extend_from_slice(&(x as i64).to_le_bytes())
        }
    }
    Ok(())
}

/// i64 -> float dtype, correctly rounded (via round-to-odd for the half formats).
pub fn i64_to_float_bits(dtype: DType, v: i64) -> f64 {
    match dtype {
        DType::F64 => v as f64,
        DType::F32 => v as f32 as f64,
        DType::F16 => f64_to_f16(i64_to_f64_round_to_odd(v)).to_f64(),
        DType::BF16 => f64_to_bf16(i64_to_f64_round_to_odd(v)).to_f64(),
        _ => v as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_and_bf16_convert_by_value() {
        for dt in [DType::F16, DType::BF16] {
            let t = HostTensor::from_f32_as(dt, &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
            assert_eq!(t.bytes().len(), 8);
            assert_eq!(t.to_f32_vec(), vec![1.0, 2.0, 3.0, 4.0]);
        }
    }

    #[test]
    fn integer_conversion_is_exact_or_an_error() {
        let t = HostTensor::from_f32_as(DType::I32, &[2], &[-7.0, 9.0]).unwrap();
        assert_eq!(t.to_i64_vec(), vec![-7, 9]);
        let e = HostTensor::from_f32_as(DType::U8, &[2], &[1.0, 300.0]).unwrap_err();
        assert!(e.message().contains("300") && e.message().contains("index 1"), "{e}");
        assert!(HostTensor::from_f32_as(DType::I64, &[1], &[1.5]).is_err());
        for (dtype, bad) in
            [(DType::U8, 256.0), (DType::U8, -1.0), (DType::I8, 128.0), (DType::I8, -129.0), (DType::Bool, 2.0)]
        {
            assert!(HostTensor::from_f32_as(dtype, &[1], &[bad]).is_err(), "{dtype} {bad}");
        }
        for (dtype, edge) in [(DType::U8, 255.0), (DType::I8, -128.0), (DType::I32, -2147483648.0)] {
            assert_eq!(HostTensor::from_f32_as(dtype, &[1], &[edge]).unwrap().to_f64_vec(), vec![edge as f64]);
        }
        assert!(HostTensor::from_f32_as(DType::I64, &[1], &[f32::NAN]).is_err());
    }

    #[test]
    fn f32_values_are_shown_in_place_only_when_aligned() {
        let values = [1.5f32, -0.0, f32::NAN, f32::INFINITY, 1e-40];
        // The same bytes at an f32-aligned start and at an unaligned one.
        let words: Vec<u32> = values.iter().map(|v| v.to_bits()).chain([0]).collect();
        // SAFETY: u32s viewed as their bytes.
        let bytes = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 4) };
        let aligned = TensorRef::new(DType::F32, &[5], &bytes[..20]).unwrap();
        let shown = aligned.as_f32().unwrap();
        assert_eq!(shown.as_ptr().cast::<u8>(), bytes.as_ptr(), "a copy");
        assert!(shown.iter().zip(&values).all(|(a, b)| a.to_bits() == b.to_bits()));
        let mut shifted = [0u8; 24];
        let start = (0..4).find(|s| !(shifted.as_ptr() as usize + s).is_multiple_of(4)).unwrap();
        shifted[start..start + 20].copy_from_slice(&bytes[..20]);
        let unaligned = TensorRef::new(DType::F32, &[5], &shifted[start..start + 20]).unwrap();
        assert_eq!(unaligned.as_f32(), None);
        assert_eq!(unaligned.to_f32_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>(), words[..5]);
        let half = HostTensor::from_f32_as(DType::F16, &[2], &[1.0, 2.0]).unwrap();
        assert_eq!(half.view().as_f32(), None);
    }

    #[test]
    fn lengths_are_checked() {
        let e = HostTensor::from_f32(&[2, 3], &[0.0; 5]).unwrap_err();
        assert!(e.message().contains("[2,3]") && e.message().contains('5'), "{e}");
        assert!(HostTensor::from_bytes(DType::F16, &[3], vec![0; 5]).is_err());
        assert!(HostTensor::from_bytes(DType::Bool, &[2], vec![0, 2]).is_err());
    }
}
