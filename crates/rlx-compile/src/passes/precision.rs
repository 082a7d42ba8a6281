//! Mixed precision (`PrecisionPolicy::AutoMixedBf16 / AutoMixedF16`): moves f32 compute
//! onto a half format where f32 accumulation inside the kernel keeps it accurate, and
//! keeps in f32 what loses accuracy in half.
//!
//! Each f32 op falls in one class (see [`class`]):
//! - **half**: matmul, conv and their gradients, pooling, `where`, elementwise arithmetic
//!   and the well-conditioned activations. Their f32 operands are cast to the half
//!   format; the kernels accumulate in f32 and round the result once.
//! - **f32**: softmax, log-softmax, norms, reductions, losses, attention, rope, and the
//!   functions whose half result loses most (`exp`, `log`, `pow`, `1/x`, `1/sqrt x`,
//!   softplus-like): half operands are cast back to f32 (exactly, widening).
//! - **follow**: layout ops, gather, compare, argmax, scatter: take their float operands
//!   in whatever format they arrive (all cast to f32 when they disagree).
//! - **keep**: casts, scans, quantized matmuls, and every op whose declared dtype is not
//!   f32 (f64 and integer graphs, a user's explicit bf16 ops) see their operands exactly
//!   as declared.
//!
//! Leaves keep their declared dtypes and graph outputs are cast back to theirs, so the
//! graph's signature is unchanged. One cast per (value, format), shared by every consumer;
//! [`PassLog::inserted_casts`] counts those of non-constant values (casts of constants
//! fold away).

use crate::pass::{Pass, PassLog, copy, rebuild};
use rlx_ir::{BinaryOp, DType, Graph, NodeId, Op, Result, Unary};
use std::collections::HashMap;

/// Rewrites an f32 graph's compute onto `half` (F16 or BF16).
pub struct MixedPrecision {
    pub half: DType,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Half,
    F32,
    Follow,
    Keep,
}

/// The precision class of an op that computes in f32 in the source graph.
fn class(op: &Op) -> Class {
    match op {
        Op::MatMul
        | Op::Conv2d { .. }
        | Op::Conv2dGradInput { .. }
        | Op::Conv2dGradWeight { .. }
        | Op::MaxPool2d { .. }
        | Op::AvgPool2d { .. }
        | Op::MaxPool2dGrad { .. }
        | Op::MaxPool2dSelect { .. }
        | Op::AvgPool2dGrad { .. }
        | Op::Where => Class::Half,
        Op::Binary(BinaryOp::Pow) => Class::F32,
        Op::Binary(_) => Class::Half,
        Op::Unary(
            Unary::Exp | Unary::Log | Unary::Ln1p | Unary::Rsqrt | Unary::Recip | Unary::Softplus | Unary::LogSigmoid,
        ) => Class::F32,
        Op::Unary(_) => Class::Half,
        Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::LayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::Reduce { .. }
        | Op::CrossEntropy
        | Op::Attention { .. }
        | Op::Rope { .. } => Class::F32,
        Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Narrow { .. }
        | Op::Concat { .. }
        | Op::Expand { .. }
        | Op::Gather
        | Op::KvAppend { .. }
        | Op::ScatterAdd { .. }
        | Op::Compare(_)
        | Op::ArgMax { .. } => Class::Follow,
        Op::Input { .. }
        | Op::Param { .. }
        | Op::Constant { .. }
        | Op::Cast { .. }
        | Op::Scan { .. }
        | Op::ScanGrad { .. }
        | Op::DequantMatMul { .. }
        | Op::Dequantize { .. } => Class::Keep,
    }
}

impl Pass for MixedPrecision {
    fn name(&self) -> &'static str {
        "mixed-precision"
    }

    fn run(&self, graph: &Graph, log: &mut PassLog) -> Result<Graph> {
        let mut casts = Casts::default();
        let mut new = rebuild(graph, |new, map, _, node| {
            if node.op().is_leaf() {
                return copy(new, map, node);
            }
            let declared: Vec<DType> = node.inputs().iter().map(|&i| graph.dtype(i)).collect();
            let ins: Vec<NodeId> = node.inputs().iter().map(|i| map[i.index()]).collect();
            // Which operands are f32 values the pass may move (the others are indices,
            // masks, or values of another declared float type).
            let movable = |k: usize| declared[k] == DType::F32;
            let class = match class(node.op()) {
                Class::Half | Class::F32 if node.dtype() != DType::F32 => Class::Keep,
                Class::Follow if !(0..ins.len()).any(movable) => Class::Keep,
                c => c,
            };
            // Follow: the moved operands' common format, f32 when they disagree.
            let formats: Vec<DType> = (0..ins.len()).filter(|&j| movable(j)).map(|j| new.dtype(ins[j])).collect();
            let common = if formats.iter().all(|&d| d == formats[0]) { formats.first().copied() } else { None };
            let want = |k: usize| -> DType {
                match class {
                    Class::Half if movable(k) => self.half,
                    Class::F32 if movable(k) => DType::F32,
                    Class::Follow if movable(k) => common.unwrap_or(DType::F32),
                    // A user's cast takes its operand in any format.
                    _ if matches!(node.op(), Op::Cast { .. }) => new.dtype(ins[k]),
                    _ => declared[k],
                }
            };
            let wants: Vec<DType> = (0..ins.len()).map(want).collect();
            let operands = ins.iter().zip(wants).map(|(&x, d)| casts.get(new, x, d)).collect::<Result<Vec<_>>>()?;
            new.push(node.op().clone(), &operands)
        })?;
        // Outputs back to their declared dtypes.
        let outputs = graph
            .outputs()
            .iter()
            .zip(new.outputs().to_vec())
            .map(|(&o, x)| casts.get(&mut new, x, graph.dtype(o)))
            .collect::<Result<Vec<_>>>()?;
        new.set_outputs(&outputs)?;
        log.inserted_casts += casts.inserted;
        log.notes.push(format!("mixed precision ({}): {} casts inserted", self.half, casts.inserted));
        Ok(new)
    }
}

/// `graph` with its f32 params declared in `half`, each widened back to f32 by a cast
/// (exact) where it is read: the params take half the bytes while the graph's values are
/// unchanged, and under a mixed policy the half-format consumers get the param itself
/// (`simplify` cancels the cast pair). A trainer compiles a gradient graph this way to
/// keep its weights in bf16 and its gradients in f32. Changes the params' declared dtype.
pub fn params_stored_as(graph: &Graph, half: DType) -> Result<Graph> {
    rebuild(graph, |new, map, _, node| match node.op() {
        Op::Param { .. } if node.dtype() == DType::F32 => {
            let p = new.push_leaf(node.op().clone(), half, node.dims())?;
            new.cast(p, DType::F32)
        }
        _ => copy(new, map, node),
    })
}

/// The shared casts: one node per (value, dtype).
#[derive(Default)]
struct Casts {
    made: HashMap<(NodeId, DType), NodeId>,
    inserted: usize,
}

impl Casts {
    fn get(&mut self, g: &mut Graph, x: NodeId, to: DType) -> Result<NodeId> {
        if g.dtype(x) == to {
            return Ok(x);
        }
        if let Some(&c) = self.made.get(&(x, to)) {
            return Ok(c);
        }
        let is_constant = matches!(g.node(x).map(|n| n.op()), Some(Op::Constant { .. }));
        let c = g.push(Op::Cast { to }, &[x])?;
        self.inserted += usize::from(!is_constant);
        self.made.insert((x, to), c);
        Ok(c)
    }
}
