//! The reader against files this crate writes, the real model, and fuzzed bytes.

use rlx_gguf::{Gguf, GgufWriter, Value};
use rlx_ir::quant::{QuantScheme, quantize};
use std::path::PathBuf;
use std::sync::Arc;

fn parse(bytes: Vec<u8>) -> rlx_ir::Result<Gguf> {
    Gguf::parse(Arc::new(bytes))
}

/// A small file with every value type and three tensors.
fn sample() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", Value::String("llama".into()))
        .metadata("u8", Value::U8(7))
        .metadata("i8", Value::I8(-7))
        .metadata("u16", Value::U16(700))
        .metadata("i16", Value::I16(-700))
        .metadata("u32", Value::U32(70000))
        .metadata("i32", Value::I32(-70000))
        .metadata("f32", Value::F32(1.5))
        .metadata("bool", Value::Bool(true))
        .metadata("u64", Value::U64(1 << 40))
        .metadata("i64", Value::I64(-(1 << 40)))
        .metadata("f64", Value::F64(0.1))
        .metadata("strings", Value::Array(vec![Value::String("a".into()), Value::String("béta".into())]))
        .metadata("nested", Value::Array(vec![Value::Array(vec![Value::U32(1), Value::U32(2)])]));
    let x: Vec<f32> = (0..64).map(|i| (i as f32 * 0.3).sin()).collect();
    w.tensor("f", &[4, 2], QuantScheme::F32, x[..8].iter().flat_map(|v| v.to_le_bytes()).collect()).unwrap();
    w.tensor("q4", &[32, 2], QuantScheme::Q4_1, quantize(QuantScheme::Q4_1, &x).unwrap()).unwrap();
    w.tensor("q8", &[64], QuantScheme::Q8_0, quantize(QuantScheme::Q8_0, &x).unwrap()).unwrap();
    w.to_bytes()
}

#[test]
fn writer_and_reader_round_trip() {
    let g = parse(sample()).unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.get("u8"), Some(&Value::U8(7)));
    assert_eq!(g.get("i64"), Some(&Value::I64(-(1 << 40))));
    assert_eq!(g.get("strings").and_then(|v| v.as_array()).map(|a| a[1].as_str()), Some(Some("béta")));
    assert_eq!(g.get("nested").unwrap().summary(), "[[1, 2] (2 items)] (1 items)");
    assert_eq!(g.tensors.len(), 3);
    let f = g.tensor("f").unwrap();
    assert_eq!((f.shape(), f.bytes), (vec![2, 4], 32));
    let x: Vec<f32> = (0..64).map(|i| (i as f32 * 0.3).sin()).collect();
    assert_eq!(g.dequantize("f").unwrap(), x[..8].to_vec());
    let q4 = g.dequantize("q4").unwrap();
    assert!(q4.iter().zip(&x).all(|(a, b)| (a - b).abs() < 0.07), "{q4:?}");
    assert!(g.tensor_range(g.tensor("q8").unwrap()).start.is_multiple_of(32));
}

#[test]
fn malformed_files_name_the_offset_and_field() {
    let good = sample();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"GGML....".to_vec(), "byte 0: magic"),
        ([&good[..4], &9u32.to_le_bytes(), &good[8..]].concat(), "version 9"),
        (good[..30].to_vec(), "byte"),
        (good[..good.len() - 40].to_vec(), "runs past the file"),
    ];
    for (bytes, want) in cases {
        let e = parse(bytes).err().expect("must fail");
        assert!(e.message().contains(want), "{e}");
    }
    // A tensor whose type id is unknown.
    let mut bad = good.clone();
    let pos = bad.windows(2).position(|w| w == b"q8").unwrap() + 2 + 4 + 8; // name, n_dims, dim
    bad[pos..pos + 4].copy_from_slice(&99u32.to_le_bytes());
    let e = parse(bad).err().unwrap();
    assert!(e.message().contains("ggml type 99") && e.message().contains("'q8'"), "{e}");
}

/// Every truncation, then random byte edits: Ok or Err, never a panic (bounded run of
/// the corpus the cargo-fuzz target in fuzz/ explores without bound).
#[test]
fn fuzzed_files_never_panic() {
    let good = sample();
    for cut in 0..good.len() {
        let _ = parse(good[..cut].to_vec());
    }
    let mut rng = rlx_oracle::Rng::new(11);
    for _ in 0..20_000 {
        let mut bytes = good.clone();
        for _ in 0..1 + rng.next_u64() % 4 {
            let at = (rng.next_u64() % bytes.len() as u64) as usize;
            bytes[at] = match rng.next_u64() % 3 {
                0 => rng.next_u64() as u8,
                1 => 0xff,
                _ => bytes[at] ^ (1 << (rng.next_u64() % 8)),
            };
        }
        if let Ok(g) = parse(bytes) {
            for t in &g.tensors {
                assert_eq!(g.tensor_data(t).len(), t.bytes);
            }
        }
    }
}

/// The real model, when present (tools/fetch_model.sh); `RLX_REQUIRE_MODEL=1` makes its
/// absence a failure.
fn model_path() -> Option<PathBuf> {
    let dir = std::env::var_os("RLX_MODELS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/rlx")));
    let path = dir?.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var("RLX_REQUIRE_MODEL").is_err(),
        "RLX_REQUIRE_MODEL is set but {} is missing: run tools/fetch_model.sh",
        path.display()
    );
    eprintln!("skipped: {} not found (run tools/fetch_model.sh)", path.display());
    None
}

#[test]
fn the_real_model_matches_gguf_python() {
    let Some(path) = model_path() else { return };
    let g = Gguf::open(&path).unwrap();
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("model.metadata.json")).unwrap()).unwrap();
    assert_eq!(g.tensors.len() as u64, meta["tensor_count"].as_u64().unwrap());
    assert_eq!(g.data_offset, meta["data_offset"].as_u64().unwrap());
    for key in
        ["llama.block_count", "llama.embedding_length", "llama.attention.head_count_kv", "llama.feed_forward_length"]
    {
        assert_eq!(g.require(key).unwrap().as_u64(), meta[key].as_u64(), "{key}");
    }
    assert_eq!(g.require("llama.rope.freq_base").unwrap().as_f64(), meta["llama.rope.freq_base"].as_f64());
    assert_eq!(g.require("general.architecture").unwrap().as_str(), Some("llama"));
    assert_eq!(g.require("tokenizer.ggml.tokens").unwrap().as_array().unwrap().len(), 49152);
    for name in ["blk.0.attn_q.weight", "token_embd.weight", "blk.7.ffn_down.weight"] {
        let want = rlx_io::load_npy(fixtures.join(format!("model.{name}.npy"))).unwrap().to_f32_vec();
        let got = g.dequantize(name).unwrap();
        assert_eq!(&got[..want.len()], &want[..], "{name}");
    }
}
