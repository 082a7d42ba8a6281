//! Reductions: ReduceSum / Mean / Max / Min / Prod / L1 / L2 / SumSquare / LogSum /
//! LogSumExp, ArgMax / ArgMin. Axes are an attribute before opset 18 (13 for ReduceSum)
//! and an input after; no axes reduce everything unless `noop_with_empty_axes`.

use super::{OpDef, axes, axis, def, one};
use crate::import::{Importer, Node};
use crate::ops::elementwise::identity_of;
use crate::ops::layout::take;
use rlx_ir::{DType, Error, NodeId, ReduceOp, Result, Unary};

#[derive(Clone, Copy)]
enum Kind {
    Plain(ReduceOp),
    L1,
    L2,
    SumSquare,
    LogSum,
    LogSumExp,
}

macro_rules! reduce_defs {
    ($($name:literal => $kind:expr),* $(,)?) => {
        &[$(def($name, 1, |i, n| reduce(i, n, $kind)), def($name, 18, |i, n| reduce(i, n, $kind))),*]
    };
}

pub const REDUCES: &[OpDef] = reduce_defs![
    "ReduceMean" => Kind::Plain(ReduceOp::Mean),
    "ReduceMax" => Kind::Plain(ReduceOp::Max),
    "ReduceMin" => Kind::Plain(ReduceOp::Min),
    "ReduceProd" => Kind::Plain(ReduceOp::Prod),
    "ReduceL1" => Kind::L1,
    "ReduceL2" => Kind::L2,
    "ReduceSumSquare" => Kind::SumSquare,
    "ReduceLogSum" => Kind::LogSum,
    "ReduceLogSumExp" => Kind::LogSumExp,
];

pub const OPS: &[OpDef] = &[
    def("ReduceSum", 1, |i, n| reduce(i, n, Kind::Plain(ReduceOp::Sum))),
    def("ReduceSum", 13, |i, n| reduce(i, n, Kind::Plain(ReduceOp::Sum))),
    def("ArgMax", 1, |i, n| arg(i, n, false)),
    def("ArgMin", 1, |i, n| arg(i, n, true)),
];

fn reduce(i: &mut Importer, n: &Node, kind: Kind) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let r = i.g.dims(x).len();
    let keep = n.int("keepdims", 1)? != 0;
    let inputs_axes = n.since >= 18 || (n.op_type() == "ReduceSum" && n.since >= 13);
    let given = if inputs_axes { i.const_ints(n, 1)? } else { n.ints("axes")? };
    let ax = match given {
        Some(a) if !a.is_empty() => axes(&a, r)?,
        _ if n.int("noop_with_empty_axes", 0)? != 0 => return one(identity_of(i, x)?),
        _ => (0..r).collect(),
    };
    let sum = |i: &mut Importer, v: NodeId| i.g.reduce(ReduceOp::Sum, v, &ax, keep);
    one(match kind {
        Kind::Plain(op) => {
            if ax.is_empty() {
                identity_of(i, x)?
            } else {
                i.g.reduce(op, x, &ax, keep)?
            }
        }
        Kind::L1 => {
            let a = i.g.unary(Unary::Abs, x)?;
            sum(i, a)?
        }
        Kind::L2 | Kind::SumSquare => {
            let sq = i.g.mul(x, x)?;
            let s = sum(i, sq)?;
            if matches!(kind, Kind::L2) { i.g.unary(Unary::Sqrt, s)? } else { s }
        }
        Kind::LogSum => {
            let s = sum(i, x)?;
            i.g.unary(Unary::Log, s)?
        }
        Kind::LogSumExp => {
            // max + log(sum(exp(x - max))): no overflow; an all -inf row gives -inf.
            let m = i.g.reduce(ReduceOp::Max, x, &ax, true)?;
            let zero = i.g.scalar_like(m, 0.0)?;
            let finite = {
                let inf = i.g.scalar_like(m, f64::INFINITY)?;
                let a = i.g.unary(Unary::Abs, m)?;
                i.g.lt(a, inf)?
            };
            let m = i.g.where_(finite, m, zero)?;
            let centred = i.g.sub(x, m)?;
            let e = i.g.unary(Unary::Exp, centred)?;
            let s = sum(i, e)?;
            let l = i.g.unary(Unary::Log, s)?;
            let m = if keep { m } else { i.g.reduce(ReduceOp::Max, m, &ax, false)? };
            i.g.add(l, m)?
        }
    })
}

fn arg(i: &mut Importer, n: &Node, min: bool) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let r = i.g.dims(x).len();
    let a = axis(n.int("axis", 0)?, r)?;
    let keep = n.int("keepdims", 1)? != 0;
    let last = n.int("select_last_index", 0)? != 0;
    let len = i.g.dims(x).get(a).copied().unwrap_or(1);
    // The last extremum is the first one of the axis reversed, at k -> len - 1 - k.
    let x = if last { take(i, x, a, &(0..len).rev().collect::<Vec<_>>())? } else { x };
    let v = if min {
        if !i.g.dtype(x).is_float() {
            return Err(Error::unsupported(format!("ArgMin of {}", i.g.describe(x))));
        }
        i.g.unary(Unary::Neg, x)?
    } else {
        x
    };
    let y = i.g.argmax(v, a, keep)?;
    debug_assert_eq!(i.g.dtype(y), DType::I64);
    if !last {
        return one(y);
    }
    let top = i.g.scalar_like(y, len as f64 - 1.0)?;
    one(i.g.sub(top, y)?)
}
