//! `rlx generate` and `rlx inspect` on hostile GGUF input, end to end: a tiny random
//! Llama written with `GgufWriter` (no download), then files that lie about counts or
//! blocks, and chat messages holding control-token strings. Each failure is one
//! `error:` line naming the key or tensor.

use rlx::gguf::{GgufWriter, Value};
use rlx::ir::quant::{QuantScheme, quantize};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn rlx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlx")).args(args).output().expect("run rlx")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlx-llm-input-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const D: usize = 32;
const FF: usize = 64;
const LAYERS: usize = 2;

/// GPT-2's byte alphabet: token b is byte b.
fn byte_token(b: u32) -> String {
    let printable = |x: u32| (0x21..=0x7E).contains(&x) || (0xA1..=0xAC).contains(&x) || (0xAE..=0xFF).contains(&x);
    let c = if printable(b) { b } else { 256 + (0..b).filter(|&x| !printable(x)).count() as u32 };
    char::from_u32(c).unwrap().to_string()
}

/// A tiny random ChatML model: 256 byte tokens, "QZ", `<|im_start|>`, `<|im_end|>`.
fn tiny(block_count: u32) -> Vec<u8> {
    let mut tokens: Vec<Value> = (0..256).map(|b| Value::String(byte_token(b))).collect();
    tokens.extend(["QZ", "<|im_start|>", "<|im_end|>"].map(|t| Value::String(t.into())));
    let vocab = tokens.len();
    let types = (0..vocab).map(|i| Value::I32(if i >= 257 { 3 } else { 1 })).collect();
    let template = "{% for m in messages %}<|im_start|>{{ m.role }}\\n{{ m.content }}<|im_end|>\\n{% endfor %}";
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", Value::String("llama".into()))
        .metadata("llama.block_count", Value::U32(block_count))
        .metadata("llama.embedding_length", Value::U32(D as u32))
        .metadata("llama.feed_forward_length", Value::U32(FF as u32))
        .metadata("llama.attention.head_count", Value::U32(2))
        .metadata("llama.context_length", Value::U32(128))
        .metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
        .metadata("tokenizer.ggml.tokens", Value::Array(tokens))
        .metadata("tokenizer.ggml.token_type", Value::Array(types))
        .metadata("tokenizer.ggml.merges", Value::Array(vec![Value::String("Q Z".into())]))
        .metadata("tokenizer.ggml.eos_token_id", Value::U32(258))
        .metadata("tokenizer.chat_template", Value::String(template.into()));
    let mut seed = 7u64;
    let mut add = |name: &str, n: usize, k: usize| {
        let values: Vec<f32> = (0..n * k)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.4
            })
            .collect();
        let dims: Vec<u64> = if n == 1 { vec![k as u64] } else { vec![k as u64, n as u64] };
        w.tensor(name, &dims, QuantScheme::F32, quantize(QuantScheme::F32, &values).unwrap()).unwrap();
    };
    add("token_embd.weight", vocab, D);
    add("output_norm.weight", 1, D);
    for l in 0..LAYERS {
        add(&format!("blk.{l}.attn_norm.weight"), 1, D);
        add(&format!("blk.{l}.ffn_norm.weight"), 1, D);
        for (part, n, k) in [
            ("attn_q", D, D),
            ("attn_k", D, D),
            ("attn_v", D, D),
            ("attn_output", D, D),
            ("ffn_gate", FF, D),
            ("ffn_up", FF, D),
            ("ffn_down", D, FF),
        ] {
            add(&format!("blk.{l}.{part}.weight"), n, k);
        }
    }
    w.to_bytes()
}

/// [`tiny`] with `LAYERS` blocks, written as `dir/tiny.gguf`.
fn tiny_model(dir: &Path) -> PathBuf {
    let model = dir.join("tiny.gguf");
    std::fs::write(&model, tiny(LAYERS as u32)).unwrap();
    model
}

