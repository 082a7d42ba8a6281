//! KV-cache append.
//!
//! Shape rule: `cache` and `new` share dtype, rank and every dim but `axis`, where `new`
//! is no longer than `cache`; `pos` is an integer scalar (`[]` or `[1]`). Out: `cache`'s type.
//!
//! Reference semantics: `out = cache` with `out[.., pos + j, ..] = new[.., j, ..]` along
//! `axis` for `j` in `0..new.dims[axis]`. `pos + len` past the cache is a run-time error
//! naming both (never a partial write).

use super::{Op, Operand, check_axis, check_same_dtype};
use crate::{DType, Error, Graph, NodeId, Result};

pub(crate) fn infer(cache: Operand, new: Operand, pos: Operand, axis: usize) -> Result<(DType, Vec<usize>)> {
    let dtype = check_same_dtype(&[cache, new])?;
    check_axis("axis", cache, axis)?;
    let fits = new.dims.len() == cache.dims.len()
        && new.dims.iter().zip(cache.dims).enumerate().all(|(i, (n, c))| if i == axis { n <= c } else { n == c });
    if !fits {
        return Err(Error::shape(format!("new rows {} do not fit cache {} along axis {axis}", new.ty(), cache.ty())));
    }
    if !pos.dtype.is_int() || crate::shape::numel(pos.dims) != 1 || pos.dims.len() > 1 {
        return Err(Error::shape(format!("pos must be an integer scalar ([] or [1]), got {}", pos.ty())));
    }
    Ok((dtype, cache.dims.to_vec()))
}

impl Graph {
    /// `cache` with `new` written at position `pos` (an integer scalar node) along `axis`.
    pub fn kv_append(&mut self, cache: NodeId, new: NodeId, pos: NodeId, axis: usize) -> Result<NodeId> {
        self.push(Op::KvAppend { axis }, &[cache, new, pos])
    }
}
