//! The reader against files this crate writes, the real model, and fuzzed bytes.

use rlx_gguf::{Gguf, GgufStream, GgufWriter, TensorHeader, Value};
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

/// The streaming writer gives the in-memory writer's bytes whatever the pieces, and
/// refuses a tensor that gets more or fewer bytes than its header says.
#[test]
fn streamed_files_equal_the_in_memory_writer() {
    let whole = sample();
    let g = parse(whole.clone()).unwrap();
    let headers: Vec<TensorHeader> = g
        .tensors
        .iter()
        .map(|t| TensorHeader { name: t.name.clone(), dims: t.dims.clone(), scheme: t.scheme })
        .collect();
    for piece in [1, 3, 17, 1000] {
        let mut s = GgufStream::begin(Vec::new(), &g.metadata, &headers).unwrap();
        for t in &g.tensors {
            for p in g.tensor_data(t).chunks(piece) {
                s.write(p).unwrap();
            }
        }
        assert_eq!(s.finish().unwrap(), whole, "pieces of {piece}");
    }
    let mut s = GgufStream::begin(Vec::new(), &g.metadata, &headers).unwrap();
    let e = s.write(&[0u8; 33]).unwrap_err().to_string();
    assert!(e.contains("'f'") && e.contains("33") && e.contains("32"), "{e}");
    s.write(&[0u8; 32]).unwrap();
    s.write(&[0u8; 5]).unwrap();
    let e = s.finish().unwrap_err().to_string();
    assert!(e.contains("'q4'") && e.contains("5 of its 40"), "{e}");
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
    assert!(
        e.message().contains("ggml type 99") && e.message().contains("'q8'") && e.message().contains("byte"),
        "{e}"
    );
}

