//! An ONNX model on the GPU: MiniLM-L3 (tools/fetch_onnx_models.sh) against onnxruntime's
//! outputs, each element within the node suite's tolerance or no farther from the f64
//! twin than onnxruntime's worst element (as the rlx-onnx model tests judge the CPU).

use super::gpu_or_skip;
use rlx::prelude::*;

#[path = "../../../rlx-onnx/tests/common/mod.rs"]
mod common;

#[test]
fn minilm_on_the_gpu_matches_onnxruntime() {
    if !gpu_or_skip("minilm_on_the_gpu_matches_onnxruntime") {
        return;
    }
    let Some(path) = common::model_path("minilm.onnx") else { return };
    let mut model = OnnxModel::load(&path).unwrap();
    model.set_device(Device::Gpu).unwrap();
    for shape in ["1x7", "4x32"] {
        let ids = common::fixture(&format!("minilm_{shape}_input_ids.npy"));
        let mask = common::fixture(&format!("minilm_{shape}_attention_mask.npy"));
        let inputs = [("input_ids", &ids), ("attention_mask", &mask)];
        let got = model.run(&inputs).unwrap();
        let exact = model.reference_f64(&inputs).unwrap();
        for k in [2, 3] {
            common::agree(&got[k], &common::fixture(&format!("minilm_{shape}_output_{k}.npy")), &exact[k]);
        }
    }
}
