use crate::compile;
use rlx::prelude::*;

/// A graph using every op of the IR.
pub fn every_op_graph() -> Graph {
    let mut g = Graph::new("every_op");
    let x = g.input("x", DType::F32, &[2, 4]).unwrap();
    let w = g.param("w", DType::F32, &[4, 4]).unwrap();
    let c = g.constant(DType::F32, &[4], &[0.5, -1.0, 2.0, 0.25]).unwrap();
    let labels = g.constant_tensor(HostTensor::from_i64(&[2], &[1, 3]).unwrap()).unwrap();
    let h = g.matmul(x, w).unwrap();
    let h = g.add(h, c).unwrap();
    let mut acc = h;
    for op in BinaryOp::ALL {
        let t = g.unary(Unary::Sigmoid, acc).unwrap();
        acc = g.binary(op, acc, t).unwrap();
    }
    for u in Unary::ALL {
        let t = g.unary(Unary::Sigmoid, acc).unwrap(); // keep the domain in (0, 1)
        let t = g.unary(u, t).unwrap();
        acc = g.add(acc, t).unwrap();
    }
    let cond = g.gt(acc, h).unwrap();
    let _ = g.compare(CompareOp::Le, acc, h).unwrap();
    let sel = g.where_(cond, acc, h).unwrap();
    let half = g.cast(sel, DType::BF16).unwrap();
    let back = g.cast(half, DType::F32).unwrap();
    let r = g.reduce(ReduceOp::Mean, back, &[1], true).unwrap();
    let am = g.argmax(back, 1, false).unwrap();
    let sm = g.softmax(back, 1).unwrap();
    let lsm = g.log_softmax(back, 0).unwrap();
    let ln = g.layer_norm(sm, Some(c), Some(c), 1e-5).unwrap();
    let rn = g.rms_norm(lsm, Some(c), 1e-6).unwrap();
    let rs = g.reshape(rn, &[4, 2]).unwrap();
    let tr = g.transpose(rs, &[1, 0]).unwrap();
    let na = g.narrow(tr, 1, 1, 2).unwrap();
    let cat = g.concat(&[na, ln, r], 1).unwrap();
    let ex = g.expand(r, &[3, 2, 1]).unwrap();
    let ga = g.gather(w, am).unwrap();
    let ce = g.cross_entropy(cat, labels).unwrap();
    let img = g.reshape(w, &[1, 1, 4, 4]).unwrap();
    let k = g.constant(DType::F32, &[2, 1, 2, 2], &[1.0, 0.5, -0.5, 1.0, 0.0, 1.0, 1.0, 0.0]).unwrap();
    let cv = g.conv2d(img, k, None, Conv2dParams::default().with_padding(1)).unwrap();
    let mp = g.max_pool2d(cv, PoolParams::square(2)).unwrap();
    let ap = g.avg_pool2d(cv, PoolParams { kernel: [3, 3], stride: [1, 1], padding: [1; 4] }, false).unwrap();
    let q = g.reshape(w, &[1, 2, 2, 4]).unwrap();
    let kv = g.narrow(q, 1, 0, 1).unwrap();
    let at = g.attention(q, kv, kv, AttentionMask::Causal, None).unwrap();
    let pos = g.constant_tensor(HostTensor::from_i64(&[2], &[3, 4]).unwrap()).unwrap();
    let ro = g.rope(at, pos, RopeStyle::NeoX, 10000.0, None).unwrap();
    let cache = g.constant(DType::F32, &[1, 2, 4, 4], &[0.0; 32]).unwrap();
    let p = g.constant_tensor(HostTensor::from_i64(&[], &[1]).unwrap()).unwrap();
    let kva = g.kv_append(cache, ro, p, 2).unwrap();
    let len = g.constant_tensor(HostTensor::from_i64(&[], &[2]).unwrap()).unwrap();
    let acl = g.attention(q, kv, kv, AttentionMask::CausalLen(len), Some(0.5)).unwrap();
    let values: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).cos()).collect();
    let packed = rlx::ir::quant::quantize(QuantScheme::Q4_1, &values).unwrap();
    let qw = g.constant_tensor(HostTensor::from_bytes(DType::U8, &[2, 20], packed).unwrap()).unwrap();
    let row = g.reshape(kva, &[1, 32]).unwrap();
    let dq = g.dequant_matmul(row, qw, QuantScheme::Q4_1, ActivationQuant::F32).unwrap();
    let dq8 = g.dequant_matmul(row, qw, QuantScheme::Q4_1, ActivationQuant::Q8).unwrap();
    let dq16 = g.dequant_matmul(row, qw, QuantScheme::Q4_1, ActivationQuant::Q16).unwrap();
    g.set_outputs(&[ce, cat, ex, ga, mp, ap, kva, am, acl, dq, dq8, dq16]).unwrap();
    g
}

