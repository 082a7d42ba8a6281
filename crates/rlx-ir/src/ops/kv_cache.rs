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

// Derivatives: linear in `cache` and `new` (pos has none). The cache's cotangent is the
// output's with the written rows zeroed; `new`'s is those rows, picked by a gather at
// `pos + 0..len` along `axis` (pos is only known when the graph runs).

/// Bool mask over `axis` (broadcastable to the cache): rows `pos..pos + len`.
fn written_rows(g: &mut Graph, axis: usize, cache: NodeId, new: NodeId, pos: NodeId) -> Result<NodeId> {
    let (cap, len) = (g.dims(cache)[axis], g.dims(new)[axis]);
    let rows = g.iota(DType::I64, cap)?;
    let pos = g.reshape(pos, &[1])?;
    let n = g.scalar_f64(DType::I64, len as f64)?;
    let end = g.add(pos, n)?;
    let from = g.ge(rows, pos)?;
    let to = g.lt(rows, end)?;
    let (from, to) = (g.cast(from, DType::I32)?, g.cast(to, DType::I32)?);
    let both = g.mul(from, to)?;
    let one = g.scalar_f64(DType::I32, 1.0)?;
    let hit = g.eq(both, one)?;
    let mut dims = vec![1; g.dims(cache).len()];
    dims[axis] = cap;
    g.reshape(hit, &dims)
}

pub(crate) fn vjp(g: &mut Graph, axis: usize, ins: &[NodeId], ct: NodeId) -> Result<Vec<Option<NodeId>>> {
    let (cache, new) = (ins[0], ins[1]);
    if !g.is_differentiable(cache) {
        return Ok(vec![None; 3]);
    }
    let pos = g.cast(ins[2], DType::I64)?;
    let hit = written_rows(g, axis, cache, new, pos)?;
    let zeros = g.full_like(ct, 0.0)?;
    let d_cache = g.where_(hit, zeros, ct)?;
    // new's rows: move `axis` first, gather rows pos + 0..len, move it back.
    let len = g.dims(new)[axis];
    let rank = g.dims(ct).len();
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.remove(axis);
    perm.insert(0, axis);
    let front = g.transpose(ct, &perm)?;
    let offsets = g.iota(DType::I64, len)?;
    let p = g.reshape(pos, &[1])?;
    let rows = g.add(offsets, p)?;
    let picked = g.gather(front, rows)?;
    let mut inverse = vec![0; rank];
    for (i, &a) in perm.iter().enumerate() {
        inverse[a] = i;
    }
    Ok(vec![Some(d_cache), Some(g.transpose(picked, &inverse)?), None])
}

pub(crate) fn jvp(g: &mut Graph, axis: usize, ins: &[NodeId], t: &[Option<NodeId>]) -> Result<Option<NodeId>> {
    let tc = g.or_zeros(t[0], ins[0])?;
    let tn = g.or_zeros(t[1], ins[1])?;
    Ok(Some(g.kv_append(tc, tn, ins[2], axis)?))
}
