//! A corpus of graphs with deterministic inputs and params, shared by the compiler tests
//! (fused vs unfused, reuse vs none), backend parity tests and benchmarks.
//!
//! Each case says how deep its longest accumulation is, so a harness can derive its
//! tolerance from the dtypes' unit roundoff instead of picking a flat bound.

mod low_precision;
mod models;

pub use low_precision::{
    error_depth, every_value_as_output, low_precision_cases, narrowest_unit_roundoff, retyped, tolerance,
};
pub use models::{TransformerConfig, transformer_block, transformer_stack};

use rlx_ir::{
    AttentionMask, BinaryOp, Conv2dParams, DType, Graph, HostTensor, NodeId, PoolParams, ReduceOp, Result, Unary,
};
use rlx_oracle::Rng;

/// A graph and the values to run it with.
#[derive(Clone)]
pub struct Case {
    pub name: String,
    pub graph: Graph,
    pub inputs: Vec<(String, HostTensor)>,
    pub params: Vec<(String, HostTensor)>,
    /// The longest chain of roundings any output element goes through (a reduction's
    /// length, a chain's number of ops): the tolerance scales with it.
    pub depth: usize,
}

impl Case {
    /// Fills every input and param of `graph` with seeded values in [lo, hi)
    /// (integer leaves get values in [0, int_hi)).
    pub fn new(name: &str, graph: Graph, depth: usize, seed: u64, lo: f64, hi: f64, int_hi: i64) -> Result<Case> {
        let mut rng = Rng::new(seed);
        let mut fill = |ids: Vec<NodeId>| -> Result<Vec<(String, HostTensor)>> {
            ids.into_iter()
                .map(|id| {
                    let node = graph.node(id).expect("a leaf of this graph");
                    let n: usize = node.dims().iter().product();
                    let values: Vec<f64> =
                        (0..n)
                            .map(|_| {
                                if node.dtype().is_float() {
                                    rng.uniform(lo, hi)
                                } else {
                                    rng.int(0, int_hi - 1) as f64
                                }
                            })
                            .collect();
                    let t = HostTensor::from_f64_as(node.dtype(), node.dims(), &values)?;
                    Ok((node.leaf_name().unwrap_or_default().to_string(), t))
                })
                .collect()
        };
        let inputs = fill(graph.inputs())?;
        let params = fill(graph.params())?;
        Ok(Case { name: name.to_string(), graph, inputs, params, depth })
    }
}

/// Every case of the corpus.
pub fn cases() -> Result<Vec<Case>> {
    let mut c = vec![mlp()?, cnn()?, block_case()?];
    for n in [1, 31, 32, 33, 200] {
        c.push(chain(n)?);
    }
    c.extend([
        chain_with_output_intermediate()?,
        producer_read_after_window()?,
        two_readers_in_window()?,
        rms_norm_reshape_gather()?,
        l2_norm()?,
        swiglu_two_matmuls()?,
        mixed_dtypes()?,
        transposed_matmuls()?,
    ]);
    Ok(c)
}

/// x [8, 32] -> 64 (gelu) -> 64 (relu) -> 10, softmax.
pub fn mlp() -> Result<Case> {
    let mut g = Graph::new("mlp");
    let x = g.input("x", DType::F32, &[8, 32])?;
    let mut h = x;
    for (i, (k, n, act)) in [(32, 64, Unary::Gelu), (64, 64, Unary::Relu)].into_iter().enumerate() {
        let w = g.param(&format!("w{i}"), DType::F32, &[k, n])?;
        let b = g.param(&format!("b{i}"), DType::F32, &[n])?;
        let z = g.matmul(h, w)?;
        let z = g.add(z, b)?;
        h = g.unary(act, z)?;
    }
    let w = g.param("w_out", DType::F32, &[64, 10])?;
    let logits = g.matmul(h, w)?;
    let p = g.softmax(logits, 1)?;
    g.set_outputs(&[p, logits])?;
    Case::new("mlp", g, 64, 1, -0.5, 0.5, 1)
}

