//! `quantize` against llama.cpp's `llama-quantize` on an all-F32 copy of SmolLM2
//! (fixtures/quantize.json, made by tools/llm/make_quantize_fixtures.py): the same type
//! for every tensor, and at each K-quant mixture (Q2_K, Q3_K_M, Q4_K_M, Q5_K_M) a
//! perplexity on Botchan at most 3% above llama.cpp's for its own file (the fixture also
//! records llama.cpp loading RLX's file), and per scheme the values' error at most
//! llama-quantize's.

mod common;

use common::cached;
use rlx_gguf::{Gguf, GgufWriter, Value};
use rlx_ir::quant::QuantScheme;
use rlx_models::quantize::{QuantType, quantize};
use rlx_models::{Llama, LlamaOptions, perplexity};
use std::sync::Arc;

/// An all-F32 copy of `g` (what make_f32_gguf.py writes).
fn f32_copy(g: &Gguf) -> Gguf {
    let mut w = GgufWriter::new();
    for (k, v) in &g.metadata {
        w.metadata(k, if k == "general.file_type" { Value::U32(0) } else { v.clone() });
    }
    for t in &g.tensors {
        let values = g.dequantize(&t.name).unwrap();
        w.tensor(&t.name, &t.dims, QuantScheme::F32, values.iter().flat_map(|v| v.to_le_bytes()).collect()).unwrap();
    }
    Gguf::parse(Arc::new(w.to_bytes())).unwrap()
}

/// Per quantized scheme in `q`, `sqrt(sum (y - x)^2 / sum x^2)` over its tensors, `x` the
/// values in `source` and `y` in `q` (as the fixture generator computes it for llama.cpp).
fn relative_errors(q: &Gguf, source: &Gguf) -> std::collections::BTreeMap<String, f64> {
    let mut sums = std::collections::BTreeMap::<String, (f64, f64)>::new();
    for t in q.tensors.iter().filter(|t| !t.scheme.is_float()) {
        let (x, y) = (source.dequantize(&t.name).unwrap(), q.dequantize(&t.name).unwrap());
        let sum = sums.entry(t.scheme.name().to_string()).or_default();
        for (&x, &y) in x.iter().zip(&y) {
            sum.0 += (y as f64 - x as f64).powi(2);
            sum.1 += (x as f64).powi(2);
        }
    }
    sums.into_iter().map(|(k, (e, n))| (k, (e / n).sqrt())).collect()
}

