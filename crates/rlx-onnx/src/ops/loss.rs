//! Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (its log-softmax
//! followed by the same NLL), over `[N, C]` or `[N, C, d1, ..]` inputs with integer
//! targets, optional per-class weights and `ignore_index`.
//!
//! The class entry of each target is picked by a one-hot comparison against the class
//! index (a `where` and a sum over C) rather than a gather: a target equal to
//! `ignore_index` may lie outside `0..C`, which a gather rejects at run time, and the
//! comparison picks nothing for it.

use super::{OpDef, def};
use crate::import::{Importer, Node};
use rlx_ir::{CompareOp, DType, Error, NodeId, ReduceOp, Result, Unary};

pub const OPS: &[OpDef] = &[
    def("NegativeLogLikelihoodLoss", 12, nll_loss),
    def("NegativeLogLikelihoodLoss", 13, nll_loss),
    def("SoftmaxCrossEntropyLoss", 12, softmax_cross_entropy),
    def("SoftmaxCrossEntropyLoss", 13, softmax_cross_entropy),
];

#[derive(Clone, Copy)]
enum Reduction {
    None,
    Sum,
    Mean,
}

fn reduction(n: &Node) -> Result<Reduction> {
    match n.string("reduction", "mean")?.as_str() {
        "none" => Ok(Reduction::None),
        "sum" => Ok(Reduction::Sum),
        "mean" => Ok(Reduction::Mean),
        other => Err(Error::unsupported(format!("reduction '{other}'"))),
    }
}

fn nll_loss(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (x, target, weight) = (i.input(n, 0)?, i.input(n, 1)?, i.opt_input(n, 2)?);
    Ok(vec![nll(i, n, x, target, weight)?])
}

/// SoftmaxCrossEntropyLoss: the NLL of `log_softmax(scores, axis 1)`, and that log
/// probability as the optional second output.
fn softmax_cross_entropy(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (x, target, weight) = (i.input(n, 0)?, i.input(n, 1)?, i.opt_input(n, 2)?);
    if i.g.dims(x).len() < 2 {
        return Err(Error::shape(format!("scores must be [N, C, ..], got {}", i.g.describe(x))));
    }
    let log_prob = i.g.log_softmax(x, 1)?;
    let loss = nll(i, n, log_prob, target, weight)?;
    Ok(vec![loss, log_prob])
}

/// `-x[n, target[n, d], d] * weight[target[n, d]]`, zero where the target is
/// `ignore_index`; reduced by `reduction` (`mean` divides by the sum of the picked
/// weights, i.e. the count of non-ignored targets without weights).
fn nll(i: &mut Importer, n: &Node, x: NodeId, target: NodeId, weight: Option<NodeId>) -> Result<NodeId> {
    let red = reduction(n)?;
    let d = i.g.dims(x).to_vec();
    let td = i.g.dims(target).to_vec();
    let dtype = i.g.dtype(x);
    if !dtype.is_float() {
        return Err(Error::dtype(format!("input must be a float tensor, got {}", i.g.describe(x))));
    }
    if !i.g.dtype(target).is_int() {
        return Err(Error::dtype(format!("target must be an integer tensor, got {}", i.g.describe(target))));
    }
    let expect: Vec<usize> = d.iter().enumerate().filter(|&(k, _)| k != 1).map(|(_, &v)| v).collect();
    if d.len() < 2 || td != expect {
        return Err(Error::shape(format!(
            "input {} must be [N, C, d..] and target {} [N, d..]",
            i.g.describe(x),
            i.g.describe(target)
        )));
    }
    let c = d[1];
    let r = d.len();
    // hit[n, c, d..] = target[n, d..] == c.
    let mut t_dims = td.clone();
    t_dims.insert(1, 1);
    let t = i.g.reshape(target, &t_dims)?;
    let mut class_dims = vec![1; r];
    class_dims[1] = c;
    let classes = i.g.iota(i.g.dtype(target), c)?;
    let classes = i.g.reshape(classes, &class_dims)?;
    let mut hit = i.g.compare(CompareOp::Eq, t, classes)?;
    // An ignored target picks no class (so neither its entry nor its weight counts).
    let mut ignored = None;
    if let Some(ii) = n.int_opt("ignore_index")? {
        let ii = i.g.scalar_f64(i.g.dtype(target), ii as f64)?;
        let keep = i.g.compare(CompareOp::Ne, t, ii)?;
        let no = i.g.scalar(DType::Bool, 0.0)?;
        hit = i.g.where_(keep, hit, no)?;
        ignored = Some(i.g.compare(CompareOp::Eq, target, ii)?);
    }
    let zero = i.g.scalar_like(x, 0.0)?;
    let chosen = i.g.where_(hit, x, zero)?;
    let picked = i.g.reduce(ReduceOp::Sum, chosen, &[1], false)?;
    // The weight of each target (1 without weights), 0 where it is ignored.
    let w = match weight {
        Some(w) => {
            if i.g.dims(w) != [c] || i.g.dtype(w) != dtype {
                return Err(Error::shape(format!("weight must be {dtype}[{c}], got {}", i.g.describe(w))));
            }
            let w = i.g.reshape(w, &class_dims)?;
            let chosen = i.g.where_(hit, w, zero)?;
            i.g.reduce(ReduceOp::Sum, chosen, &[1], false)?
        }
        None => {
            let one_ = i.g.full(dtype, &td, 1.0)?;
            match ignored {
                Some(ignored) => i.g.where_(ignored, zero, one_)?,
                None => one_,
            }
        }
    };
    let neg = i.g.unary(Unary::Neg, picked)?;
    let loss = i.g.mul(neg, w)?;
    let all: Vec<usize> = (0..td.len()).collect();
    match red {
        Reduction::None => Ok(loss),
        Reduction::Sum => i.g.reduce(ReduceOp::Sum, loss, &all, false),
        Reduction::Mean => {
            let total = i.g.reduce(ReduceOp::Sum, loss, &all, false)?;
            let count = i.g.reduce(ReduceOp::Sum, w, &all, false)?;
            i.g.div(total, count)
        }
    }
}
