//! Scan: forward against the same loop unrolled, gradients and Hessian-vector products
//! through checkpointed scans against the unrolled loop's (whose ops are checked against
//! finite differences) and against finite differences directly, bit-identical results for
//! every checkpoint count.

use super::*;

const H: usize = 3;
const X: usize = 2;

/// `h' = tanh(h W + x U + b)`: inputs h [1, H], W [H, H], U [X, H], b [H], x [1, X].
fn rnn_step(g: &mut Graph, h: NodeId, w: NodeId, u: NodeId, b: NodeId, x: NodeId) -> Result<NodeId> {
    let hw = g.matmul(h, w)?;
    let xu = g.matmul(x, u)?;
    let s = g.add(hw, xu)?;
    let s = g.add(s, b)?;
    g.unary(Unary::Tanh, s)
}

fn body() -> Graph {
    let mut g = Graph::new("rnn_cell");
    let h = g.input("h", DType::F64, &[1, H]).unwrap();
    let w = g.input("w", DType::F64, &[H, H]).unwrap();
    let u = g.input("u", DType::F64, &[X, H]).unwrap();
    let b = g.input("b", DType::F64, &[H]).unwrap();
    let x = g.input("x", DType::F64, &[1, X]).unwrap();
    let y = rnn_step(&mut g, h, w, u, b, x).unwrap();
    g.set_outputs(&[y]).unwrap();
    g
}

/// loss = sum(final h * q) with q fixed, over a sequence of `len` steps, as a scan or
/// unrolled.
fn rnn_loss(len: usize, checkpoints: Option<usize>, unrolled: bool) -> Graph {
    let mut g = Graph::new("rnn");
    let h0 = g.input("h0", DType::F64, &[1, H]).unwrap();
    let w = g.param("w", DType::F64, &[H, H]).unwrap();
    let u = g.param("u", DType::F64, &[X, H]).unwrap();
    let b = g.param("b", DType::F64, &[H]).unwrap();
    let xs = g.input("xs", DType::F64, &[len, 1, X]).unwrap();
    let last = if unrolled {
        let mut h = h0;
        for t in 0..len {
            let x = g.narrow(xs, 0, t, 1).unwrap();
            let x = g.reshape(x, &[1, X]).unwrap();
            h = rnn_step(&mut g, h, w, u, b, x).unwrap();
        }
        h
    } else {
        g.scan(&body(), h0, &[w, u, b], &[xs], checkpoints).unwrap()
    };
    let q = g.constant(DType::F64, &[1, H], &[0.5, -1.0, 2.0]).unwrap();
    let y = g.mul(last, q).unwrap();
    let l = g.reduce(ReduceOp::Sum, y, &[0, 1], false).unwrap();
    g.set_outputs(&[l]).unwrap();
    g
}

struct Values {
    feed: Vec<(String, HostTensor)>,
    params: Vec<(String, HostTensor)>,
}

fn values(len: usize, rng: &mut Rng) -> Values {
    let t = |rng: &mut Rng, dims: &[usize]| {
        let v: Vec<f64> = (0..dims.iter().product()).map(|_| rng.uniform(-1.0, 1.0)).collect();
        HostTensor::from_f64_as(DType::F64, dims, &v).unwrap()
    };
    Values {
        feed: vec![("h0".into(), t(rng, &[1, H])), ("xs".into(), t(rng, &[len, 1, X]))],
        params: vec![("w".into(), t(rng, &[H, H])), ("u".into(), t(rng, &[X, H])), ("b".into(), t(rng, &[H]))],
    }
}

fn run(g: &Graph, v: &Values, extra: &[(String, HostTensor)]) -> Vec<Vec<f64>> {
    let mut c = Session::new(Device::Cpu).unwrap().compile(g).unwrap();
    for (n, t) in &v.params {
        c.set_param_typed(n, t).unwrap();
    }
    let feed: Vec<(&str, &HostTensor)> = v.feed.iter().chain(extra).map(|(n, t)| (n.as_str(), t)).collect();
    c.run_typed(&feed).unwrap().iter().map(|t| t.to_f64_vec()).collect()
}

const WRT: [&str; 5] = ["h0", "w", "u", "b", "xs"];