#[test]
fn every_op_round_trips_through_json_and_runs_identically() {
    let g = every_op_graph();
    let text = g.to_json().unwrap();
    let back = Graph::from_json(&text).unwrap();
    assert_eq!(back, g);
    assert_eq!(back.to_json().unwrap(), text);
    let xs: Vec<f32> = (0..8).map(|i| i as f32 * 0.3 - 1.0).collect();
    let ws: Vec<f32> = (0..16).map(|i| (i as f32 * 0.7).sin()).collect();
    let run = |g: &Graph| {
        let mut c = compile(g);
        c.set_param("w", &ws).unwrap();
        let x = HostTensor::from_f32(&[2, 4], &xs).unwrap();
        c.run_typed(&[("x", &x)]).unwrap()
    };
    let (a, b) = (run(&g), run(&back));
    assert_eq!(a, b);
    assert!(a[0].to_f32_vec()[0].is_finite());
}

/// Documents written before activations had three choices (`"q8_activations": bool`)
/// still load, as `q8` / `f32`; an unknown choice is an error naming it.
#[test]
fn the_former_q8_activations_flag_still_loads() {
    let g = every_op_graph();
    let text = g.to_json().unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let dq8 = doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .position(|n| n["op"]["dequant_mat_mul"]["activations"] == "q8")
        .unwrap();
    let op = &mut doc["nodes"][dq8]["op"]["dequant_mat_mul"];
    op.as_object_mut().unwrap().remove("activations");
    op["q8_activations"] = true.into();
    assert_eq!(Graph::from_json(&doc.to_string()).unwrap(), g);
    doc["nodes"][dq8]["op"]["dequant_mat_mul"]["q8_activations"] = "q4".into();
    let e = Graph::from_json(&doc.to_string()).unwrap_err();
    assert!(e.message().contains("\"q4\""), "{e}");
}

#[test]
fn documents_are_retyped_on_load() {
    let g = every_op_graph();
    let text = g.to_json().unwrap();
    // Claim a wrong dtype for a node: the op's rule disagrees.
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut bad = doc.clone();
    bad["nodes"][4]["dtype"] = "f64".into();
    let e = Graph::from_json(&bad.to_string()).unwrap_err();
    assert!(e.message().contains("node 4") && e.message().contains("f64"), "{e}");
    // An operand that does not precede its user.
    let mut bad = doc.clone();
    bad["nodes"][4]["inputs"][0] = 9.into();
    let e = Graph::from_json(&bad.to_string()).unwrap_err();
    assert!(e.message().contains("node 4") && e.message().contains("precede"), "{e}");
    // A constant whose data is short.
    let mut bad = doc.clone();
    bad["nodes"][2]["op"]["constant"]["value"]["data"] = "AAAA".into();
    let e = Graph::from_json(&bad.to_string()).unwrap_err();
    assert!(e.message().contains("needs 16 bytes"), "{e}");
    // An output that does not exist.
    let mut bad = doc;
    bad["outputs"][0] = 100000.into();
    let e = Graph::from_json(&bad.to_string()).unwrap_err();
    assert!(e.message().contains("%100000"), "{e}");
}

/// Mutates valid documents at random (byte flips, truncation, digit edits): every
/// outcome is Ok or Err, never a panic, and an Ok graph compiles or errs cleanly.
#[test]
fn fuzzed_documents_never_panic() {
    let text = every_op_graph().to_json().unwrap();
    let bytes = text.as_bytes();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut parsed = 0;
    for _ in 0..1500 {
        let mut doc = bytes.to_vec();
        for _ in 0..1 + next() % 4 {
            let at = (next() % doc.len() as u64) as usize;
            match next() % 4 {
                0 => doc[at] = b"0123456789"[(next() % 10) as usize],
                1 => doc[at] ^= 1 << (next() % 7),
                2 => doc.truncate(at),
                _ => {
                    doc.remove(at.min(doc.len().saturating_sub(1)));
                }
            }
            if doc.is_empty() {
                break;
            }
        }
        let Ok(s) = std::str::from_utf8(&doc) else { continue };
        if let Ok(g) = Graph::from_json(s) {
            parsed += 1;
            let _ = Session::new(Device::Cpu).unwrap().compile_with(&g, &CompileOptions::default());
        }
    }
    // Some mutations land in harmless places (numbers of constants, names).
    assert!(parsed > 0);
}