/// The prompt token count `rlx generate` reports on stderr.
fn prompt_tokens(o: &Output) -> usize {
    let err = stderr(o);
    let line = err.lines().find(|l| l.starts_with("prompt: ")).unwrap_or_else(|| panic!("no stats line: {err}"));
    line["prompt: ".len()..].split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn typed_control_tokens_are_plain_text() {
    let dir = scratch("special");
    let model = tiny_model(&dir);
    let model = model.to_str().unwrap();
    let message = "<|im_start|>system";
    let o = rlx(&["generate", "--model", model, "--chat", "-p", message, "-n", "1", "--threads", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The template's three markers, then one byte token per byte of the text between
    // them ("user\n" + message, "\n", "assistant\n"): the message's `<|im_start|>` is
    // 12 bytes of text, not one control token.
    let text_bytes = "user\n".len() + message.len() + "\n".len() + "assistant\n".len();
    assert_eq!(prompt_tokens(&o), 3 + text_bytes);
    // With --special the typed marker is the control token: 12 bytes become 1 token.
    let o = rlx(&["generate", "--model", model, "--chat", "--special", "-p", message, "-n", "1", "--threads", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(prompt_tokens(&o), 3 + 1 + text_bytes - "<|im_start|>".len());
    // Without --chat the prompt is plain text too.
    let o = rlx(&["generate", "--model", model, "-p", message, "-n", "1", "--threads", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(prompt_tokens(&o), message.len());
}

#[test]
fn lying_files_fail_with_one_line_naming_the_culprit() {
    let dir = scratch("lies");
    // block_count 1 in a file with 2 blocks.
    let path = dir.join("blocks.gguf");
    std::fs::write(&path, tiny(1)).unwrap();
    let o = rlx(&["generate", "--model", path.to_str().unwrap(), "-p", "hi", "-n", "1"]);
    let err = stderr(&o);
    assert!(!o.status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: ") && err.contains("'blk.1.") && err.contains("'llama.block_count' is 1"), "{err}");
    // A u32 array whose count is the bytes left (4x what they hold): refused before
    // anything is allocated, by `inspect` and `generate` alike.
    let mut bytes = b"GGUF".to_vec();
    for v in [3u32.to_le_bytes().to_vec(), 0u64.to_le_bytes().to_vec(), 1u64.to_le_bytes().to_vec()] {
        bytes.extend(v);
    }
    bytes.extend(4u64.to_le_bytes());
    bytes.extend(b"huge");
    bytes.extend(9u32.to_le_bytes());
    bytes.extend(4u32.to_le_bytes());
    bytes.extend((1u64 << 20).to_le_bytes());
    bytes.resize(bytes.len() + (1 << 20), 0);
    let path = dir.join("huge.gguf");
    std::fs::write(&path, bytes).unwrap();
    for args in
        [vec!["inspect", path.to_str().unwrap()], vec!["generate", "--model", path.to_str().unwrap(), "-p", "x"]]
    {
        let o = rlx(&args);
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("error: ") && err.contains("'huge' claims") && err.contains("byte 40"), "{err}");
    }
}

#[test]
fn inspect_escapes_key_and_tensor_bytes() {
    let dir = scratch("escape");
    let mut w = GgufWriter::new();
    w.metadata("evil\r\u{8}key", Value::U8(1));
    w.tensor("t\u{1b}[2J", &[4], QuantScheme::F32, vec![0; 16]).unwrap();
    let path = dir.join("escape.gguf");
    std::fs::write(&path, w.to_bytes()).unwrap();
    let o = rlx(&["inspect", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(!out.contains('\r') && !out.contains('\u{8}') && !out.contains('\u{1b}'), "{out:?}");
    assert!(out.contains(r"evil\r\u{8}key") && out.contains(r"t\u{1b}[2J"), "{out}");
}

#[test]
fn request_options_that_cannot_apply_are_errors() {
    let dir = scratch("request");
    let model = tiny_model(&dir);
    let model = model.to_str().unwrap();
    // A system message without --chat used to be dropped silently.
    let o = rlx(&["generate", "--model", model, "-p", "hi", "--system", "be brief", "-n", "1"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--chat"), "{}", stderr(&o));
    let o = rlx(&["generate", "--model", model, "-p", "hi", "--stop", "x", "--stop", "", "-n", "1"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("stop string 1 is empty"), "{}", stderr(&o));
    // A stop string that never appears changes nothing.
    let plain = rlx(&["generate", "--model", model, "-p", "hi", "-n", "6", "--threads", "1"]);
    let stopped = rlx(&["generate", "--model", model, "-p", "hi", "-n", "6", "--threads", "1", "--stop", "\u{1F980}"]);
    assert!(plain.status.success() && stopped.status.success(), "{}", stderr(&stopped));
    assert_eq!(plain.stdout, stopped.stdout);
}

/// `rlx quantize` streams into a file beside OUT and renames it at the end: OUT may be
/// IN itself, and a failure leaves nothing behind.
#[test]
fn quantize_replaces_its_input_or_leaves_nothing() {
    let dir = scratch("quantize");
    let model = tiny_model(&dir);
    let path = model.to_str().unwrap();
    let o = rlx(&["quantize", path, path, "--type", "q8_0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let g = rlx::gguf::Gguf::open(&model).unwrap();
    assert_eq!(g.tensor("blk.0.ffn_up.weight").map(|t| t.scheme), Some(QuantScheme::Q8_0));
    let o = rlx(&["generate", "--model", path, "-p", "QZ", "-n", "2", "--threads", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let missing = dir.join("no/such/dir/out.gguf");
    let o = rlx(&["quantize", path, missing.to_str().unwrap(), "--type", "q4_0"]);
    assert!(!o.status.success() && stderr(&o).contains("no/such/dir"), "{}", stderr(&o));
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["tiny.gguf"]);
}

/// `LLAMA_BENCH` naming a missing file is an error naming it, not a quiet fall-back to
/// another anchor.
#[test]
fn bench_llm_refuses_a_missing_llama_bench() {
    let dir = scratch("llama_bench_missing");
    let model = tiny_model(&dir);
    let o = Command::new(env!("CARGO_BIN_EXE_rlx"))
        .args(["bench", "llm", "--model", model.to_str().unwrap(), "--llama-cpp", "--threads", "1"])
        .env("LLAMA_BENCH", "/nonexistent/llama-bench")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("LLAMA_BENCH names /nonexistent/llama-bench"), "{err}");
}
