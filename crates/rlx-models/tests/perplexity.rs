//! `perplexity` against llama.cpp's `llama-perplexity` on the same text, context and
//! chunks (fixtures/perplexity.json, made by tools/llm/make_perplexity_fixtures.py on
//! botchan.txt, a public-domain book shipped in the sentencepiece 0.2.0 sdist and fetched
//! by tools/fetch_text.sh). The quantized paths differ only in activation rounding (and
//! llama.cpp's f16 KV cache), so the figures must agree within 1%.

mod common;

use common::cached;
use rlx_models::perplexity::negative_log_likelihood;
use rlx_models::{Llama, LlamaOptions, perplexity};
use serde_json::Value;

/// Chunks scored here (the fixture has the running value after each of 20).
const CHUNKS: usize = 8;

fn fixture() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/perplexity.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn check(key: &str, fetch: &str) {
    let fx = fixture();
    let m = &fx["models"][key];
    let (Some(model), Some(text)) = (
        cached(m["file"].as_str().unwrap(), fetch),
        cached(fx["text"]["file"].as_str().unwrap(), "tools/fetch_text.sh"),
    ) else {
        return;
    };
    let ctx = fx["n_ctx"].as_u64().unwrap() as usize;
    let mut llama = Llama::load(&model, &LlamaOptions { context: ctx, ..LlamaOptions::default() }).unwrap();
    let mut text = String::from_utf8(std::fs::read(text).unwrap()).unwrap();
    // llama.cpp's -f drops one trailing newline.
    if text.ends_with('\n') {
        text.pop();
    }
    let tokens = llama.tokenizer.encode_prompt(&text, false).unwrap();
    assert_eq!(tokens.len() as u64, m["n_tokens"].as_u64().unwrap(), "{key}: token count");
    let first: Vec<u64> = tokens[..16].iter().map(|&t| t as u64).collect();
    assert_eq!(serde_json::json!(first), m["first_ids"], "{key}: first ids");
    let p = perplexity(&mut llama, &tokens, ctx, Some(CHUNKS), |_, _, _| {}).unwrap();
    assert_eq!(p.tokens_scored, CHUNKS * (ctx / 2 - 1));
    for mode in ["default", "f32_kv"] {
        let want = m["runs"][mode]["running"][CHUNKS - 1].as_f64().unwrap();
        let rel = (p.ppl - want).abs() / want;
        assert!(rel < 0.01, "{key} {mode}: rlx {:.4}, llama.cpp {want:.4} ({:.2}%)", p.ppl, rel * 100.0);
        eprintln!("{key} {mode}: rlx {:.4}, llama.cpp {want:.4} ({:+.2}%)", p.ppl, (p.ppl / want - 1.0) * 100.0);
    }
}

#[test]
fn smollm2_perplexity_matches_llama_cpp() {
    check("smollm2", "tools/fetch_model.sh");
}

#[test]
fn gemma3_perplexity_matches_llama_cpp() {
    check("gemma3", "tools/fetch_model.sh gemma3");
}

#[test]
fn negative_log_likelihood_matches_f64() {
    for (logits, token) in
        [(vec![0.0f32], 0u32), (vec![1.0, 2.0, 3.0], 0), (vec![-1e3, 5.0, 5.0, -20.0], 2), (vec![30.0; 17], 16)]
    {
        let max = logits.iter().fold(f64::NEG_INFINITY, |m, &l| m.max(l as f64));
        let lse = max + logits.iter().map(|&l| (l as f64 - max).exp()).sum::<f64>().ln();
        let want = lse - logits[token as usize] as f64;
        let got = negative_log_likelihood(&logits, token);
        assert!((got - want).abs() <= 1e-6 * want.abs().max(1.0), "{logits:?}: {got} vs {want}");
    }
}

#[test]
fn short_texts_and_bad_contexts_are_errors() {
    let Some(model) = cached(rlx_models::DEFAULT_MODEL, "tools/fetch_model.sh") else { return };
    let mut llama = Llama::load(&model, &LlamaOptions { context: 64, ..LlamaOptions::default() }).unwrap();
    let e = perplexity(&mut llama, &[1; 100], 64, None, |_, _, _| {}).unwrap_err();
    assert!(e.to_string().contains("the text is 100 tokens") && e.to_string().contains("128"), "{e}");
    let e = perplexity(&mut llama, &[1; 1000], 128, None, |_, _, _| {}).unwrap_err();
    assert!(e.to_string().contains("larger than the model's cache of 64"), "{e}");
}
