//! A tiny random Llama written with `GgufWriter`: the KV-cached paths agree with a full
//! prompt pass, and malformed models fail with errors that name what is wrong. Needs no
//! downloaded file.

use rlx_gguf::{Gguf, GgufWriter, Value};
use rlx_ir::quant::{QuantScheme, quantize};
use rlx_models::{Llama, LlamaOptions};
use std::sync::Arc;

const D: usize = 64;
const FF: usize = 128;
const LAYERS: usize = 2;
const VOCAB: usize = 256;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// The GPT-2 byte alphabet, so the 256 tokens are the single bytes.
fn byte_tokens() -> Vec<Value> {
    (0..256u32)
        .map(|b| {
            let printable = (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
            let shifted = 256
                + (0..b)
                    .filter(|&x| {
                        !((0x21..=0x7E).contains(&x) || (0xA1..=0xAC).contains(&x) || (0xAE..=0xFF).contains(&x))
                    })
                    .count() as u32;
            Value::String(char::from_u32(if printable { b } else { shifted }).unwrap().to_string())
        })
        .collect()
}

/// A random model; `skip` leaves one tensor out, `arch` names the architecture.
fn tiny_model(skip: Option<&str>, arch: &str) -> Gguf {
    let mut rng = Rng(42);
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", Value::String(arch.into()))
        .metadata("llama.block_count", Value::U32(LAYERS as u32))
        .metadata("llama.embedding_length", Value::U32(D as u32))
        .metadata("llama.feed_forward_length", Value::U32(FF as u32))
        .metadata("llama.attention.head_count", Value::U32(4))
        .metadata("llama.attention.head_count_kv", Value::U32(2))
        .metadata("llama.context_length", Value::U32(64))
        .metadata("llama.rope.freq_base", Value::F32(10000.0))
        .metadata("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5))
        .metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
        .metadata("tokenizer.ggml.pre", Value::String("default".into()))
        .metadata("tokenizer.ggml.tokens", Value::Array(byte_tokens()))
        .metadata("tokenizer.ggml.eos_token_id", Value::U32(0));
    let mut add = |name: &str, n: usize, k: usize, scheme: QuantScheme, scale: f32| {
        if skip == Some(name) {
            return;
        }
        let values: Vec<f32> = (0..n * k).map(|_| rng.next() * scale).collect();
        let dims: Vec<u64> = if n == 1 { vec![k as u64] } else { vec![k as u64, n as u64] };
        w.tensor(name, &dims, scheme, quantize(scheme, &values).unwrap()).unwrap();
    };
    add("token_embd.weight", VOCAB, D, QuantScheme::Q8_0, 1.0);
    add("output_norm.weight", 1, D, QuantScheme::F32, 1.0);
    for l in 0..LAYERS {
        add(&format!("blk.{l}.attn_norm.weight"), 1, D, QuantScheme::F32, 1.0);
        add(&format!("blk.{l}.ffn_norm.weight"), 1, D, QuantScheme::F32, 1.0);
        for (part, n, k) in [
            ("attn_q", D, D),
            ("attn_k", D / 2, D),
            ("attn_v", D / 2, D),
            ("attn_output", D, D),
            ("ffn_gate", FF, D),
            ("ffn_up", FF, D),
            ("ffn_down", D, FF),
        ] {
            add(&format!("blk.{l}.{part}.weight"), n, k, QuantScheme::Q4_1, 0.2);
        }
    }
    Gguf::parse(Arc::new(w.to_bytes())).unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn cached_steps_agree_with_one_prompt_pass() {
    let options = LlamaOptions { context: 32, threads: Some(2), q8_decode: false, ..Default::default() };
    let mut m = Llama::from_gguf(tiny_model(None, "llama"), &options).unwrap();
    let tokens: Vec<u32> = vec![72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100];
    let full = m.prefill(&tokens).unwrap();
    assert_eq!(full.len(), VOCAB);
    assert!(full.iter().all(|v| v.is_finite()));
    // Two prompt chunks, then token by token: the same logits (f32 throughout).
    m.reset();
    m.prefill(&tokens[..4]).unwrap();
    let chunked = m.prefill(&tokens[4..]).unwrap();
    assert!(max_diff(&full, &chunked) < 1e-4, "chunked prefill differs by {}", max_diff(&full, &chunked));
    m.reset();
    m.prefill(&tokens[..1]).unwrap();
    let mut last = Vec::new();
    for &t in &tokens[1..] {
        last = m.decode(t).unwrap();
    }
    assert!(max_diff(&full, &last) < 1e-4, "decode steps differ by {}", max_diff(&full, &last));
    assert_eq!(m.position(), tokens.len());
    // q8 decode: close, not equal (8-bit activations).
    m.set_q8_decode(true);
    m.reset();
    m.prefill(&tokens[..tokens.len() - 1]).unwrap();
    let q8 = m.decode(tokens[tokens.len() - 1]).unwrap();
    let d = max_diff(&full, &q8);
    assert!(d > 0.0 && d < 0.05 * full.iter().map(|v| v.abs()).fold(0.0, f32::max), "q8 decode differs by {d}");
}

#[test]
fn the_context_is_bounded() {
    let options = LlamaOptions { context: 8, threads: Some(1), q8_decode: true, ..Default::default() };
    let mut m = Llama::from_gguf(tiny_model(None, "llama"), &options).unwrap();
    m.prefill(&[1, 2, 3, 4, 5, 6]).unwrap();
    m.decode(7).unwrap();
    m.decode(8).unwrap();
    let e = m.decode(9).unwrap_err();
    assert!(e.message().contains("context full") && e.message().contains('8'), "{e}");
    let e = m.prefill(&[]).unwrap_err();
    assert!(e.message().contains("no tokens"), "{e}");
    m.reset();
    let e = m.prefill(&[1, 2, 3, 4, 5, 6, 7, 8, 9]).unwrap_err();
    assert!(e.message().contains("context full"), "{e}");
    let e = m.prefill(&[VOCAB as u32]).unwrap_err();
    assert!(e.message().contains("token id 256"), "{e}");
}

#[test]
fn malformed_models_name_what_is_wrong() {
    let e = Llama::from_gguf(tiny_model(Some("blk.1.ffn_up.weight"), "llama"), &LlamaOptions::default()).err().unwrap();
    assert!(e.message().contains("blk.1.ffn_up.weight"), "{e}");
    let e = Llama::from_gguf(tiny_model(None, "mamba"), &LlamaOptions::default()).err().unwrap();
    assert!(e.message().contains("mamba"), "{e}");
}

#[test]
fn the_tokenizer_round_trips_bytes() {
    let m = Llama::from_gguf(tiny_model(None, "llama"), &LlamaOptions::default()).unwrap();
    for text in ["plain", "  spaces\tand\nlines ", "ünïcödé 日本 🙂", "\u{0}\u{7f}"] {
        let ids = m.tokenizer.encode(text, false).unwrap();
        assert_eq!(ids.len(), text.len(), "one byte token per byte: {text:?}");
        assert_eq!(m.tokenizer.decode(&ids).unwrap(), text);
    }
}
