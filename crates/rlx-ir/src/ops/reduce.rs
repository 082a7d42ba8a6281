//! Reductions over axes, and argmax.
//!
//! Shape rule: the reduced axes are removed (or kept as 1 with `keep_dims`); axes are
//! distinct and in range; an empty axis list is the identity. `max`/`min` of an empty
//! extent has no value and is rejected when the graph is built; `sum` of nothing is 0,
//! `prod` 1, `mean` NaN (0/0). `mean` takes floats; the others floats and integers
//! (integers wrap).
//!
//! Reference semantics: `sum`/`prod`/`mean` accumulate in the compute type in row-major
//! order of the input; `max`/`min` return NaN if any reduced element is NaN.
//! `argmax` returns the i64 index of the first maximum along `axis`; a NaN counts as
//! the maximum (first NaN wins, as in NumPy).

use super::{Op, Operand, check_axis};
use crate::{DType, Error, Graph, NodeId, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 5] = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod];

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "reduce_sum",
            ReduceOp::Mean => "reduce_mean",
            ReduceOp::Max => "reduce_max",
            ReduceOp::Min => "reduce_min",
            ReduceOp::Prod => "reduce_prod",
        }
    }
}

/// Output dims of reducing `dims` over `axes`.
pub fn reduced_dims(dims: &[usize], axes: &[usize], keep_dims: bool) -> Vec<usize> {
    let mut out = Vec::with_capacity(dims.len());
    for (i, &d) in dims.iter().enumerate() {
        if axes.contains(&i) {
            if keep_dims {
                out.push(1);
            }
        } else {
            out.push(d);
        }
    }
    out
}

pub(crate) fn infer_reduce(op: ReduceOp, x: Operand, axes: &[usize], keep_dims: bool) -> Result<(DType, Vec<usize>)> {
    if x.dtype == DType::Bool {
        return Err(Error::dtype(format!("cannot reduce a bool tensor {} (cast it first)", x.ty())));
    }
    if op == ReduceOp::Mean && !x.dtype.is_float() {
        return Err(Error::dtype(format!("mean takes a float tensor, got {} (cast it first)", x.ty())));
    }
    for (i, &a) in axes.iter().enumerate() {
        check_axis("axis", x, a)?;
        if axes[..i].contains(&a) {
            return Err(Error::shape(format!("axis {a} is listed twice in {axes:?}")));
        }
        if x.dims[a] == 0 && matches!(op, ReduceOp::Max | ReduceOp::Min) {
            return Err(Error::shape(format!(
                "{} over axis {a} of {}: an empty extent has no extremum",
                op.name(),
                x.ty()
            )));
        }
    }
    Ok((x.dtype, reduced_dims(x.dims, axes, keep_dims)))
}

pub(crate) fn infer_argmax(x: Operand, axis: usize, keep_dims: bool) -> Result<(DType, Vec<usize>)> {
    check_axis("axis", x, axis)?;
    if x.dims[axis] == 0 {
        return Err(Error::shape(format!("argmax over empty axis {axis} of {}", x.ty())));
    }
    Ok((DType::I64, reduced_dims(x.dims, &[axis], keep_dims)))
}

impl Graph {
    pub fn reduce(&mut self, op: ReduceOp, x: NodeId, axes: &[usize], keep_dims: bool) -> Result<NodeId> {
        self.push(Op::Reduce { op, axes: axes.to_vec(), keep_dims }, &[x])
    }

    /// i64 index of the first maximum along `axis`.
    pub fn argmax(&mut self, x: NodeId, axis: usize, keep_dims: bool) -> Result<NodeId> {
        self.push(Op::ArgMax { axis, keep_dims }, &[x])
    }
}