#[test]
fn scan_matches_the_unrolled_loop_with_any_checkpoints() {
    let one = vec![("d_output".to_string(), HostTensor::from_f64_as(DType::F64, &[], &[1.0]).unwrap())];
    for (len, checkpoints) in [(4usize, vec![2usize, 1, 4]), (7, vec![3, 1, 2, 7]), (1, vec![1])] {
        let v = values(len, &mut Rng::new(len as u64));
        let want = run(&grad_with_loss(&rnn_loss(len, None, true), &WRT).unwrap(), &v, &one);
        let mut first: Option<Vec<Vec<f64>>> = None;
        for k in checkpoints {
            let got = run(&grad_with_loss(&rnn_loss(len, Some(k), false), &WRT).unwrap(), &v, &one);
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert_close(a, b, 1e-12, &format!("len {len} checkpoints {k} output {i}"));
            }
            // Checkpoints change memory, never a bit of the results.
            match &first {
                None => first = Some(got),
                Some(f) => assert!(
                    f.iter().flatten().zip(got.iter().flatten()).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "len {len}: checkpoints {k} changed the bits"
                ),
            }
        }
    }
}

#[test]
fn scan_gradient_matches_finite_differences() {
    let len = 5;
    let f = rnn_loss(len, Some(2), false);
    let v = values(len, &mut Rng::new(9));
    let one = vec![("d_output".to_string(), HostTensor::from_f64_as(DType::F64, &[], &[1.0]).unwrap())];
    let got = run(&grad_with_loss(&f, &["w", "xs"]).unwrap(), &v, &one);
    let loss = |v: &Values| run(&f, v, &[])[0][0];
    let h = 1e-6;
    for (k, name) in ["w", "xs"].iter().enumerate() {
        let base = v.params.iter().chain(&v.feed).find(|(n, _)| n == name).unwrap().1.clone();
        let fd: Vec<f64> = (0..base.len())
            .map(|j| {
                let shifted = |d: f64| {
                    let mut w = Values { feed: v.feed.clone(), params: v.params.clone() };
                    for (n, t) in w.params.iter_mut().chain(w.feed.iter_mut()) {
                        if n == name {
                            *t = nudged(&base, j, d);
                        }
                    }
                    loss(&w)
                };
                (shifted(h) - shifted(-h)) / (2.0 * h)
            })
            .collect();
        assert_close(&got[1 + k], &fd, 1e-6, &format!("d loss / d {name}"));
    }
}

#[test]
fn hvp_through_a_checkpointed_scan() {
    let len = 4;
    let v = values(len, &mut Rng::new(21));
    let mut rng = Rng::new(22);
    let tangents: Vec<(String, HostTensor)> = v
        .feed
        .iter()
        .chain(&v.params)
        .map(|(n, t)| {
            let d: Vec<f64> = (0..t.len()).map(|_| rng.uniform(-1.0, 1.0)).collect();
            (format!("tangent_{n}"), HostTensor::from_f64_as(DType::F64, t.dims(), &d).unwrap())
        })
        .collect();
    let want = run(&hvp(&rnn_loss(len, None, true), &WRT).unwrap(), &v, &tangents);
    for k in [1, 2, 4] {
        let got = run(&hvp(&rnn_loss(len, Some(k), false), &WRT).unwrap(), &v, &tangents);
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_close(a, b, 1e-11, &format!("checkpoints {k} output {i}"));
        }
    }
}

#[test]
fn scan_graphs_round_trip_through_json() {
    let g = grad_with_loss(&rnn_loss(3, Some(2), false), &WRT).unwrap();
    let back = Graph::from_json(&g.to_json().unwrap()).unwrap();
    assert_eq!(back, g);
}

#[test]
fn bad_scans_are_errors() {
    let mut g = Graph::new("bad");
    let h0 = g.input("h0", DType::F64, &[1, H]).unwrap();
    let w = g.input("w", DType::F64, &[H, H]).unwrap();
    let u = g.input("u", DType::F64, &[X, H]).unwrap();
    let b = g.input("b", DType::F64, &[H]).unwrap();
    let xs = g.input("xs", DType::F64, &[3, 1, X]).unwrap();
    let e = g.scan(&body(), h0, &[w, u, b], &[xs], Some(4)).unwrap_err();
    assert!(e.message().contains("checkpoints 4") && e.message().contains("1..=3"), "{e}");
    let e = g.scan(&body(), h0, &[w, u], &[xs], None).unwrap_err();
    assert!(e.message().contains("inputs"), "{e}");
    let short = g.input("short", DType::F64, &[3, 1, 1]).unwrap();
    let e = g.scan(&body(), h0, &[w, u, b], &[short], None).unwrap_err();
    assert!(e.message().contains("f64[3,1,1]") && e.message().contains("f64[3,1,2]"), "{e}");
    let mut wrong = body();
    let out = wrong.outputs()[0];
    let r = wrong.reshape(out, &[H, 1]).unwrap();
    wrong.set_outputs(&[r]).unwrap();
    let e = g.scan(&wrong, h0, &[w, u, b], &[xs], None).unwrap_err();
    assert!(e.message().contains("output 0"), "{e}");
}
