//! Five networks against JAX (fixtures from tools/autodiff/make_jax_fixtures.py, all f64):
//! loss, gradient of every input, a directional derivative (jvp) and a Hessian-vector
//! product. Each network is spelled out here with RLX's builders, op for op as the
//! script writes it in JAX.

use super::*;
use serde_json::Value;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/autodiff/fixtures/jax")
}

fn npy(name: &str) -> HostTensor {
    rlx::io::load_npy(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn manifest() -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("manifest.json")).unwrap()).unwrap()
}

fn constant(g: &mut Graph, v: &Value, dims: &[usize], dt: DType) -> NodeId {
    let flat: Vec<f64> = flatten(v);
    g.constant_tensor(HostTensor::from_f64_as(dt, dims, &flat).unwrap()).unwrap()
}

fn flatten(v: &Value) -> Vec<f64> {
    match v {
        Value::Array(a) => a.iter().flat_map(flatten).collect(),
        other => vec![other.as_f64().unwrap()],
    }
}

fn labels(g: &mut Graph, v: &Value) -> NodeId {
    let l: Vec<i64> = v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
    g.constant_tensor(HostTensor::from_i64(&[l.len()], &l).unwrap()).unwrap()
}

/// The network `name` in dtype `dt`, its inputs in the manifest's order.
fn network(name: &str, m: &Value, dt: DType) -> Graph {
    let c = &m["constants"];
    let mut g = Graph::new(name);
    for (k, dims) in m["networks"][name]["inputs"].as_object().unwrap() {
        let dims: Vec<usize> = dims.as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        g.input(k, dt, &dims).unwrap();
    }
    let find = |g: &Graph, n: &str| g.find_leaf(n).unwrap();
    let loss = match name {
        "mlp" => {
            let (x, w1, b1, w2, b2) = (find(&g, "x"), find(&g, "w1"), find(&g, "b1"), find(&g, "w2"), find(&g, "b2"));
            let h = g.matmul(x, w1).unwrap();
            let h = g.add(h, b1).unwrap();
            let h = g.unary(Unary::Tanh, h).unwrap();
            let l = g.matmul(h, w2).unwrap();
            let l = g.add(l, b2).unwrap();
            let y = labels(&mut g, &c["labels8"]);
            g.cross_entropy(l, y).unwrap()
        }
        "layer_norm" => {
            let (x, gamma, beta) = (find(&g, "x"), find(&g, "gamma"), find(&g, "beta"));
            let y = g.layer_norm(x, Some(gamma), Some(beta), 1e-5).unwrap();
            let y = g.unary(Unary::Tanh, y).unwrap();
            let r = constant(&mut g, &c["r_ln"], &[4, 8], dt);
            let y = g.mul(y, r).unwrap();
            g.reduce(ReduceOp::Sum, y, &[0, 1], false).unwrap()
        }
        "attention" => {
            let x = find(&g, "x");
            let heads = |g: &mut Graph, w: &str, n: usize| {
                let w = g.find_leaf(w).unwrap();
                let p = g.matmul(x, w).unwrap();
                let p = g.reshape(p, &[5, n, 8]).unwrap();
                let p = g.transpose(p, &[1, 0, 2]).unwrap();
                g.reshape(p, &[1, n, 5, 8]).unwrap()
            };
            let (q, k, v) = (heads(&mut g, "wq", 2), heads(&mut g, "wk", 1), heads(&mut g, "wv", 1));
            let a = g.attention(q, k, v, AttentionMask::Causal, None).unwrap();
            let a = g.reshape(a, &[2, 5, 8]).unwrap();
            let a = g.transpose(a, &[1, 0, 2]).unwrap();
            let a = g.reshape(a, &[5, 16]).unwrap();
            let wo = find(&g, "wo");
            let o = g.matmul(a, wo).unwrap();
            let r = constant(&mut g, &c["r_att"], &[5, 16], dt);
            let o = g.mul(o, r).unwrap();
            g.reduce(ReduceOp::Sum, o, &[0, 1], false).unwrap()
        }
        "conv_net" => {
            let (x, k1, c1, k2, wf) = (find(&g, "x"), find(&g, "k1"), find(&g, "c1"), find(&g, "k2"), find(&g, "wf"));
            let h = g.conv2d(x, k1, Some(c1), Conv2dParams::default().with_padding(1)).unwrap();
            let h = g.unary(Unary::Relu, h).unwrap();
            let h = g.max_pool2d(h, PoolParams::square(2)).unwrap();
            let h = g.conv2d(h, k2, None, Conv2dParams::default()).unwrap();
            let h = g.unary(Unary::Tanh, h).unwrap();
            let h = g.avg_pool2d(h, PoolParams::square(2), false).unwrap();
            let h = g.reshape(h, &[2, 6]).unwrap();
            let l = g.matmul(h, wf).unwrap();
            let y = labels(&mut g, &c["labels2"]);
            g.cross_entropy(l, y).unwrap()
        }
        "scan_rnn" => {
            let mut body = Graph::new("cell");
            let h = body.input("h", dt, &[1, 4]).unwrap();
            let w = body.input("w", dt, &[4, 4]).unwrap();
            let u = body.input("u", dt, &[3, 4]).unwrap();
            let b = body.input("b", dt, &[4]).unwrap();
            let xt = body.input("x", dt, &[1, 3]).unwrap();
            let hw = body.matmul(h, w).unwrap();
            let xu = body.matmul(xt, u).unwrap();
            let s = body.add(hw, xu).unwrap();
            let s = body.add(s, b).unwrap();
            let out = body.unary(Unary::Tanh, s).unwrap();
            body.set_outputs(&[out]).unwrap();
            let (h0, w, u, b, xs) = (find(&g, "h0"), find(&g, "w"), find(&g, "u"), find(&g, "b"), find(&g, "xs"));
            let last = g.scan(&body, h0, &[w, u, b], &[xs], Some(2)).unwrap();
            let q = constant(&mut g, &c["q_rnn"], &[1, 4], dt);
            let y = g.mul(last, q).unwrap();
            g.reduce(ReduceOp::Sum, y, &[0, 1], false).unwrap()
        }
        other => panic!("unknown network {other}"),
    };
    g.set_outputs(&[loss]).unwrap();
    g
}

