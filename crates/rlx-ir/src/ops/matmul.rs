//! Batched matrix product.
//!
//! Shape rule: `[..., m, k] x [..., k, n] -> [..., m, n]`; both operands have rank >= 2
//! and their batch dims broadcast (NumPy `matmul`). Same dtype, not bool.
//!
//! Reference semantics: `out[.., i, j] = sum_p a[.., i, p] * b[.., p, j]`, accumulated
//! in the compute type (f32 for f32/f16/bf16, f64 for f64, wrapping for integers).

use super::{Op, Operand, check_same_dtype};
use crate::shape::broadcast_dims;
use crate::{DType, Error, Graph, NodeId, Result};

pub(crate) fn infer(a: Operand, b: Operand) -> Result<(DType, Vec<usize>)> {
    let dtype = check_same_dtype(&[a, b])?;
    if dtype == DType::Bool {
        return Err(Error::dtype(format!("matmul does not take bool operands ({}, {})", a.ty(), b.ty())));
    }
    if a.dims.len() < 2 || b.dims.len() < 2 {
        return Err(Error::shape(format!(
            "operands need rank >= 2 ([..., m, k] x [..., k, n]), got {} and {}",
            a.ty(),
            b.ty()
        )));
    }
    let (ra, rb) = (a.dims.len(), b.dims.len());
    let (m, ka, kb, n) = (a.dims[ra - 2], a.dims[ra - 1], b.dims[rb - 2], b.dims[rb - 1]);
    if ka != kb {
        return Err(Error::shape(format!("inner dims differ: {} has k = {ka}, {} has k = {kb}", a.ty(), b.ty())));
    }
    let mut dims = broadcast_dims(&a.dims[..ra - 2], &b.dims[..rb - 2])
        .ok_or_else(|| Error::shape(format!("batch dims of {} and {} do not broadcast", a.ty(), b.ty())))?;
    dims.extend([m, n]);
    Ok((dtype, dims))
}

impl Graph {
    /// Batched matmul: [..., m, k] x [..., k, n] -> [..., m, n], batch dims broadcast.
    pub fn matmul(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.push(Op::MatMul, &[a, b])
    }
}

// Derivatives: bilinear. `da = ct @ b^T`, `db = a^T @ ct`, each summed over the batch
// axes its operand was broadcast along.

pub(crate) fn vjp(g: &mut Graph, a: NodeId, b: NodeId, ct: NodeId) -> Result<Vec<Option<NodeId>>> {
    if !g.is_differentiable(a) {
        return Ok(vec![None, None]);
    }
    let bt = g.transpose_last2(b)?;
    let da = g.matmul(ct, bt)?;
    let at = g.transpose_last2(a)?;
    let db = g.matmul(at, ct)?;
    let (ad, bd) = (g.dims(a).to_vec(), g.dims(b).to_vec());
    Ok(vec![Some(g.sum_to(da, &ad)?), Some(g.sum_to(db, &bd)?)])
}

pub(crate) fn jvp(g: &mut Graph, a: NodeId, b: NodeId, t: &[Option<NodeId>]) -> Result<Option<NodeId>> {
    let left = t[0].map(|ta| g.matmul(ta, b)).transpose()?;
    let right = t[1].map(|tb| g.matmul(a, tb)).transpose()?;
    g.add_opt(left, right)
}
