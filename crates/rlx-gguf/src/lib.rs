//! GGUF, the llama.cpp model container: a header, typed metadata, tensor infos and
//! aligned tensor data.
//!
//! The reader works over a memory map (or any byte buffer) and checks every read: a
//! malformed or truncated file is an `Err` naming the byte offset and the field being
//! read (keys and names escaped), never a panic or an out-of-bounds read (fuzzed in
//! tests/reader.rs and by the libFuzzer target in the workspace's fuzz/). Claimed counts
//! never size an allocation beyond what the remaining bytes can hold; every accepted
//! tensor lies inside the file; duplicate keys and tensor names are errors. Tensor
//! bytes are borrowed from the map, not copied.
//!
//! Architecture invariant: this crate parses and writes bytes; quantization formats live
//! in `rlx_ir::quant`, so backends never depend on a file format.

mod reader;
mod writer;

pub use reader::{Gguf, PageRelease, TensorInfo};
pub use writer::{GgufStream, GgufWriter, TensorHeader};

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// GGUF's value-type id.
    pub fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => 0,
            Value::I8(_) => 1,
            Value::U16(_) => 2,
            Value::I16(_) => 3,
            Value::U32(_) => 4,
            Value::I32(_) => 5,
            Value::F32(_) => 6,
            Value::Bool(_) => 7,
            Value::String(_) => 8,
            Value::Array(_) => 9,
            Value::U64(_) => 10,
            Value::I64(_) => 11,
            Value::F64(_) => 12,
        }
    }

    /// Any integer value as u64 (negative ones are None).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// A short rendering for `rlx inspect`: arrays show their length and first items.
    pub fn summary(&self) -> String {
        match self {
            Value::String(s) if s.chars().count() > 60 => format!("{:?}...", s.chars().take(60).collect::<String>()),
            Value::String(s) => format!("{s:?}"),
            Value::Array(a) => {
                let head: Vec<String> = a.iter().take(4).map(Value::summary).collect();
                format!("[{}{}] ({} items)", head.join(", "), if a.len() > 4 { ", ..." } else { "" }, a.len())
            }
            Value::Bool(b) => b.to_string(),
            Value::F32(v) => v.to_string(),
            Value::F64(v) => v.to_string(),
            other => other.as_u64().map_or_else(|| format!("{other:?}"), |v| v.to_string()),
        }
    }
}
