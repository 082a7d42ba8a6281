//! Decoder-only LLM families, one file each: what a family's block computes, read from
//! its GGUF metadata. The graph builder in [`crate::llama`] serves every family; a family
//! describes itself as data ([`Block`]): its norms, FFN kind, RoPE pairing, attention
//! scale, embedding scale and the kind of attention each layer runs (global, or a
//! sliding window with its own RoPE base).
//!
//! Adding a family (Qwen2/3, Mistral, Phi-3): a file here with a `describe` function,
//! one line in `FAMILIES`, and a test against llama.cpp (tools/llm/).

mod gemma3;
mod llama;

use rlx_gguf::{Gguf, Value};
use rlx_ir::{Error, Result, RopeStyle};

/// A family: its `general.architecture` and how its block is described.
struct Family {
    arch: &'static str,
    describe: fn(&Gguf, &LlamaConfig) -> Result<Block>,
}

/// Every family RLX runs.
const FAMILIES: &[Family] =
    &[Family { arch: "llama", describe: llama::describe }, Family { arch: "gemma3", describe: gemma3::describe }];

/// The families' names, for messages.
pub fn supported() -> Vec<&'static str> {
    FAMILIES.iter().map(|f| f.arch).collect()
}

/// The FFN of a block: `down(act(gate(x)) * up(x))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ffn {
    /// SiLU on the gate (Llama, Qwen, Mistral).
    SwiGlu,
    /// GELU, tanh approximation, on the gate (Gemma).
    GeGluTanh,
}

/// What attention one layer runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerAttention {
    pub rope_base: f32,
    /// Keys a query sees, its own included (`None`: all before it).
    pub window: Option<usize>,
}

/// What a family's block computes, beyond the shared skeleton
/// `x += attn(norm(x)); x += ffn(norm(x))`.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub ffn: Ffn,
    pub rope: RopeStyle,
    /// RMS norms of each query and key head (`attn_q_norm`, `attn_k_norm`) before RoPE.
    pub qk_norm: bool,
    /// RMS norms of the attention and FFN outputs before each residual add
    /// (`post_attention_norm`, `post_ffw_norm`).
    pub post_norms: bool,
    /// Multiplies `q kᵀ` (usually `1 / sqrt(head_dim)`).
    pub attention_scale: f32,
    /// Multiplies the token embeddings (Gemma: `sqrt(d_model)`).
    pub embedding_scale: Option<f32>,
    /// Per layer.
    pub layers: Vec<LayerAttention>,
}

/// LlamaConfig-parameters every family has, read from `{arch}.*` keys.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    pub arch: String,
    pub n_layer: usize,
    pub d_model: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub d_ff: usize,
    pub vocab: usize,
    pub rope_base: f32,
    pub rope_dims: usize,
    pub rms_eps: f32,
    /// The context the model was trained for.
    pub context_length: usize,
}

impl LlamaConfig {
    /// The metadata key `{arch}.{name}`.
    pub fn key(&self, name: &str) -> String {
        format!("{}.{name}", self.arch)
    }
}

pub(crate) fn meta_usize(g: &Gguf, key: &str) -> Result<usize> {
    let v = g.require(key)?;
    v.as_u64()
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| Error::parse(format!("gguf: '{key}' is {}, not a non-negative integer", v.summary())))
}

/// `meta_usize` for a key that may be absent (then `default`).
pub(crate) fn meta_usize_or(g: &Gguf, key: &str, default: usize) -> Result<usize> {
    if g.get(key).is_none() { Ok(default) } else { meta_usize(g, key) }
}

/// A positive number at `key`, `default` when absent.
pub(crate) fn meta_f32_or(g: &Gguf, key: &str, default: f64) -> Result<f32> {
    match g.get(key) {
        None => Ok(default as f32),
        Some(v) => v
            .as_f64()
            .map(|x| x as f32)
            .filter(|x| x.is_finite() && *x > 0.0)
            .ok_or_else(|| Error::parse(format!("gguf: '{key}' is {}, not a positive number", v.summary()))),
    }
}

/// A hyper-parameter that must be at least 1.
fn positive(value: usize, key: &str) -> Result<usize> {
    if value == 0 {
        return Err(Error::parse(format!("gguf: '{key}' is 0")));
    }
    Ok(value)
}

