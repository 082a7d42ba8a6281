//! Parsing. Every read goes through `Cursor`, which checks bounds and names the field.

use crate::Value;
use rlx_ir::quant::QuantScheme;
use rlx_ir::{Error, Result};
use std::path::Path;
use std::sync::Arc;

const MAGIC: &[u8; 4] = b"GGUF";
/// ggml's limit on tensor rank.
const MAX_DIMS: u32 = 4;
/// Array nesting deeper than this is rejected (a malicious file could recurse forever).
const MAX_NESTING: u32 = 8;

/// A tensor's entry in the header.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the innermost (contiguous) axis.
    pub dims: Vec<u64>,
    pub scheme: QuantScheme,
    /// Byte offset from the start of the data section.
    pub offset: u64,
    /// Bytes of data.
    pub bytes: usize,
}

impl TensorInfo {
    pub fn numel(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Row-major dims (outermost first), as RLX shapes are written.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

/// A parsed GGUF file whose tensor data stays in the (shared, mapped) bytes.
pub struct Gguf {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Byte offset of the data section in the file.
    pub data_offset: u64,
    bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
}

impl Gguf {
    /// Maps and parses a file.
    pub fn open(path: impl AsRef<Path>) -> Result<Gguf> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
        // SAFETY: the map is read-only; like every mmap user we assume the file is not
        // truncated underneath us while mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
        Gguf::parse(Arc::new(map)).map_err(|e| e.context(path.display()))
    }

    /// Parses `bytes` (the whole file).
    pub fn parse(bytes: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Result<Gguf> {
        let (version, metadata, tensors, alignment, data_offset) = {
            let data = (*bytes).as_ref();
            let mut c = Cursor { data, at: 0 };
            let magic = c.take(4, "magic")?;
            if magic != MAGIC {
                return Err(Error::parse(format!("gguf: byte 0: magic {magic:?} is not \"GGUF\"")));
            }
            let version = c.u32("version")?;
            if !(2..=3).contains(&version) {
                return Err(Error::parse(format!("gguf: byte 4: unsupported version {version} (reads 2 and 3)")));
            }
            let tensor_count = c.u64("tensor_count")?;
            let kv_count = c.u64("metadata_kv_count")?;
            let mut metadata = Vec::new();
            for i in 0..kv_count {
                let key = c.string(&format!("metadata key {i}"))?;
                let ty = c.u32(&format!("type of metadata '{key}'"))?;
                let value = c.value(ty, &key, 0)?;
                metadata.push((key, value));
            }
            let mut tensors = Vec::new();
            for i in 0..tensor_count {
                let at = c.at;
                let name = c.string(&format!("name of tensor {i}"))?;
                let n_dims = c.u32(&format!("n_dims of tensor '{name}'"))?;
                if n_dims == 0 || n_dims > MAX_DIMS {
                    return Err(Error::parse(format!(
                        "gguf: byte {at}: tensor '{name}' has {n_dims} dims (1 to {MAX_DIMS})"
                    )));
                }
                let dims =
                    (0..n_dims).map(|d| c.u64(&format!("dim {d} of tensor '{name}'"))).collect::<Result<Vec<_>>>()?;
                let ty_at = c.at;
                let ty = c.u32(&format!("type of tensor '{name}'"))?;
                let scheme = QuantScheme::from_ggml_type(ty).ok_or_else(|| {
                    Error::parse(format!("gguf: byte {ty_at}: tensor '{name}' has unsupported ggml type {ty}"))
                })?;
                let offset = c.u64(&format!("offset of tensor '{name}'"))?;
                let bytes = tensor_bytes(scheme, &dims).ok_or_else(|| {
                    Error::parse(format!("gguf: byte {at}: tensor '{name}' dims {dims:?} do not fit {}", scheme.name()))
                })?;
                tensors.push(TensorInfo { name, dims, scheme, offset, bytes });
            }
            let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment").map(|(_, v)| v.as_u64()) {
                None => 32,
                Some(Some(a)) if a > 0 && a.is_power_of_two() => a,
                Some(_) => return Err(Error::parse("gguf: general.alignment is not a power of two")),
            };
            let data_offset = (c.at as u64).next_multiple_of(alignment);
            let data_len = (data.len() as u64).saturating_sub(data_offset);
            for t in &tensors {
                let end = t.offset.checked_add(t.bytes as u64);
                if !t.offset.is_multiple_of(alignment) || end.is_none_or(|e| e > data_len) {
                    return Err(Error::parse(format!(
                        "gguf: tensor '{}' data at offset {} (+{} bytes) is misaligned or runs past the file ({} data bytes from byte {data_offset})",
                        t.name, t.offset, t.bytes, data_len
                    )));
                }
            }
            (version, metadata, tensors, alignment, data_offset)
        };
        Ok(Gguf { version, metadata, tensors, alignment, data_offset, bytes })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// A required metadata value, or an error naming the key.
    pub fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| Error::parse(format!("gguf: missing metadata key '{key}'")))
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The tensor's bytes, borrowed from the file.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let start = (self.data_offset + t.offset) as usize;
        &(*self.bytes).as_ref()[start..start + t.bytes]
    }

