//! Import semantics beyond single ops: IR-v3 initializers listed as inputs, symbolic dims
//! bound consistently across inputs, one compiled program per input shape.

mod common;

use common::{node, value_info, weight};
use prost::Message;
use rlx_ir::HostTensor;
use rlx_onnx::OnnxModel;
use rlx_onnx::proto::tensor_proto::DataType;
use rlx_onnx::proto::{GraphProto, ModelProto, OperatorSetIdProto};

/// `y = a + b * w` over `a, b: f32[batch, 2]`, with `w` an initializer that IR-v3
/// exporters also list as a graph input.
fn model() -> Vec<u8> {
    ModelProto {
        ir_version: Some(3),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(9) }],
        graph: Some(GraphProto {
            name: Some("v3".into()),
            node: vec![node("Mul", "scale", &["b", "w"], &["bw"]), node("Add", "sum", &["a", "bw"], &["y"])],
            initializer: vec![weight("w", &[2], &[2.0, -3.0])],
            input: vec![
                value_info("a", DataType::Float, &[None, Some(2)]),
                value_info("b", DataType::Float, &[None, Some(2)]),
                value_info("w", DataType::Float, &[Some(2)]),
            ],
            output: vec![value_info("y", DataType::Float, &[None, Some(2)])],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn initializers_listed_as_inputs_are_params_with_their_values() {
    let mut m = OnnxModel::from_bytes(&model()).unwrap();
    let names: Vec<&str> = m.inputs().iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    let a = HostTensor::from_f32(&[1, 2], &[1.0, 1.0]).unwrap();
    let b = HostTensor::from_f32(&[1, 2], &[0.5, 0.25]).unwrap();
    let y = m.run(&[("a", &a), ("b", &b)]).unwrap();
    assert_eq!(y[0].to_f32_vec(), [2.0, 0.25]);
}

#[test]
fn a_symbolic_dim_binds_once_per_run_and_compiles_once_per_shape() {
    let mut m = OnnxModel::from_bytes(&model()).unwrap();
    let t = |n: usize| HostTensor::from_f32(&[n, 2], &vec![1.0; 2 * n]).unwrap();
    let e = m.run(&[("a", &t(2)), ("b", &t(3))]).unwrap_err().to_string();
    assert!(e.contains("'batch'") && e.contains("bound 'batch' to 2"), "{e}");
    for n in [1, 17, 1, 17] {
        let y = m.run(&[("a", &t(n)), ("b", &t(n))]).unwrap();
        assert_eq!(y[0].dims(), [n, 2]);
    }
    // Two shapes, two programs: the repeats ran cached ones (the last compile was 17's).
    let last = m.last_compile_time();
    m.run(&[("a", &t(1)), ("b", &t(1))]).unwrap();
    assert_eq!(m.last_compile_time(), last);
}
