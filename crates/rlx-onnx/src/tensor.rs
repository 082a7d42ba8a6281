//! ONNX tensors: element types, `TensorProto` values (typed fields, `raw_data`, external
//! data files) as `HostTensor`s or borrowed `ParamBuffer`s.

use crate::proto::{TensorProto, tensor_proto::DataLocation, tensor_proto::DataType};
use bytes::Bytes;
use rlx_ir::shape::fmt_type;
use rlx_ir::{DType, Error, HostTensor, Result};
use rlx_runtime::{ParamBuffer, SharedBytes};
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// The IR dtype of an ONNX element type, or an error naming the type.
pub fn dtype_of(elem_type: i32) -> Result<DType> {
    let t =
        DataType::try_from(elem_type).map_err(|_| Error::parse(format!("unknown ONNX element type {elem_type}")))?;
    Ok(match t {
        DataType::Float => DType::F32,
        DataType::Double => DType::F64,
        DataType::Float16 => DType::F16,
        DataType::Bfloat16 => DType::BF16,
        DataType::Int8 => DType::I8,
        DataType::Int32 => DType::I32,
        DataType::Int64 => DType::I64,
        DataType::Uint8 => DType::U8,
        DataType::Bool => DType::Bool,
        other => return Err(Error::unsupported(format!("ONNX element type {} is not supported", other.as_str_name()))),
    })
}

/// The ONNX element type of an IR dtype.
pub fn elem_type_of(dtype: DType) -> i32 {
    (match dtype {
        DType::F32 => DataType::Float,
        DType::F64 => DataType::Double,
        DType::F16 => DataType::Float16,
        DType::BF16 => DataType::Bfloat16,
        DType::I8 => DataType::Int8,
        DType::I32 => DataType::Int32,
        DType::I64 => DataType::Int64,
        DType::U8 => DataType::Uint8,
        DType::Bool => DataType::Bool,
    }) as i32
}

/// Dims of a tensor proto, checked: non-negative, and their product fits.
pub fn dims_of(t: &TensorProto) -> Result<Vec<usize>> {
    let dims = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| Error::parse(format!("tensor '{}': negative dim {d}", t.name()))))
        .collect::<Result<Vec<_>>>()?;
    if rlx_ir::shape::checked_numel(&dims).is_none() {
        return Err(Error::parse(format!("tensor '{}': dims {:?} overflow", t.name(), t.dims)));
    }
    Ok(dims)
}

/// Where external data files are read from: the model's directory, each file mapped once.
#[derive(Default)]
pub struct ExternalData {
    dir: Option<PathBuf>,
    files: std::sync::Mutex<HashMap<String, Bytes>>,
}

impl ExternalData {
    pub fn beside(model: &Path) -> ExternalData {
        ExternalData { dir: Some(model.parent().unwrap_or(Path::new(".")).to_path_buf()), files: Default::default() }
    }

    /// `length` bytes at `offset` of `location` (relative to the model's directory).
    fn read(&self, tensor: &str, location: &str, offset: usize, length: Option<usize>) -> Result<Bytes> {
        let dir = self.dir.as_ref().ok_or_else(|| {
            Error::input(format!(
                "tensor '{tensor}': its data is in the external file '{location}', but the model was given as bytes (load it from a path)"
            ))
        })?;
        let rel = Path::new(location);
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(Error::input(format!(
                "tensor '{tensor}': external data location '{location}' must be a relative path inside the model's directory"
            )));
        }
        let mut files = self.files.lock().map_err(|_| Error::internal("external data cache poisoned"))?;
        let file = match files.get(location) {
            Some(f) => f.clone(),
            None => {
                let path = dir.join(rel);
                let f = std::fs::File::open(&path)
                    .map_err(|e| Error::io(format!("tensor '{tensor}': external data file {}: {e}", path.display())))?;
                // SAFETY: the map is read-only; a file truncated underneath it is the user's
                // fault, as with any mapped model file.
                let map = unsafe { memmap2::Mmap::map(&f) }
                    .map_err(|e| Error::io(format!("tensor '{tensor}': mapping {}: {e}", path.display())))?;
                let bytes = Bytes::from_owner(map);
                files.insert(location.to_string(), bytes.clone());
                bytes
            }
        };
        let end = match length {
            Some(len) => offset.checked_add(len),
            None => Some(file.len()),
        };
        match end {
            Some(end) if offset <= end && end <= file.len() => Ok(file.slice(offset..end)),
            _ => Err(Error::input(format!(
                "tensor '{tensor}': external data bytes {offset}..{} lie outside '{location}' ({} bytes)",
                end.map_or("overflow".to_string(), |e| e.to_string()),
                file.len()
            ))),
        }
    }
}

