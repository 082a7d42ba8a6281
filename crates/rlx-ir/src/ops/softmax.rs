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

// Derivatives, from the output y: softmax `dx = y (ct - sum(ct y))`; log-softmax
// `dx = ct - exp(y) sum(ct)` (sums along the axis).

pub(crate) fn vjp_softmax(g: &mut Graph, axis: usize, y: NodeId, ct: NodeId) -> Result<Vec<Option<NodeId>>> {
    Ok(vec![Some(softmax_linear(g, axis, y, ct)?)])
}

pub(crate) fn jvp_softmax(g: &mut Graph, axis: usize, y: NodeId, t: Option<NodeId>) -> Result<Option<NodeId>> {
    t.map(|t| softmax_linear(g, axis, y, t)).transpose()
}

/// `y (v - sum(v y))`: softmax's Jacobian (symmetric) applied to `v`.
fn softmax_linear(g: &mut Graph, axis: usize, y: NodeId, v: NodeId) -> Result<NodeId> {
    let vy = g.mul(v, y)?;
    let s = g.reduce(super::ReduceOp::Sum, vy, &[axis], true)?;
    let d = g.sub(v, s)?;
    g.mul(y, d)
}

pub(crate) fn vjp_log_softmax(g: &mut Graph, axis: usize, y: NodeId, ct: NodeId) -> Result<Vec<Option<NodeId>>> {
    let s = g.reduce(super::ReduceOp::Sum, ct, &[axis], true)?;
    let p = g.unary(super::Unary::Exp, y)?;
    let ps = g.mul(p, s)?;
    Ok(vec![Some(g.sub(ct, ps)?)])
}

pub(crate) fn jvp_log_softmax(g: &mut Graph, axis: usize, y: NodeId, t: Option<NodeId>) -> Result<Option<NodeId>> {
    let Some(t) = t else { return Ok(None) };
    let p = g.unary(super::Unary::Exp, y)?;
    let pt = g.mul(p, t)?;
    let s = g.reduce(super::ReduceOp::Sum, pt, &[axis], true)?;
    Ok(Some(g.sub(t, s)?))
}
