//! Decoder-only transformers from a GGUF file: every family in [`crate::arch`] (Llama:
//! SmolLM2, TinyLlama, Llama 2/3; Gemma 3), one graph builder reading the family's
//! [`Block`] description.
//!
//! One graph builder serves both passes: `n` new tokens at position `pos` are appended to
//! a KV cache of `context` rows (params updated in place, shared by every compiled graph
//! of the model), and attention runs causally over the first `pos + n` rows. The prompt
//! (prefill) runs as one batch of `n` tokens whose matmuls quantize activations to 16 bits
//! (an integer GEMM); each generated token runs the `n = 1` decode graph, compiled once,
//! whose matmuls quantize their activation row to 8 bits and use integer dot products.
//! With `q8_decode` off both keep f32 activations.
//! Weights are borrowed from the memory-mapped file, never copied.
//!
//! Per layer: `x += Wo · attn(rope(Wq · rms(x)), rope(Wk · rms(x)), Wv · rms(x))`, then
//! `x += Wdown · (act(Wgate · rms(x)) * Wup · rms(x))`, with the family's extra norms
//! (per-head Q/K, after each branch), activation, RoPE pairing and per-layer window;
//! logits of the last position are `Wout · rms(x)`, with `Wout` the token embedding when
//! the file has no `output.weight`.

use crate::arch::{self, Block, Ffn, LlamaConfig};
use crate::tokenizer::{TokenId, Tokenizer};
use rlx_gguf::{Gguf, TensorInfo, Value};
use rlx_ir::quant::QuantScheme;
use rlx_ir::{ActivationQuant, AttentionMask, DType, Error, Graph, HostTensor, NodeId, Result, TensorRef, Unary};
use rlx_runtime::{CompileOptions, CompiledGraph, Device, ParamBuffer, Session};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Sequence graphs (prompts and prompt pieces, by length) kept compiled, and the most
/// bytes their arenas may hold together (SmolLM2: ~17 KiB a token, 4.1 MiB for a
/// 256-token piece); the most recently run stay, a new one always. A server's prompts
/// come in many lengths, and a new length compiles for ~7-10 ms (SmolLM2, 2 cores,
/// lengths 5 to 300), as long as an 11-token prompt's whole prefill.
const SEQUENCE_GRAPHS: usize = 8;
const SEQUENCE_GRAPH_BYTES: usize = 32 << 20;

/// The checks a file's tensors must pass against its hyper-parameters before anything
/// is built: no block past `llama.block_count` (a file with 30 blocks that says 29 would
/// run 29 and print fluent nonsense), every expected tensor present (checked where each
/// is bound, naming the key that asks for it).
fn check_blocks(g: &Gguf, c: &LlamaConfig) -> Result<()> {
    let count = c.key("block_count");
    for t in &g.tensors {
        let Some(rest) = t.name.strip_prefix("blk.") else { continue };
        let block = rest.split('.').next().and_then(|n| n.parse::<usize>().ok());
        match block {
            Some(b) if b < c.n_layer => {}
            Some(b) => {
                return Err(Error::parse(format!(
                    "gguf: tensor '{}' is in block {b}, but '{count}' is {} (blocks 0 to {})",
                    t.name.escape_debug(),
                    c.n_layer,
                    c.n_layer - 1
                )));
            }
            None => {
                return Err(Error::parse(format!("gguf: tensor '{}' names no block number", t.name.escape_debug())));
            }
        }
    }
    Ok(())
}

/// How to run a model.
#[derive(Clone, Debug)]
pub struct LlamaOptions {
    /// Rows of the KV cache (tokens of context); 0 = min(the model's context, 2048).
    pub context: usize,
    /// Worker threads (None = `RLX_THREADS` or all cores).
    pub threads: Option<usize>,
    /// Decode steps quantize matmul activations to 8 bits for integer dot products, as
    /// llama.cpp does, and prompts to 16 bits; false keeps them f32 (slower, closer to the
    /// f32 reference).
    pub q8_decode: bool,
    /// Where the graphs run (weights and KV cache live there too).
    pub device: Device,
    /// The KV cache's element type: `F16` (half the memory; what llama.cpp keeps) or
    /// `F32` (exact, for comparisons with f32 references). `None`: f16 on the CPU, f32 on
    /// a GPU (whose arena keeps sub-word types in 32-bit words, so f16 saves nothing).
    pub cache_type: Option<DType>,
}

impl Default for LlamaOptions {
    fn default() -> Self {
        LlamaOptions { context: 0, threads: None, q8_decode: true, device: Device::Cpu, cache_type: None }
    }
}

impl LlamaOptions {
    /// The cache type these options give.
    pub fn resolved_cache_type(&self) -> Result<DType> {
        match self.cache_type {
            None if self.device == Device::Cpu => Ok(DType::F16),
            None => Ok(DType::F32),
            Some(t @ (DType::F16 | DType::BF16 | DType::F32)) => Ok(t),
            Some(t) => Err(Error::input(format!("a KV cache of {t} (f32, f16 or bf16)"))),
        }
    }
}

/// Where a projection's weight lives and how it is stored.
#[derive(Clone, Debug)]
struct WeightInfo {
    scheme: QuantScheme,
    /// Output rows (`n`) and values per row (`k`).
    rows: usize,
    cols: usize,
}

/// Timings of one [`Llama::generate`] call.
#[derive(Clone, Debug, Default)]
pub struct GenerateStats {
    /// Compiling graphs for shapes not seen before, with the weights' packed copies the
    /// first of them makes (not part of the rates below).
    pub compile_seconds: f64,
    pub prompt_tokens: usize,
    pub prompt_seconds: f64,
    pub generated_tokens: usize,
    pub generate_seconds: f64,
}

impl GenerateStats {
    /// Prompt speed, `None` when no prompt ran (`-n 0` runs none).
    pub fn prompt_tokens_per_second(&self) -> Option<f64> {
        (self.prompt_seconds > 0.0).then(|| self.prompt_tokens as f64 / self.prompt_seconds)
    }

    /// Decode speed: tokens after the first (which comes from the prompt pass); `None`
    /// when there were none.
    pub fn generate_tokens_per_second(&self) -> Option<f64> {
        (self.generated_tokens > 1 && self.generate_seconds > 0.0)
            .then(|| (self.generated_tokens - 1) as f64 / self.generate_seconds)
    }
}

/// A loaded model: its file, tokenizer, weights bound zero-copy, KV cache, and compiled
/// graphs (one per prompt length seen, one for decode).
pub struct Llama {
    pub config: LlamaConfig,
    /// What the family's block computes.
    pub block: Block,
    /// Shared, so that a server's request handlers can tokenize beside the running model.
    pub tokenizer: Arc<Tokenizer>,
    gguf: Gguf,
    session: Session,
    compile_options: CompileOptions,
    context: usize,
    /// The KV cache's element type.
    cache_type: DType,
    q8_decode: bool,
    weights: HashMap<String, (WeightInfo, ParamBuffer)>,
    norms: HashMap<String, ParamBuffer>,
    /// KV caches by slot (one sequence each; slot 0 is the one `generate` uses), then by
    /// layer: (k, v), each `[1, n_kv_head, context, head_dim]`.
    slots: Vec<Vec<(ParamBuffer, ParamBuffer)>>,
    embedding: (TensorInfo, WeightInfo),
    output_name: String,
    /// Graphs of one sequence's `n` tokens (prompts, scoring, hidden states), a few
    /// shapes at a time (chat turns and embedding inputs differ in length), by shape and
    /// copy: prompts of one shape that run side by side ([`Llama::run_slots`]) need a
    /// copy each (a program runs one call at a time).
    sequences: HashMap<(StepShape, usize), Step>,
    /// Sequence graphs run so far (their recency).
    runs: u64,
    decode: Option<Step>,
    /// Batched decode graphs ([`Llama::decode_batch`]) by rows.
    batch: HashMap<usize, Step>,
    /// Tokens in slot 0's cache.
    pos: usize,
    /// Seconds spent compiling graphs (and packing the weights for them) so far.
    compile_seconds: f64,
}

