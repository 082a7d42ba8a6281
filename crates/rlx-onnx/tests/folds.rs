//! Import-time folds into a Conv. A BatchNormalization right after a Conv is folded into
//! the conv's weight and bias: the graph has no per-channel arithmetic left, the result
//! agrees with the unfolded form (the same model with an Identity in between) and with the
//! f64 twin at two input shapes (the second imports with the weights folded for the
//! first). A zero Pad before a Conv becomes the conv's padding.

mod common;

use common::{node, value_info, weight};
use prost::Message;
use rlx_ir::{HostTensor, Op};
use rlx_onnx::OnnxModel;
use rlx_onnx::proto::tensor_proto::DataType;
use rlx_onnx::proto::{AttributeProto, GraphProto, ModelProto, OperatorSetIdProto, attribute_proto::AttributeType};

/// Conv 3 -> 5 channels (3x3, pad 1, with bias) then BatchNormalization; with
/// `identity` an Identity between them keeps the batch norm unfolded.
fn conv_bn(identity: bool) -> Vec<u8> {
    let wave = |n: usize, k: f32| -> Vec<f32> { (0..n).map(|i| (i as f32 * k).sin() * 0.5).collect() };
    let c = 5;
    let mut nodes = vec![node("Conv", "conv", &["x", "w", "b"], &["c"])];
    nodes[0].attribute.push(AttributeProto {
        name: Some("pads".into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: vec![1, 1, 1, 1],
        ..Default::default()
    });
    let bn_in = if identity {
        nodes.push(node("Identity", "id", &["c"], &["c2"]));
        "c2"
    } else {
        "c"
    };
    nodes.push(node("BatchNormalization", "bn", &[bn_in, "gamma", "beta", "mean", "var"], &["y"]));
    let var: Vec<f32> = (0..c).map(|k| 0.5 + k as f32 * 0.3).collect();
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(15) }],
        graph: Some(GraphProto {
            name: Some("conv_bn".into()),
            node: nodes,
            initializer: vec![
                weight("w", &[5, 3, 3, 3], &wave(135, 0.7)),
                weight("b", &[5], &wave(5, 1.3)),
                weight("gamma", &[5], &wave(5, 2.1).iter().map(|v| v + 1.0).collect::<Vec<_>>()),
                weight("beta", &[5], &wave(5, 0.4)),
                weight("mean", &[5], &wave(5, 3.3)),
                weight("var", &[5], &var),
            ],
            input: vec![value_info("x", DataType::Float, &[None, Some(3), Some(6), Some(7)])],
            output: vec![value_info("y", DataType::Float, &[None, Some(5), Some(6), Some(7)])],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn input(batch: usize) -> HostTensor {
    let v: Vec<f32> = (0..batch * 3 * 42).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
    HostTensor::from_f32(&[batch, 3, 6, 7], &v).unwrap()
}

#[test]
fn batch_norm_after_conv_folds_into_its_weights() {
    let mut folded = OnnxModel::from_bytes(&conv_bn(false)).unwrap();
    let mut plain = OnnxModel::from_bytes(&conv_bn(true)).unwrap();
    let graph = folded.graph_for(&[vec![2, 3, 6, 7]]).unwrap();
    let live: Vec<&str> = {
        // Ops that feed the output (the unfused conv stays in the graph, dead).
        let mut seen = vec![false; graph.len()];
        let mut stack: Vec<_> = graph.outputs().to_vec();
        while let Some(id) = stack.pop() {
            if !std::mem::replace(&mut seen[id.index()], true) {
                stack.extend(graph.node(id).unwrap().inputs());
            }
        }
        graph.nodes().filter(|(id, _)| seen[id.index()]).map(|(_, n)| n.op().name()).collect()
    };
    assert_eq!(live.iter().filter(|&&o| o == "conv2d").count(), 1, "{live:?}");
    assert!(!live.iter().any(|o| ["mul", "add", "rsqrt"].contains(o)), "{live:?}");
    assert!(graph.nodes().any(|(_, n)| matches!(n.op(), Op::Param { name } if name.starts_with("w|bn:"))));
    for batch in [2, 1] {
        let x = input(batch);
        let a = folded.run(&[("x", &x)]).unwrap();
        let b = plain.run(&[("x", &x)]).unwrap();
        let exact = plain.reference_f64(&[("x", &x)]).unwrap();
        let (a, b, e) = (a[0].to_f64_vec(), b[0].to_f64_vec(), exact[0].to_f64_vec());
        let scale = e.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        // Both are f32 computations of the same function: a few roundings of the
        // output's scale apart (27 products per output, then the affine map).
        for k in 0..a.len() {
            assert!((a[k] - e[k]).abs() <= 32.0 * f32::EPSILON as f64 * scale, "folded {k}: {} vs {}", a[k], e[k]);
            assert!((b[k] - e[k]).abs() <= 32.0 * f32::EPSILON as f64 * scale, "plain {k}: {} vs {}", b[k], e[k]);
        }
    }
}

/// Pad (zeros, spatial axes, NHWC) -> Transpose -> Conv, as TensorFlow exports write a
/// padded conv: the conv takes the padding into its own, so the graph reads no padded
/// copy, and the result is bit-identical to a Conv with the same `pads` attribute.
#[test]
fn a_zero_pad_before_a_conv_becomes_its_padding() {
    let ints = |name: &str, v: &[i64]| AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    };
    let w: Vec<f32> = (0..4 * 3 * 9).map(|i| (i as f32 * 0.31).cos() * 0.4).collect();
    let graph = |nodes: Vec<rlx_onnx::proto::NodeProto>, extra: Vec<rlx_onnx::proto::TensorProto>| {
        let mut init = vec![weight("w", &[4, 3, 3, 3], &w)];
        init.extend(extra);
        ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(13) }],
            graph: Some(GraphProto {
                name: Some("pad_conv".into()),
                node: nodes,
                initializer: init,
                input: vec![value_info("x", DataType::Float, &[Some(1), Some(6), Some(7), Some(3)])],
                output: vec![value_info("y", DataType::Float, &[Some(1), Some(4), Some(6), Some(7)])],
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    };
    let pads = rlx_onnx::proto::TensorProto {
        name: Some("pads".into()),
        dims: vec![8],
        data_type: Some(DataType::Int64 as i32),
        int64_data: vec![0, 1, 1, 0, 0, 1, 1, 0],
        ..Default::default()
    };
    let mut to_nchw = node("Transpose", "t", &["xp"], &["xt"]);
    to_nchw.attribute.push(ints("perm", &[0, 3, 1, 2]));
    let padded = graph(
        vec![node("Pad", "pad", &["x", "pads"], &["xp"]), to_nchw.clone(), node("Conv", "conv", &["xt", "w"], &["y"])],
        vec![pads],
    );
    let mut to_nchw_plain = to_nchw;
    to_nchw_plain.input = vec!["x".into()];
    let mut conv = node("Conv", "conv", &["xt", "w"], &["y"]);
    conv.attribute.push(ints("pads", &[1, 1, 1, 1]));
    let plain = graph(vec![to_nchw_plain, conv], vec![]);
    let x: Vec<f32> = (0..6 * 7 * 3).map(|i| (i as f32 * 0.77).sin()).collect();
    let x = HostTensor::from_f32(&[1, 6, 7, 3], &x).unwrap();
    let mut m = OnnxModel::from_bytes(&padded).unwrap();
    let g = m.graph_for(&[vec![1, 6, 7, 3]]).unwrap();
    let out = g.outputs()[0];
    let conv_input = g.node(out).unwrap().inputs()[0];
    assert_eq!(g.dims(conv_input), [1, 3, 6, 7], "the conv reads the unpadded transpose");
    let a = m.run(&[("x", &x)]).unwrap();
    let b = OnnxModel::from_bytes(&plain).unwrap().run(&[("x", &x)]).unwrap();
    assert_eq!(a[0].bytes(), b[0].bytes());
}
