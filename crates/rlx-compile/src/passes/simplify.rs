//! Algebraic simplification, only where the result is bit-identical for every input:
//! `x * 1`, `x / 1`, `x + (-0)`, `x - (+0)` (`x + (+0)` is not: -0 + 0 = +0; integers
//! allow both zeros), transpose of transpose, identity transposes, reshape of reshape,
//! reshapes / expands to the operand's own dims, casts to the same dtype, and a cast back
//! from an exact widening.

use crate::pass::{Pass, PassLog, copy, rebuild};
use rlx_ir::{BinaryOp, DType, Graph, Node, NodeId, Op, Result};

pub struct Simplify;

impl Pass for Simplify {
    fn name(&self) -> &'static str {
        "simplify"
    }

    fn run(&self, graph: &Graph, log: &mut PassLog) -> Result<Graph> {
        let mut rewrites = 0;
        let g = rebuild(graph, |new, map, _, node| {
            let ins: Vec<NodeId> = node.inputs().iter().map(|i| map[i.index()]).collect();
            match simplified(new, node, &ins)? {
                Some(id) => {
                    rewrites += 1;
                    Ok(id)
                }
                None => copy(new, map, node),
            }
        })?;
        if rewrites > 0 {
            log.notes.push(format!("simplify: {rewrites} rewrites"));
        }
        Ok(g)
    }
}

/// The node's simpler replacement in `g` (operands already remapped), if any.
fn simplified(g: &mut Graph, node: &Node, ins: &[NodeId]) -> Result<Option<NodeId>> {
    let same_type = |g: &Graph, x: NodeId| g.dims(x) == node.dims() && g.dtype(x) == node.dtype();
    Ok(match node.op() {
        Op::Binary(op) => {
            let (a, b) = (ins[0], ins[1]);
            let keep = |x: NodeId, g: &Graph| same_type(g, x).then_some(x);
            let int = node.dtype().is_int();
            match op {
                BinaryOp::Mul if all(g, b, |v| v == 1.0) => keep(a, g),
                BinaryOp::Mul if all(g, a, |v| v == 1.0) => keep(b, g),
                BinaryOp::Div if all(g, b, |v| v == 1.0) => keep(a, g),
                BinaryOp::Add if all(g, b, |v| is_neg_zero(v) || (int && v == 0.0)) => keep(a, g),
                BinaryOp::Add if all(g, a, |v| is_neg_zero(v) || (int && v == 0.0)) => keep(b, g),
                BinaryOp::Sub if all(g, b, |v| v == 0.0 && !is_neg_zero(v)) => keep(a, g),
                _ => None,
            }
        }
        Op::Cast { to } if g.dtype(ins[0]) == *to => Some(ins[0]),
        // Back from an exact widening: cast(cast(x: A -> B) -> A) = x when B holds every A
        // (f16/bf16 -> f32/f64, f32 -> f64).
        Op::Cast { to } => match g.node(ins[0]).map(|n| (n.op().clone(), n.inputs().to_vec())) {
            Some((Op::Cast { to: mid }, inner)) if g.dtype(inner[0]) == *to && widens_exactly(*to, mid) => {
                Some(inner[0])
            }
            _ => None,
        },
        Op::Reshape { .. } | Op::Expand { .. } if same_type(g, ins[0]) => Some(ins[0]),
        Op::Reshape { dims } => match g.node(ins[0]).map(|n| (n.op().clone(), n.inputs().to_vec())) {
            Some((Op::Reshape { .. }, inner)) => Some(g.reshape(inner[0], dims)?),
            _ => None,
        },
        Op::Transpose { perm } if is_identity(perm) => Some(ins[0]),
        Op::Transpose { perm } => match g.node(ins[0]).map(|n| (n.op().clone(), n.inputs().to_vec())) {
            Some((Op::Transpose { perm: first }, inner)) => {
                // out[i] = mid[perm[i]] = x[first[perm[i]]].
                let composed: Vec<usize> = perm.iter().map(|&p| first[p]).collect();
                Some(if is_identity(&composed) { inner[0] } else { g.transpose(inner[0], &composed)? })
            }
            _ => None,
        },
        _ => None,
    })
}

fn widens_exactly(from: DType, to: DType) -> bool {
    matches!((from, to), (DType::F16 | DType::BF16, DType::F32 | DType::F64) | (DType::F32, DType::F64))
}

fn is_identity(perm: &[usize]) -> bool {
    perm.iter().enumerate().all(|(i, &p)| i == p)
}

fn is_neg_zero(v: f64) -> bool {
    v == 0.0 && v.is_sign_negative()
}

/// Whether `id` is a constant whose every element satisfies `pred`.
fn all(g: &Graph, id: NodeId, pred: impl Fn(f64) -> bool) -> bool {
    matches!(g.node(id).map(Node::op), Some(Op::Constant { value }) if value.to_f64_vec().into_iter().all(&pred))
}
