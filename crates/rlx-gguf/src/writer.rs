//! Writing GGUF v3 files: [`GgufStream`] writes the header up front and then each
//! tensor's bytes in order, so a file far larger than memory can be written piece by
//! piece; [`GgufWriter`] collects everything in memory and streams it into a `Vec`.

use crate::Value;
use rlx_ir::quant::QuantScheme;
use rlx_ir::{Error, Result};
use std::io::Write;

const ALIGNMENT: usize = 32;

/// A tensor as the header describes it: its name, ggml-order dims and type.
#[derive(Clone, Debug)]
pub struct TensorHeader {
    pub name: String,
    pub dims: Vec<u64>,
    pub scheme: QuantScheme,
}

impl TensorHeader {
    /// Bytes of the tensor's data.
    fn bytes(&self) -> Result<usize> {
        let numel = self.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        let numel = numel.and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
            Error::input(format!("tensor '{}': {:?} elements overflow", self.name.escape_debug(), self.dims))
        })?;
        self.scheme.row_bytes(numel).map_err(|e| e.context(format!("tensor '{}'", self.name.escape_debug())))
    }
}

/// A GGUF v3 file written front to back: [`GgufStream::begin`] writes the metadata and
/// the tensor table, then [`GgufStream::write`] takes each tensor's bytes in table order,
/// in as many pieces as the caller likes, and [`GgufStream::finish`] checks that every
/// tensor got exactly its size.
pub struct GgufStream<W: Write> {
    out: W,
    /// Data bytes of each tensor, in table order, with its name for messages.
    sizes: Vec<(String, usize)>,
    /// The tensor being written and how many of its bytes have been.
    current: usize,
    done: usize,
}

impl<W: Write> GgufStream<W> {
    pub fn begin(mut out: W, metadata: &[(String, Value)], tensors: &[TensorHeader]) -> Result<GgufStream<W>> {
        let mut head = Vec::new();
        head.extend_from_slice(b"GGUF");
        head.extend_from_slice(&3u32.to_le_bytes());
        head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        for (k, v) in metadata {
            put_string(&mut head, k);
            head.extend_from_slice(&v.type_id().to_le_bytes());
            put_value(&mut head, v);
        }
        let mut offset = 0usize;
        let mut sizes = Vec::with_capacity(tensors.len());
        for t in tensors {
            let bytes = t.bytes()?;
            put_string(&mut head, &t.name);
            head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                head.extend_from_slice(&d.to_le_bytes());
            }
            head.extend_from_slice(&t.scheme.ggml_type().to_le_bytes());
            head.extend_from_slice(&(offset as u64).to_le_bytes());
            offset = (offset + bytes).next_multiple_of(ALIGNMENT);
            sizes.push((t.name.clone(), bytes));
        }
        head.resize(head.len().next_multiple_of(ALIGNMENT), 0);
        out.write_all(&head).map_err(io_error)?;
        let mut stream = GgufStream { out, sizes, current: 0, done: 0 };
        stream.skip_empty()?;
        Ok(stream)
    }

    /// The next `bytes` of the tensor data, continuing where the last call stopped; a
    /// piece may not run past the end of the current tensor.
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let Some((name, size)) = self.sizes.get(self.current) else {
            return Err(Error::input(format!("gguf: {} bytes past the last tensor", bytes.len())));
        };
        if self.done + bytes.len() > *size {
            return Err(Error::input(format!(
                "tensor '{}': {} bytes written, its header says {size}",
                name.escape_debug(),
                self.done + bytes.len()
            )));
        }
        self.out.write_all(bytes).map_err(io_error)?;
        self.done += bytes.len();
        self.skip_empty()
    }

    /// Pads and moves past every tensor that is complete.
    fn skip_empty(&mut self) -> Result<()> {
        while let Some(&(_, size)) = self.sizes.get(self.current) {
            if self.done < size {
                break;
            }
            let pad = size.next_multiple_of(ALIGNMENT) - size;
            self.out.write_all(&[0u8; ALIGNMENT][..pad]).map_err(io_error)?;
            self.current += 1;
            self.done = 0;
        }
        Ok(())
    }

    /// The writer, once every tensor is complete.
    pub fn finish(mut self) -> Result<W> {
        if let Some((name, size)) = self.sizes.get(self.current) {
            return Err(Error::input(format!(
                "tensor '{}': {} of its {size} bytes written",
                name.escape_debug(),
                self.done
            )));
        }
        self.out.flush().map_err(io_error)?;
        Ok(self.out)
    }
}

fn io_error(e: std::io::Error) -> Error {
    Error::io(format!("gguf: writing: {e}"))
}

/// Builds a GGUF v3 file in memory.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<(TensorHeader, Vec<u8>)>,
}

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    pub fn metadata(&mut self, key: &str, value: Value) -> &mut Self {
        self.metadata.push((key.to_string(), value));
        self
    }

    /// Adds a tensor with ggml-order `dims` and its encoded bytes.
    pub fn tensor(&mut self, name: &str, dims: &[u64], scheme: QuantScheme, data: Vec<u8>) -> Result<&mut Self> {
        let header = TensorHeader { name: name.to_string(), dims: dims.to_vec(), scheme };
        let want = header.bytes()?;
        if data.len() != want {
            return Err(Error::input(format!(
                "tensor '{name}': {} bytes for {:?} {} values, need {want}",
                data.len(),
                dims,
                scheme.name()
            )));
        }
        self.tensors.push((header, data));
        Ok(self)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let headers: Vec<TensorHeader> = self.tensors.iter().map(|(h, _)| h.clone()).collect();
        let stream = GgufStream::begin(Vec::new(), &self.metadata, &headers).and_then(|mut s| {
            for (_, data) in &self.tensors {
                s.write(data)?;
            }
            s.finish()
        });
        // Every size was checked by `tensor`, and a Vec takes every write.
        stream.expect("tensor sizes were checked when added")
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => put_string(out, s),
        Value::Array(items) => {
            out.extend_from_slice(&items.first().map_or(0, Value::type_id).to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}
