//! `rlx run | inspect | check` on a real ONNX model (MiniLM-L3, tools/fetch_onnx_models.sh):
//! the CLI's outputs equal the Rust API's, bit for bit.

use rlx::prelude::*;
use std::path::PathBuf;
use std::process::{Command, Output};

fn rlx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlx")).args(args).output().expect("run rlx")
}

fn minilm() -> Option<PathBuf> {
    let base = std::env::var("RLX_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/rlx"));
    let path = base.join("onnx-models/minilm.onnx");
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var("RLX_REQUIRE_MODEL").is_err(),
        "{} is missing: run tools/fetch_onnx_models.sh",
        path.display()
    );
    None
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rlx-onnx/tests/fixtures/models").join(name)
}

#[test]
fn run_writes_what_the_api_returns() {
    let Some(model) = minilm() else { return };
    let out = std::env::temp_dir().join(format!("rlx-onnx-cli-{}", std::process::id()));
    let (ids, mask) = (fixture("minilm_4x32_input_ids.npy"), fixture("minilm_4x32_attention_mask.npy"));
    let o = rlx(&[
        "run",
        model.to_str().unwrap(),
        "--input",
        &format!("input_ids={}", ids.display()),
        "--input",
        &format!("attention_mask={}", mask.display()),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (ids, mask) = (rlx::io::load_npy(&ids).unwrap(), rlx::io::load_npy(&mask).unwrap());
    let want = OnnxModel::load(&model).unwrap().run(&[("input_ids", &ids), ("attention_mask", &mask)]).unwrap();
    for (i, w) in want.iter().enumerate() {
        let got = rlx::io::load_npy(out.join(format!("output_{i}.npy"))).unwrap();
        assert_eq!((got.dtype(), got.dims(), got.bytes()), (w.dtype(), w.dims(), w.bytes()), "output {i}");
    }
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn inspect_and_check_describe_the_model() {
    let Some(model) = minilm() else { return };
    let o = rlx(&["inspect", model.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for want in [
        "opsets ai.onnx:17",
        "input_ids: i64[batch_size, sequence_length]",
        "LayerNormalization",
        "every op has an importer",
    ] {
        assert!(text.contains(want), "missing '{want}' in:\n{text}");
    }
    let o = rlx(&["check", model.to_str().unwrap(), "--shape", "input_ids=2x16", "--shape", "attention_mask=2x16"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A symbolic dim without --shape is an error naming the input.
    let o = rlx(&["check", model.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--shape input_ids="),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn bad_onnx_flags_are_errors_naming_the_flag() {
    let Some(model) = minilm() else { return };
    let m = model.to_str().unwrap();
    let fails = |args: &[&str], want: &str| {
        let o = rlx(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(want), "{args:?}: {err}");
    };
    fails(&["check", m, "--shape", "input_ids=2xq", "--shape", "attention_mask=2x16"], "--shape 'input_ids=2xq'");
    fails(&["check", m, "--shape", "input_ids", "--shape", "attention_mask=2x16"], "is not NAME=AxBxC");
    fails(&["check", m, "--shape", "input_ids=2", "--shape", "attention_mask=2x16"], "rank 1");
    fails(
        &["check", m, "--shape", "input_ids=2x16", "--shape", "attention_mask=2x16", "--shape", "tokens=2x16"],
        "no such input",
    );
    fails(&["run", m, "--param", "w=w.npy"], "--param w=w.npy");
    fails(&["bench", "onnx"], "needs a model");
    let ids = fixture("minilm_4x32_input_ids.npy");
    fails(&["run", m, "--input", &format!("input_ids={}", ids.display())], "input 'attention_mask'");
}
