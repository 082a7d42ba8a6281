//! Softmax and log-softmax along one axis.
//!
//! Shape rule: output type equals input type; float only; axis in range.
//!
//! Reference semantics: with `m = max(x)` along the axis,
//! `softmax = exp(x - m) / sum(exp(x - m))`, `log_softmax = x - m - ln(sum(exp(x - m)))`.
//! A row of all -inf gives NaN (as in PyTorch); a NaN anywhere in a row gives NaN.

use super::{Op, Operand, check_axis, check_float};
use crate::{DType, Graph, NodeId, Result};

pub(crate) fn infer(x: Operand, axis: usize) -> Result<(DType, Vec<usize>)> {
    check_float("operand", x)?;
    check_axis("axis", x, axis)?;
    Ok((x.dtype, x.dims.to_vec()))
}

impl Graph {
    pub fn softmax(&mut self, x: NodeId, axis: usize) -> Result<NodeId> {
        self.push(Op::Softmax { axis }, &[x])
    }
    pub fn log_softmax(&mut self, x: NodeId, axis: usize) -> Result<NodeId> {
        self.push(Op::LogSoftmax { axis }, &[x])
    }
}
