//! Shared by the real-model tests: fixture and model paths, and the comparison with
//! onnxruntime under the node suite's tolerance, arbitrated by the f64 oracle.

#![allow(dead_code)]

use rlx_io::npy::load_npy;
use rlx_ir::HostTensor;
use rlx_onnx::proto::tensor_proto::DataType;
use rlx_onnx::proto::tensor_shape_proto::{Dimension, dimension::Value as Dim};
use rlx_onnx::proto::{NodeProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto, type_proto};
use std::path::PathBuf;

pub fn fixture(name: &str) -> HostTensor {
    // From crates/rlx-onnx or crates/rlx (the GPU test includes this file).
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rlx-onnx/tests/fixtures/models").join(name);
    load_npy(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `~/.cache/rlx/onnx-models/FILE` (tools/fetch_onnx_models.sh), or None (the test skips)
/// unless RLX_REQUIRE_MODEL is set.
pub fn model_path(file: &str) -> Option<PathBuf> {
    let base = std::env::var("RLX_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/rlx"));
    let path = base.join("onnx-models").join(file);
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

/// How RLX's output compares with onnxruntime's.
#[derive(Debug)]
pub struct Agreement {
    /// The largest `|rlx - ort| / (1e-7 + 1e-3 |ort|)` (the suite's tolerance is 1).
    pub margin: f64,
    /// Elements outside the suite's tolerance (each no farther from the f64 oracle than
    /// onnxruntime's farthest element).
    pub outside: usize,
    /// The largest error against the f64 oracle, RLX's and onnxruntime's, relative to the
    /// output's largest magnitude.
    pub rlx_error: f64,
    pub ort_error: f64,
}

/// Compares `got` (RLX) with `ort` elementwise under the node suite's tolerance. Near-zero
/// elements of outputs that end in cancellation (a layer norm's centred values) can miss an
/// absolute tolerance of 1e-7 in any f32 implementation (the two differ by 1.7e-7 on
/// values of 5e-5 in MiniLM's embeddings, both within 1.2e-7 of the f64 oracle); such an
/// element passes only when its error against the f64 oracle `exact` is no larger than
/// onnxruntime's largest error on the same output.
pub fn agree(got: &HostTensor, ort: &HostTensor, exact: &HostTensor) -> Agreement {
    assert_eq!((got.dtype(), got.dims()), (ort.dtype(), ort.dims()), "dtype / dims");
    if !ort.dtype().is_float() {
        assert_eq!(got.bytes(), ort.bytes(), "integer outputs differ");
        return Agreement { margin: 0.0, outside: 0, rlx_error: 0.0, ort_error: 0.0 };
    }
    let (g, o, e) = (got.to_f64_vec(), ort.to_f64_vec(), exact.to_f64_vec());
    assert_eq!(e.len(), g.len(), "oracle length");
    let scale = e.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(f64::MIN_POSITIVE);
    let mut a = Agreement { margin: 0.0, outside: 0, rlx_error: 0.0, ort_error: 0.0 };
    let ort_worst = o.iter().zip(&e).fold(0.0f64, |m, (o, e)| m.max((o - e).abs()));
    for k in 0..g.len() {
        assert!(g[k].is_finite() && o[k].is_finite(), "element {k}: {} vs {}", g[k], o[k]);
        let m = (g[k] - o[k]).abs() / (1e-7 + 1e-3 * o[k].abs());
        a.margin = a.margin.max(m);
        let (re, oe) = ((g[k] - e[k]).abs(), (o[k] - e[k]).abs());
        a.rlx_error = a.rlx_error.max(re / scale);
        a.ort_error = a.ort_error.max(oe / scale);
        if m > 1.0 {
            a.outside += 1;
            assert!(
                re <= ort_worst,
                "element {k}: RLX {} vs onnxruntime {} (f64 oracle {}): outside the tolerance, and {re:.3e} from the oracle where onnxruntime's largest error is {ort_worst:.3e}",
                g[k],
                o[k],
                e[k]
            );
        }
    }
    a
}

// Small models built in tests.

/// A tensor input or output; `None` dims are the symbolic `batch`.
pub fn value_info(name: &str, elem: DataType, dims: &[Option<i64>]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d {
                Some(v) => Dim::DimValue(*v),
                None => Dim::DimParam("batch".into()),
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem as i32),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(name.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

pub fn weight(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(DataType::Float as i32),
        float_data: values.to_vec(),
        ..Default::default()
    }
}