/// Tensor `name`'s info, or an error naming it (and, for a block's tensor, the
/// `{arch}.block_count` that asks for the block).
fn tensor<'a>(g: &'a Gguf, name: &str) -> Result<&'a TensorInfo> {
    g.tensor(name).ok_or_else(|| {
        let arch = g.get("general.architecture").and_then(Value::as_str).unwrap_or("llama");
        let count = format!("{arch}.block_count");
        let why = match (name.strip_prefix("blk."), g.get(&count).and_then(Value::as_u64)) {
            (Some(_), Some(n)) => format!(" ('{count}' is {n})"),
            _ => String::new(),
        };
        Error::parse(format!("gguf: missing tensor '{name}'{why}"))
    })
}

/// The activations of a product with weights in `scheme` in a step whose products take
/// `step`'s: float weights (F32, F16, BF16) keep f32 activations, as llama.cpp gives them
/// their own type: 8-bit rows against them gained no speed (no integer dot of a float
/// weight) and lost precision.
fn activations_for(scheme: QuantScheme, step: ActivationQuant) -> ActivationQuant {
    if scheme.is_float() { ActivationQuant::F32 } else { step }
}

/// A projection's info after checking its shape; `keys` says which metadata the
/// expected `[rows, cols]` comes from, so a mismatch names both sides.
fn weight_info(t: &TensorInfo, rows: usize, cols: usize, keys: &str) -> Result<WeightInfo> {
    let shape = t.shape();
    if shape != [rows, cols] {
        return Err(Error::shape(format!(
            "gguf: tensor '{}' is {:?} ({}), expected [{rows}, {cols}] from {keys}",
            t.name,
            shape,
            t.scheme.name()
        )));
    }
    Ok(WeightInfo { scheme: t.scheme, rows, cols })
}

impl Llama {
    /// Maps `path` and prepares the model (graphs compile on first use).
    pub fn load(path: impl AsRef<Path>, options: &LlamaOptions) -> Result<Llama> {
        let gguf = Gguf::open(path.as_ref())?;
        // The file's name on a model-level error too (the reader's already carry it).
        Llama::from_gguf(gguf, options).map_err(|e| e.context(path.as_ref().display()))
    }

    pub fn from_gguf(mut gguf: Gguf, options: &LlamaOptions) -> Result<Llama> {
        let (c, block) = arch::read(&gguf)?;
        let tokenizer = Arc::new(Tokenizer::from_gguf(&gguf)?);
        check_blocks(&gguf, &c)?;
        // The vocabulary now lives in the tokenizer; the metadata copy (~8 MB of small
        // strings for a 49k vocabulary) goes.
        gguf.metadata.retain(|(k, _)| {
            !matches!(k.as_str(), "tokenizer.ggml.tokens" | "tokenizer.ggml.merges" | "tokenizer.ggml.token_type")
        });
        let context = if options.context == 0 { c.context_length.min(2048) } else { options.context };
        let bytes = gguf.shared_bytes();
        // A weight the CPU repacks is then read from the copy: its mapped pages go.
        let release = gguf.page_release();
        let borrow = |t: &TensorInfo, dtype: DType, dims: &[usize]| {
            let buffer = ParamBuffer::from_bytes(dtype, dims, bytes.clone(), gguf.tensor_range(t))
                .map_err(|e| e.context(&t.name))?;
            Ok::<_, Error>(match &release {
                Some(release) => buffer.with_page_release(release.clone()),
                None => buffer,
            })
        };
        // Head counts and dims are the file's numbers: their products are checked.
        let width = |heads: usize, key: &str| {
            heads.checked_mul(c.head_dim).ok_or_else(|| {
                Error::parse(format!("gguf: '{key}' x head dim ({heads} x {}) overflows usize", c.head_dim))
            })
        };
        let (q, kv) =
            (width(c.n_head, &c.key("attention.head_count"))?, width(c.n_kv_head, &c.key("attention.head_count_kv"))?);
        let (h, ff) = (c.d_model, c.d_ff);
        let mut weights = HashMap::new();
        let mut norms = HashMap::new();
        let output_name = if gguf.tensor("output.weight").is_some() { "output.weight" } else { "token_embd.weight" };
        // Where each expected shape comes from, for messages.
        let (d, heads, kv_heads) =
            (c.key("embedding_length"), c.key("attention.head_count"), c.key("attention.head_count_kv"));
        let vocab_d = format!("the vocabulary ('tokenizer.ggml.tokens') and '{d}'");
        let q_d = format!("'{heads}' x head dim and '{d}'");
        let kv_d = format!("'{kv_heads}' x head dim and '{d}'");
        let d_q = format!("'{d}' and '{heads}' x head dim");
        let ff_d = format!("'{}' and '{d}'", c.key("feed_forward_length"));
        let d_ff = format!("'{d}' and '{}'", c.key("feed_forward_length"));
        let mut projections = vec![(output_name.to_string(), c.vocab, h, vocab_d.clone())];
        let mut norm_dims = Vec::new();
        let head_d = c.key("attention.key_length");
        for l in 0..c.n_layer {
            for (part, rows, cols, keys) in [
                ("attn_q", q, h, &q_d),
                ("attn_k", kv, h, &kv_d),
                ("attn_v", kv, h, &kv_d),
                ("attn_output", h, q, &d_q),
                ("ffn_gate", ff, h, &ff_d),
                ("ffn_up", ff, h, &ff_d),
                ("ffn_down", h, ff, &d_ff),
            ] {
                projections.push((format!("blk.{l}.{part}.weight"), rows, cols, keys.clone()));
            }
            let mut parts = vec![("attn_norm", h, &d), ("ffn_norm", h, &d)];
            if block.post_norms {
                parts.extend([("post_attention_norm", h, &d), ("post_ffw_norm", h, &d)]);
            }
            if block.qk_norm {
                parts.extend([("attn_q_norm", c.head_dim, &head_d), ("attn_k_norm", c.head_dim, &head_d)]);
            }
            norm_dims
                .extend(parts.into_iter().map(|(part, n, key)| (format!("blk.{l}.{part}.weight"), n, key.clone())));
        }
        norm_dims.push(("output_norm.weight".to_string(), h, d.clone()));
        for (name, n, key) in norm_dims {
            let buffer = norm_buffer(&gguf, &name, n, &key, &borrow)?;
            norms.insert(name, buffer);
        }
        for (name, rows, cols, keys) in projections {
            let t = tensor(&gguf, &name)?;
            let info = weight_info(t, rows, cols, &keys)?;
            let row_bytes = info.scheme.row_bytes(cols)?;
            let buffer = borrow(t, DType::U8, &[rows, row_bytes])?;
            weights.insert(name, (info, buffer));
        }
        let embd = tensor(&gguf, "token_embd.weight")?.clone();
        let embd_info = weight_info(&embd, c.vocab, h, &vocab_d)?;
        let cache_type = options.resolved_cache_type()?;
        let slot = slot_caches(&c, context, cache_type)?;
        let compile_options = CompileOptions { threads: options.threads, ..CompileOptions::default() };
        release_freed_heap();
        Ok(Llama {
            config: c,
            block,
            tokenizer,
            gguf,
            session: Session::new(options.device)?,
            compile_options,
            context,
            cache_type,
            q8_decode: options.q8_decode,
            weights,
            norms,
            slots: vec![slot],
            embedding: (embd, embd_info),
            output_name: output_name.to_string(),
            sequences: HashMap::new(),
            runs: 0,
            decode: None,
            batch: HashMap::new(),
            pos: 0,
            compile_seconds: 0.0,
        })
    }

