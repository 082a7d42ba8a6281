//! Models built from files. Today: decoder LLMs from GGUF ([`llama`]; the families in
//! [`arch`]: Llama, Gemma 3) with their tokenizers (byte-level BPE, SentencePiece:
//! [`tokenizer`]), chat templates ([`chat`]) and sampler ([`sampler`]); the text of a
//! completion with stop strings ([`completion`]); perplexity ([`perplexity`](mod@perplexity)) and
//! re-quantization ([`quantize`]) as llama.cpp's tools compute them.
//!
//! Architecture invariant: models are graphs built with `rlx-ir` builders and run through
//! `rlx-runtime`; nothing here calls a kernel or knows a backend.

pub mod arch;
pub mod chat;
pub mod completion;
pub mod llama;
pub mod perplexity;
pub mod quantize;
pub mod sampler;
pub mod tokenizer;

pub use arch::{Block, LlamaConfig};
pub use chat::{ChatTemplate, Message};
pub use completion::{Completion, FinishReason, StopStrings, TextOut};
pub use llama::{BatchRow, GenerateStats, Generation, Llama, LlamaOptions, SlotPiece};
pub use perplexity::{Perplexity, perplexity};
pub use sampler::{Sampler, SamplerConfig};
pub use tokenizer::{TextStream, TokenId, Tokenizer};

use std::path::PathBuf;

/// File name of the model the README, tests and benchmarks use.
pub const DEFAULT_MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The model cache directory: `RLX_MODELS`, else `~/.cache/rlx`.
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("RLX_MODELS") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("rlx")
}

/// File name of Gemma 3 270M (Q4_K_M), the second family the tests run.
pub const GEMMA3_MODEL: &str = "gemma-3-270m-q4_k_m.gguf";

/// Where the default model lives (it may not be there: `tools/fetch_model.sh` gets it).
pub fn default_model_path() -> PathBuf {
    models_dir().join(DEFAULT_MODEL)
}