/// Largest `|got - want|` over a tensor, relative to the tensor's largest `|want|` (so a
/// tiny element that cancels does not dominate).
fn error(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, w| m.max(w.abs())).max(f64::MIN_POSITIVE);
    got.iter().zip(want).fold(0f64, |m, (g, w)| m.max((g - w).abs())) / scale
}

/// Every network in `dt` against JAX's f64 values: loss, gradients, jvp and hvp. The
/// bound is derived, not tuned: each value passes through at most `depth` roundings of
/// `dt` (depth = the derivative graph's node count, an upper bound on any path), each
/// relative error `eps`, and sums can amplify by a small constant: `8 depth eps`.
fn check(dt: DType) -> Vec<String> {
    let m = manifest();
    let mut report = Vec::new();
    for (name, spec) in m["networks"].as_object().unwrap() {
        let f = network(name, &m, dt);
        let names: Vec<String> = spec["inputs"].as_object().unwrap().keys().cloned().collect();
        let wrt: Vec<&str> = names.iter().map(String::as_str).collect();
        let input = |tag: &str, k: &str| npy(&format!("{name}.{tag}.{k}.npy"));
        let typed = |t: &HostTensor| HostTensor::from_f64_as(dt, t.dims(), &t.to_f64_vec()).unwrap();
        let mut feed: Vec<(String, HostTensor)> =
            names.iter().map(|k| (k.clone(), typed(&input("input", k)))).collect();
        let tangents: Vec<(String, HostTensor)> =
            names.iter().map(|k| (format!("tangent_{k}"), typed(&input("tangent", k)))).collect();
        let mut with_seed = feed.clone();
        with_seed.push(("d_output".into(), HostTensor::from_f64_as(dt, &[], &[1.0]).unwrap()));
        let gr = grad_with_loss(&f, &wrt).unwrap();
        let hg = hvp(&f, &wrt).unwrap();
        let eps = if dt == DType::F64 { f64::EPSILON } else { f32::EPSILON as f64 };
        let tol = 8.0 * hg.len() as f64 * eps;
        let mut worst = 0f64;
        let mut expect = |what: String, got: &[f64], want: &[f64]| {
            let e = error(got, want);
            worst = worst.max(e);
            assert!(e <= tol, "{dt} {name} {what}: relative error {e:.2e} > bound {tol:.2e}");
        };
        let got = Runner::new(&gr).run(&with_seed);
        expect("loss".into(), &got[0], &[spec["loss"].as_f64().unwrap()]);
        for (i, k) in names.iter().enumerate() {
            expect(format!("d/d{k}"), &got[1 + i], &input("grad", k).to_f64_vec());
        }
        feed.extend(tangents);
        let jv = Runner::new(&jvp(&f, &wrt).unwrap()).run(&feed);
        expect("jvp".into(), &jv[1], &[spec["jvp"].as_f64().unwrap()]);
        let hv = Runner::new(&hg).run(&feed);
        for (i, k) in names.iter().enumerate() {
            expect(format!("hvp {k}"), &hv[1 + names.len() + i], &input("hvp", k).to_f64_vec());
        }
        report.push(format!("{dt} {name}: worst relative error {worst:.2e} (bound {tol:.2e})"));
    }
    report
}

#[test]
fn f64_losses_gradients_jvps_and_hvps_match_jax() {
    eprintln!("{}", check(DType::F64).join("\n"));
}

#[test]
fn f32_training_graphs_match_jax_within_the_f32_bound() {
    eprintln!("{}", check(DType::F32).join("\n"));
}