    /// The file's metadata and tensors.
    pub fn gguf(&self) -> &Gguf {
        &self.gguf
    }

    /// The model's chat template (its own, else its family's).
    pub fn chat_template(&self) -> Result<crate::ChatTemplate> {
        let jinja = self.gguf.get("tokenizer.chat_template").and_then(Value::as_str);
        crate::ChatTemplate::for_model(jinja, &self.config.arch)
    }

    /// The KV cache's element type.
    pub fn cache_type(&self) -> DType {
        self.cache_type
    }

    /// Rows of KV cache (the most tokens a conversation can hold).
    pub fn context(&self) -> usize {
        self.context
    }

    /// Tokens in the KV cache.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Switches between quantized activations (8-bit decode, 16-bit prompts: the default)
    /// and f32 everywhere.
    pub fn set_q8_decode(&mut self, q8: bool) {
        if q8 != self.q8_decode {
            self.q8_decode = q8;
            self.decode = None;
            self.batch.clear();
            self.sequences.clear();
        }
    }

    /// Forgets the conversation (the cache rows are overwritten by the next tokens).
    pub fn reset(&mut self) {
        self.pos = 0;
    }

    /// Keeps the first `len` tokens of the cache and forgets the rest (a conversation
    /// whose prompt shares only that prefix with what was run).
    pub fn rewind(&mut self, len: usize) -> Result<()> {
        if len > self.pos {
            return Err(Error::input(format!("cannot rewind to {len} tokens: the cache holds {}", self.pos)));
        }
        self.pos = len;
        Ok(())
    }

    /// The graph of one step: `n` new tokens appended at input `pos`; `activations` says
    /// what the matmuls do to theirs. Inputs `x` (embeddings `[1, n, d_model]`) and `pos` (`i32[1]`);
    /// output the logits of the last token, `[1, 1, vocab]`.
    pub fn build_graph(&self, n: usize, activations: ActivationQuant) -> Result<Graph> {
        self.build_graph_scoring(n, activations, n - 1)
    }

    /// [`Llama::build_graph`] with the logits of every position from `first` on
    /// (`[1, n - first, vocab]`): what scoring a text (perplexity) needs.
    pub fn build_graph_scoring(&self, n: usize, activations: ActivationQuant, first: usize) -> Result<Graph> {
        self.build(StepShape::Sequence { n, first, hidden: false }, activations)
    }

    /// The graph of one decode step for `rows` sequences at once: input `x` (`[1, rows,
    /// d_model]`, row `r` the token of sequence `r`) and `pos` (`i32[rows]`, each row's
    /// position in its own cache, params `cache_k.{layer}.{row}`); output the logits of
    /// every row, `[1, rows, vocab]`. Each weight is read once per step for all rows.
    ///
    /// A row computes what the one-token graph computes for it alone, bit for bit: the
    /// row-wise ops (norms, RoPE, activations) see only their row; each row's attention is
    /// an op of its own, of the one-token graph's shape; and the matmuls' 8-bit path
    /// quantizes each activation row on its own and splits columns, never rows, across
    /// threads (`tests/batch.rs` checks the logits).
    pub fn build_batch_graph(&self, rows: usize, activations: ActivationQuant) -> Result<Graph> {
        self.build(StepShape::Batch { rows }, activations)
    }

