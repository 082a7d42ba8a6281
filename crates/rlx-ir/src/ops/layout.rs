//! Data movement: reshape, transpose, narrow, concat, expand. Exact for every dtype.
//!
//! Reference semantics: all operate on the row-major element order.
//! - `reshape`: same elements, new dims (element counts must match).
//! - `transpose`: `out.dims[i] = x.dims[perm[i]]`, `perm` a permutation of 0..rank.
//! - `narrow`: entries `start..start+len` of `axis` (bounds checked when built).
//! - `concat`: operands joined along `axis`; they agree on every other dim and dtype.
//! - `expand`: NumPy `broadcast_to`: new leading axes, or size-1 axes stretched.

use super::{Op, Operand, check_axis, check_same_dtype};
use crate::shape::{broadcast_dims, checked_numel, fmt_dims};
use crate::{DType, Error, Graph, NodeId, Result};

pub(crate) fn infer_reshape(x: Operand, dims: &[usize]) -> Result<(DType, Vec<usize>)> {
    let want = checked_numel(dims).ok_or_else(|| Error::shape(format!("target shape {} overflows", fmt_dims(dims))))?;
    let have = crate::shape::numel(x.dims);
    if want != have {
        return Err(Error::shape(format!(
            "cannot reshape {} ({have} elements) to {} ({want} elements)",
            x.ty(),
            fmt_dims(dims)
        )));
    }
    Ok((x.dtype, dims.to_vec()))
}

pub(crate) fn infer_transpose(x: Operand, perm: &[usize]) -> Result<(DType, Vec<usize>)> {
    let rank = x.dims.len();
    let mut seen = vec![false; rank];
    let valid = perm.len() == rank && perm.iter().all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
    if !valid {
        return Err(Error::shape(format!("perm {perm:?} is not a permutation of the {rank} axes of {}", x.ty())));
    }
    Ok((x.dtype, perm.iter().map(|&p| x.dims[p]).collect()))
}

pub(crate) fn infer_narrow(x: Operand, axis: usize, start: usize, len: usize) -> Result<(DType, Vec<usize>)> {
    check_axis("axis", x, axis)?;
    let extent = x.dims[axis];
    if start.checked_add(len).is_none_or(|end| end > extent) {
        return Err(Error::shape(format!(
            "window start {start} len {len} exceeds axis {axis} of {} (size {extent})",
            x.ty()
        )));
    }
    let mut dims = x.dims.to_vec();
    dims[axis] = len;
    Ok((x.dtype, dims))
}

pub(crate) fn infer_concat(xs: &[Operand], axis: usize) -> Result<(DType, Vec<usize>)> {
    let dtype = check_same_dtype(xs)?;
    let first = xs[0];
    check_axis("axis", first, axis)?;
    let mut total = 0usize;
    for x in xs {
        let compatible = x.dims.len() == first.dims.len()
            && x.dims.iter().zip(first.dims).enumerate().all(|(i, (a, b))| i == axis || a == b);
        if !compatible {
            return Err(Error::shape(format!("{} and {} must agree on every axis but {axis}", first.ty(), x.ty())));
        }
        total = total.checked_add(x.dims[axis]).ok_or_else(|| Error::shape("concat length overflows"))?;
    }
    let mut dims = first.dims.to_vec();
    dims[axis] = total;
    Ok((dtype, dims))
}

pub(crate) fn infer_expand(x: Operand, dims: &[usize]) -> Result<(DType, Vec<usize>)> {
    if dims.len() < x.dims.len() || broadcast_dims(x.dims, dims).as_deref() != Some(dims) {
        return Err(Error::shape(format!("cannot expand {} to {}", x.ty(), fmt_dims(dims))));
    }
    Ok((x.dtype, dims.to_vec()))
}

impl Graph {
    pub fn reshape(&mut self, x: NodeId, dims: &[usize]) -> Result<NodeId> {
        self.push(Op::Reshape { dims: dims.to_vec() }, &[x])
    }
    pub fn transpose(&mut self, x: NodeId, perm: &[usize]) -> Result<NodeId> {
        self.push(Op::Transpose { perm: perm.to_vec() }, &[x])
    }
    pub fn narrow(&mut self, x: NodeId, axis: usize, start: usize, len: usize) -> Result<NodeId> {
        self.push(Op::Narrow { axis, start, len }, &[x])
    }
    pub fn concat(&mut self, xs: &[NodeId], axis: usize) -> Result<NodeId> {
        self.push(Op::Concat { axis }, xs)
    }
    /// NumPy `broadcast_to`.
    pub fn expand(&mut self, x: NodeId, dims: &[usize]) -> Result<NodeId> {
        self.push(Op::Expand { dims: dims.to_vec() }, &[x])
    }
}

// Derivatives: every layout op is linear. VJPs: reshape back, the inverse permutation,
// narrow's cotangent padded with zeros, concat's split by narrow, expand's summed back.
// JVPs: the same op on the tangent.

pub(crate) fn vjp(g: &mut Graph, op: &Op, ins: &[NodeId], ct: NodeId) -> Result<Vec<Option<NodeId>>> {
    if !g.is_differentiable(ins[0]) {
        return Ok(vec![None; ins.len()]);
    }
    let x = ins[0];
    let xd = g.dims(x).to_vec();
    Ok(match op {
        Op::Reshape { .. } => vec![Some(g.reshape(ct, &xd)?)],
        Op::Transpose { perm } => {
            let mut inverse = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inverse[p] = i;
            }
            vec![Some(g.transpose(ct, &inverse)?)]
        }
        Op::Narrow { axis, start, len } => {
            let zeros = |g: &mut Graph, n: usize| -> Result<Option<NodeId>> {
                let mut d = xd.clone();
                d[*axis] = n;
                (n > 0).then(|| g.full(g.dtype(ct), &d, 0.0)).transpose()
            };
            let before = zeros(g, *start)?;
            let after = zeros(g, xd[*axis] - start - len)?;
            let parts: Vec<NodeId> = [before, Some(ct), after].into_iter().flatten().collect();
            vec![Some(if parts.len() == 1 { ct } else { g.concat(&parts, *axis)? })]
        }
        Op::Concat { axis } => {
            let mut start = 0;
            let mut out = Vec::new();
            for &i in ins {
                let len = g.dims(i)[*axis];
                out.push(Some(g.narrow(ct, *axis, start, len)?));
                start += len;
            }
            out
        }
        Op::Expand { .. } => vec![Some(g.sum_to(ct, &xd)?)],
        _ => return Err(Error::internal(format!("{} is not a layout op", op.name()))),
    })
}

pub(crate) fn jvp(g: &mut Graph, op: &Op, ins: &[NodeId], out: NodeId, t: &[Option<NodeId>]) -> Result<Option<NodeId>> {
    if let Op::Concat { axis } = op {
        let parts = ins.iter().zip(t).map(|(&x, &tx)| g.or_zeros(tx, x)).collect::<Result<Vec<_>>>()?;
        return Ok(Some(g.concat(&parts, *axis)?));
    }
    let Some(tx) = t[0] else { return Ok(None) };
    let mut op = op.clone();
    // The op again, on the tangent (its attributes already fit the tangent's dims).
    if let Op::Expand { dims } = &mut op {
        *dims = g.dims(out).to_vec();
    }
    Ok(Some(g.push(op, &[tx])?))
}
