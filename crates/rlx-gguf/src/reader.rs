//! Parsing. Every read goes through `Cursor`, which checks bounds and names the field.

use crate::Value;
use rlx_ir::quant::QuantScheme;
use rlx_ir::{Error, Result};
use std::collections::HashSet;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

const MAGIC: &[u8; 4] = b"GGUF";
/// ggml's limit on tensor rank.
const MAX_DIMS: u32 = 4;
/// Array nesting deeper than this is rejected (a malicious file could recurse forever).
const MAX_NESTING: u32 = 8;
/// Metadata array items a file may hold in all (each costs a 32-byte `Value`: 512 MiB).
const MAX_ARRAY_ITEMS: u64 = 1 << 24;
/// Entries reserved ahead of parsing them (a 64k vocabulary in one allocation).
const RESERVE_AHEAD: u64 = 1 << 16;

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
    /// Elements (every tensor `Gguf::parse` accepts has a count that fits; saturating
    /// for one built by hand).
    pub fn numel(&self) -> u64 {
        self.dims.iter().fold(1u64, |a, &d| a.saturating_mul(d))
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
    /// The file's mapping, when `bytes` is one (`open`), for [`Gguf::page_release`].
    map: Option<Arc<memmap2::Mmap>>,
}

/// Drops the resident pages under a slice of mapped bytes (see [`Gguf::page_release`]).
pub type PageRelease = Arc<dyn Fn(&[u8]) + Send + Sync>;