    fn build(&self, shape: StepShape, activations: ActivationQuant) -> Result<Graph> {
        let (n, first, hidden) = match shape {
            StepShape::Sequence { n, first, hidden } => (n, first, hidden),
            StepShape::Batch { rows } => (rows, 0, false),
        };
        if first >= n {
            return Err(Error::input(format!("logits from position {first} of a step of {n} tokens")));
        }
        let (c, block) = (&self.config, &self.block);
        let (h, nh, nkv, hd) = (c.d_model, c.n_head, c.n_kv_head, c.head_dim);
        let batch = matches!(shape, StepShape::Batch { .. });
        let name = if batch { format!("{}_batch_{n}", c.arch) } else { format!("{}_step_{n}", c.arch) };
        let mut g = Graph::new(&name);
        let mut x = g.input("x", DType::F32, &[1, n, h])?;
        let pos = g.input("pos", DType::I32, &[if batch { n } else { 1 }])?;
        let (positions, len) = if batch {
            (pos, None)
        } else {
            let iota = g.constant_tensor(HostTensor::from_i64(&[n], &(0..n as i64).collect::<Vec<_>>())?)?;
            let iota = g.cast(iota, DType::I32)?;
            let count = g.scalar(DType::I32, n as f32)?;
            (g.add(pos, iota)?, Some(g.add(pos, count)?))
        };
        let norm = |g: &mut Graph, x: NodeId, name: &str| -> Result<NodeId> {
            let dim = *g.dims(x).last().unwrap_or(&h);
            let gamma = g.param(name, DType::F32, &[dim])?;
            g.rms_norm(x, Some(gamma), c.rms_eps)
        };
        let proj = |g: &mut Graph, x: NodeId, name: &str| -> Result<NodeId> {
            let (info, _) = &self.weights[name];
            let row_bytes = info.scheme.row_bytes(info.cols)?;
            let w = g.param(name, DType::U8, &[info.rows, row_bytes])?;
            g.dequant_matmul(x, w, info.scheme, activations_for(info.scheme, activations))
        };
        let heads = |g: &mut Graph, x: NodeId, count: usize| -> Result<NodeId> {
            let x = g.reshape(x, &[1, n, count, hd])?;
            g.transpose(x, &[0, 2, 1, 3])
        };
        for (l, layer) in block.layers.iter().enumerate() {
            let p = |part: &str| format!("blk.{l}.{part}.weight");
            let hn = norm(&mut g, x, &p("attn_norm"))?;
            let q = proj(&mut g, hn, &p("attn_q"))?;
            let k = proj(&mut g, hn, &p("attn_k"))?;
            let v = proj(&mut g, hn, &p("attn_v"))?;
            let mut q = heads(&mut g, q, nh)?;
            let mut k = heads(&mut g, k, nkv)?;
            if block.qk_norm {
                q = norm(&mut g, q, &p("attn_q_norm"))?;
                k = norm(&mut g, k, &p("attn_k_norm"))?;
            }
            let q = g.rope(q, positions, block.rope, layer.rope_base, Some(c.rope_dims))?;
            let k = g.rope(k, positions, block.rope, layer.rope_base, Some(c.rope_dims))?;
            // The new K/V rows rounded to the cache's type; attention reads them widened.
            let to_cache =
                |g: &mut Graph, t| if self.cache_type == DType::F32 { Ok(t) } else { g.cast(t, self.cache_type) };
            // Appends K and V rows (`[1, nkv, s, hd]`, the cache's type) at `at` to the
            // cache named by `key`: the cache's K and V with them.
            let append = |g: &mut Graph, (k, v): (NodeId, NodeId), at, key: &str| -> Result<(NodeId, NodeId)> {
                let cache_dims = [1, nkv, self.context, hd];
                let ck = g.param(&format!("cache_k.{key}"), self.cache_type, &cache_dims)?;
                let cv = g.param(&format!("cache_v.{key}"), self.cache_type, &cache_dims)?;
                Ok((g.kv_append(ck, k, at, 2)?, g.kv_append(cv, v, at, 2)?))
            };
            // Attends `q` over the first `len` rows of the cache's K and V.
            let attend = |g: &mut Graph, q, (kc, vc), len| {
                let mask = match layer.window {
                    Some(w) => AttentionMask::SlidingLen(len, w),
                    None => AttentionMask::CausalLen(len),
                };
                g.attention(q, kc, vc, mask, Some(block.attention_scale))
            };
            let a = match len {
                Some(len) => {
                    let v = heads(&mut g, v, nkv)?;
                    let (k, v) = (to_cache(&mut g, k)?, to_cache(&mut g, v)?);
                    let cache = append(&mut g, (k, v), pos, &l.to_string())?;
                    let a = attend(&mut g, q, cache, len)?;
                    g.transpose(a, &[0, 2, 1, 3])?
                }
                None => {
                    // One sequence per row: its own cache, position and length. Rows are
                    // taken from `[1, n, heads, hd]` layouts, where each is contiguous: a
                    // view, reshaped to `[1, heads, 1, hd]` (the same bytes), with no copy.
                    let rows_first = |g: &mut Graph, t| g.transpose(t, &[0, 2, 1, 3]);
                    let q = rows_first(&mut g, q)?;
                    let k = rows_first(&mut g, k)?;
                    let v = g.reshape(v, &[1, n, nkv, hd])?;
                    let (k, v) = (to_cache(&mut g, k)?, to_cache(&mut g, v)?);
                    let row = |g: &mut Graph, t, r, count| {
                        let t = g.narrow(t, 1, r, 1)?;
                        g.reshape(t, &[1, count, 1, hd])
                    };
                    // Every row's append comes first, then every row's attention: steps
                    // with no data between them, which the CPU program runs side by side.
                    let one = g.scalar(DType::I32, 1.0)?;
                    let mut rows = Vec::with_capacity(n);
                    for r in 0..n {
                        let (q, k, v) = (row(&mut g, q, r, nh)?, row(&mut g, k, r, nkv)?, row(&mut g, v, r, nkv)?);
                        let at = g.narrow(pos, 0, r, 1)?;
                        let len = g.add(at, one)?;
                        rows.push((q, append(&mut g, (k, v), at, &format!("{l}.{r}"))?, len));
                    }
                    // Each row's `[1, nh, 1, hd]` is its `[1, 1, nh, hd]` (the same bytes):
                    // joined along the rows, they are the rows-first layout already.
                    let outs: Vec<NodeId> = rows
                        .into_iter()
                        .map(|(q, cache, len)| {
                            let a = attend(&mut g, q, cache, len)?;
                            g.reshape(a, &[1, 1, nh, hd])
                        })
                        .collect::<Result<_>>()?;
                    g.concat(&outs, 1)?
                }
            };
            let a = g.reshape(a, &[1, n, nh * hd])?;
            let mut o = proj(&mut g, a, &p("attn_output"))?;
            if block.post_norms {
                o = norm(&mut g, o, &p("post_attention_norm"))?;
            }
            x = g.add(x, o)?;
            let hn = norm(&mut g, x, &p("ffn_norm"))?;
            let gate = proj(&mut g, hn, &p("ffn_gate"))?;
            let up = proj(&mut g, hn, &p("ffn_up"))?;
            let act = match block.ffn {
                Ffn::SwiGlu => Unary::Silu,
                Ffn::GeGluTanh => Unary::GeluTanh,
            };
            let gate = g.unary(act, gate)?;
            let f = g.mul(gate, up)?;
            let mut d = proj(&mut g, f, &p("ffn_down"))?;
            if block.post_norms {
                d = norm(&mut g, d, &p("post_ffw_norm"))?;
            }
            x = g.add(x, d)?;
        }
        let last = if first > 0 { g.narrow(x, 1, first, n - first)? } else { x };
        let xn = norm(&mut g, last, "output_norm.weight")?;
        let out = if hidden { xn } else { proj(&mut g, xn, &self.output_name)? };
        g.set_outputs(&[out])?;
        Ok(g)
    }

    /// Seconds spent compiling graphs (and packing the weights for them) since loading.
    pub fn compile_seconds(&self) -> f64 {
        self.compile_seconds
    }

    /// Compiles the graph of `shape` and binds the weights (caches are bound per run, by
    /// [`Llama::bind_slots`]).
    fn compile_step(&mut self, shape: StepShape, activations: ActivationQuant) -> Result<Step> {
        let start = Instant::now();
        let graph = self.build(shape, activations)?;
        let mut compiled = self.session.compile_with(&graph, &self.compile_options)?;
        // Every param but the caches (a hidden-state graph has no output head).
        let names: Vec<String> = compiled.params().iter().map(|p| p.name.clone()).collect();
        for name in names.iter().filter(|n| !n.starts_with("cache_")) {
            match (self.weights.get(name), self.norms.get(name)) {
                (Some((_, buffer)), _) | (None, Some(buffer)) => compiled.bind_param(name, buffer)?,
                (None, None) => return Err(Error::internal(format!("no weight for the graph's param '{name}'"))),
            }
        }
        // The weights' packed copies (made by the first graph, shared by the others) are
        // a load cost: without this the first prompt paid for them.
        compiled.pack_params()?;
        self.compile_seconds += start.elapsed().as_secs_f64();
        Ok(Step { compiled, shape, bound: Vec::new(), last_run: 0 })
    }

    /// Embedding rows of `tokens`, `[1, n, d_model]`.
    fn embed(&self, tokens: &[TokenId]) -> Result<HostTensor> {
        let (t, info) = &self.embedding;
        let h = self.config.d_model;
        let row_bytes = info.scheme.row_bytes(h)?;
        let data = self.gguf.tensor_data(t);
        let mut x = vec![0f32; tokens.len() * h];
        for (&id, row) in tokens.iter().zip(x.chunks_exact_mut(h)) {
            let at = id as usize * row_bytes;
            let bytes = data.get(at..at + row_bytes).ok_or_else(|| {
                Error::input(format!("token id {id} is outside the embedding table of {} rows", info.rows))
            })?;
            rlx_ir::quant::dequantize(info.scheme, bytes, row)?;
            if let Some(scale) = self.block.embedding_scale {
                row.iter_mut().for_each(|v| *v *= scale);
            }
        }
        HostTensor::from_f32(&[1, tokens.len(), h], &x)
    }

    /// Runs `tokens` after what slot 0's cache holds through the graph `kind` names (other
    /// slots' pieces go through `run_together`).
    fn step(&mut self, tokens: &[TokenId], kind: StepKind) -> Result<Vec<f32>> {
        let (x, pos) = self.sequence_inputs(0, self.pos, tokens)?;
        let n = tokens.len();
        let mut step = match kind {
            StepKind::Decode => {
                self.prepare_decode()?;
                self.decode.take().expect("compiled by prepare_decode")
            }
            StepKind::Sequence { first } => {
                if first >= n {
                    return Err(Error::input(format!("outputs from index {first} of {n} tokens")));
                }
                self.take_sequence((StepShape::Sequence { n, first, hidden: false }, 0))?
            }
        };
        let run = self.bind_slots(&mut step, &[0]).and_then(|()| step.compiled.run_typed(&[("x", &x), ("pos", &pos)]));
        match kind {
            StepKind::Decode => self.decode = Some(step),
            StepKind::Sequence { .. } => self.keep_sequence(step, 0),
        }
        let logits = run?.remove(0).to_f32_vec();
        self.pos += n;
        Ok(logits)
    }

