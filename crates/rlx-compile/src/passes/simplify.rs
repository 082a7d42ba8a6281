//! Algebraic simplification, only where the result is bit-identical for every input:
//! `x * 1`, `x / 1`, `x + (-0)`, `x - (+0)` (`x + (+0)` is not: -0 + 0 = +0; integers
//! allow both zeros), transpose of transpose, identity transposes, reshape of reshape,
//! reshapes / expands to the operand's own dims, casts to the same dtype, and a cast back
//! from an exact widening.
//!
//! Transposes also sink through elementwise ops, which move data, not values: a unary op
//! of `transpose(x)`, and a binary op of `transpose(x)` with a small operand (a
//! per-channel bias, seen transposed the other way) or with a transpose of the same perm,
//! become the op on `x` followed by one transpose — when the transposes have no other
//! reader. Two transposes that meet then compose away. Exported CNNs put an NHWC <->
//! NCHW pair around every conv with the batch norm and activation in between; sunk, the
//! pairs cancel (open_nsfw: 110 transposes).

use crate::pass::{Pass, PassLog, copy, rebuild};
use rlx_ir::{BinaryOp, DType, Graph, Node, NodeId, Op, Result};

pub struct Simplify;

impl Pass for Simplify {
    fn name(&self) -> &'static str {
        "simplify"
    }

    fn run(&self, graph: &Graph, log: &mut PassLog) -> Result<Graph> {
        let mut rewrites = 0;
        // Readers of each old node (a graph output counts as one), and of each new node
        // made for one; a reused node counts as shared.
        let mut old_readers = vec![0usize; graph.len()];
        for (_, node) in graph.nodes() {
            for i in node.inputs() {
                old_readers[i.index()] += 1;
            }
        }
        for o in graph.outputs() {
            old_readers[o.index()] += 1;
        }
        let mut readers: Vec<usize> = Vec::with_capacity(graph.len());
        let g = rebuild(graph, |new, map, id, node| {
            let ins: Vec<NodeId> = node.inputs().iter().map(|i| map[i.index()]).collect();
            let before = new.len();
            let sole = |x: NodeId| readers.get(x.index()).is_some_and(|&r| r == 1);
            let rewritten = match sunk(new, node, &ins, &sole)? {
                Some(id) => Some(id),
                None => simplified(new, node, &ins)?,
            };
            let result = match rewritten {
                Some(id) => {
                    rewrites += 1;
                    id
                }
                None => copy(new, map, node)?,
            };
            readers.resize(new.len(), usize::MAX);
            let r = result.index();
            readers[r] = if r >= before {
                old_readers[id.index()]
            } else if ins.contains(&result) && readers[r] != usize::MAX {
                // A pass-through (x * 1, a reshape to its own dims): the operand's readers
                // lose this node and gain its readers.
                let own = ins.iter().filter(|&&i| i == result).count();
                readers[r].saturating_sub(own).saturating_add(old_readers[id.index()])
            } else {
                usize::MAX
            };
            Ok(result)
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

/// Largest operand transposed to meet a sunk transpose, in elements.
const SINK_OPERAND_LIMIT: usize = 1 << 12;

/// `op(transpose(x), ..)` as `transpose(op(x, ..))` when the transpose's only reader is
/// this node and `x` is computed (see the module docs); None otherwise. Casts are left
/// alone: the mixed-precision pass places them around params for the packed layouts.
fn sunk(g: &mut Graph, node: &Node, ins: &[NodeId], sole: &dyn Fn(NodeId) -> bool) -> Result<Option<NodeId>> {
    // A transpose of a leaf (a weight) stays: backends read it as a transposed operand
    // (a matmul's, a packed bf16 param's), which sinking would hide behind another op.
    let transposed = |g: &Graph, x: NodeId| match g.node(x).map(Node::op) {
        Some(Op::Transpose { perm }) if sole(x) => {
            let inner = g.node(x).map(|n| n.inputs()[0])?;
            (!g.node(inner)?.op().is_leaf()).then(|| (perm.clone(), inner))
        }
        _ => None,
    };
    match node.op() {
        Op::Unary(_) => {
            let Some((perm, x)) = transposed(g, ins[0]) else { return Ok(None) };
            let y = g.push(node.op().clone(), &[x])?;
            Ok(Some(g.transpose(y, &perm)?))
        }
        Op::Binary(_) => {
            let (a, b) = (ins[0], ins[1]);
            match (transposed(g, a), transposed(g, b)) {
                (Some((pa, x)), Some((pb, y))) if pa == pb && g.dims(x) == g.dims(y) => {
                    let z = g.push(node.op().clone(), &[x, y])?;
                    Ok(Some(g.transpose(z, &pa)?))
                }
                (Some((perm, x)), None) => sink_with_small(g, node, perm, x, b, true),
                (None, Some((perm, y))) => sink_with_small(g, node, perm, y, a, false),
                _ => Ok(None),
            }
        }
        _ => Ok(None),
    }
}

/// `op(transpose(x), c)` (or `op(c, transpose(x))`) with `c` small and broadcasting into
/// the transposed dims: `c` is seen in x's layout (padded to full rank, transposed by the
/// inverse perm) and the op runs on x.
fn sink_with_small(
    g: &mut Graph,
    node: &Node,
    perm: Vec<usize>,
    x: NodeId,
    c: NodeId,
    x_first: bool,
) -> Result<Option<NodeId>> {
    let (xd, cd) = (g.dims(x).to_vec(), g.dims(c).to_vec());
    let r = xd.len();
    if cd.len() > r || rlx_ir::shape::numel(&cd) > SINK_OPERAND_LIMIT || node.dims().len() != r {
        return Ok(None);
    }
    // The op's result must have the transposed dims (c broadcasts into them, not past).
    let transposed_dims: Vec<usize> = perm.iter().map(|&p| xd[p]).collect();
    if node.dims() != transposed_dims {
        return Ok(None);
    }
    let full: Vec<usize> = std::iter::repeat_n(1, r - cd.len()).chain(cd.iter().copied()).collect();
    let mut inverse = vec![0; r];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    let c = if full != cd { g.reshape(c, &full)? } else { c };
    let c = g.transpose(c, &inverse)?;
    let ops = if x_first { [x, c] } else { [c, x] };
    let y = g.push(node.op().clone(), &ops)?;
    Ok(Some(g.transpose(y, &perm)?))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::ConstFold;
    use rlx_ir::{HostTensor, Unary};

    /// NHWC -> NCHW, relu, bias add with a per-channel [C] vector in NHWC, back to NCHW:
    /// the transposes meet and cancel, and the values are bit-identical.
    #[test]
    fn transposes_sink_through_elementwise_ops_and_cancel() {
        let mut g = Graph::new("sink");
        let values: Vec<f32> = (0..2 * 3 * 4 * 5).map(|i| (i as f32 * 0.37).sin()).collect();
        let c = g.constant_tensor(HostTensor::from_f32(&[2, 3, 4, 5], &values).unwrap()).unwrap();
        // A computed value (a conv's output in the real case), not a leaf.
        let x = g.unary(Unary::Neg, c).unwrap();
        let nhwc = g.transpose(x, &[0, 2, 3, 1]).unwrap();
        let r = g.unary(Unary::Relu, nhwc).unwrap();
        let bias = g.constant_tensor(HostTensor::from_f32(&[3], &[0.5, -1.0, 2.0]).unwrap()).unwrap();
        let y = g.add(r, bias).unwrap();
        let nchw = g.transpose(y, &[0, 3, 1, 2]).unwrap();
        g.set_outputs(&[nchw]).unwrap();
        let simplified = Simplify.run(&g, &mut PassLog::default()).unwrap();
        let live = crate::passes::Dce.run(&simplified, &mut PassLog::default()).unwrap();
        let big_transposes = live
            .nodes()
            .filter(|(_, n)| matches!(n.op(), Op::Transpose { .. }) && rlx_ir::shape::numel(n.dims()) > 3)
            .count();
        assert_eq!(big_transposes, 0, "{live:?}");
        let fold = |g: &Graph| {
            let f = ConstFold.run(g, &mut PassLog::default()).unwrap();
            match f.node(f.outputs()[0]).unwrap().op() {
                Op::Constant { value } => value.clone(),
                other => panic!("not folded: {other:?}"),
            }
        };
        assert_eq!(fold(&g).bytes(), fold(&live).bytes());
    }

    /// A transpose with a second reader stays where it is.
    #[test]
    fn a_shared_transpose_does_not_sink() {
        let mut g = Graph::new("shared");
        let x = g.input("x", DType::F32, &[2, 3]).unwrap();
        let x = g.unary(Unary::Neg, x).unwrap();
        let t = g.transpose(x, &[1, 0]).unwrap();
        let r = g.unary(Unary::Relu, t).unwrap();
        let e = g.unary(Unary::Exp, t).unwrap();
        g.set_outputs(&[r, e]).unwrap();
        let s = Simplify.run(&g, &mut PassLog::default()).unwrap();
        let transposes = s.nodes().filter(|(_, n)| matches!(n.op(), Op::Transpose { .. })).count();
        assert_eq!(transposes, 1);
    }

    /// A transposed leaf (a weight a matmul reads transposed, a packed param) stays put.
    #[test]
    fn a_transposed_leaf_does_not_sink() {
        let mut g = Graph::new("leaf");
        let w = g.param("w", DType::F32, &[2, 3]).unwrap();
        let t = g.transpose(w, &[1, 0]).unwrap();
        let r = g.unary(Unary::Relu, t).unwrap();
        g.set_outputs(&[r]).unwrap();
        let s = Simplify.run(&g, &mut PassLog::default()).unwrap();
        let out = s.node(s.outputs()[0]).unwrap();
        assert!(matches!(out.op(), Op::Unary(Unary::Relu)));
        assert!(matches!(s.node(out.inputs()[0]).unwrap().op(), Op::Transpose { .. }));
    }
}
