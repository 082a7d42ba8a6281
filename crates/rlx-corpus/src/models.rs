//! Model-shaped graphs: a pre-norm transformer block and a stack of them.

use rlx_ir::{AttentionMask, DType, Graph, NodeId, Result, RopeStyle, Unary};

#[derive(Clone, Copy, Debug)]
pub struct TransformerConfig {
    pub seq: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub ffn: usize,
}

impl TransformerConfig {
    /// Small enough for tests.
    pub fn tiny() -> TransformerConfig {
        TransformerConfig { seq: 8, hidden: 32, heads: 4, kv_heads: 2, ffn: 64 }
    }

    /// SmolLM2-135M's block shape (hidden 576, 9 heads, 3 KV heads, FFN 1536), 64 tokens.
    pub fn smol() -> TransformerConfig {
        TransformerConfig { seq: 64, hidden: 576, heads: 9, kv_heads: 3, ffn: 1536 }
    }
}

/// Adds one Llama-style block (RMSNorm, GQA attention with RoPE, SwiGLU FFN, residuals)
/// reading `x [seq, hidden]`; params are prefixed `p`.
pub fn add_block(g: &mut Graph, cfg: &TransformerConfig, x: NodeId, positions: NodeId, p: &str) -> Result<NodeId> {
    let (s, h, nh, nkv) = (cfg.seq, cfg.hidden, cfg.heads, cfg.kv_heads);
    let hd = h / nh;
    let param = |g: &mut Graph, name: &str, dims: &[usize]| g.param(&format!("{p}{name}"), DType::F32, dims);
    let n1 = param(g, "attn_norm", &[h])?;
    let wq = param(g, "wq", &[h, h])?;
    let wk = param(g, "wk", &[h, nkv * hd])?;
    let wv = param(g, "wv", &[h, nkv * hd])?;
    let wo = param(g, "wo", &[h, h])?;
    let n2 = param(g, "ffn_norm", &[h])?;
    let wg = param(g, "w_gate", &[h, cfg.ffn])?;
    let wu = param(g, "w_up", &[h, cfg.ffn])?;
    let wd = param(g, "w_down", &[cfg.ffn, h])?;

    let a = g.rms_norm(x, Some(n1), 1e-5)?;
    let heads = |g: &mut Graph, t: NodeId, n: usize| -> Result<NodeId> {
        let t = g.reshape(t, &[s, n, hd])?;
        let t = g.transpose(t, &[1, 0, 2])?;
        g.reshape(t, &[1, n, s, hd])
    };
    let q = g.matmul(a, wq)?;
    let q = heads(g, q, nh)?;
    let q = g.rope(q, positions, RopeStyle::NeoX, 10000.0, None)?;
    let k = g.matmul(a, wk)?;
    let k = heads(g, k, nkv)?;
    let k = g.rope(k, positions, RopeStyle::NeoX, 10000.0, None)?;
    let v = g.matmul(a, wv)?;
    let v = heads(g, v, nkv)?;
    let att = g.attention(q, k, v, AttentionMask::Causal, None)?;
    let att = g.reshape(att, &[nh, s, hd])?;
    let att = g.transpose(att, &[1, 0, 2])?;
    let att = g.reshape(att, &[s, h])?;
    let att = g.matmul(att, wo)?;
    let x = g.add(x, att)?;

    let f = g.rms_norm(x, Some(n2), 1e-5)?;
    let gate = g.matmul(f, wg)?;
    let up = g.matmul(f, wu)?;
    let gate = g.unary(Unary::Silu, gate)?;
    let hmid = g.mul(up, gate)?;
    let down = g.matmul(hmid, wd)?;
    g.add(x, down)
}

/// One block: inputs `x [seq, hidden]` and `positions [seq]`.
pub fn transformer_block(cfg: &TransformerConfig) -> Result<Graph> {
    transformer_stack(cfg, 1)
}

/// `layers` blocks in a row.
pub fn transformer_stack(cfg: &TransformerConfig, layers: usize) -> Result<Graph> {
    let mut g = Graph::new(&format!("transformer_x{layers}"));
    let x = g.input("x", DType::F32, &[cfg.seq, cfg.hidden])?;
    let positions = g.input("positions", DType::I64, &[cfg.seq])?;
    let mut h = x;
    for l in 0..layers {
        h = add_block(&mut g, cfg, h, positions, &format!("l{l}."))?;
    }
    g.set_outputs(&[h])?;
    Ok(g)
}
