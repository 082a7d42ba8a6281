//! Row gather (embedding lookup).
//!
//! Shape rule: `table [v, r...]` (rank >= 1, any dtype) and integer `indices` of any shape
//! give `indices.dims ++ [r...]`.
//!
//! Reference semantics: `out[i..] = table[indices[i..]]`. An index outside `0..v` is a
//! run-time error naming the index, its position and the table (never a wrap or a clamp).

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

impl Graph {
    /// Rows of `table` (axis 0) picked by integer `indices`: out = indices.dims ++ table.dims[1..].
    pub fn gather(&mut self, table: NodeId, indices: NodeId) -> Result<NodeId> {
        self.push(Op::Gather, &[table, indices])
    }
}
