//! Perplexity of a text, computed as llama.cpp's `llama-perplexity` does, so the two
//! figures compare: the text is tokenized with BOS (when the model adds one) and without
//! parsing control tokens, cut into chunks of `ctx` tokens (the tail that does not fill a
//! chunk is dropped), each chunk's first token replaced by BOS, and each chunk run from an
//! empty cache. Only the second half is scored: the logits after positions `ctx / 2` ..
//! `ctx - 2` predict the next token, `ctx / 2 - 1` tokens per chunk (early tokens see too
//! little context to say much about the model). Each token's `-log p` comes from a
//! log-softmax with the exponentials summed in f64; the estimate is `exp(mean)` and its
//! error `sqrt(var / (count - 1)) * ppl`.

use crate::llama::Llama;
use crate::tokenizer::TokenId;
use rlx_ir::{Error, Result};

/// The result of [`perplexity`].
#[derive(Clone, Debug, PartialEq)]
pub struct Perplexity {
    /// `exp` of the mean negative log-likelihood.
    pub ppl: f64,
    /// Its standard error.
    pub error: f64,
    /// The running estimate after each chunk (llama.cpp's `[i]x.xxxx` values).
    pub running: Vec<f64>,
    pub tokens_scored: usize,
    pub text_tokens: usize,
}

/// `-log p(token)` under `logits` (llama.cpp's order: max in f32, `exp(l - max)` in f32
/// summed in f64).
pub fn negative_log_likelihood(logits: &[f32], token: TokenId) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    -(f64::from(logits[token as usize] - max) - sum.ln())
}

/// The perplexity of `tokens` (already tokenized as described above) in chunks of
/// `ctx`, at most `max_chunks`; `on_chunk(i, chunks, running)` after each.
pub fn perplexity(
    llama: &mut Llama,
    tokens: &[TokenId],
    ctx: usize,
    max_chunks: Option<usize>,
    mut on_chunk: impl FnMut(usize, usize, f64),
) -> Result<Perplexity> {
    if ctx < 4 {
        return Err(Error::input(format!("perplexity needs a context of at least 4 tokens, got {ctx}")));
    }
    if ctx > llama.context() {
        return Err(Error::input(format!(
            "perplexity context {ctx} is larger than the model's cache of {}",
            llama.context()
        )));
    }
    if tokens.len() < 2 * ctx {
        return Err(Error::input(format!(
            "the text is {} tokens: perplexity needs at least 2 x ctx = {} (use a longer text or a smaller --ctx)",
            tokens.len(),
            2 * ctx
        )));
    }
    let chunks = (tokens.len() / ctx).min(max_chunks.unwrap_or(usize::MAX)).max(1);
    let first = ctx / 2;
    let vocab = llama.config.vocab;
    let bos = llama.tokenizer.prompt_start().first().copied();
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    let mut running = Vec::with_capacity(chunks);
    for c in 0..chunks {
        let mut chunk = tokens[c * ctx..(c + 1) * ctx].to_vec();
        if let Some(bos) = bos {
            chunk[0] = bos;
        }
        llama.reset();
        let logits = llama.score(&chunk, first)?;
        // Logits after position first + i predict token first + i + 1; the last
        // position's logits predict nothing inside the chunk.
        for (i, row) in logits.chunks_exact(vocab).take(ctx - 1 - first).enumerate() {
            let v = negative_log_likelihood(row, chunk[first + i + 1]);
            nll += v;
            nll2 += v * v;
            count += 1;
        }
        let ppl = (nll / count as f64).exp();
        running.push(ppl);
        on_chunk(c, chunks, ppl);
    }
    llama.reset();
    let mean = nll / count as f64;
    let var = nll2 / count as f64 - mean * mean;
    let ppl = mean.exp();
    let error = if var > 0.0 && count > 1 { (var / (count - 1) as f64).sqrt() * ppl } else { 0.0 };
    Ok(Perplexity { ppl, error, running, tokens_scored: count, text_tokens: tokens.len() })
}
