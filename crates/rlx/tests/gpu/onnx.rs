//! An ONNX model on the GPU: MiniLM-L3 (tools/fetch_onnx_models.sh) against onnxruntime's
//! outputs, each element within the node suite's tolerance or no farther from the f64
//! twin than onnxruntime's worst element (as the rlx-onnx model tests judge the CPU).

use super::gpu_or_skip;
use rlx::prelude::*;
use std::path::PathBuf;

fn fixture(name: &str) -> HostTensor {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rlx-onnx/tests/fixtures/models");
    rlx::io::load_npy(dir.join(name)).unwrap()
}

#[test]
fn minilm_on_the_gpu_matches_onnxruntime() {
    if !gpu_or_skip("minilm_on_the_gpu_matches_onnxruntime") {
        return;
    }
    let base = std::env::var("RLX_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/rlx"));
    let path = base.join("onnx-models/minilm.onnx");
    if !path.exists() {
        assert!(std::env::var("RLX_REQUIRE_MODEL").is_err(), "{} is missing", path.display());
        return;
    }
    let mut model = OnnxModel::load(&path).unwrap();
    model.set_device(Device::Gpu).unwrap();
    for shape in ["1x7", "4x32"] {
        let ids = fixture(&format!("minilm_{shape}_input_ids.npy"));
        let mask = fixture(&format!("minilm_{shape}_attention_mask.npy"));
        let inputs = [("input_ids", &ids), ("attention_mask", &mask)];
        let got = model.run(&inputs).unwrap();
        let exact = model.reference_f64(&inputs).unwrap();
        for k in [2, 3] {
            let ort = fixture(&format!("minilm_{shape}_output_{k}.npy")).to_f64_vec();
            let (g, e) = (got[k].to_f64_vec(), exact[k].to_f64_vec());
            let ort_worst = ort.iter().zip(&e).fold(0.0f64, |m, (o, e)| m.max((o - e).abs()));
            for j in 0..g.len() {
                let within = (g[j] - ort[j]).abs() <= 1e-7 + 1e-3 * ort[j].abs();
                assert!(
                    within || (g[j] - e[j]).abs() <= ort_worst,
                    "{shape} output {k} element {j}: GPU {} vs onnxruntime {} (f64 {})",
                    g[j],
                    ort[j],
                    e[j]
                );
            }
        }
    }
}
