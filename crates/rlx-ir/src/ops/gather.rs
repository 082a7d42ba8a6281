//! Row gather (embedding lookup) and its transpose, scatter-add.
//!
//! Shape rule: `table [v, r...]` (rank >= 1, any dtype) and integer `indices` of any shape
//! give `indices.dims ++ [r...]`. `scatter_add(indices, updates)` with `updates` of dims
//! `indices.dims ++ [r...]` gives `[rows, r...]`.
//!
//! Reference semantics: `out[i..] = table[indices[i..]]`. An index outside `0..v` is a
//! run-time error naming the index, its position and the table (never a wrap or a clamp).
//! `scatter_add`: zeros, then `out[indices[i..]] += updates[i..]` in row-major order of
//! `indices` (repeated indices accumulate).
//!
//! Derivatives: gather is linear in `table` (indices have none): its VJP is scatter_add of
//! the cotangent, its JVP the gather of the tangent; scatter_add is the transpose.

use super::{Op, Operand};
use crate::{DType, Error, Graph, NodeId, Result};

pub(crate) fn infer(table: Operand, indices: Operand) -> Result<(DType, Vec<usize>)> {
    if table.dims.is_empty() {
        return Err(Error::shape(format!("table needs rank >= 1, got {}", table.ty())));
    }
    if !indices.dtype.is_int() {
        return Err(Error::dtype(format!("indices must be an integer type, got {}", indices.ty())));
    }
    let mut dims = indices.dims.to_vec();
    dims.extend_from_slice(&table.dims[1..]);
    Ok((table.dtype, dims))
}

pub(crate) fn infer_scatter_add(rows: usize, indices: Operand, updates: Operand) -> Result<(DType, Vec<usize>)> {
    if !indices.dtype.is_int() {
        return Err(Error::dtype(format!("indices must be an integer type, got {}", indices.ty())));
    }
    let k = indices.dims.len();
    if updates.dims.len() < k || updates.dims[..k] != *indices.dims || updates.dtype == DType::Bool {
        return Err(Error::shape(format!(
            "updates {} must be indices.dims ++ row dims (indices {}), not bool",
            updates.ty(),
            indices.ty()
        )));
    }
    let mut dims = vec![rows];
    dims.extend_from_slice(&updates.dims[k..]);
    Ok((updates.dtype, dims))
}

impl Graph {
    /// A `[rows, ...]` table of zeros with `updates` rows added at `indices` (repeats add).
    pub fn scatter_add(&mut self, indices: NodeId, updates: NodeId, rows: usize) -> Result<NodeId> {
        self.push(Op::ScatterAdd { rows }, &[indices, updates])
    }

    /// Rows of `table` (axis 0) picked by integer `indices`: out = indices.dims ++ table.dims[1..].
    pub fn gather(&mut self, table: NodeId, indices: NodeId) -> Result<NodeId> {
        self.push(Op::Gather, &[table, indices])
    }
}

pub(crate) fn vjp_gather(g: &mut Graph, ins: &[NodeId], ct: NodeId) -> Result<Vec<Option<NodeId>>> {
    if !g.is_differentiable(ins[0]) {
        return Ok(vec![None, None]);
    }
    let rows = g.dims(ins[0])[0];
    Ok(vec![Some(g.scatter_add(ins[1], ct, rows)?), None])
}

pub(crate) fn vjp_scatter_add(g: &mut Graph, ins: &[NodeId], ct: NodeId) -> Result<Vec<Option<NodeId>>> {
    if !g.is_differentiable(ins[1]) {
        return Ok(vec![None, None]);
    }
    Ok(vec![None, Some(g.gather(ct, ins[0])?)])
}