    /// The inputs of `tokens` run after the first `pos` rows of `slot`'s cache: their
    /// embeddings and the position; an error if the slot does not exist or the cache
    /// cannot hold them.
    fn sequence_inputs(&self, slot: usize, pos: usize, tokens: &[TokenId]) -> Result<(HostTensor, HostTensor)> {
        let n = tokens.len();
        if n == 0 {
            return Err(Error::input("no tokens to run"));
        }
        if slot >= self.slots.len() {
            return Err(Error::input(format!("slot {slot} of {} cache slots", self.slots.len())));
        }
        if pos + n > self.context {
            return Err(Error::input(format!(
                "context full: {pos} tokens in the cache + {n} new > {} (raise the context size)",
                self.context
            )));
        }
        Ok((self.embed(tokens)?, HostTensor::from_f32_as(DType::I32, &[1], &[pos as f32])?))
    }

    /// The sequence graph `key` (compiled first unless kept), out of the kept ones while
    /// it runs.
    fn take_sequence(&mut self, key: (StepShape, usize)) -> Result<Step> {
        self.prepare_sequence(key)?;
        Ok(self.sequences.remove(&key).expect("compiled by prepare_sequence"))
    }

    /// Keeps a sequence graph that just ran as copy `copy` of its shape.
    fn keep_sequence(&mut self, mut step: Step, copy: usize) {
        self.runs += 1;
        step.last_run = self.runs;
        self.sequences.insert((step.shape, copy), step);
    }

    /// Runs several sequences' prompt pieces, each as [`Llama::prefill_slot`] (or, with
    /// `hidden`, [`Llama::hidden_slot`]) runs it, with the same results, in order. On the
    /// CPU with more than one worker, consecutive pieces of distinct slots and like
    /// lengths ([`side_by_side_groups`]) run side by side, one worker each
    /// ([`rlx_runtime::CompiledGraph::run_side_by_side`]): `rlx serve`'s prompts of
    /// requests that arrive together. SmolLM2, 8 prompts of 9-12 tokens, 2 threads, Intel
    /// Xeon model 207: one after another 88-95 ms, two at a time 71-77. Pieces of one
    /// shape that run together each take a copy of its graph, kept like the others.
    pub fn run_slots(&mut self, pieces: &[SlotPiece]) -> Vec<Result<Vec<f32>>> {
        let workers = match self.session.device() {
            Device::Cpu => self.compile_options.threads.unwrap_or_else(rlx_runtime::cpu::default_threads),
            _ => 1,
        };
        side_by_side_groups(pieces, workers).into_iter().flat_map(|group| self.run_together(&pieces[group])).collect()
    }

    /// [`Llama::run_slots`] of pieces of distinct slots, all at once (one piece:
    /// [`Llama::prefill_slot`], [`Llama::hidden_slot`]).
    fn run_together(&mut self, pieces: &[SlotPiece]) -> Vec<Result<Vec<f32>>> {
        let shape = |p: &SlotPiece| {
            let n = p.tokens.len();
            StepShape::Sequence { n, first: if p.hidden { 0 } else { n.saturating_sub(1) }, hidden: p.hidden }
        };
        // Each piece's graph, bound to its slot, and its inputs (the graphs of pieces that
        // cannot run go back at once).
        let (mut steps, mut inputs) = (Vec::with_capacity(pieces.len()), Vec::with_capacity(pieces.len()));
        for (i, piece) in pieces.iter().enumerate() {
            let copy = pieces[..i].iter().filter(|p| shape(p) == shape(piece)).count();
            let ready = self.sequence_inputs(piece.slot, piece.pos, piece.tokens).and_then(|(x, pos)| {
                let mut step = self.take_sequence((shape(piece), copy))?;
                if let Err(e) = self.bind_slots(&mut step, &[piece.slot]) {
                    self.keep_sequence(step, copy);
                    return Err(e);
                }
                Ok((step, [x, pos]))
            });
            match ready {
                Ok((step, values)) => {
                    steps.push(Ok((step, copy)));
                    inputs.push(Some(values));
                }
                Err(e) => {
                    steps.push(Err(e));
                    inputs.push(None);
                }
            }
        }
        let named: Vec<[(&str, &HostTensor); 2]> =
            inputs.iter().flatten().map(|[x, pos]| [("x", x), ("pos", pos)]).collect();
        let mut jobs: Vec<(&mut CompiledGraph, &[(&str, &HostTensor)])> = steps
            .iter_mut()
            .filter_map(|s| s.as_mut().ok())
            .zip(&named)
            .map(|((step, _), named)| (&mut step.compiled, named.as_slice()))
            .collect();
        let mut ran = CompiledGraph::run_side_by_side(&mut jobs).into_iter();
        steps
            .into_iter()
            .map(|s| {
                let (step, copy) = s?;
                self.keep_sequence(step, copy);
                Ok(ran.next().expect("one result per job")?.remove(0).to_f32_vec())
            })
            .collect()
    }

    /// Binds the caches of `slots` (row `r` of a batch graph gets `slots[r]`) to `step`,
    /// where they differ from what it holds.
    fn bind_slots(&self, step: &mut Step, slots: &[usize]) -> Result<()> {
        if step.bound == slots {
            return Ok(());
        }
        let key = |l: usize, row: usize| match step.shape {
            StepShape::Sequence { .. } => l.to_string(),
            StepShape::Batch { .. } => format!("{l}.{row}"),
        };
        // A buffer cannot be bound to two params of one program at once, so a row whose
        // new slot another row still holds waits until that row moves on. Rows keep the
        // slots' order, so the moves never form a cycle.
        let mut pending: Vec<usize> = (0..slots.len()).filter(|&r| step.bound.get(r) != Some(&slots[r])).collect();
        step.bound.resize(slots.len(), usize::MAX);
        while !pending.is_empty() {
            let free = |r: usize| !step.bound.iter().enumerate().any(|(o, &s)| o != r && s == slots[r]);
            let Some(i) = pending.iter().position(|&r| free(r)) else {
                return Err(Error::internal(format!("cache slots {slots:?} cannot be bound over {:?}", step.bound)));
            };
            let r = pending.swap_remove(i);
            for (l, (k, v)) in self.slots[slots[r]].iter().enumerate() {
                for (name, buffer) in [(format!("cache_k.{}", key(l, r)), k), (format!("cache_v.{}", key(l, r)), v)] {
                    step.compiled.bind_param(&name, buffer)?;
                    // The cache persists only if the graph appends to it in place.
                    if !step.compiled.updates_in_place(&name)? {
                        return Err(Error::internal(format!(
                            "{name} is not updated in place: the KV cache would be lost"
                        )));
                    }
                }
            }
            step.bound[r] = slots[r];
        }
        Ok(())
    }