/// conv (pad 1) -> relu -> max pool -> conv -> avg pool -> flatten -> matmul.
pub fn cnn() -> Result<Case> {
    let mut g = Graph::new("cnn");
    let x = g.input("x", DType::F32, &[2, 1, 8, 8])?;
    let w1 = g.param("w1", DType::F32, &[4, 1, 3, 3])?;
    let b1 = g.param("b1", DType::F32, &[4])?;
    let w2 = g.param("w2", DType::F32, &[8, 4, 3, 3])?;
    let h = g.conv2d(x, w1, Some(b1), Conv2dParams::default().with_padding(1))?;
    let h = g.unary(Unary::Relu, h)?;
    let h = g.max_pool2d(h, PoolParams::square(2))?;
    let h = g.conv2d(h, w2, None, Conv2dParams::default().with_padding(1))?;
    let h = g.unary(Unary::Silu, h)?;
    let h = g.avg_pool2d(h, PoolParams::square(2), true)?;
    let flat = g.reshape(h, &[2, 32])?;
    let wo = g.param("wo", DType::F32, &[32, 10])?;
    let out = g.matmul(flat, wo)?;
    g.set_outputs(&[out])?;
    Case::new("cnn", g, 72, 2, -1.0, 1.0, 1)
}

fn block_case() -> Result<Case> {
    let cfg = TransformerConfig::tiny();
    let g = transformer_block(&cfg)?;
    Case::new("transformer_block", g, cfg.hidden.max(cfg.ffn) + cfg.seq, 3, -0.5, 0.5, cfg.seq as i64)
}

/// `n` elementwise ops in a row (mixing binary, unary and a broadcast operand).
pub fn chain(n: usize) -> Result<Case> {
    let mut g = Graph::new(&format!("chain_{n}"));
    let x = g.input("x", DType::F32, &[37, 19])?;
    let b = g.input("b", DType::F32, &[19])?;
    let mut h = x;
    for i in 0..n {
        h = match i % 4 {
            0 => g.binary(BinaryOp::Mul, h, b)?,
            1 => g.unary(Unary::Tanh, h)?,
            2 => g.binary(BinaryOp::Add, h, x)?,
            _ => g.unary(Unary::Sigmoid, h)?,
        };
    }
    g.set_outputs(&[h])?;
    Case::new(&format!("chain_{n}"), g, n, 10 + n as u64, -1.0, 1.0, 1)
}

/// The middle of a fusable chain is also an output: it must be written.
fn chain_with_output_intermediate() -> Result<Case> {
    let mut g = Graph::new("chain_output_intermediate");
    let x = g.input("x", DType::F32, &[64, 33])?;
    let a = g.unary(Unary::Exp, x)?;
    let b = g.unary(Unary::Sqrt, a)?;
    let c = g.unary(Unary::Silu, b)?;
    let d = g.add(c, x)?;
    g.set_outputs(&[d, b])?;
    Case::new("chain_output_intermediate", g, 4, 20, -2.0, 2.0, 1)
}

/// silu(z) and an add-norm's sum feed fused windows and are read again afterwards.
fn producer_read_after_window() -> Result<Case> {
    let mut g = Graph::new("producer_read_after_window");
    let x = g.input("x", DType::F32, &[16, 48])?;
    let z = g.input("z", DType::F32, &[16, 48])?;
    let r = g.input("r", DType::F32, &[16, 48])?;
    let gamma = g.param("gamma", DType::F32, &[48])?;
    let s = g.unary(Unary::Silu, z)?;
    let n = g.rms_norm(x, Some(gamma), 1e-6)?;
    let gated = g.mul(n, s)?;
    let sum = g.add(gated, r)?;
    let ln = g.layer_norm(sum, Some(gamma), None, 1e-5)?;
    let later = g.mul(s, sum)?; // reads silu(z) and the sum after both windows
    let out = g.add(ln, later)?;
    g.set_outputs(&[out])?;
    Case::new("producer_read_after_window", g, 48, 21, -1.0, 1.0, 1)
}

/// One value read by two ops that are both inside one region (a diamond).
fn two_readers_in_window() -> Result<Case> {
    let mut g = Graph::new("two_readers_in_window");
    let x = g.input("x", DType::F32, &[300, 7])?;
    let t = g.unary(Unary::Tanh, x)?;
    let a = g.unary(Unary::Exp, t)?;
    let b = g.mul(t, t)?;
    let c = g.sub(a, b)?;
    g.set_outputs(&[c])?;
    Case::new("two_readers_in_window", g, 3, 22, -2.0, 2.0, 1)
}

