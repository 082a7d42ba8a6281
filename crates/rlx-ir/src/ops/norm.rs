//! LayerNorm and RmsNorm over the last axis.
//!
//! Shape rule: output type equals `x`'s; float only, rank >= 1; gamma and beta are
//! vectors of the last axis' length and `x`'s dtype; eps is finite and >= 0.
//!
//! Reference semantics, per row of length h:
//! `layer_norm = (x - mean) / sqrt(var + eps) * gamma + beta`, var the biased (1/h) variance;
//! `rms_norm = x / sqrt(mean(x^2) + eps) * gamma`.

use super::{F32Attr, Op, Operand, check_finite, check_float};
use crate::{DType, Error, Graph, NodeId, Result};

pub(crate) fn infer(x: Operand, affine: &[Operand]) -> Result<(DType, Vec<usize>)> {
    check_float("x", x)?;
    let Some(&h) = x.dims.last() else {
        return Err(Error::shape(format!("x needs rank >= 1, got {}", x.ty())));
    };
    for p in affine {
        if p.dtype != x.dtype || p.dims != [h] {
            return Err(Error::shape(format!(
                "gamma/beta must be {}[{h}] to match x {}, got {}",
                x.dtype,
                x.ty(),
                p.ty()
            )));
        }
    }
    Ok((x.dtype, x.dims.to_vec()))
}

fn check_eps(eps: f32) -> Result<F32Attr> {
    check_finite("eps", eps)?;
    if eps < 0.0 {
        return Err(Error::graph(format!("eps must be >= 0, got {eps}")));
    }
    Ok(F32Attr(eps))
}

impl Graph {
    /// Normalizes over the last axis; gamma/beta have the last axis' length.
    pub fn layer_norm(&mut self, x: NodeId, gamma: Option<NodeId>, beta: Option<NodeId>, eps: f32) -> Result<NodeId> {
        let eps = check_eps(eps).map_err(|e| e.context("layer_norm"))?;
        let inputs: Vec<NodeId> = [Some(x), gamma, beta].into_iter().flatten().collect();
        self.push(Op::LayerNorm { eps, gamma: gamma.is_some(), beta: beta.is_some() }, &inputs)
    }

    pub fn rms_norm(&mut self, x: NodeId, gamma: Option<NodeId>, eps: f32) -> Result<NodeId> {
        let eps = check_eps(eps).map_err(|e| e.context("rms_norm"))?;
        let inputs: Vec<NodeId> = [Some(x), gamma].into_iter().flatten().collect();
        self.push(Op::RmsNorm { eps, gamma: gamma.is_some() }, &inputs)
    }
}
