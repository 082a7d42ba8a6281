//! Tensor file formats. Every parser returns an `Err` naming the byte offset and field
//! at fault for a malformed or truncated file; none panics on any input.
//!
//! Architecture invariant: formats convert bytes to `HostTensor`s and back; they know
//! nothing of graphs' execution or of any backend.

pub mod npy;

pub use npy::{load_npy, npy_bytes, parse_npy, save_npy};
