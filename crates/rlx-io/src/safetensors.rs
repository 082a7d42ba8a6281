//! safetensors files (Hugging Face's format): an 8-byte little-endian header length, a
//! JSON header mapping each tensor's name to `{dtype, shape, data_offsets}` (offsets into
//! the data that follows, which the tensors tile without gaps) plus an optional
//! `__metadata__` map of strings, then the data.
//!
//! dtypes: `F32 F64 F16 BF16 I8 I32 I64 U8 BOOL`, the RLX dtypes of the same name.
//! Tensors are written in the order given; the header is padded with spaces to a
//! multiple of 8 bytes, as the reference writer does.

use rlx_ir::shape::{checked_byte_len, fmt_dims};
use rlx_ir::{DType, Error, HostTensor, Result};
use serde_json::{Map, Value};
use std::path::Path;

/// The tensors of a file, in data order, and its `__metadata__` strings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SafeTensors {
    pub tensors: Vec<(String, HostTensor)>,
    pub metadata: Vec<(String, String)>,
}

impl SafeTensors {
    /// The tensor named `name`.
    pub fn get(&self, name: &str) -> Option<&HostTensor> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

pub fn load_safetensors(path: impl AsRef<Path>) -> Result<SafeTensors> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
    parse_safetensors(&bytes).map_err(|e| e.context(path.display()))
}

/// Writes `tensors` (and `metadata`) to `path`.
pub fn save_safetensors(
    path: impl AsRef<Path>,
    tensors: &[(&str, &HostTensor)],
    metadata: &[(&str, &str)],
) -> Result<()> {
    let path = path.as_ref();
    let bytes = safetensors_bytes(tensors, metadata)?;
    std::fs::write(path, bytes).map_err(|e| Error::io(format!("{}: {e}", path.display())))
}

fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "F32",
        DType::F64 => "F64",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::I8 => "I8",
        DType::I32 => "I32",
        DType::I64 => "I64",
        DType::U8 => "U8",
        DType::Bool => "BOOL",
    }
}

fn dtype_of(name: &str) -> Option<DType> {
    [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I8, DType::I32, DType::I64, DType::U8, DType::Bool]
        .into_iter()
        .find(|&d| dtype_name(d) == name)
}

/// The safetensors encoding of `tensors`; a repeated name (or one named `__metadata__`)
/// is an error.
pub fn safetensors_bytes(tensors: &[(&str, &HostTensor)], metadata: &[(&str, &str)]) -> Result<Vec<u8>> {
    let mut header = Map::new();
    if !metadata.is_empty() {
        let meta = metadata.iter().map(|&(k, v)| (k.to_string(), Value::from(v))).collect();
        header.insert("__metadata__".into(), Value::Object(meta));
    }
    let mut offset = 0usize;
    for &(name, t) in tensors {
        let end = offset + t.bytes().len();
        let entry = serde_json::json!({
            "dtype": dtype_name(t.dtype()),
            "shape": t.dims(),
            "data_offsets": [offset, end],
        });
        if header.insert(name.to_string(), entry).is_some() {
            return Err(Error::input(format!("safetensors: tensor name '{name}' is given twice or reserved")));
        }
        offset = end;
    }
    let mut text = serde_json::to_string(&Value::Object(header)).map_err(|e| Error::internal(e.to_string()))?;
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut out = Vec::with_capacity(8 + text.len() + offset);
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    for &(_, t) in tensors {
        out.extend_from_slice(t.bytes());
    }
    Ok(out)
}

/// Parses a whole safetensors file. Errors name the byte offset, tensor and field at
/// fault; the data must be exactly the tensors' bytes, tiled without gaps or overlaps.
pub fn parse_safetensors(bytes: &[u8]) -> Result<SafeTensors> {
    let header_len = bytes.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).ok_or_else(|| {
        Error::parse(format!("safetensors: byte 0: {} bytes is too short for the header length", bytes.len()))
    })?;
    let data_start =
        usize::try_from(header_len).ok().and_then(|n| n.checked_add(8)).filter(|&end| end <= bytes.len()).ok_or_else(
            || {
                Error::parse(format!(
                    "safetensors: byte 0: a header of {header_len} bytes runs past the end of the file ({} bytes)",
                    bytes.len()
                ))
            },
        )?;
    let header: Value = serde_json::from_slice(&bytes[8..data_start])
        .map_err(|e| Error::parse(format!("safetensors: byte 8: the header is not JSON: {e}")))?;
    let Value::Object(header) = header else {
        return Err(Error::parse("safetensors: byte 8: the header is not a JSON object"));
    };
    let data = &bytes[data_start..];
    let mut out = SafeTensors::default();
    let mut spans = Vec::new();
    for (name, entry) in &header {
        let field = |what: &str| Error::parse(format!("safetensors: byte 8: tensor '{name}': {what}"));
        if name == "__metadata__" {
            let Value::Object(meta) = entry else { return Err(field("is not a map of strings")) };
            for (k, v) in meta {
                let v = v.as_str().ok_or_else(|| field(&format!("value of '{k}' is not a string")))?;
                out.metadata.push((k.clone(), v.to_string()));
            }
            continue;
        }
        let dtype_text = entry.get("dtype").and_then(Value::as_str).ok_or_else(|| field("has no 'dtype' string"))?;
        let dtype = dtype_of(dtype_text).ok_or_else(|| field(&format!("unsupported dtype '{dtype_text}'")))?;
        let dims = entry
            .get("shape")
            .and_then(Value::as_array)
            .and_then(|a| {
                a.iter().map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok())).collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| field("'shape' is not a list of sizes"))?;
        let (start, end) = match entry.get("data_offsets").and_then(Value::as_array).map(Vec::as_slice) {
            Some([a, b]) => match (a.as_u64(), b.as_u64()) {
                (Some(a), Some(b)) => (a, b),
                _ => return Err(field("'data_offsets' are not two sizes")),
            },
            _ => return Err(field("has no 'data_offsets' pair")),
        };
        let want = checked_byte_len(&format!("safetensors: tensor '{name}'"), dtype, &dims)?;
        if start > end || end - start != want as u64 {
            return Err(field(&format!(
                "{dtype_text} {} needs {want} bytes, 'data_offsets' [{start}, {end}] span {}",
                fmt_dims(&dims),
                end.saturating_sub(start)
            )));
        }
        spans.push((start, end, name.clone(), dtype, dims));
    }
    // The tensors tile the data: sorted by offsets (empty ones first), each starts where
    // the last ended.
    spans.sort_by_key(|s| (s.0, s.1));
    let mut at = 0u64;
    for (start, end, name, dtype, dims) in spans {
        if start != at || end > data.len() as u64 {
            return Err(Error::parse(format!(
                "safetensors: byte {}: tensor '{name}' spans data bytes [{start}, {end}], expected to start at {at} within the {} data bytes",
                data_start as u64 + start.min(data.len() as u64),
                data.len()
            )));
        }
        let t = HostTensor::from_bytes(dtype, &dims, data[start as usize..end as usize].to_vec())
            .map_err(|e| e.context(format!("safetensors: tensor '{name}' at byte {}", data_start as u64 + start)))?;
        out.tensors.push((name, t));
        at = end;
    }
    if at != data.len() as u64 {
        return Err(Error::parse(format!(
            "safetensors: byte {}: {} data bytes after the last tensor",
            data_start as u64 + at,
            data.len() as u64 - at
        )));
    }
    Ok(out)
}
