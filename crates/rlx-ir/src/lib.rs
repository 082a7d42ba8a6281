//! RLX's tensor IR: [`DType`], [`HostTensor`], the SSA [`Graph`] with shape-inferring
//! builders, the [`Op`] set (one file per family under `ops/`, each with its derivative
//! rules), the derivative passes (`derivative`), a verifier and the JSON format.
//!
//! Architecture invariant: this crate knows nothing of execution. It never depends on a
//! backend, a runtime or a file format other than its own JSON.

pub mod derivative;
mod dtype;
mod error;
mod graph;
mod json;
pub mod ops;
pub mod quant;
pub mod shape;
mod tensor;

pub use dtype::{
    DType, f16_bits_to_f32, f32_to_bf16, f32_to_f16, f64_to_bf16, f64_to_f16, i64_to_f64_round_to_odd,
    round_f32_to_dtype, round_f64_to_small_float, round_to_float_dtype,
};
pub use error::{Error, ErrorKind, Result};
pub use graph::{Graph, Node, NodeId};
pub use json::{FORMAT_NAME, FORMAT_VERSION, base64_decode, base64_encode};
pub use ops::{
    ActivationQuant, AttentionMask, BinaryOp, CompareOp, Conv2dParams, F32Attr, MaskKind, Op, PoolParams, ReduceOp,
    RopeStyle, Unary,
};
pub use quant::QuantScheme;
pub use tensor::{HostTensor, TensorRef, encode_f64, encode_le, i64_to_float_bits};
