//! ONNX: any bytes give `Ok` or `Err` from the reader, the importer and a run, never a
//! panic. Shared by the libFuzzer target `onnx`, crates/rlx/tests/fuzz_replay (the
//! committed corpus) and crates/rlx-onnx/tests/malformed.rs (a seeded mutation run);
//! depends on rlx-onnx and rlx-ir only.

use rlx_ir::{DType, HostTensor};
use rlx_onnx::OnnxModel;

/// Largest input a mutated model is run on: odd shapes and attributes are the point, and
/// one input must stay in the milliseconds.
const MAX_ELEMS: usize = 1 << 12;

pub fn onnx(data: &[u8]) {
    let Ok(mut model) = OnnxModel::from_bytes(data) else { return };
    let _ = model.unsupported_ops();
    let _ = model.op_counts();
    // Symbolic dims bound to 2; inputs of other dtypes zero-filled.
    let mut inputs = Vec::new();
    for info in model.inputs() {
        let Some(dtype) = info.dtype else { return };
        let dims: Vec<usize> = info.dims.iter().map(|d| d.unwrap_or(2)).collect();
        if dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).is_none_or(|n| n > MAX_ELEMS) {
            return;
        }
        let Ok(t) = HostTensor::zeros(dtype, &dims) else { return };
        inputs.push((info.name.clone(), t));
    }
    // Graphs whose constants or outputs are huge are not what this check is after.
    if model.outputs().iter().any(|o| o.dtype == Some(DType::F64) && o.dims.len() > 6) {
        return;
    }
    let named: Vec<(&str, &HostTensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let _ = model.run(&named);
}
