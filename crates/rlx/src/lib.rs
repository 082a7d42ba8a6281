//! RLX: build a typed tensor graph, compile it for a device, run it.
//!
//! `use rlx::prelude::*;` brings in the whole public API contract:
//! [`prelude::Graph`] and its builders, [`prelude::Session`], [`prelude::CompiledGraph`],
//! [`prelude::HostTensor`]. The README's quickstart is compiled and run as a doc test of
//! this crate.

pub use rlx_autodiff as autodiff;
pub use rlx_compile as compile;
pub use rlx_gguf as gguf;
pub use rlx_io as io;
pub use rlx_ir as ir;
pub use rlx_ir::{Error, ErrorKind, Result};
pub use rlx_models as models;
pub use rlx_onnx as onnx;
pub use rlx_optim as optim;
pub use rlx_runtime as runtime;
pub use rlx_train as train;

/// Everything the API contract promises, in one import.
pub mod prelude {
    pub use rlx_autodiff::{grad, grad_with_loss, hvp, jvp};
    pub use rlx_ir::{
        ActivationQuant, AttentionMask, BinaryOp, CompareOp, Conv2dParams, DType, Error, Graph, HostTensor, NodeId, Op,
        PoolParams, ReduceOp, Result, RopeStyle, Unary, quant::QuantScheme,
    };
    pub use rlx_onnx::{OnnxModel, TensorInfo};
    pub use rlx_runtime::{
        CompileOptions, CompiledGraph, Device, ParamBuffer, PrecisionPolicy, Session, SharedBytes, fastest_device,
        is_available,
    };
}

/// README.md's Rust code blocks, compiled and run as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