/// The hyper-parameters and block of the file's family, each checked for consistency
/// with the others (the tensors are checked against them when bound).
pub fn read(g: &Gguf) -> Result<(LlamaConfig, Block)> {
    let arch = g.require("general.architecture")?.as_str().unwrap_or("");
    let family = FAMILIES.iter().find(|f| f.arch == arch).ok_or_else(|| {
        Error::unsupported(format!(
            "architecture '{}': implemented are {}",
            arch.escape_debug(),
            supported().iter().map(|a| format!("'{a}'")).collect::<Vec<_>>().join(", ")
        ))
    })?;
    let hyper = read_hyper(g, arch)?;
    let block = (family.describe)(g, &hyper)?;
    if block.layers.len() != hyper.n_layer {
        return Err(Error::internal(format!(
            "{arch}: {} layer kinds for {} layers",
            block.layers.len(),
            hyper.n_layer
        )));
    }
    Ok((hyper, block))
}

fn read_hyper(g: &Gguf, arch: &str) -> Result<LlamaConfig> {
    let k = |name: &str| format!("{arch}.{name}");
    let need = |name: &str| -> Result<usize> { positive(meta_usize(g, &k(name))?, &k(name)) };
    let n_layer = need("block_count")?;
    let d_model = need("embedding_length")?;
    let d_ff = need("feed_forward_length")?;
    let n_head = need("attention.head_count")?;
    let n_kv_head = positive(meta_usize_or(g, &k("attention.head_count_kv"), n_head)?, &k("attention.head_count_kv"))?;
    if !n_head.is_multiple_of(n_kv_head) {
        return Err(Error::parse(format!(
            "gguf: '{}' {n_head} does not split into groups of '{}' {n_kv_head}",
            k("attention.head_count"),
            k("attention.head_count_kv")
        )));
    }
    // Heads are usually d_model / n_head wide; a file can say otherwise.
    if g.get(&k("attention.key_length")).is_none() && !d_model.is_multiple_of(n_head) {
        return Err(Error::parse(format!(
            "gguf: '{}' {d_model} is not a multiple of '{}' {n_head} (and no '{}')",
            k("embedding_length"),
            k("attention.head_count"),
            k("attention.key_length")
        )));
    }
    let head_dim =
        positive(meta_usize_or(g, &k("attention.key_length"), d_model / n_head)?, &k("attention.key_length"))?;
    let value_dim = meta_usize_or(g, &k("attention.value_length"), head_dim)?;
    if value_dim != head_dim {
        return Err(Error::unsupported(format!(
            "gguf: '{}' {head_dim} != '{}' {value_dim}",
            k("attention.key_length"),
            k("attention.value_length")
        )));
    }
    let rope_dims = meta_usize_or(g, &k("rope.dimension_count"), head_dim)?;
    if rope_dims == 0 || rope_dims > head_dim || !rope_dims.is_multiple_of(2) {
        return Err(Error::parse(format!(
            "gguf: '{}' {rope_dims} is not an even count of at most the head dim {head_dim}",
            k("rope.dimension_count")
        )));
    }
    let tokens = g.require("tokenizer.ggml.tokens")?.as_array().map_or(0, <[Value]>::len);
    let vocab = meta_usize_or(g, &k("vocab_size"), tokens)?;
    if vocab != tokens {
        return Err(Error::parse(format!(
            "gguf: '{}' {vocab} != the {tokens} entries of 'tokenizer.ggml.tokens'",
            k("vocab_size")
        )));
    }
    Ok(LlamaConfig {
        arch: arch.to_string(),
        n_layer,
        d_model,
        n_head,
        n_kv_head,
        head_dim,
        d_ff,
        vocab,
        rope_base: meta_f32_or(g, &k("rope.freq_base"), 10000.0)?,
        rope_dims,
        rms_eps: meta_f32_or(g, &k("attention.layer_norm_rms_epsilon"), 1e-5)?,
        context_length: positive(meta_usize_or(g, &k("context_length"), 2048)?, &k("context_length"))?,
    })
}

/// Refuses RoPE scaling the graph does not implement (it would run, and drift).
pub(crate) fn no_rope_scaling(g: &Gguf, h: &LlamaConfig) -> Result<()> {
    let kind = g.get(&h.key("rope.scaling.type")).and_then(Value::as_str).unwrap_or("none");
    let factor = g.get(&h.key("rope.scaling.factor")).and_then(Value::as_f64).unwrap_or(1.0);
    if kind != "none" && factor != 1.0 {
        return Err(Error::unsupported(format!(
            "gguf: '{}' is '{}' with factor {factor}: RoPE scaling is not implemented",
            h.key("rope.scaling.type"),
            kind.escape_debug()
        )));
    }
    Ok(())
}