/// Every truncation, then random byte edits: Ok or Err, never a panic (a bounded, blind
/// version of what the coverage-guided `gguf` target in the root fuzz/ explores:
/// `cargo xtask fuzz gguf`).
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
        let len = bytes.len();
        if let Ok(g) = parse(bytes) {
            for t in &g.tensors {
                assert!(g.tensor_range(t).end <= len, "tensor {:?} outside the file", t.name);
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

/// A header with no tensors and the given raw metadata entries (key, type, value bytes).
fn raw_file(entries: &[(&[u8], u32, Vec<u8>)], tensor_count: u64) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&tensor_count.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (key, ty, value) in entries {
        out.extend_from_slice(&(key.len() as u64).to_le_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(value);
    }
    out
}

/// An array value: item type, count, then `rest` (whatever bytes follow).
fn array_value(item: u32, count: u64, rest: &[u8]) -> Vec<u8> {
    [&item.to_le_bytes()[..], &count.to_le_bytes(), rest].concat()
}

#[test]
fn claimed_counts_the_file_cannot_hold_are_errors() {
    let huge = u64::MAX / 2;
    // (file, what the error must name)
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (raw_file(&[(b"big", 9, array_value(0, huge, &[0; 64]))], 0), "'big' claims"),
        (raw_file(&[(b"big", 9, array_value(8, huge, &[0; 64]))], 0), "'big' claims"),
        (raw_file(&[(b"big", 9, array_value(9, huge, &[0; 64]))], 0), "'big' claims"),
        // u32 items take 4 bytes each: a count of the bytes left is 4x too many.
        (raw_file(&[(b"u32s", 9, array_value(4, 64, &[0; 64]))], 0), "'u32s' claims 64 items of type 4"),
        (raw_file(&[(b"s", 8, huge.to_le_bytes().to_vec())], 0), "value of 's' needs"),
        (raw_file(&[], huge), "name of tensor 0"),
        (raw_file(&[(b"t", 9, array_value(77, 1, &[0; 8]))], 0), "unknown item type 77"),
    ];
    for (bytes, want) in cases {
        let e = parse(bytes).err().expect("must fail");
        assert!(e.message().contains(want) && e.message().contains("byte"), "{want}: {e}");
    }
    // A huge metadata count fails at the first key that is not there.
    let mut bytes = raw_file(&[], 0);
    bytes[16..24].copy_from_slice(&huge.to_le_bytes());
    let e = parse(bytes).err().unwrap();
    assert!(e.message().contains("byte 24: metadata key 0"), "{e}");
}

#[test]
fn arrays_are_bounded_in_memory() {
    // 2^24 + 1 u8 items are really in the file, but would take 32 bytes each in memory.
    let n = (1u64 << 24) + 1;
    let bytes = raw_file(&[(b"bytes", 9, array_value(0, n, &vec![7u8; n as usize]))], 0);
    let e = parse(bytes).err().unwrap();
    assert!(e.message().contains("'bytes'") && e.message().contains("array items"), "{e}");
}

#[test]
fn duplicates_are_errors_naming_the_key_or_tensor() {
    let mut w = GgufWriter::new();
    w.metadata("general.name", Value::String("a".into())).metadata("general.name", Value::String("b".into()));
    let e = parse(w.to_bytes()).err().unwrap();
    assert!(e.message().contains("'general.name' appears twice") && e.message().contains("byte"), "{e}");
    let mut w = GgufWriter::new();
    w.tensor("w", &[4], QuantScheme::F32, vec![0; 16]).unwrap();
    w.tensor("w", &[4], QuantScheme::F32, vec![0; 16]).unwrap();
    let e = parse(w.to_bytes()).err().unwrap();
    assert!(e.message().contains("tensor 'w' appears twice") && e.message().contains("byte"), "{e}");
}

#[test]
fn key_bytes_in_errors_are_escaped() {
    let bytes = raw_file(&[(b"a\r\x08b", 7, vec![5])], 0);
    let e = parse(bytes).err().unwrap();
    let m = e.message();
    assert!(!m.contains('\r') && !m.contains('\u{8}'), "{m:?}");
    assert!(m.contains(r"'a\r\u{8}b'") && m.contains("byte"), "{m}");
}

/// Tensors whose data is not inside the file: padding past a file that ends in its
/// header, counts whose product overflows, offsets near 2^64, misalignment.
#[test]
fn every_accepted_tensor_lies_inside_the_file() {
    let mut w = GgufWriter::new();
    w.metadata("k", Value::U8(1));
    w.tensor("empty", &[0], QuantScheme::F32, vec![]).unwrap();
    let good = w.to_bytes();
    // After the name: n_dims, then one dim, the type and the offset end the header.
    let dims_at = good.windows(5).position(|w| w == b"empty").unwrap() + 5 + 4;
    let header_end = dims_at + 8 + 4 + 8;
    assert_ne!(header_end % 32, 0, "the cut below must fall before the padding ends");
    // The file ends with its header: the aligned data section would start past the end
    // (libFuzzer's 140-byte find: accepted, then `tensor_data` sliced out of bounds).
    let e = parse(good[..header_end].to_vec()).err().unwrap();
    assert!(e.message().contains("'empty'") && e.message().contains("runs past the file"), "{e}");
    let set = |bytes: &mut Vec<u8>, at: usize, v: u64| bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
    // An offset near 2^64 (offset + bytes overflows) and a misaligned one.
    for offset in [u64::MAX - 3, 4] {
        let mut bad = good.clone();
        set(&mut bad, dims_at + 8 + 4, offset);
        let e = parse(bad).err().unwrap();
        assert!(e.message().contains("'empty'") && e.message().contains(&offset.to_string()), "{e}");
    }
    // Dims [0, 2^40, 2^40]: zero bytes but 2^80 elements (numel would overflow).
    let mut w = GgufWriter::new();
    w.tensor("wide", &[1, 1, 1], QuantScheme::F32, vec![0; 4]).unwrap();
    let mut bad = w.to_bytes();
    let at = bad.windows(4).position(|w| w == b"wide").unwrap() + 4 + 4;
    set(&mut bad, at, 0);
    set(&mut bad, at + 8, 1 << 40);
    set(&mut bad, at + 16, 1 << 40);
    let e = parse(bad).err().unwrap();
    assert!(e.message().contains("'wide'") && e.message().contains("do not fit"), "{e}");
    // A foreign TensorInfo cannot make tensor_data or tensor_range panic.
    let g = parse(good).unwrap();
    let mut t = g.tensors[0].clone();
    t.offset = u64::MAX;
    t.bytes = usize::MAX;
    assert!(g.tensor_data(&t).is_empty());
    t.offset = 0;
    t.bytes = 1 << 20;
    assert!(g.tensor_data(&t).is_empty());
}

#[test]
fn alignment_must_be_a_sane_power_of_two() {
    for a in [0u64, 3, 1 << 40] {
        let mut w = GgufWriter::new();
        w.metadata("general.alignment", Value::U64(a));
        let e = parse(w.to_bytes()).err().unwrap();
        assert!(e.message().contains("general.alignment"), "{e}");
    }
}
