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

pub(crate) fn infer(eps: f32, x: Operand, affine: &[Operand]) -> Result<(DType, Vec<usize>)> {
    // Checked here, not only in the builders: `Graph::push` and documents reach this rule.
    check_eps(eps)?;
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

// Derivatives, recomputing the normalized rows xhat from x (last axis, length h):
// layer norm: xhat = (x - mean) r, r = 1 / sqrt(var + eps); rms norm: xhat = x r,
// r = 1 / sqrt(mean(x^2) + eps). With c = ct * gamma (or ct):
// layer norm `dx = r (c - mean(c) - xhat mean(c xhat))`, rms norm `dx = r (c - xhat mean(c xhat))`;
// `dgamma = sum over rows of ct xhat`, `dbeta = sum over rows of ct`.

/// (xhat, r) of `x`, both of x's dims.
fn normalized(g: &mut Graph, rms: bool, eps: f32, x: NodeId) -> Result<(NodeId, NodeId)> {
    let axis = g.dims(x).len() - 1;
    let mean = |g: &mut Graph, v: NodeId| g.reduce(super::ReduceOp::Mean, v, &[axis], true);
    let centered = if rms {
        x
    } else {
        let m = mean(g, x)?;
        g.sub(x, m)?
    };
    let sq = g.mul(centered, centered)?;
    let var = mean(g, sq)?;
    let e = g.scalar_f64(g.dtype(x), eps as f64)?;
    let ve = g.add(var, e)?;
    let r = g.unary(super::Unary::Rsqrt, ve)?;
    let dims = g.dims(x).to_vec();
    let r = g.broadcast_to(r, &dims)?;
    Ok((g.mul(centered, r)?, r))
}

/// The normalization's Jacobian applied to `v` (x's dims): r (v - [mean v] - xhat mean(v xhat)).
fn normalize_linear(g: &mut Graph, rms: bool, xhat: NodeId, r: NodeId, v: NodeId) -> Result<NodeId> {
    let axis = g.dims(v).len() - 1;
    let vx = g.mul(v, xhat)?;
    let m = g.reduce(super::ReduceOp::Mean, vx, &[axis], true)?;
    let proj = g.mul(xhat, m)?;
    let mut d = g.sub(v, proj)?;
    if !rms {
        let mv = g.reduce(super::ReduceOp::Mean, v, &[axis], true)?;
        d = g.sub(d, mv)?;
    }
    g.mul(r, d)
}

/// Sum over every axis but the last (rows), giving `[h]`.
fn sum_rows(g: &mut Graph, v: NodeId) -> Result<NodeId> {
    let h = *g.dims(v).last().unwrap_or(&1);
    g.sum_to(v, &[h])
}

/// A norm node's op and operands, unpacked.
struct Norm {
    rms: bool,
    eps: f32,
    x: NodeId,
    gamma: Option<NodeId>,
    has_beta: bool,
}

fn parts(op: &Op, ins: &[NodeId]) -> Result<Norm> {
    let (rms, eps, has_gamma, has_beta) = match *op {
        Op::LayerNorm { eps, gamma, beta } => (false, eps.0, gamma, beta),
        Op::RmsNorm { eps, gamma } => (true, eps.0, gamma, false),
        _ => return Err(Error::internal(format!("{} is not a norm", op.name()))),
    };
    Ok(Norm { rms, eps, x: ins[0], gamma: has_gamma.then(|| ins[1]), has_beta })
}

pub(crate) fn vjp(g: &mut Graph, op: &Op, ins: &[NodeId], ct: NodeId) -> Result<Vec<Option<NodeId>>> {
    let Norm { rms, eps, x, gamma, has_beta } = parts(op, ins)?;
    let (xhat, r) = normalized(g, rms, eps, x)?;
    let c = match gamma {
        Some(gm) => g.mul(ct, gm)?,
        None => ct,
    };
    let mut out = vec![Some(normalize_linear(g, rms, xhat, r, c)?)];
    if gamma.is_some() {
        let cx = g.mul(ct, xhat)?;
        out.push(Some(sum_rows(g, cx)?));
    }
    if has_beta {
        out.push(Some(sum_rows(g, ct)?));
    }
    Ok(out)
}

pub(crate) fn jvp(g: &mut Graph, op: &Op, ins: &[NodeId], t: &[Option<NodeId>]) -> Result<Option<NodeId>> {
    let Norm { rms, eps, x, gamma, has_beta } = parts(op, ins)?;
    let (xhat, r) = normalized(g, rms, eps, x)?;
    let mut total = None;
    if let Some(tx) = t[0] {
        let d = normalize_linear(g, rms, xhat, r, tx)?;
        total = Some(match gamma {
            Some(gm) => g.mul(d, gm)?,
            None => d,
        });
    }
    let tg = gamma.and_then(|_| t[1]);
    let tb = if has_beta { t[1 + gamma.is_some() as usize] } else { None };
    if let Some(tg) = tg {
        let term = g.mul(xhat, tg)?;
        total = g.add_opt(total, Some(term))?;
    }
    if let Some(tb) = tb {
        let dims = g.dims(x).to_vec();
        let term = g.broadcast_to(tb, &dims)?;
        total = g.add_opt(total, Some(term))?;
    }
    Ok(total)
}