    /// The file's bytes, shared (for binding tensor data zero-copy).
    pub fn shared_bytes(&self) -> Arc<dyn AsRef<[u8]> + Send + Sync> {
        self.bytes.clone()
    }

    /// Byte range of a tensor's data within the file.
    pub fn tensor_range(&self, t: &TensorInfo) -> std::ops::Range<usize> {
        let start = (self.data_offset + t.offset) as usize;
        start..start + t.bytes
    }

    /// A tensor decoded to f32.
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>> {
        let t = self.tensor(name).ok_or_else(|| Error::input(format!("gguf: no tensor '{name}'")))?;
        let mut out = vec![0f32; t.numel() as usize];
        rlx_ir::quant::dequantize(t.scheme, self.tensor_data(t), &mut out)?;
        Ok(out)
    }
}

/// Data bytes of a tensor, or None if the innermost dim is not whole blocks or it overflows.
fn tensor_bytes(scheme: QuantScheme, dims: &[u64]) -> Option<usize> {
    let inner = *dims.first()?;
    if !inner.is_multiple_of(scheme.block_size() as u64) {
        return None;
    }
    let rows = dims[1..].iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
    let row = (inner / scheme.block_size() as u64).checked_mul(scheme.block_bytes() as u64)?;
    usize::try_from(rows.checked_mul(row)?).ok()
}

struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize, field: &str) -> Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.data.len()).ok_or_else(|| {
            Error::parse(format!(
                "gguf: byte {}: {field} needs {n} bytes, the file has {} left",
                self.at,
                self.data.len().saturating_sub(self.at)
            ))
        })?;
        let s = &self.data[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N]> {
        let b = self.take(N, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    fn u32(&mut self, field: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn string(&mut self, field: &str) -> Result<String> {
        let at = self.at;
        let len = self.u64(field)?;
        let len = usize::try_from(len)
            .map_err(|_| Error::parse(format!("gguf: byte {at}: {field} length {len} overflows")))?;
        let bytes = self.take(len, field)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| {
            Error::parse(format!("gguf: byte {}: {field} is not UTF-8", at + 8 + e.utf8_error().valid_up_to()))
        })
    }

    fn value(&mut self, ty: u32, key: &str, depth: u32) -> Result<Value> {
        let field = format!("value of '{key}'");
        Ok(match ty {
            0 => Value::U8(self.array::<1>(&field)?[0]),
            1 => Value::I8(self.array::<1>(&field)?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.array(&field)?)),
            3 => Value::I16(i16::from_le_bytes(self.array(&field)?)),
            4 => Value::U32(self.u32(&field)?),
            5 => Value::I32(i32::from_le_bytes(self.array(&field)?)),
            6 => Value::F32(f32::from_le_bytes(self.array(&field)?)),
            7 => {
                let at = self.at;
                match self.array::<1>(&field)?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => return Err(Error::parse(format!("gguf: byte {at}: bool '{key}' holds {b}"))),
                }
            }
            8 => Value::String(self.string(&field)?),
            9 => {
                let at = self.at;
                if depth >= MAX_NESTING {
                    return Err(Error::parse(format!(
                        "gguf: byte {at}: arrays in '{key}' nest deeper than {MAX_NESTING}"
                    )));
                }
                let item = self.u32(&format!("item type of '{key}'"))?;
                let count = self.u64(&format!("length of '{key}'"))?;
                // Every item takes at least one byte: a count past the file is malformed.
                if count > (self.data.len() - self.at) as u64 {
                    return Err(Error::parse(format!(
                        "gguf: byte {at}: array '{key}' claims {count} items, more than the file holds"
                    )));
                }
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(item, key, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64(&field)?),
            11 => Value::I64(i64::from_le_bytes(self.array(&field)?)),
            12 => Value::F64(f64::from_le_bytes(self.array(&field)?)),
            other => {
                return Err(Error::parse(format!(
                    "gguf: byte {}: '{key}' has unknown value type {other}",
                    self.at - 4
                )));
            }
        })
    }
}