    /// What the matmuls of a step do to their activations. Decode steps: 8 bits, as llama.cpp (the integer dots then
    /// read the weights at DRAM speed). Prompts: 16 bits, near f32's precision at about
    /// 1.5x its speed: on 8 bits SmolLM2 answered "What is the capital of France?" with
    /// "L'Étoile, la ..." (llama-server's answer too) instead of "The capital of France is
    /// Paris." (2026-12-02). With `q8_decode` off, f32 everywhere.
    fn activations(&self, decode: bool) -> ActivationQuant {
        match (self.q8_decode, decode) {
            (false, _) => ActivationQuant::F32,
            (true, true) => ActivationQuant::Q8,
            (true, false) => ActivationQuant::Q16,
        }
    }

    /// Compiles the graphs a prompt of `n` tokens and the decode steps after it need.
    pub fn prepare(&mut self, n: usize) -> Result<()> {
        if n == 0 {
            return Err(Error::input("a prompt needs at least one token"));
        }
        self.prepare_sequence((StepShape::Sequence { n, first: n - 1, hidden: false }, 0))?;
        self.prepare_decode()
    }

    fn prepare_decode(&mut self) -> Result<()> {
        if self.decode.is_none() {
            self.decode =
                Some(self.compile_step(StepShape::Sequence { n: 1, first: 0, hidden: false }, self.activations(true))?);
        }
        Ok(())
    }

    /// Compiles the sequence graph `key` (a prompt's shape, and which copy of it) unless
    /// it is one of the few kept.
    fn prepare_sequence(&mut self, key: (StepShape, usize)) -> Result<()> {
        if self.sequences.contains_key(&key) {
            return Ok(());
        }
        let step = self.compile_step(key.0, self.activations(false))?;
        let kept = self.sequences.iter().map(|(&k, s)| (s.last_run, k, s.compiled.arena_bytes())).collect();
        for old in least_recent_beyond(kept, step.compiled.arena_bytes(), (SEQUENCE_GRAPHS, SEQUENCE_GRAPH_BYTES)) {
            self.sequences.remove(&old);
        }
        self.sequences.insert(key, step);
        Ok(())
    }

    /// Runs a prompt as one batch after what the cache holds; returns the logits of its
    /// last token.
    pub fn prefill(&mut self, tokens: &[TokenId]) -> Result<Vec<f32>> {
        self.step(tokens, StepKind::Sequence { first: tokens.len().saturating_sub(1) })
    }

    /// Runs one token; returns the logits that follow it.
    pub fn decode(&mut self, token: TokenId) -> Result<Vec<f32>> {
        self.step(&[token], StepKind::Decode)
    }

    /// Runs `tokens` as one batch after what the cache holds (as a prompt); returns the
    /// logits after each token from index `first` on, row by row (`(tokens.len() - first)
    /// * vocab` values).
    pub fn score(&mut self, tokens: &[TokenId], first: usize) -> Result<Vec<f32>> {
        self.step(tokens, StepKind::Sequence { first })
    }

    /// Makes room for `count` sequences at once (at least 1): each slot is a KV cache of
    /// [`Llama::context`] rows, allocated here, once; slot 0 is the one the
    /// single-sequence calls ([`Llama::generate`], [`Llama::prefill`], ...) use.
    pub fn set_slots(&mut self, count: usize) -> Result<()> {
        if count == 0 {
            return Err(Error::input("a model needs at least 1 cache slot"));
        }
        while self.slots.len() < count {
            self.slots.push(slot_caches(&self.config, self.context, self.cache_type)?);
        }
        self.slots.truncate(count);
        // Graphs bound to a slot that is gone rebind on their next run.
        let gone = |step: &mut Step| {
            if step.bound.iter().any(|&s| s >= count) {
                step.bound.clear();
            }
        };
        self.sequences.values_mut().chain(&mut self.decode).chain(self.batch.values_mut()).for_each(gone);
        Ok(())
    }

    /// Sequences the caches can hold at once.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Bytes of all KV caches (every slot, every layer, K and V).
    pub fn cache_bytes(&self) -> usize {
        let per_slot = 2 * self.config.n_layer * self.config.n_kv_head * self.context * self.config.head_dim;
        self.slots.len() * per_slot * self.cache_type.size_bytes()
    }

    /// Runs `tokens` (a prompt, or a chunk of one) of the sequence in `slot` after the
    /// first `pos` rows of its cache; returns the logits of the last token.
    pub fn prefill_slot(&mut self, slot: usize, pos: usize, tokens: &[TokenId]) -> Result<Vec<f32>> {
        self.run_together(&[SlotPiece { slot, pos, tokens, hidden: false }]).remove(0)
    }

    /// Of `common` leading tokens a new prompt shares with the prompt whose prefill wrote a
    /// slot's cache rows, how many rows it can keep and still get, bit for bit, what its
    /// prefill from the start gives: on the CPU with quantized prompt activations, `common`
    /// rounded down to a multiple of the attention's row block, so that the rest's row
    /// blocks line up with those of the whole prompt (`ATTENTION_ROW_BLOCK`; the products
    /// quantize and sum each row on its own); none elsewhere (f32 activations and the GPU
    /// choose kernels, and orders of sums, by the number of rows). Rows decode steps
    /// wrote are not a prefill's (8-bit activations) and are never reused.
    pub fn reusable_prompt_rows(&self, common: usize) -> usize {
        let block = rlx_runtime::cpu::ATTENTION_ROW_BLOCK;
        if self.q8_decode && self.session.device() == Device::Cpu { common / block * block } else { 0 }
    }

    /// Runs `tokens` of the sequence in `slot` after the first `pos` rows of its cache,
    /// as [`Llama::prefill_slot`] does, and returns the last hidden state of every token
    /// after the final norm (`tokens.len() * d_model` values, token after token): the
    /// vectors the output head turns into logits, which embeddings pool.
    pub fn hidden_slot(&mut self, slot: usize, pos: usize, tokens: &[TokenId]) -> Result<Vec<f32>> {
        self.run_together(&[SlotPiece { slot, pos, tokens, hidden: true }]).remove(0)
    }

    /// One decode step for several sequences at once, through the batched graph of
    /// [`Llama::build_batch_graph`]: row `i` appends `rows[i].token` at `rows[i].pos` of
    /// slot `rows[i].slot`'s cache. Returns the logits of every row, row after row. Each
    /// row's logits are bit for bit those of [`Llama::decode`] on that sequence alone.
    pub fn decode_batch(&mut self, rows: &[BatchRow]) -> Result<Vec<f32>> {
        let mut logits = Vec::new();
        self.decode_batch_into(rows, &mut logits)?;
        Ok(logits)
    }

    /// [`Llama::decode_batch`] into `logits` (resized): a loop of steps keeps one buffer,
    /// which saves a fresh allocation's page faults per step (8 rows of SmolLM2: 1.5 MiB).
    pub fn decode_batch_into(&mut self, rows: &[BatchRow], logits: &mut Vec<f32>) -> Result<()> {
        self.decode_batch_with(rows, |all| {
            logits.clear();
            logits.extend_from_slice(all);
        })
    }