/// The little-endian bytes of a tensor in its IR dtype's packed layout, borrowed when the
/// file holds them raw (`raw_data` or external data), converted from the typed fields
/// otherwise.
pub fn tensor_bytes(t: &TensorProto, external: &ExternalData) -> Result<(DType, Vec<usize>, Bytes)> {
    let name = t.name();
    let dtype = dtype_of(t.data_type()).map_err(|e| e.context(format!("tensor '{name}'")))?;
    let dims = dims_of(t)?;
    let n = rlx_ir::shape::numel(&dims);
    // dims_of bounds the element count; the byte count may still overflow.
    let want = n
        .checked_mul(dtype.size_bytes())
        .ok_or_else(|| Error::parse(format!("tensor '{name}': {} overflows usize bytes", fmt_type(dtype, &dims))))?;
    let bytes = if t.data_location() == DataLocation::External {
        let entry = |key: &str| t.external_data.iter().find(|e| e.key() == key).map(|e| e.value().to_string());
        let location = entry("location")
            .ok_or_else(|| Error::parse(format!("tensor '{name}': external data without a 'location'")))?;
        let number = |key: &str| -> Result<Option<usize>> {
            entry(key)
                .map(|v| {
                    v.parse::<usize>().map_err(|_| Error::parse(format!("tensor '{name}': external data {key} '{v}'")))
                })
                .transpose()
        };
        external.read(name, &location, number("offset")?.unwrap_or(0), number("length")?)?
    } else if let Some(raw) = &t.raw_data {
        raw.clone()
    } else {
        Bytes::from(typed_bytes(t, dtype, n)?)
    };
    if bytes.len() != want {
        return Err(Error::parse(format!(
            "tensor '{name}' ({}) holds {} bytes of data, needs {want}",
            fmt_type(dtype, &dims),
            bytes.len()
        )));
    }
    Ok((dtype, dims, bytes))
}

/// The tensor as a host value (a copy).
pub fn to_host(t: &TensorProto, external: &ExternalData) -> Result<HostTensor> {
    let (dtype, dims, bytes) = tensor_bytes(t, external)?;
    HostTensor::from_bytes(dtype, &dims, bytes.to_vec())
}

/// The tensor as a param buffer, borrowing the file's bytes where they are aligned.
pub fn to_param(t: &TensorProto, external: &ExternalData) -> Result<ParamBuffer> {
    let (dtype, dims, bytes) = tensor_bytes(t, external)?;
    let len = bytes.len();
    let shared: SharedBytes = Arc::new(bytes);
    ParamBuffer::from_bytes(dtype, &dims, shared, 0..len)
}

/// Packed bytes from the typed repeated fields (`float_data`, `int32_data`, ...), whose
/// use per element type the schema fixes (`int32_data` carries every type of 32 bits or
/// less, f16/bf16 as their bit patterns).
fn typed_bytes(t: &TensorProto, dtype: DType, n: usize) -> Result<Vec<u8>> {
    let name = t.name();
    let count = |len: usize, field: &str| {
        if len == n {
            Ok(())
        } else {
            Err(Error::parse(format!("tensor '{name}': {field} has {len} values, its dims need {n}")))
        }
    };
    Ok(match dtype {
        DType::F32 => {
            count(t.float_data.len(), "float_data")?;
            t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::F64 => {
            count(t.double_data.len(), "double_data")?;
            t.double_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::I64 => {
            count(t.int64_data.len(), "int64_data")?;
            t.int64_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::I32 => {
            count(t.int32_data.len(), "int32_data")?;
            t.int32_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::F16 | DType::BF16 => {
            count(t.int32_data.len(), "int32_data")?;
            t.int32_data.iter().flat_map(|&v| (v as u16).to_le_bytes()).collect()
        }
        DType::I8 | DType::U8 | DType::Bool => {
            count(t.int32_data.len(), "int32_data")?;
            t.int32_data.iter().map(|&v| if dtype == DType::Bool { (v != 0) as u8 } else { v as u8 }).collect()
        }
    })
}
