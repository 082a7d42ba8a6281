//! Replays every committed fuzz corpus file (fuzz/corpus/TARGET) through the same check
//! function its libFuzzer target runs, without libFuzzer: a crash the fuzzer found and
//! a fix made stays fixed in the normal test suite. The corpora are kept small
//! (`cargo xtask fuzz --merge`), so this takes seconds. Fuzzing itself:
//! `cargo xtask fuzz [TARGET|all] [--runs N] [--seconds S]` (docs/reliability.md).

#[path = "../../../../fuzz/src/checks.rs"]
#[allow(dead_code)]
mod checks;
#[path = "../../../../fuzz/src/onnx_check.rs"]
mod onnx_check;

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// fuzz/corpus/TARGET and the crash repros of fixed bugs in fuzz/regressions/TARGET.
fn corpus(target: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["corpus", "regressions"] {
        let dir = fuzz_dir().join(dir).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        files.extend(entries.map(|e| e.expect("a directory entry").path()).filter(|p| p.is_file()));
    }
    files.sort();
    files
}

/// Runs `check` on every file of `target`'s corpus and fails naming each file that
/// panicked (all of them, not just the first).
fn replay(target: &str, check: fn(&[u8])) {
    let files = corpus(target);
    assert!(!files.is_empty(), "fuzz/corpus/{target} is empty");
    let failed: Vec<String> = files
        .iter()
        .filter(|f| {
            let bytes = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            std::panic::catch_unwind(|| check(&bytes)).is_err()
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{target}: {} of {} corpus files panic:\n{}",
        failed.len(),
        files.len(),
        failed.join("\n")
    );
}

#[test]
fn gguf_corpus() {
    replay("gguf", checks::gguf);
}

#[test]
fn graph_json_corpus() {
    replay("graph_json", checks::graph_json);
}

#[test]
fn npy_corpus() {
    replay("npy", checks::npy);
}

#[test]
fn safetensors_corpus() {
    replay("safetensors", checks::safetensors);
}

#[test]
fn graph_run_corpus() {
    replay("graph_run", checks::graph_run);
}

#[test]
fn onnx_corpus() {
    replay("onnx", onnx_check::onnx);
}

/// Writes the seed files the corpora started from (graph documents, .npy and GGUF
/// files this code writes, one byte per graph_run seed). Run by hand, before a merge:
/// `cargo test -p rlx --test fuzz_replay -- --ignored write_seeds`.
#[test]
#[ignore]
fn write_seeds() {
    let write = |target: &str, name: String, bytes: &[u8]| {
        let path = fuzz_dir().join("corpus").join(target).join(name);
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    };
    for (i, doc) in checks::seed_documents().iter().enumerate() {
        write("graph_json", format!("seed-{i}.json"), doc.as_bytes());
        write("graph_run", format!("seed-{i}"), &[i as u8]);
    }
    for dtype in rlx_ir::DType::ALL {
        let t = rlx_ir::HostTensor::from_f32_as(dtype, &[2, 3], &[0.0, 1.0, 0.0, 1.0, 1.0, 0.0]).expect("a tensor");
        write("npy", format!("seed-{dtype}.npy"), &rlx_io::npy_bytes(&t));
    }
    let tensors: Vec<rlx_ir::HostTensor> = rlx_ir::DType::ALL
        .iter()
        .map(|&d| rlx_ir::HostTensor::from_f32_as(d, &[2, 3], &[0.0, 1.0, 0.0, 1.0, 1.0, 0.0]).expect("a tensor"))
        .collect();
    let names: Vec<String> = rlx_ir::DType::ALL.iter().map(|d| format!("t_{d}")).collect();
    let named: Vec<(&str, &rlx_ir::HostTensor)> = names.iter().map(String::as_str).zip(&tensors).collect();
    let st = rlx_io::safetensors_bytes(&named, &[("format", "rlx")]).expect("a safetensors file");
    write("safetensors", "seed-0.safetensors".into(), &st);
    let mut w = rlx_gguf::GgufWriter::new();
    w.metadata("general.architecture", rlx_gguf::Value::String("llama".into()));
    w.metadata("llama.block_count", rlx_gguf::Value::U32(1));
    w.metadata("tokenizer.ggml.tokens", rlx_gguf::Value::Array(vec![rlx_gguf::Value::String("a".into()); 3]));
    for (k, scheme) in
        [rlx_ir::QuantScheme::F32, rlx_ir::QuantScheme::Q8_0, rlx_ir::QuantScheme::Q4K].into_iter().enumerate()
    {
        let row = scheme.row_bytes(256).expect("a row");
        w.tensor(&format!("t{k}"), &[256, 2], scheme, vec![0x11; 2 * row]).expect("a tensor");
    }
    write("gguf", "seed-0.gguf".into(), &w.to_bytes());
}

/// Writes next to each graph_run repro in fuzz/artifacts-to-fix the graph document its
/// bytes build (`rlx run FILE.json` reproduces it without the fuzz harness):
/// `cargo test -p rlx --test fuzz_replay -- --ignored write_repro_documents`.
#[test]
#[ignore]
fn write_repro_documents() {
    let dir = fuzz_dir().join("artifacts-to-fix");
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        if !name.starts_with("graph_run-") || name.contains('.') || !path.is_file() {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Some(doc) = checks::graph_run_document(&bytes) {
            std::fs::write(dir.join(format!("{name}.json")), doc).expect("writing the document");
        }
    }
}