    /// [`Llama::decode_batch`], with the logits (row after row, in the order of `rows`)
    /// lent to `see` where the step's program left them: no copy when `rows` come in
    /// ascending slot order, the batch graph's own (a server's step samples every row
    /// from them: copying SmolLM2's 8 rows out cost ~0.15 ms of a ~7 ms step).
    pub fn decode_batch_with<R>(&mut self, rows: &[BatchRow], see: impl FnOnce(&[f32]) -> R) -> Result<R> {
        let n = rows.len();
        if n == 0 {
            return Err(Error::input("decode_batch: no rows"));
        }
        let mut slots: Vec<usize> = rows.iter().map(|r| r.slot).collect();
        for (i, r) in rows.iter().enumerate() {
            if r.slot >= self.slots.len() {
                return Err(Error::input(format!("row {i}: slot {} of {} cache slots", r.slot, self.slots.len())));
            }
            if r.pos >= self.context {
                return Err(Error::input(format!(
                    "row {i}: context full: {} tokens in slot {}'s cache, context {}",
                    r.pos, r.slot, self.context
                )));
            }
        }
        slots.sort_unstable();
        if slots.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::input(format!("decode_batch: a slot appears twice in {slots:?}")));
        }
        // Rows run in slot order (so rebinding never cycles); logits go back in the
        // caller's order.
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_unstable_by_key(|&i| rows[i].slot);
        let tokens: Vec<TokenId> = order.iter().map(|&i| rows[i].token).collect();
        let x = self.embed(&tokens)?;
        let positions: Vec<f32> = order.iter().map(|&i| rows[i].pos as f32).collect();
        let pos = HostTensor::from_f32_as(DType::I32, &[n], &positions)?;
        let mut step = match self.batch.remove(&n) {
            Some(step) => step,
            None => self.compile_step(StepShape::Batch { rows: n }, self.activations(true))?,
        };
        let (mut see, mut seen) = (Some(see), None);
        let mut place = |outputs: &[TensorRef]| {
            let Some(see) = see.take() else { return };
            let in_order = order.iter().enumerate().all(|(k, &i)| k == i);
            seen = Some(match outputs[0].as_f32() {
                Some(logits) if in_order => see(logits),
                _ => {
                    let sorted = outputs[0].to_f32_vec();
                    let vocab = sorted.len() / n;
                    let mut logits = vec![0.0; sorted.len()];
                    for (k, &i) in order.iter().enumerate() {
                        logits[i * vocab..][..vocab].copy_from_slice(&sorted[k * vocab..][..vocab]);
                    }
                    see(&logits)
                }
            });
        };
        let run = self
            .bind_slots(&mut step, &slots)
            .and_then(|()| step.compiled.run_typed_with(&[("x", &x), ("pos", &pos)], &mut place));
        self.batch.insert(n, step);
        run?;
        seen.ok_or_else(|| Error::internal("decode_batch: the step showed no logits"))
    }

    /// Prefills `prompt`, then samples up to `max_new` tokens, calling `on_token` with the
    /// tokenizer and each token as it comes (return false to stop). Stops at the
    /// end-of-sequence token when `stop_at_eos`, and when the cache is full. The last
    /// token returned is not in the cache yet: a conversation continues by prefilling it
    /// with the next turn.
    pub fn generate(
        &mut self,
        prompt: &[TokenId],
        max_new: usize,
        sampler: &mut crate::sampler::Sampler,
        stop_at_eos: bool,
        mut on_token: impl FnMut(&Tokenizer, TokenId) -> bool,
    ) -> Result<(Vec<TokenId>, GenerateStats)> {
        let mut generation = self.begin(prompt, max_new, stop_at_eos)?;
        while let Some(next) = self.next_token(&mut generation, sampler)? {
            if !on_token(&self.tokenizer, next) {
                break;
            }
        }
        Ok((generation.tokens, generation.stats))
    }

    /// Starts a generation: compiles what `prompt` needs and prefills it after what the
    /// cache holds. [`Llama::next_token`] then yields the tokens one at a time (the
    /// stepping form of [`Llama::generate`], for callers that cannot hand over a callback:
    /// a Python iterator, a server interleaving requests).
    pub fn begin(&mut self, prompt: &[TokenId], max_new: usize, stop_at_eos: bool) -> Result<Generation> {
        if prompt.is_empty() {
            return Err(Error::input("generate needs at least one prompt token"));
        }
        if self.pos + prompt.len() > self.context {
            return Err(Error::input(format!(
                "the prompt is {} tokens, more than the context of {} tokens{} holds",
                prompt.len(),
                self.context,
                if self.pos > 0 { format!(" ({} already used)", self.pos) } else { String::new() }
            )));
        }
        let mut g = Generation {
            history: prompt.to_vec(),
            tokens: Vec::new(),
            max_new,
            stop_at_eos,
            logits: Vec::new(),
            pending: None,
            done: max_new == 0,
            filled_context: false,
            stats: GenerateStats { prompt_tokens: prompt.len(), ..Default::default() },
        };
        if g.done {
            return Ok(g);
        }
        // Both graphs compile before the clocks start.
        let compile_start = self.compile_seconds;
        self.prepare(prompt.len())?;
        g.stats.compile_seconds = self.compile_seconds - compile_start;
        let start = Instant::now();
        g.logits = self.prefill(prompt)?;
        g.stats.prompt_seconds = start.elapsed().as_secs_f64();
        Ok(g)
    }

    /// The next token of `g` (`None` once it has ended: end of sequence when asked for,
    /// `max_new` tokens, or a full cache). The token returned is decoded into the cache
    /// only when the next one is asked for, so a caller that stops early never pays for
    /// a step it does not use. An error ends the generation (the cache no longer matches).
    pub fn next_token(&mut self, g: &mut Generation, sampler: &mut crate::sampler::Sampler) -> Result<Option<TokenId>> {
        if g.done {
            return Ok(None);
        }
        let start = Instant::now();
        let next = self.sample_next(g, sampler);
        g.stats.generate_seconds += start.elapsed().as_secs_f64();
        // After a failed step the cache no longer matches the tokens: the generation ends.
        g.done |= next.is_err();
        next.map(Some)
    }

    fn sample_next(&mut self, g: &mut Generation, sampler: &mut crate::sampler::Sampler) -> Result<TokenId> {
        if let Some(previous) = g.pending.take() {
            g.logits = self.decode(previous)?;
        }
        let next = sampler.sample(&g.logits, &g.history)?;
        g.tokens.push(next);
        g.history.push(next);
        let eos = g.stop_at_eos && self.tokenizer.ends_generation(next);
        // A full cache ends generation like the token limit does.
        let full = self.pos >= self.context;
        g.done = eos || g.tokens.len() == g.max_new || full;
        g.filled_context = full && !eos && g.tokens.len() < g.max_new;
        if !g.done {
            g.pending = Some(next);
        }
        g.stats.generated_tokens = g.tokens.len();
        Ok(next)
    }
}

/// What a compiled graph computes (see [`Llama::build_batch_graph`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum StepShape {
    /// `n` tokens of one sequence at input `pos` (`i32[1]`); logits (or, when `hidden`,
    /// the final-normed hidden states) from position `first`.
    Sequence { n: usize, first: usize, hidden: bool },
    /// One token for each of `rows` sequences, each with its own position and cache.
    Batch { rows: usize },
}

/// A compiled graph, with the cache slots bound to it (by row).
struct Step {
    compiled: CompiledGraph,
    shape: StepShape,
    bound: Vec<usize>,
    /// [`Llama::runs`] at its last run (sequence graphs: the least recent goes first).
    last_run: u64,
}

