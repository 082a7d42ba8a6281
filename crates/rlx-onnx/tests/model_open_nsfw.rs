//! Yahoo's open_nsfw classifier (a ResNet-50 taking NHWC images; opset 17; Conv, MaxPool,
//! Pad, ReduceMean, Transpose, Cast, Softmax) against onnxruntime's output on one image
//! (`tools/onnx/make_model_fixtures.py`), under the node suite's tolerance.

use rlx_io::npy::load_npy;
use rlx_ir::HostTensor;
use rlx_onnx::OnnxModel;
use std::path::PathBuf;

fn fixture(name: &str) -> HostTensor {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models").join(name);
    load_npy(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `~/.cache/rlx/onnx-models/open_nsfw.onnx` (tools/fetch_onnx_models.sh), or None (the
/// test skips) unless RLX_REQUIRE_MODEL is set.
fn model_path() -> Option<PathBuf> {
    let base = std::env::var("RLX_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/rlx"));
    let path = base.join("onnx-models/open_nsfw.onnx");
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var("RLX_REQUIRE_MODEL").is_err(),
        "{} is missing: run tools/fetch_onnx_models.sh",
        path.display()
    );
    eprintln!("skipped: {} not found (tools/fetch_onnx_models.sh)", path.display());
    None
}

#[test]
fn open_nsfw_matches_onnxruntime() {
    let Some(path) = model_path() else { return };
    let mut model = OnnxModel::load(&path).unwrap();
    let name = model.inputs()[0].name.clone();
    let image = fixture("open_nsfw_input.npy");
    let start = std::time::Instant::now();
    let outs = model.run(&[(name.as_str(), &image)]).unwrap();
    let first = start.elapsed();
    let want = fixture("open_nsfw_output_0.npy");
    assert_eq!(outs.len(), 1);
    assert_eq!((outs[0].dtype(), outs[0].dims()), (want.dtype(), want.dims()));
    let (got, want) = (outs[0].to_f64_vec(), want.to_f64_vec());
    // The largest error as a fraction of the suite's tolerance (1 is the limit).
    let margin = got.iter().zip(&want).map(|(a, b)| (a - b).abs() / (1e-7 + 1e-3 * b.abs())).fold(0.0f64, f64::max);
    let rel = got.iter().zip(&want).map(|(a, b)| (a - b).abs() / b.abs().max(f64::MIN_POSITIVE)).fold(0.0f64, f64::max);
    println!(
        "open_nsfw: {got:?} (onnxruntime {want:?}); max relative error {rel:.2e}, margin {margin:.3} of the suite tolerance; import, compile and run in {first:.1?}"
    );
    assert!(margin <= 1.0, "outside the tolerance: margin {margin:.3}");
}