fn fixture() -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quantize.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `q`'s perplexity on the text at `text` over the fixture's context and chunks (as
/// llama-perplexity computes it).
fn perplexity_of(q: Gguf, fx: &serde_json::Value, text: &std::path::Path) -> f64 {
    let ctx = fx["n_ctx"].as_u64().unwrap() as usize;
    let mut llama = Llama::from_gguf(q, &LlamaOptions { context: ctx, ..LlamaOptions::default() }).unwrap();
    let mut text = String::from_utf8(std::fs::read(text).unwrap()).unwrap();
    if text.ends_with('\n') {
        text.pop();
    }
    let tokens = llama.tokenizer.encode_prompt(&text, false).unwrap();
    let chunks = fx["chunks"].as_u64().unwrap() as usize;
    perplexity(&mut llama, &tokens, ctx, Some(chunks), |_, _, _| {}).unwrap().ppl
}

#[test]
fn quantize_matches_llama_quantize() {
    let (Some(model), Some(text)) =
        (cached(rlx_models::DEFAULT_MODEL, "tools/fetch_model.sh"), cached("botchan.txt", "tools/fetch_text.sh"))
    else {
        return;
    };
    let fx = fixture();
    let f32 = f32_copy(&Gguf::open(&model).unwrap());
    for (kind, entry) in fx["types"].as_object().unwrap() {
        let (bytes, report) = quantize(&f32, QuantType::parse(kind).unwrap(), Vec::new(), |_, _, _| {}).unwrap();
        let q = Gguf::parse(Arc::new(bytes)).unwrap();
        let want = entry["tensor_types"].as_object().unwrap();
        assert_eq!(q.tensors.len(), want.len(), "{kind}");
        for t in &q.tensors {
            assert_eq!(t.scheme.name(), want[&t.name].as_str().unwrap(), "{kind}: {}", t.name);
        }
        assert!(report.bytes_out < report.bytes_in / 3, "{kind}: {report:?}");
        // Per scheme, the values' error as llama-quantize's at most (the K-quant grids
        // are fits: a range grid's error was 1.1-1.3x theirs; the others are the same
        // rounding as theirs).
        for (scheme, &ours) in &relative_errors(&q, &f32) {
            let theirs = entry["llama_quantize_relative_error"][scheme].as_f64().unwrap();
            assert!(ours <= 1.02 * theirs, "{kind} {scheme}: relative error {ours:.5}, llama-quantize's {theirs:.5}");
            eprintln!("{kind} {scheme}: relative error {ours:.5}, llama-quantize's {theirs:.5}");
        }
        // llama.cpp's llama_ftype numbers.
        let file_type = match kind.as_str() {
            "q4_0" => 2,
            "q8_0" => 7,
            "q5_1" => 9,
            "q2_k" => 10,
            "q3_k" => 12,
            "q4_k" => 15,
            "q5_k" => 17,
            _ => panic!("{kind}: no file type known"),
        };
        assert_eq!(q.get("general.file_type").and_then(Value::as_u64), Some(file_type), "{kind}");
        if !kind.ends_with("_k") {
            continue;
        }
        // The model runs, and is as good as llama.cpp's own file of the K-quant mixture
        // (or better: SmolLM2's Q2_K mixture, its FFN down Q3_K, scores 35.44 to 36.61).
        let ppl = perplexity_of(q, &fx, &text);
        let theirs = entry["llama_cpp_ppl"][0].as_f64().unwrap();
        assert!(ppl < 1.03 * theirs, "{kind}: rlx's file {ppl:.4}, llama-quantize's {theirs:.4}");
        eprintln!("{kind}: rlx's file {ppl:.4} (rlx), llama-quantize's {theirs:.4} (llama.cpp)");
    }
}

/// Gemma 3 270M re-quantized to Q2_K: its ffn_down and attn_output (rows of 2048 and
/// 1024 values) Q3_K, the rows of 640 values fall back to Q4_0 / Q5_0, the head Q8_0. The
/// 3-bit products in a real model, prompts (the 16-bit GEMM on the repacked weights) and
/// decode alike. Its perplexity is llama.cpp's on the same bytes (the same
/// 1% as the other perplexity tests: they differ in activation rounding and the KV
/// cache's f16).
#[test]
fn a_q2_k_gemma_scores_as_llama_cpp_scores_it() {
    let (Some(model), Some(text)) = (
        cached("gemma-3-270m-q4_k_m.gguf", "tools/fetch_model.sh gemma3"),
        cached("botchan.txt", "tools/fetch_text.sh"),
    ) else {
        return;
    };
    let fx = fixture();
    let entry = &fx["gemma_q2_k"];
    let (bytes, _) = quantize(&Gguf::open(&model).unwrap(), QuantType::Q2K, Vec::new(), |_, _, _| {}).unwrap();
    let q = Gguf::parse(Arc::new(bytes)).unwrap();
    let want = entry["tensor_types"].as_object().unwrap();
    assert_eq!(q.tensors.len(), want.len());
    for t in &q.tensors {
        assert_eq!(t.scheme.name(), want[&t.name].as_str().unwrap(), "{}", t.name);
    }
    assert!(q.tensors.iter().filter(|t| t.scheme == QuantScheme::Q3K).count() >= 36);
    let ppl = perplexity_of(q, &fx, &text);
    let theirs = entry["llama_cpp_ppl_of_rlx_file"][0].as_f64().unwrap();
    let rel = (ppl / theirs - 1.0).abs();
    assert!(rel < 0.01, "Gemma q2_k: rlx {ppl:.4}, llama.cpp {theirs:.4} on the same file");
    eprintln!(
        "Gemma q2_k: rlx {ppl:.4}, llama.cpp {theirs:.4} on the same file ({:+.2}%)",
        (ppl / theirs - 1.0) * 100.0
    );
}

#[test]
fn unknown_types_are_errors() {
    let e = QuantType::parse("q3_xs").unwrap_err();
    assert!(e.to_string().contains("q3_xs") && e.to_string().contains("q4_k"), "{e}");
}
