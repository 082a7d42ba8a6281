//! ONNX import: `OnnxModel::load("model.onnx")?.run(&[("input_ids", &ids)])`.
//!
//! The protobuf is read with prost (`proto`, generated code committed); tensors' raw bytes
//! stay in the mapped file (`tensor`). For each distinct set of input shapes the graph is
//! imported into an IR graph (`import`, op by op through the table in `ops`), with shape
//! subgraphs folded to constants, compiled through rlx-runtime and cached (`model`).

pub mod import;
pub mod model;
pub mod ops;
pub mod proto;
pub mod tensor;
mod wire;

pub use model::{OnnxModel, TensorInfo};
