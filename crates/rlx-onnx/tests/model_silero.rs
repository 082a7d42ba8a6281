//! Silero VAD 6.2.3 streaming at 16 kHz against onnxruntime's outputs
//! (`tools/onnx/make_model_fixtures.py`, protocol in `fixtures/models/silero_io.json`):
//! 20 consecutive calls of 576 samples (64 of context + 512), each fed the state the
//! previous call returned. The full model picks its 8k / 16k branch with an If on the
//! `sr` input, which the program specializes on; the 16k-only variant
//! (`silero_vad_16k.onnx`) gives onnxruntime's same outputs, so it shares the fixtures.
//! Elements outside the suite's tolerance are arbitrated by the f64 oracle as in
//! `common::agree`: the LSTM's cell update `f c + i g` cancels to ~3e-4 in a few state
//! elements, where any f32 implementation is off by ~1e-3 relative (onnxruntime too).

mod common;

use common::{Agreement, agree, fixture, model_path};
use rlx_ir::HostTensor;
use rlx_onnx::OnnxModel;

/// Row `k` of a stacked fixture.
fn row(t: &HostTensor, k: usize) -> HostTensor {
    let n = t.bytes().len() / t.dims()[0];
    HostTensor::from_bytes(t.dtype(), &t.dims()[1..], t.bytes()[k * n..(k + 1) * n].to_vec()).unwrap()
}

/// Streams the fixture's calls through `file`; `specialized`: the inputs the program
/// must be specialized on.
fn stream(file: &str, specialized: &[&str]) {
    let Some(path) = model_path(file) else { return };
    let mut model = OnnxModel::load(&path).unwrap();
    let names: Vec<&str> = model.inputs().iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["input", "state", "sr"]);
    let (inputs, probs, states) =
        (fixture("silero_inputs.npy"), fixture("silero_probs.npy"), fixture("silero_states.npy"));
    let sr = HostTensor::from_i64(&[], &[16000]).unwrap();
    let mut state = fixture("silero_state_init.npy");
    let mut worst = [(0.0f64, 0usize, 0.0f64, 0.0f64); 2];
    let calls = inputs.dims()[0];
    assert_eq!(calls, 20);
    for k in 0..calls {
        let x = row(&inputs, k);
        let feeds = [("input", &x), ("state", &state), ("sr", &sr)];
        let outs = model.run(&feeds).unwrap();
        assert_eq!(outs.len(), 2);
        let exact = model.reference_f64(&feeds).unwrap();
        for (j, want) in [row(&probs, k), row(&states, k)].iter().enumerate() {
            let Agreement { margin, outside, rlx_error, ort_error } = agree(&outs[j], want, &exact[j]);
            let w = &mut worst[j];
            *w = (w.0.max(margin), w.1 + outside, w.2.max(rlx_error), w.3.max(ort_error));
        }
        state = outs[1].clone();
    }
    for (what, (margin, outside, rlx, ort)) in ["probability", "state"].iter().zip(worst) {
        println!(
            "{file} {what}: {calls} chained calls, max margin {margin:.3} of the suite tolerance, {outside} elements outside it (each within onnxruntime's largest error from the f64 oracle); max error vs f64 {rlx:.2e} (onnxruntime {ort:.2e})"
        );
    }
    println!(
        "{file}: compiled in {:.1?}, specialized on {:?}",
        model.last_compile_time().unwrap(),
        model.specialized_inputs()
    );
    assert_eq!(model.specialized_inputs(), specialized);
}

#[test]
fn silero_vad_streams_like_onnxruntime() {
    // The If on `sr` folds: only the 16k branch is compiled.
    stream("silero_vad.onnx", &["sr"]);
}

#[test]
fn silero_vad_16k_streams_like_onnxruntime() {
    stream("silero_vad_16k.onnx", &[]);
}