impl Gguf {
    /// Maps and parses a file.
    pub fn open(path: impl AsRef<Path>) -> Result<Gguf> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
        // SAFETY: the map is read-only; like every mmap user we assume the file is not
        // truncated underneath us while mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
        let map = Arc::new(map);
        let mut gguf = Gguf::parse(map.clone()).map_err(|e| e.context(path.display()))?;
        gguf.map = Some(map);
        Ok(gguf)
    }

    /// Parses `bytes` (the whole file).
    pub fn parse(bytes: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Result<Gguf> {
        let (version, metadata, tensors, alignment, data_offset) = {
            let data = (*bytes).as_ref();
            let mut c = Cursor { data, at: 0, items: 0 };
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
            // Counts are claims: capacity is reserved only for entries the remaining bytes
            // can hold (a key takes >= 12 bytes, a tensor info >= 28), so a forged count
            // costs no memory; entries beyond it grow the vector as they really parse.
            let mut metadata: Vec<(String, Value)> = Vec::new();
            c.reserve(&mut metadata, kv_count, 12, "metadata_kv_count")?;
            let mut seen = HashSet::new();
            for i in 0..kv_count {
                let at = c.at;
                let key = c.string(&format!("metadata key {i}"))?;
                let ty = c.u32(&format!("type of metadata {}", esc(&key)))?;
                let value = c.value(ty, &key, 0)?;
                if !seen.insert(key.clone()) {
                    return Err(Error::parse(format!("gguf: byte {at}: metadata key {} appears twice", esc(&key))));
                }
                metadata.push((key, value));
            }
            let mut tensors: Vec<TensorInfo> = Vec::new();
            c.reserve(&mut tensors, tensor_count, 28, "tensor_count")?;
            let mut names = HashSet::new();
            // Where each tensor's info starts, for the data-range errors below.
            let mut info_at = Vec::new();
            for i in 0..tensor_count {
                let at = c.at;
                let name = c.string(&format!("name of tensor {i}"))?;
                let n_dims = c.u32(&format!("n_dims of tensor {}", esc(&name)))?;
                if n_dims == 0 || n_dims > MAX_DIMS {
                    return Err(Error::parse(format!(
                        "gguf: byte {at}: tensor {} has {n_dims} dims (1 to {MAX_DIMS})",
                        esc(&name)
                    )));
                }
                let dims = (0..n_dims)
                    .map(|d| c.u64(&format!("dim {d} of tensor {}", esc(&name))))
                    .collect::<Result<Vec<_>>>()?;
                let ty_at = c.at;
                let ty = c.u32(&format!("type of tensor {}", esc(&name)))?;
                let scheme = QuantScheme::from_ggml_type(ty).ok_or_else(|| {
                    Error::parse(format!("gguf: byte {ty_at}: tensor {} has unsupported ggml type {ty}", esc(&name)))
                })?;
                let offset = c.u64(&format!("offset of tensor {}", esc(&name)))?;
                // The element count must fit too (`numel` multiplies every dim, including
                // the ones a zero dim makes irrelevant to the byte size).
                let bytes = tensor_bytes(scheme, &dims)
                    .filter(|_| dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).is_some())
                    .ok_or_else(|| {
                        Error::parse(format!(
                            "gguf: byte {at}: tensor {} dims {dims:?} do not fit {} (whole blocks, at most 2^64 bytes)",
                            esc(&name),
                            scheme.name()
                        ))
                    })?;
                if !names.insert(name.clone()) {
                    return Err(Error::parse(format!("gguf: byte {at}: tensor {} appears twice", esc(&name))));
                }
                tensors.push(TensorInfo { name, dims, scheme, offset, bytes });
                info_at.push(at);
            }
            let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment").map(|(_, v)| v.as_u64()) {
                None => 32,
                // A power of two that the header end can be rounded up to without overflow;
                // larger than the file is meaningless anyway.
                Some(Some(a)) if a > 0 && a.is_power_of_two() && a <= 1 << 32 => a,
                Some(v) => {
                    return Err(Error::parse(format!(
                        "gguf: metadata 'general.alignment' {v:?} is not a power of two up to 2^32"
                    )));
                }
            };
            let header_end = c.at as u64;
            let data_offset = header_end.next_multiple_of(alignment);
            // Padding to the alignment may run past a file that ends in its header: then
            // no tensor can have data (and `tensor_data` must not slice from past the end).
            let data_len = (data.len() as u64).checked_sub(data_offset);
            for (t, at) in tensors.iter().zip(&info_at) {
                let end = t.offset.checked_add(t.bytes as u64);
                let inside = match (end, data_len) {
                    (Some(end), Some(len)) => end <= len,
                    _ => false,
                };
                if !t.offset.is_multiple_of(alignment) || !inside {
                    return Err(Error::parse(format!(
                        "gguf: byte {at}: tensor {} data at offset {} (+{} bytes) is misaligned (alignment {alignment}) or runs past the file ({} data bytes from byte {data_offset})",
                        esc(&t.name),
                        t.offset,
                        t.bytes,
                        data_len.unwrap_or(0)
                    )));
                }
            }
            (version, metadata, tensors, alignment, data_offset)
        };
        Ok(Gguf { version, metadata, tensors, alignment, data_offset, bytes, map: None })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// A required metadata value, or an error naming the key.
    pub fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| Error::parse(format!("gguf: missing metadata key {}", esc(key))))
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The tensor's bytes, borrowed from the file. Every tensor `parse` accepted lies
    /// inside the file; a `TensorInfo` from elsewhere that does not gets an empty slice
    /// rather than a panic.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        (*self.bytes).as_ref().get(self.tensor_range(t)).unwrap_or(&[])
    }

    /// The file's bytes, shared (for binding tensor data zero-copy).
    pub fn shared_bytes(&self) -> Arc<dyn AsRef<[u8]> + Send + Sync> {
        self.bytes.clone()
    }

    /// For a mapped file (`open`): a function that drops this process's resident pages
    /// wholly inside a slice of its bytes, for a tensor whose readers now read a copy (a
    /// kernel's repacked weight). They are read back from the file if touched again.
    /// None for bytes that are not a file mapping (`parse`), or off Unix.
    pub fn page_release(&self) -> Option<PageRelease> {
        #[cfg(unix)]
        if let Some(map) = &self.map {
            let map = map.clone();
            return Some(Arc::new(move |bytes: &[u8]| {
                const PAGE: usize = 4096;
                let base = map.as_ptr() as usize;
                let (start, end) = (bytes.as_ptr() as usize, bytes.as_ptr() as usize + bytes.len());
                if start < base || end > base + map.len() {
                    return;
                }
                let (first, last) = ((start - base).next_multiple_of(PAGE), (end - base) / PAGE * PAGE);
                if first < last {
                    // SAFETY: the map is read-only and the file is not modified while
                    // mapped (`open`'s assumption), so a dropped page reads back the same
                    // bytes: no borrow of the mapping sees a change. Failure only leaves the
                    // pages resident.
                    let _ =
                        unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, last - first) };
                }
            }));
        }
        None
    }

    /// Byte range of a tensor's data within the file (checked arithmetic: a foreign
    /// `TensorInfo` whose range overflows gets an empty range at the end of the file).
    pub fn tensor_range(&self, t: &TensorInfo) -> std::ops::Range<usize> {
        let start = self.data_offset.checked_add(t.offset).and_then(|s| usize::try_from(s).ok());
        match start.and_then(|s| Some(s..s.checked_add(t.bytes)?)) {
            Some(r) => r,
            None => {
                let len = (*self.bytes).as_ref().len();
                len..len
            }
        }
    }

    /// A tensor decoded to f32.
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>> {
        let t = self.tensor(name).ok_or_else(|| Error::input(format!("gguf: no tensor {}", esc(name))))?;
        let n =
            usize::try_from(t.numel()).map_err(|_| Error::input(format!("gguf: tensor {} is too large", esc(name))))?;
        let mut out = Vec::new();
        out.try_reserve_exact(n)
            .map_err(|_| Error::input(format!("gguf: tensor {}: cannot allocate {n} f32 values", esc(name))))?;
        out.resize(n, 0f32);
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

/// A key or name as it appears in messages: quoted, with control characters and
/// quotes escaped (`'a\r'`), so a hostile key cannot rewrite the terminal line.
pub(crate) fn esc(s: &str) -> String {
    format!("'{}'", s.escape_debug())
}

/// `value of 'key'` in a message.
struct ValueOf<'k>(&'k str);

