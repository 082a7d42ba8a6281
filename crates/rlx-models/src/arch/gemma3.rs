//! `gemma3`: Gemma 3 (text). Per block: pre-norms and post-norms around attention and
//! the FFN, RMS norms of each query and key head, GeGLU (tanh GELU on the gate),
//! embeddings scaled by `sqrt(d_model)`, RoPE on halves. Five local layers (a sliding
//! window of `gemma3.attention.sliding_window` keys, RoPE base 10,000) alternate with one
//! global layer (RoPE base `gemma3.rope.freq_base`): layer `l` is local unless
//! `l % 6 == 5`, as llama.cpp reads the family.
//!
//! The GGUF stores each norm weight as `1 + w` (Gemma's `RMSNorm` scales by `1 + w`;
//! llama.cpp's converter adds the 1), so the norms are plain `x / rms(x) * weight` here.

use super::{Block, Ffn, LayerAttention, LlamaConfig, meta_usize};
use rlx_gguf::Gguf;
use rlx_ir::{Error, Result, RopeStyle};

/// One global layer in every `PATTERN`.
const PATTERN: usize = 6;
/// The local layers' RoPE base (not in the GGUF: fixed by the family).
const LOCAL_ROPE_BASE: f32 = 10_000.0;

pub(super) fn describe(g: &Gguf, h: &LlamaConfig) -> Result<Block> {
    super::no_rope_scaling(g, h)?;
    let key = h.key("attention.sliding_window");
    let window = meta_usize(g, &key)?;
    if window == 0 {
        return Err(Error::parse(format!("gguf: '{key}' is 0")));
    }
    // Queries are scaled by query_pre_attn_scalar^-1/2: the head dim, except for the
    // 27B model (62 layers), whose scalar is d_model / n_head (llama.cpp decides the same
    // way; the GGUF does not carry the scalar).
    let scalar = if h.n_layer == 62 { h.d_model / h.n_head } else { h.head_dim };
    Ok(Block {
        ffn: Ffn::GeGluTanh,
        rope: RopeStyle::NeoX,
        qk_norm: true,
        post_norms: true,
        attention_scale: 1.0 / (scalar as f32).sqrt(),
        embedding_scale: Some((h.d_model as f32).sqrt()),
        layers: (0..h.n_layer)
            .map(|l| {
                if l % PATTERN == PATTERN - 1 {
                    LayerAttention { rope_base: h.rope_base, window: None }
                } else {
                    LayerAttention { rope_base: LOCAL_ROPE_BASE, window: Some(window) }
                }
            })
            .collect(),
    })
}