/// RmsNorm, a reshape that changes the rank, then a gather on axis 0 of the result.
fn rms_norm_reshape_gather() -> Result<Case> {
    let mut g = Graph::new("rms_norm_reshape_gather");
    let x = g.input("x", DType::F32, &[1, 6, 8])?;
    let gamma = g.param("gamma", DType::F32, &[8])?;
    let ids = g.input("ids", DType::I64, &[4])?;
    let n = g.rms_norm(x, Some(gamma), 1e-6)?;
    let r = g.reshape(n, &[6, 8])?;
    let rows = g.gather(r, ids)?;
    g.set_outputs(&[rows])?;
    Case::new("rms_norm_reshape_gather", g, 8, 23, -1.0, 1.0, 6)
}

/// L2 normalization with its denominator also read later.
fn l2_norm() -> Result<Case> {
    let mut g = Graph::new("l2_norm");
    let x = g.input("x", DType::F32, &[10, 40])?;
    let sq = g.mul(x, x)?;
    let ss = g.reduce(ReduceOp::Sum, sq, &[1], true)?;
    let eps = g.scalar(DType::F32, 1e-6)?;
    let ss = g.add(ss, eps)?;
    let d = g.unary(Unary::Sqrt, ss)?;
    let y = g.div(x, d)?;
    let scaled = g.mul(y, d)?;
    g.set_outputs(&[y, scaled])?;
    Case::new("l2_norm", g, 40, 24, -1.0, 1.0, 1)
}

/// The gated FFN of Llama: down((x wu) * silu(x wg)).
fn swiglu_two_matmuls() -> Result<Case> {
    let mut g = Graph::new("swiglu_ffn");
    let x = g.input("x", DType::F32, &[5, 24])?;
    let wg = g.param("wg", DType::F32, &[24, 40])?;
    let wu = g.param("wu", DType::F32, &[24, 40])?;
    let wd = g.param("wd", DType::F32, &[40, 24])?;
    let gate = g.matmul(x, wg)?;
    let up = g.matmul(x, wu)?;
    let s = g.unary(Unary::Silu, gate)?;
    let h = g.mul(up, s)?;
    let out = g.matmul(h, wd)?;
    g.set_outputs(&[out])?;
    Case::new("swiglu_ffn", g, 64, 25, -0.5, 0.5, 1)
}

/// Matmuls reading transposed operands: batched a @ b^T (attention's q k^T), a^T @ b,
/// and an integer a^T @ b^T.
fn transposed_matmuls() -> Result<Case> {
    let mut g = Graph::new("transposed_matmuls");
    let q = g.input("q", DType::F32, &[2, 3, 5, 8])?;
    let k = g.input("k", DType::F32, &[2, 3, 7, 8])?;
    let kt = g.transpose(k, &[0, 1, 3, 2])?;
    let scores = g.matmul(q, kt)?;
    let a = g.input("a", DType::F32, &[9, 6])?;
    let b = g.input("b", DType::F32, &[9, 4])?;
    let at = g.transpose(a, &[1, 0])?;
    let atb = g.matmul(at, b)?;
    let i = g.input("i", DType::I32, &[4, 3])?;
    let j = g.input("j", DType::I32, &[5, 4])?;
    let it = g.transpose(i, &[1, 0])?;
    let jt = g.transpose(j, &[1, 0])?;
    let ij = g.matmul(it, jt)?;
    g.set_outputs(&[scores, atb, ij])?;
    Case::new("transposed_matmuls", g, 9, 27, -1.0, 1.0, 10)
}

/// bf16 and f16 chains, a cast back to f32, and an integer path beside them.
fn mixed_dtypes() -> Result<Case> {
    let mut g = Graph::new("mixed_dtypes");
    let x = g.input("x", DType::BF16, &[33, 17])?;
    let y = g.input("y", DType::F16, &[33, 17])?;
    let i = g.input("i", DType::I32, &[33, 17])?;
    let a = g.unary(Unary::Gelu, x)?;
    let a = g.mul(a, x)?;
    let a32 = g.cast(a, DType::F32)?;
    let b = g.unary(Unary::Tanh, y)?;
    let b = g.add(b, y)?;
    let b32 = g.cast(b, DType::F32)?;
    let s = g.add(a32, b32)?;
    let ii = g.mul(i, i)?;
    let m = g.reduce(ReduceOp::Max, ii, &[1], false)?;
    let att_q = g.reshape(s, &[1, 1, 33, 17])?;
    let at = g.attention(att_q, att_q, att_q, AttentionMask::Causal, None)?;
    g.set_outputs(&[s, m, at])?;
    Case::new("mixed_dtypes", g, 40, 26, -2.0, 2.0, 100)
}