/// Runs of consecutive `pieces` that [`Llama::run_slots`] runs side by side: at most
/// `workers` a run, of distinct slots (a slot's pieces run in order), the longest at
/// most 1.5x the shortest. A run lasts as long as its longest piece on one thread, which
/// a piece on all threads beats when the others are much shorter: SmolLM2, 2 threads,
/// Intel Xeon model 207, one after another against side by side: 256 + 10 tokens 237 /
/// 314 ms, 64 + 10: 73 / 101; 128 + 64: 160 / 157; 64 + 64: 118 / 99; 256 + 256: 439 / 394.
fn side_by_side_groups(pieces: &[SlotPiece], workers: usize) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    while start < pieces.len() {
        let (mut end, mut shortest, mut longest) = (start + 1, pieces[start].tokens.len(), pieces[start].tokens.len());
        while end < pieces.len()
            && end - start < workers
            && pieces[start..end].iter().all(|p| p.slot != pieces[end].slot)
        {
            let n = pieces[end].tokens.len();
            if 2 * longest.max(n) > 3 * shortest.min(n) {
                break;
            }
            (shortest, longest) = (shortest.min(n), longest.max(n));
            end += 1;
        }
        groups.push(start..end);
        start = end;
    }
    groups
}

/// Of `kept` (last run, key, bytes), the keys to drop so that a new entry of `bytes` and
/// the most recently run of the rest number at most `limits.0` and hold at most
/// `limits.1` bytes together (the new one stays whatever its size).
fn least_recent_beyond<K>(mut kept: Vec<(u64, K, usize)>, mut bytes: usize, limits: (usize, usize)) -> Vec<K> {
    kept.sort_unstable_by_key(|&(run, ..)| std::cmp::Reverse(run));
    let mut count = 1;
    let mut dropped = Vec::new();
    for (_, key, size) in kept {
        if count < limits.0 && bytes + size <= limits.1 {
            count += 1;
            bytes += size;
        } else {
            dropped.push(key);
        }
    }
    dropped
}

/// Per layer (k, v) caches for one sequence, each `[1, n_kv_head, context, head_dim]`.
fn slot_caches(c: &LlamaConfig, context: usize, cache_type: DType) -> Result<Vec<(ParamBuffer, ParamBuffer)>> {
    let dims = [1, c.n_kv_head, context, c.head_dim];
    (0..c.n_layer)
        .map(|_| Ok((ParamBuffer::zeroed(cache_type, &dims)?, ParamBuffer::zeroed(cache_type, &dims)?)))
        .collect()
}

/// Which compiled graph a step runs.
#[derive(Clone, Copy)]
enum StepKind {
    /// The one-token graph with the decode activations.
    Decode,
    /// The n-token graph with the prompt activations and its logits from `first` on
    /// (slot 0's prompts and scoring; other slots' pieces go through `run_together`).
    Sequence { first: usize },
}

/// A piece of one slot's prompt for [`Llama::run_slots`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotPiece<'a> {
    /// The cache slot of the piece's sequence.
    pub slot: usize,
    /// Tokens already in that cache (where the piece goes).
    pub pos: usize,
    pub tokens: &'a [TokenId],
    /// The last hidden state of every token ([`Llama::hidden_slot`]) instead of the last
    /// token's logits ([`Llama::prefill_slot`]).
    pub hidden: bool,
}

/// One row of [`Llama::decode_batch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchRow {
    /// The cache slot of the row's sequence.
    pub slot: usize,
    /// Tokens already in that cache (where this token goes).
    pub pos: usize,
    pub token: TokenId,
}

/// A generation in progress ([`Llama::begin`], [`Llama::next_token`]).
#[derive(Clone, Debug)]
pub struct Generation {
    /// Prompt and tokens so far (the sampler's repetition window reads it).
    history: Vec<TokenId>,
    /// The tokens generated so far.
    pub tokens: Vec<TokenId>,
    max_new: usize,
    stop_at_eos: bool,
    /// Logits that follow the last token in the cache.
    logits: Vec<f32>,
    /// The last token returned, not yet in the cache.
    pending: Option<TokenId>,
    done: bool,
    /// Ended because the cache was full (before the token limit or end of sequence).
    filled_context: bool,
    /// Timings so far (generation time counts only the calls into the model).
    pub stats: GenerateStats,
}

impl Generation {
    /// Whether no token will follow.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Whether it ended because the context was full.
    pub fn filled_context(&self) -> bool {
        self.filled_context
    }
}

/// A norm weight `[h]` as an f32 buffer (borrowed when the file stores f32).
fn norm_buffer(
    g: &Gguf,
    name: &str,
    h: usize,
    key: &str,
    borrow: &impl Fn(&TensorInfo, DType, &[usize]) -> Result<ParamBuffer>,
) -> Result<ParamBuffer> {
    let t = tensor(g, name)?;
    if t.shape() != [h] {
        return Err(Error::shape(format!("gguf: tensor '{name}' is {:?}, expected [{h}] from '{key}'", t.shape())));
    }
    if t.scheme == QuantScheme::F32 {
        return borrow(t, DType::F32, &[h]);
    }
    let values = g.dequantize(name)?;
    let buffer = ParamBuffer::zeroed(DType::F32, &[h])?;
    buffer.write(&HostTensor::from_f32(&[h], &values)?)?;
    Ok(buffer)
}

/// Hands the heap pages freed while parsing (metadata strings, temporaries) back to the
/// OS: glibc keeps them otherwise, and they counted ~10 MB of resident memory for a model
/// whose weights are only 92 MiB.
fn release_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim only returns unused heap memory; it has no preconditions.
        unsafe {
            malloc_trim(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{SlotPiece, least_recent_beyond, side_by_side_groups};

    /// Pieces run side by side: as many as the workers, of distinct slots and like lengths
    /// (the longest at most 1.5x the shortest), in their order.
    #[test]
    fn side_by_side_groups_pair_like_pieces_of_distinct_slots() {
        let tokens = [1u32; 300];
        let pieces: Vec<SlotPiece> = [(0, 10), (1, 12), (2, 9), (3, 15), (4, 256), (5, 256), (5, 200), (6, 6), (7, 3)]
            .iter()
            .map(|&(slot, n)| SlotPiece { slot, pos: 0, tokens: &tokens[..n], hidden: false })
            .collect();
        assert_eq!(side_by_side_groups(&pieces, 2), vec![0..2, 2..3, 3..4, 4..6, 6..7, 7..8, 8..9]);
        assert_eq!(side_by_side_groups(&pieces, 3), vec![0..3, 3..4, 4..6, 6..7, 7..8, 8..9]);
        assert_eq!(side_by_side_groups(&pieces, 1), (0..9).map(|i| i..i + 1).collect::<Vec<_>>());
        assert_eq!(side_by_side_groups(&[], 2), Vec::<std::ops::Range<usize>>::new());
    }

    #[test]
    fn the_least_recent_graphs_go_past_the_count_or_the_bytes() {
        // (last run, key, bytes); a new entry of 10 bytes.
        let kept = || vec![(3, 'c', 10), (1, 'a', 10), (4, 'd', 10), (2, 'b', 10)];
        assert_eq!(least_recent_beyond(kept(), 10, (8, 1000)), Vec::<char>::new());
        assert_eq!(least_recent_beyond(kept(), 10, (3, 1000)), vec!['b', 'a']);
        assert_eq!(least_recent_beyond(kept(), 10, (1, 1000)), vec!['d', 'c', 'b', 'a']);
        assert_eq!(least_recent_beyond(kept(), 10, (8, 35)), vec!['b', 'a']);
        // A new entry over the budget stays alone; a small old one fits behind a large one.
        assert_eq!(least_recent_beyond(kept(), 50, (8, 40)), vec!['d', 'c', 'b', 'a']);
        let mixed = vec![(3, 'c', 30), (2, 'b', 5), (1, 'a', 5)];
        assert_eq!(least_recent_beyond(mixed, 10, (8, 25)), vec!['c']);
    }
}