impl fmt::Display for ValueOf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "value of {}", esc(self.0))
    }
}

/// Least encoded bytes of a value of GGUF type `ty` (None for an unknown type).
fn min_encoded_size(ty: u32) -> Option<u64> {
    Some(match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        // A string's length prefix.
        8 => 8,
        // An array's item type and count.
        9 => 12,
        _ => return None,
    })
}

struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
    /// Array items read so far (nested ones included).
    items: u64,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize, field: &(impl fmt::Display + ?Sized)) -> Result<&[u8]> {
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

    /// Reserves room in `v` for `count` entries of at least `min_size` encoded bytes,
    /// capped by what the rest of the file can hold and by RESERVE_AHEAD, fallibly: the
    /// count is the file's claim, not a size to trust. Past the cap the vector grows as
    /// entries really parse (a forged metadata count in a 98 MB file would otherwise
    /// reserve 98 MB / 12 x 56 bytes = 457 MB before the first key fails).
    fn reserve<T>(
        &self,
        v: &mut Vec<T>,
        count: u64,
        min_size: u64,
        field: &(impl fmt::Display + ?Sized),
    ) -> Result<()> {
        let left = (self.data.len() - self.at) as u64;
        let n = usize::try_from(count.min(left / min_size.max(1)).min(RESERVE_AHEAD)).unwrap_or(usize::MAX);
        v.try_reserve_exact(n).map_err(|_| {
            Error::parse(format!("gguf: byte {}: {field} {count}: cannot allocate room for {n} entries", self.at))
        })
    }

    fn array<const N: usize>(&mut self, field: &(impl fmt::Display + ?Sized)) -> Result<[u8; N]> {
        let b = self.take(N, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    fn u32(&mut self, field: &(impl fmt::Display + ?Sized)) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &(impl fmt::Display + ?Sized)) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn string(&mut self, field: &(impl fmt::Display + ?Sized)) -> Result<String> {
        let at = self.at;
        let len = self.u64(field)?;
        // `take` checks the length against the bytes left before anything is copied.
        let len = usize::try_from(len)
            .map_err(|_| Error::parse(format!("gguf: byte {at}: {field} length {len} is more than the file holds")))?;
        let bytes = self.take(len, field)?;
        let text = std::str::from_utf8(bytes)
            .map_err(|e| Error::parse(format!("gguf: byte {}: {field} is not UTF-8", at + 8 + e.valid_up_to())))?;
        let mut s = String::new();
        s.try_reserve_exact(text.len())
            .map_err(|_| Error::parse(format!("gguf: byte {at}: {field}: cannot allocate {len} bytes")))?;
        s.push_str(text);
        Ok(s)
    }

    fn value(&mut self, ty: u32, key: &str, depth: u32) -> Result<Value> {
        // Formatted only if an error names it (a 262k-token vocabulary is 800k values).
        let field = ValueOf(key);
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
                    b => return Err(Error::parse(format!("gguf: byte {at}: bool {} holds {b}", esc(key)))),
                }
            }
            8 => Value::String(self.string(&field)?),
            9 => {
                let at = self.at;
                if depth >= MAX_NESTING {
                    return Err(Error::parse(format!(
                        "gguf: byte {at}: arrays in {} nest deeper than {MAX_NESTING}",
                        esc(key)
                    )));
                }
                let item = self.u32(&format!("item type of {}", esc(key)))?;
                let count = self.u64(&format!("length of {}", esc(key)))?;
                let min = min_encoded_size(item).ok_or_else(|| {
                    Error::parse(format!("gguf: byte {at}: array {} has unknown item type {item}", esc(key)))
                })?;
                // Every item takes at least `min` bytes: a count the rest of the file
                // cannot hold is malformed, and is refused before anything is allocated.
                let left = (self.data.len() - self.at) as u64;
                if count > left / min {
                    return Err(Error::parse(format!(
                        "gguf: byte {at}: array {} claims {count} items of type {item} (>= {min} bytes each), the file has {left} bytes left",
                        esc(key)
                    )));
                }
                // An item in memory is a 32-byte `Value` however small its encoding: a u8
                // array filling a 98 MB file would take 3 GB. All arrays of a file
                // together hold at most MAX_ARRAY_ITEMS (a 262k vocabulary with scores,
                // types and merges is ~1M).
                self.items = self.items.saturating_add(count);
                if self.items > MAX_ARRAY_ITEMS {
                    return Err(Error::parse(format!(
                        "gguf: byte {at}: array {} brings the file's array items to {}, more than the {MAX_ARRAY_ITEMS} supported",
                        esc(key),
                        self.items
                    )));
                }
                let mut items = Vec::new();
                self.reserve(&mut items, count, min, &format!("length of {}", esc(key)))?;
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
                    "gguf: byte {}: {} has unknown value type {other}",
                    self.at - 4,
                    esc(key)
                )));
            }
        })
    }
}
