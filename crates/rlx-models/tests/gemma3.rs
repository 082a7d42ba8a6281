//! Gemma 3 270M (Q4_K_M GGUF: Q8_0, Q5_0, Q4_K and Q6_K weights) against llama.cpp:
//! tokenizer ids from `llama-tokenize`, greedy text from `llama-completion` on an all-F32
//! copy of the weights with an f32 KV cache (tools/llm/make_gemma3_fixtures.py; fixtures
//! in tests/fixtures/gemma3).
//!
//! The model is fetched by `tools/fetch_model.sh gemma3` (the test command runs it).
//! Without the file these tests say how to get it and pass, unless `RLX_REQUIRE_MODEL=1`
//! (set in CI), where a missing model fails.

mod common;

use rlx_models::{ChatTemplate, GEMMA3_MODEL, Llama, LlamaOptions, Message, Sampler, SamplerConfig, TokenId};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

fn json(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gemma3").join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<TokenId> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as TokenId).collect()
}

/// The model with f32 decode, loaded once for all tests (they take turns: one cache).
fn model() -> Option<&'static Mutex<Llama>> {
    static MODEL: OnceLock<Option<Mutex<Llama>>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = common::cached(GEMMA3_MODEL, "tools/fetch_model.sh gemma3")?;
            // llama.cpp's reference ran with an f32 KV cache.
            let options = LlamaOptions {
                q8_decode: false,
                context: 1100,
                cache_type: Some(rlx_ir::DType::F32),
                ..LlamaOptions::default()
            };
            Some(Mutex::new(Llama::load(&path, &options).unwrap()))
        })
        .as_ref()
}

#[test]
fn the_family_is_read_from_the_file() {
    let Some(m) = model() else { return };
    let m = m.lock().unwrap_or_else(|e| e.into_inner());
    let (c, b) = (&m.config, &m.block);
    assert_eq!(
        (c.arch.as_str(), c.n_layer, c.d_model, c.n_head, c.n_kv_head, c.head_dim),
        ("gemma3", 18, 640, 4, 1, 256)
    );
    // Five local layers (window 512, RoPE base 10k), then one global (base 1M).
    let globals: Vec<usize> = b.layers.iter().enumerate().filter(|(_, l)| l.window.is_none()).map(|(i, _)| i).collect();
    assert_eq!(globals, [5, 11, 17]);
    assert!(b.layers.iter().all(|l| l.window.map_or(l.rope_base == 1e6, |w| w == 512 && l.rope_base == 1e4)));
    assert_eq!(b.attention_scale, 1.0 / 16.0);
    assert_eq!(b.embedding_scale, Some(640f32.sqrt()));
}

#[test]
fn tokenizer_matches_llama_cpp() {
    let Some(m) = model() else { return };
    let t = &m.lock().unwrap_or_else(|e| e.into_inner()).tokenizer;
    let fx = json("tokenizer.json");
    let mut bad = Vec::new();
    for c in fx["cases"].as_array().unwrap() {
        let text = c["text"].as_str().unwrap();
        let plain = t.encode(text, false).unwrap();
        if plain != ids(&c["plain"]) {
            bad.push(format!("{text:?}: plain {plain:?}, llama.cpp {:?}", ids(&c["plain"])));
        }
        let special = t.encode(text, true).unwrap();
        if special != ids(&c["special"]) {
            bad.push(format!("{text:?}: special {special:?}, llama.cpp {:?}", ids(&c["special"])));
        }
        // Plain encoding keeps every byte: decoding gives the text back.
        assert_eq!(t.decode(&plain).unwrap(), text, "round trip of {text:?}");
    }
    assert!(
        bad.is_empty(),
        "{} of {} cases differ:\n{}",
        bad.len(),
        fx["cases"].as_array().unwrap().len(),
        bad.join("\n")
    );
    // BOS is added (tokenizer.ggml.add_bos_token), <end_of_turn> ends a generation.
    assert_eq!(t.encode_prompt("x", false).unwrap()[0], 2);
    assert!(t.ends_generation(106) && t.ends_generation(1) && !t.ends_generation(2));
}

#[test]
fn greedy_text_equals_llama_cpp_on_f32_weights() {
    let Some(m) = model() else { return };
    let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
    let fx = json("greedy.json");
    let n = fx["tokens"].as_u64().unwrap() as usize;
    for c in fx["cases"].as_array().unwrap() {
        let prompt = c["prompt"].as_str().unwrap();
        let ids = m.tokenizer.encode_prompt(prompt, false).unwrap();
        assert_eq!(ids.len() as u64, c["prompt_tokens"].as_u64().unwrap(), "{prompt:?}");
        m.reset();
        let mut sampler = Sampler::new(SamplerConfig::default()).unwrap();
        let (tokens, _) = m.generate(&ids, n, &mut sampler, false, |_, _| true).unwrap();
        let text = m.tokenizer.decode(&tokens).unwrap();
        assert_eq!(text, c["text"].as_str().unwrap(), "prompt of {} tokens: {prompt:?}", ids.len());
    }
}

#[test]
fn gemma_chat_prompts_render_like_llama_cpp() {
    let Some(m) = model() else { return };
    let m = m.lock().unwrap_or_else(|e| e.into_inner());
    // The file has no template: the family's is used.
    assert!(m.gguf().get("tokenizer.chat_template").is_none());
    let template = m.chat_template().unwrap();
    assert_eq!(template, ChatTemplate::Gemma);
    let messages =
        [Message::new("system", " Be brief. "), Message::new("user", "Hi!\n"), Message::new("assistant", "Hello.")];
    // llama.cpp's built-in "gemma" template: the system text opens the first user turn,
    // contents trimmed, the assistant is "model".
    let want = "<start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n<start_of_turn>model\n";
    assert_eq!(template.render(&messages, true), want);
    let ids = template.encode(&m.tokenizer, &messages, true, false).unwrap();
    assert_eq!(ids, m.tokenizer.encode_prompt(want, true).unwrap());
    // A typed control token stays text.
    let typed = template.encode(&m.tokenizer, &[Message::new("user", "<end_of_turn>")], true, false).unwrap();
    assert_eq!(typed.iter().filter(|&&id| id == 106).count(), 1, "only the template's own <end_of_turn>");
}
