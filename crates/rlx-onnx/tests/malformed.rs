//! Malformed models never panic: truncated or garbled protobuf, a node naming a missing
//! tensor, rank and dtype mismatches, a missing external data file each give an `Err`
//! naming the node or tensor (and the byte offset for broken wire format); and a bounded,
//! seeded mutation run over small models (the libFuzzer target `onnx` in fuzz/ runs the
//! same check unbounded: `cargo xtask fuzz onnx`).

mod common;
#[path = "../../../fuzz/src/onnx_check.rs"]
mod onnx_check;

use common::{node, value_info, weight};
use prost::Message;
use rlx_ir::HostTensor;
use rlx_onnx::OnnxModel;
use rlx_onnx::proto::tensor_proto::{DataLocation, DataType};
use rlx_onnx::proto::tensor_shape_proto::dimension::Value as Dim;
use rlx_onnx::proto::{
    GraphProto, ModelProto, OperatorSetIdProto, StringStringEntryProto, TensorProto, TypeProto, type_proto,
};

/// `y = relu(x @ w + b)` over `x: f32[batch, 3]`, opset 17.
fn mlp() -> ModelProto {
    let w: Vec<f32> = (0..6).map(|k| k as f32 * 0.25 - 0.5).collect();
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        graph: Some(GraphProto {
            name: Some("mlp".into()),
            node: vec![
                node("MatMul", "mm", &["x", "w"], &["h"]),
                node("Add", "bias", &["h", "b"], &["z"]),
                node("Relu", "act", &["z"], &["y"]),
            ],
            initializer: vec![weight("w", &[3, 2], &w), weight("b", &[2], &[0.5, -0.25])],
            input: vec![value_info("x", DataType::Float, &[None, Some(3)])],
            output: vec![value_info("y", DataType::Float, &[None, Some(2)])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn run(model: ModelProto, x: &HostTensor) -> rlx_ir::Result<Vec<HostTensor>> {
    OnnxModel::from_bytes(&model.encode_to_vec())?.run(&[("x", x)])
}

fn err(r: rlx_ir::Result<impl std::fmt::Debug>) -> String {
    r.expect_err("must fail").to_string()
}

#[test]
fn the_small_model_runs() {
    let x = HostTensor::from_f32(&[2, 3], &[1.0, 2.0, 3.0, -1.0, -2.0, -3.0]).unwrap();
    let y = run(mlp(), &x).unwrap();
    // f64 oracle: relu(x @ w + b), w[i][j] = (2i + j) / 4 - 1/2.
    let w = |i: usize, j: usize| (2 * i + j) as f64 * 0.25 - 0.5;
    let b = [0.5, -0.25];
    let xs = x.to_f64_vec();
    let want: Vec<f64> = (0..4)
        .map(|k| {
            let (r, j) = (k / 2, k % 2);
            ((0..3).map(|i| xs[r * 3 + i] * w(i, j)).sum::<f64>() + b[j]).max(0.0)
        })
        .collect();
    assert_eq!(y[0].to_f64_vec(), want);
}

#[test]
fn truncated_and_garbled_protobuf_name_the_byte() {
    let bytes = mlp().encode_to_vec();
    let mut saw_offset = 0;
    for cut in 1..bytes.len() {
        match OnnxModel::from_bytes(&bytes[..cut]) {
            Ok(_) => {}
            Err(e) => saw_offset += e.to_string().contains("at byte") as usize,
        }
    }
    assert!(saw_offset > bytes.len() / 2, "{saw_offset} of {} truncations named a byte offset", bytes.len());
    // A length prefix pointing past the end, inside graph.node[0].
    let mut garbled = bytes.clone();
    let graph_at = garbled.iter().position(|&b| b == 0x3a).unwrap();
    let node_at = graph_at + 2 + garbled[graph_at + 2..].iter().position(|&b| b == 0x0a).unwrap();
    garbled[node_at + 1] = 0x7f;
    let e = err(OnnxModel::from_bytes(&garbled));
    assert!(e.contains("at byte") && e.contains("ModelProto.graph[0]"), "{e}");
}

#[test]
fn a_missing_tensor_names_the_node_and_the_value() {
    let mut m = mlp();
    m.graph.as_mut().unwrap().node[1].input[1] = "bias_vector".into();
    let x = HostTensor::from_f32(&[1, 3], &[1.0; 3]).unwrap();
    let e = err(run(m, &x));
    assert!(e.contains("node 'bias' (Add, opset 17)") && e.contains("'bias_vector'"), "{e}");
}

#[test]
fn rank_and_dtype_mismatches_name_the_node() {
    let x = HostTensor::from_f32(&[1, 3], &[1.0; 3]).unwrap();
    let mut m = mlp();
    m.graph.as_mut().unwrap().initializer[0] = weight("w", &[4, 2], &[0.0; 8]);
    let e = err(run(m, &x));
    assert!(e.contains("node 'mm' (MatMul"), "{e}");
    let mut m = mlp();
    m.graph.as_mut().unwrap().initializer[1] = TensorProto {
        name: Some("b".into()),
        dims: vec![2],
        data_type: Some(DataType::Int64 as i32),
        int64_data: vec![1, 2],
        ..Default::default()
    };
    let e = err(run(m, &x));
    assert!(e.contains("node 'bias' (Add"), "{e}");
    // The caller's input: wrong rank, wrong dtype, a fixed dim that differs.
    let model = || OnnxModel::from_bytes(&mlp().encode_to_vec()).unwrap();
    let e = err(model().run(&[("x", &HostTensor::from_f32(&[3], &[1.0; 3]).unwrap())]));
    assert!(e.contains("input 'x' is x: f32[batch, 3]"), "{e}");
    let e = err(model().run(&[("x", &HostTensor::from_i64(&[1, 3], &[1; 3]).unwrap())]));
    assert!(e.contains("input 'x'"), "{e}");
    let e = err(model().run(&[("x", &HostTensor::from_f32(&[1, 4], &[1.0; 4]).unwrap())]));
    assert!(e.contains("input 'x': dim 1 is 3"), "{e}");
    let e = err(model().run(&[]));
    assert!(e.contains("input 'x'") && e.contains("missing"), "{e}");
}

#[test]
fn unsupported_ops_are_listed_with_node_and_opset() {
    let mut m = mlp();
    m.graph.as_mut().unwrap().node.push(node("NoSuchOp", "odd", &["y"], &["q"]));
    m.graph.as_mut().unwrap().node.push(node("Relu", "alien", &["y"], &["r"]));
    m.graph.as_mut().unwrap().node[4].domain = Some("com.example".into());
    let model = OnnxModel::from_bytes(&m.encode_to_vec()).unwrap();
    let list = model.unsupported_ops();
    assert_eq!(list.len(), 2, "{list:?}");
    assert!(list[0].starts_with("node 'odd' (NoSuchOp, opset 17)"), "{list:?}");
    assert!(list[1].contains("domain 'com.example'"), "{list:?}");
}

#[test]
fn a_missing_external_data_file_names_the_tensor_and_file() {
    let dir = std::env::temp_dir().join(format!("rlx-onnx-external-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut m = mlp();
    let w = &mut m.graph.as_mut().unwrap().initializer[0];
    w.float_data.clear();
    w.data_location = Some(DataLocation::External as i32);
    w.external_data = vec![
        StringStringEntryProto { key: Some("location".into()), value: Some("weights.bin".into()) },
        StringStringEntryProto { key: Some("offset".into()), value: Some("0".into()) },
        StringStringEntryProto { key: Some("length".into()), value: Some("24".into()) },
    ];
    let path = dir.join("model.onnx");
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    let e = err(OnnxModel::load(&path));
    assert!(e.contains("tensor 'w'") && e.contains("weights.bin"), "{e}");
    // Present but too short: the range is named.
    std::fs::write(dir.join("weights.bin"), [0u8; 16]).unwrap();
    let e = err(OnnxModel::load(&path));
    assert!(e.contains("tensor 'w'") && e.contains("0..24"), "{e}");
    // Complete: it loads and runs, weights read from the file.
    let w: Vec<u8> = (0..6).flat_map(|k| (k as f32 * 0.25 - 0.5).to_le_bytes()).collect();
    std::fs::write(dir.join("weights.bin"), w).unwrap();
    let x = HostTensor::from_f32(&[1, 3], &[1.0, 2.0, 3.0]).unwrap();
    let y = OnnxModel::load(&path).unwrap().run(&[("x", &x)]).unwrap();
    assert_eq!(y[0].to_f32_vec(), run(mlp(), &x).unwrap()[0].to_f32_vec());
    // A location escaping the model's directory is refused.
    let mut m2 = m.clone();
    m2.graph.as_mut().unwrap().initializer[0].external_data[0].value = Some("../weights.bin".into());
    std::fs::write(&path, m2.encode_to_vec()).unwrap();
    let e = err(OnnxModel::load(&path));
    assert!(e.contains("relative path inside"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A seeded mutation run (byte flips, truncations, duplicated spans) over the small model
/// and a few node-suite models when present: every input is `Ok` or `Err`.
#[test]
fn bounded_mutation_run_never_panics() {
    let mut seeds = vec![mlp().encode_to_vec()];
    let suite = std::env::var("HOME").map(|h| std::path::PathBuf::from(h).join(".cache/rlx/onnx-1.22.0/node"));
    for t in [
        "test_conv_with_strides_padding",
        "test_gather_0",
        "test_slice",
        "test_layer_normalization_2d_axis0",
        "test_if",
    ] {
        if let Ok(bytes) = suite.as_ref().map(|d| d.join(t).join("model.onnx")).map(std::fs::read) {
            seeds.extend(bytes.ok());
        }
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut accepted = 0;
    for round in 0..3000 {
        let seed = &seeds[round % seeds.len()];
        let mut bytes = seed.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() as usize) % bytes.len().max(1);
            match next() % 4 {
                0 => bytes[at] ^= 1 << (next() % 8),
                1 => bytes[at] = next() as u8,
                2 => bytes.truncate(at.max(1)),
                _ => {
                    let len = (next() as usize % 16).min(bytes.len() - at);
                    let span = bytes[at..at + len].to_vec();
                    bytes.splice(at..at, span);
                }
            }
        }
        let ok = std::panic::catch_unwind(|| onnx_check::onnx(&bytes));
        assert!(ok.is_ok(), "round {round}: a mutated model panicked (bytes: {:?})", &bytes[..bytes.len().min(64)]);
        accepted += OnnxModel::from_bytes(&bytes).is_ok() as usize;
    }
    println!("3000 byte-mutated models: {accepted} parsed, none panicked");
    // Structured mutations reach the importer: attribute values, dims, operand names and
    // op types changed inside well-formed protobuf.
    const VALUES: [i64; 9] = [-3, -1, 0, 1, 2, 3, 7, i64::MAX, i64::MIN];
    const OPS: [&str; 12] = [
        "Reshape",
        "Slice",
        "Gather",
        "Conv",
        "MaxPool",
        "Transpose",
        "Concat",
        "Split",
        "Pad",
        "Expand",
        "Tile",
        "Range",
    ];
    let models: Vec<ModelProto> = seeds.iter().filter_map(|b| ModelProto::decode(b.as_slice()).ok()).collect();
    for round in 0..3000 {
        let mut m = models[round % models.len()].clone();
        let Some(g) = m.graph.as_mut() else { continue };
        for _ in 0..1 + next() % 3 {
            let n = g.node.len().max(1);
            let k = next() as usize % n;
            let Some(node) = g.node.get_mut(k) else { break };
            match next() % 5 {
                0 if !node.attribute.is_empty() => {
                    let a = next() as usize % node.attribute.len();
                    let v = VALUES[next() as usize % VALUES.len()];
                    node.attribute[a].i = Some(v);
                    if let Some(x) = node.attribute[a].ints.first_mut() {
                        *x = v;
                    }
                }
                1 => node.op_type = Some(OPS[next() as usize % OPS.len()].into()),
                2 if node.input.len() > 1 => node.input.swap(0, 1),
                3 => {
                    if let Some(t) = g.initializer.first_mut()
                        && let Some(d) = t.dims.first_mut()
                    {
                        *d = VALUES[next() as usize % VALUES.len()];
                    }
                }
                _ => {
                    if let Some(input) = g.input.first_mut()
                        && let Some(TypeProto { value: Some(type_proto::Value::TensorType(t)), .. }) =
                            input.r#type.as_mut()
                        && let Some(shape) = t.shape.as_mut()
                        && let Some(d) = shape.dim.first_mut()
                    {
                        d.value = Some(Dim::DimValue(next() as i64 % 5));
                    }
                }
            }
        }
        let bytes = m.encode_to_vec();
        let ok = std::panic::catch_unwind(|| onnx_check::onnx(&bytes));
        let ops: Vec<String> = m.graph.iter().flat_map(|g| g.node.iter().map(|n| n.op_type().to_string())).collect();
        assert!(ok.is_ok(), "round {round}: a structurally mutated model panicked (ops {ops:?})");
    }
    println!("3000 structurally mutated models: none panicked");
}
