//! `llama`: SmolLM2, TinyLlama, Llama 2/3. Pre-norm blocks, SwiGLU, RoPE on adjacent
//! pairs (GGUF conversion permutes the Q and K rows for llama.cpp's "NORM" mode), every
//! layer global.

use super::{Block, Ffn, LayerAttention, LlamaConfig};
use rlx_gguf::Gguf;
use rlx_ir::{Result, RopeStyle};

pub(super) fn describe(g: &Gguf, h: &LlamaConfig) -> Result<Block> {
    super::no_rope_scaling(g, h)?;
    Ok(Block {
        ffn: Ffn::SwiGlu,
        rope: RopeStyle::GptJ,
        qk_norm: false,
        post_norms: false,
        attention_scale: 1.0 / (h.head_dim as f32).sqrt(),
        embedding_scale: None,
        layers: vec![LayerAttention { rope_base: h.rope_base, window: None }; h.n_layer],
    })
}
