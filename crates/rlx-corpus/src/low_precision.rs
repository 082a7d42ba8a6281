//! The low-precision family (bf16 / f16 graphs and a mixed bf16 -> f32 one) and what a
//! harness needs to derive their tolerances: the error depth of a graph and its f64 twin.

use crate::{Case, TransformerConfig, chain, mlp, transformer_block};
use rlx_ir::{DType, Graph, Op, Result, Unary};

/// bf16 and f16 elementwise chains and MLPs, a bf16 transformer block (attention, rope,
/// norms, SwiGLU), and a bf16 matmul whose result is cast to f32 for a softmax and a
/// layer norm.
pub fn low_precision_cases() -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    for (dtype, tag) in [(DType::BF16, "bf16"), (DType::F16, "f16")] {
        for (base, seed) in [(chain(33)?, 40), (mlp()?, 41)] {
            let graph = retyped(&base.graph, dtype)?;
            cases.push(Case::new(&format!("{}_{tag}", base.name), graph, base.depth, seed, -1.0, 1.0, 1)?);
        }
    }
    let cfg = TransformerConfig::tiny();
    let block = retyped(&transformer_block(&cfg)?, DType::BF16)?;
    cases.push(Case::new("transformer_block_bf16", block, cfg.ffn + cfg.seq, 42, -0.5, 0.5, cfg.seq as i64)?);
    cases.push(bf16_then_f32()?);
    Ok(cases)
}

/// `softmax(layer_norm(f32(x @ w)))` with bf16 `x`, `w`; outputs the bf16 product too.
fn bf16_then_f32() -> Result<Case> {
    let mut g = Graph::new("bf16_cast_f32");
    let x = g.input("x", DType::BF16, &[9, 40])?;
    let w = g.param("w", DType::BF16, &[40, 17])?;
    let y = g.matmul(x, w)?;
    let y = g.unary(Unary::Gelu, y)?;
    let wide = g.cast(y, DType::F32)?;
    let n = g.layer_norm(wide, None, None, 1e-5)?;
    let s = g.softmax(n, 1)?;
    g.set_outputs(&[s, y])?;
    Case::new("bf16_cast_f32", g, 57, 43, -1.0, 1.0, 1)
}

/// `graph` with every float leaf and cast in `dtype` (see `Graph::retyped`).
pub fn retyped(graph: &Graph, dtype: DType) -> Result<Graph> {
    graph.retyped(dtype)
}

/// How many roundings an output element of `g` can accumulate: each node's own
/// reduction length (matmul's k, a softmax row, a conv window...; each term of an
/// f32-accumulated sum carries its operands' roundings) summed over the graph, plus the
/// ops on the longest path (one result rounding each). Tolerances are
/// `5 u sqrt(error_depth) M` ([`tolerance`]).
pub fn error_depth(g: &Graph) -> usize {
    accumulation_depth(g) + longest_path(g)
}

fn accumulation_depth(g: &Graph) -> usize {
    g.nodes()
        .map(|(_, n)| {
            let dims = |k: usize| g.dims(n.inputs()[k]);
            let numel = |k: usize| dims(k).iter().product::<usize>();
            match n.op() {
                Op::MatMul => *dims(0).last().unwrap_or(&1),
                Op::Reduce { axes, .. } => axes.iter().map(|&a| dims(0)[a]).product(),
                Op::Softmax { axis } | Op::LogSoftmax { axis } => dims(0)[*axis],
                Op::LayerNorm { .. } | Op::RmsNorm { .. } => *dims(0).last().unwrap_or(&1),
                Op::Attention { .. } => numel(1) / dims(1)[0].max(1),
                Op::DequantMatMul { .. } => *dims(0).last().unwrap_or(&1),
                // Convolutions, pooling and their gradients, cross-entropy, scatter: bounded
                // by the larger operand.
                Op::Conv2d { .. }
                | Op::Conv2dGradInput { .. }
                | Op::Conv2dGradWeight { .. }
                | Op::AvgPool2d { .. }
                | Op::AvgPool2dGrad { .. }
                | Op::CrossEntropy
                | Op::ScatterAdd { .. } => (0..n.inputs().len()).map(numel).max().unwrap_or(1),
                // Elementwise and layout ops: their one rounding is on the path.
                _ => 0,
            }
        })
        .sum()
}

fn longest_path(g: &Graph) -> usize {
    let mut len = vec![0usize; g.len()];
    for (id, n) in g.nodes() {
        len[id.index()] = n.inputs().iter().map(|i| len[i.index()] + 1).max().unwrap_or(0);
    }
    g.outputs().iter().map(|o| len[o.index()]).max().unwrap_or(0)
}

/// `5 u sqrt(depth) magnitude`: the probabilistic rounding error bound (Higham & Mary
/// 2019: with rounding errors modelled as independent and mean zero, a computation of
/// `depth` roundings of unit roundoff `u` is within `lambda sqrt(depth) u` relative of
/// exact with probability >= 1 - 2 exp(-lambda^2 / 2); lambda 5 gives 1 - 7.5e-6 per
/// value), relative to `magnitude`, the largest value the computation goes through (so
/// a result that cancels to near zero is not held to a relative bound it cannot meet).
/// The worst-case bound, `depth u`, is loose enough to pass a broken bf16 kernel.
pub fn tolerance(u: f64, depth: usize, magnitude: f64) -> f64 {
    5.0 * u * (depth as f64).sqrt() * magnitude
}

/// `g` with every float value it computes as an output (what a tolerance's magnitude
/// `M` is measured on).
pub fn every_value_as_output(g: &Graph) -> Result<Graph> {
    let mut all = g.clone();
    let values: Vec<_> =
        g.nodes().filter(|(id, n)| !n.op().is_leaf() && g.dtype(*id).is_float()).map(|(id, _)| id).collect();
    all.set_outputs(&values)?;
    Ok(all)
}

/// The largest unit roundoff among `g`'s float values (bf16 2^-8, f16 2^-11, ...).
pub fn narrowest_unit_roundoff(g: &Graph) -> f64 {
    g.nodes().map(|(id, _)| g.dtype(id).unit_roundoff()).fold(0.0, f64::max)
}
