//! Losses.
//!
//! `cross_entropy(logits [n, c], labels [n]) -> []`: float logits, integer labels.
//! Reference semantics: `mean_i (logsumexp(logits[i]) - logits[i, labels[i]])`, with the
//! log-sum-exp taken around the row maximum; `n = 0` gives NaN (mean of nothing). A label
//! outside `0..c` is a run-time error naming it and its row.

use super::{Op, Operand, check_float};
use crate::{DType, Error, Graph, NodeId, Result};

pub(crate) fn infer_cross_entropy(logits: Operand, labels: Operand) -> Result<(DType, Vec<usize>)> {
    check_float("logits", logits)?;
    if !labels.dtype.is_int() {
        return Err(Error::dtype(format!("labels must be an integer type, got {}", labels.ty())));
    }
    if logits.dims.len() != 2 || labels.dims.len() != 1 || labels.dims[0] != logits.dims[0] {
        return Err(Error::shape(format!(
            "expects logits [n, c] and labels [n], got {} and {}",
            logits.ty(),
            labels.ty()
        )));
    }
    if logits.dims[1] == 0 {
        return Err(Error::shape(format!("logits {} have no classes", logits.ty())));
    }
    Ok((logits.dtype, Vec::new()))
}

impl Graph {
    /// Mean softmax cross-entropy of logits [n, c] against integer labels [n]: a scalar [].
    pub fn cross_entropy(&mut self, logits: NodeId, labels: NodeId) -> Result<NodeId> {
        self.push(Op::CrossEntropy, &[logits, labels])
    }
}

// Derivatives in the logits (labels have none): `(softmax(logits) - onehot(labels)) / n`
// per unit of the (scalar) cotangent.

/// `(softmax(logits) - onehot(labels)) / n`.
fn residual(g: &mut Graph, logits: NodeId, labels: NodeId) -> Result<NodeId> {
    let (n, c) = (g.dims(logits)[0], g.dims(logits)[1]);
    let dt = g.dtype(logits);
    let p = g.softmax(logits, 1)?;
    let classes = g.iota(DType::I64, c)?;
    let classes = g.reshape(classes, &[1, c])?;
    let labels = g.cast(labels, DType::I64)?;
    let col = g.reshape(labels, &[n, 1])?;
    let hit = g.eq(col, classes)?;
    let onehot = g.mask(hit, dt)?;
    let d = g.sub(p, onehot)?;
    let inv = g.scalar_f64(dt, 1.0 / n as f64)?;
    g.mul(d, inv)
}

pub(crate) fn vjp(g: &mut Graph, logits: NodeId, labels: NodeId, ct: NodeId) -> Result<Vec<Option<NodeId>>> {
    let r = residual(g, logits, labels)?;
    Ok(vec![Some(g.mul(r, ct)?), None])
}

pub(crate) fn jvp(g: &mut Graph, logits: NodeId, labels: NodeId, t: Option<NodeId>) -> Result<Option<NodeId>> {
    let Some(t) = t else { return Ok(None) };
    let r = residual(g, logits, labels)?;
    let rt = g.mul(r, t)?;
    Ok(Some(g.reduce(super::ReduceOp::Sum, rt, &[0, 1], false)?))
}
