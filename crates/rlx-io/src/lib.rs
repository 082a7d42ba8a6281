//! Tensor file formats: NumPy `.npy` and safetensors. Every parser returns an `Err` naming the byte offset and field
//! at fault for a malformed or truncated file; none panics on any input.
//!
//! Architecture invariant: formats convert bytes to `HostTensor`s and back; they know
//! nothing of graphs' execution or of any backend.

pub mod npy;
pub mod safetensors;

pub use npy::{load_npy, npy_bytes, parse_npy, save_npy};
pub use safetensors::{SafeTensors, load_safetensors, parse_safetensors, safetensors_bytes, save_safetensors};
