//! Transforms compose (grad of grad, third order, jvp of grad = hvp), leaves that do not
//! reach the loss get typed zeros, and misuse is an error naming the culprit.

use super::*;

fn scalar_input(v: f64) -> HostTensor {
    HostTensor::from_f64_as(DType::F64, &[], &[v]).unwrap()
}

/// A function of one f64 computed by hand.
type Analytic = fn(f64) -> f64;

/// f(x) = x^3 sin(x), and its first three derivatives by hand.
fn cubic_sine() -> (Graph, [Analytic; 3]) {
    let mut g = Graph::new("f");
    let x = g.input("x", DType::F64, &[]).unwrap();
    let x2 = g.mul(x, x).unwrap();
    let x3 = g.mul(x2, x).unwrap();
    let s = g.unary(Unary::Sin, x).unwrap();
    let y = g.mul(x3, s).unwrap();
    g.set_outputs(&[y]).unwrap();
    let d1 = |x: f64| 3.0 * x * x * x.sin() + x.powi(3) * x.cos();
    let d2 = |x: f64| 6.0 * x * x.sin() + 6.0 * x * x * x.cos() - x.powi(3) * x.sin();
    let d3 = |x: f64| 6.0 * x.sin() + 18.0 * x * x.cos() - 9.0 * x * x * x.sin() - x.powi(3) * x.cos();
    (g, [d1, d2, d3])
}

#[test]
fn grad_of_grad_of_grad() {
    let (f, d) = cubic_sine();
    let g1 = grad(&f, &["x"]).unwrap();
    let g2 = grad(&g1, &["x"]).unwrap();
    let g3 = grad(&g2, &["x"]).unwrap();
    // Each level adds a seed input: d_output, d_output_2, d_output_3.
    for (k, g) in [&g1, &g2, &g3].into_iter().enumerate() {
        let mut feed = vec![("x".to_string(), scalar_input(0.7))];
        for level in 0..=k {
            let name = if level == 0 { "d_output".to_string() } else { format!("d_output_{}", level + 1) };
            feed.push((name, scalar_input(1.0)));
        }
        let got = Runner::new(g).run(&feed)[0][0];
        assert_close(&[got], &[d[k](0.7)], 1e-12, &format!("derivative {}", k + 1));
    }
}

#[test]
fn jvp_of_grad_is_hvp() {
    // A small MLP loss of x and w.
    let mut f = Graph::new("mlp");
    let x = f.input("x", DType::F64, &[3, 4]).unwrap();
    let w = f.param("w", DType::F64, &[4, 2]).unwrap();
    let h = f.matmul(x, w).unwrap();
    let h = f.unary(Unary::Tanh, h).unwrap();
    let s = f.log_softmax(h, 1).unwrap();
    let l = f.reduce(ReduceOp::Mean, s, &[0, 1], false).unwrap();
    f.set_outputs(&[l]).unwrap();
    let mut rng = Rng::new(4);
    let vals = |rng: &mut Rng, dims: &[usize]| {
        let v: Vec<f64> = (0..dims.iter().product()).map(|_| rng.uniform(-1.0, 1.0)).collect();
        HostTensor::from_f64_as(DType::F64, dims, &v).unwrap()
    };
    let (xv, wv, tx, tw) =
        (vals(&mut rng, &[3, 4]), vals(&mut rng, &[4, 2]), vals(&mut rng, &[3, 4]), vals(&mut rng, &[4, 2]));
    let feed = |extra: Vec<(&str, &HostTensor)>| {
        let mut v: Vec<(String, HostTensor)> = vec![("x".into(), xv.clone()), ("w".into(), wv.clone())];
        v.extend(extra.into_iter().map(|(n, t)| (n.to_string(), t.clone())));
        v
    };
    let jg = jvp(&grad(&f, &["x", "w"]).unwrap(), &["x", "w"]).unwrap();
    let one = scalar_input(1.0);
    let mut c = Session::new(Device::Cpu).unwrap().compile(&jg).unwrap();
    c.set_param_typed("w", &wv).unwrap();
    let inputs = feed(vec![("d_output", &one), ("tangent_x", &tx), ("tangent_w", &tw)]);
    let refs: Vec<(&str, &HostTensor)> =
        inputs.iter().filter(|(n, _)| n != "w").map(|(n, t)| (n.as_str(), t)).collect();
    let a: Vec<Vec<f64>> = c.run_typed(&refs).unwrap().iter().map(|t| t.to_f64_vec()).collect();
    let hg = hvp(&f, &["x", "w"]).unwrap();
    let mut c = Session::new(Device::Cpu).unwrap().compile(&hg).unwrap();
    c.set_param_typed("w", &wv).unwrap();
    let inputs = feed(vec![("tangent_x", &tx), ("tangent_w", &tw)]);
    let refs: Vec<(&str, &HostTensor)> =
        inputs.iter().filter(|(n, _)| n != "w").map(|(n, t)| (n.as_str(), t)).collect();
    let b: Vec<Vec<f64>> = c.run_typed(&refs).unwrap().iter().map(|t| t.to_f64_vec()).collect();
    // jvp(grad): [gx, gw, tangent gx, tangent gw]; hvp: [loss, gx, gw, Hv_x, Hv_w].
    assert_close(&a[2], &b[3], 1e-12, "H v (x)");
    assert_close(&a[3], &b[4], 1e-12, "H v (w)");
    assert_close(&a[0], &b[1], 1e-12, "gradient (x)");
}

#[test]
fn unreached_leaves_get_zeros_of_their_own_type() {
    let mut f = Graph::new("partial");
    let x = f.input("x", DType::F32, &[2]).unwrap();
    let _lonely = f.param("lonely_bf16", DType::BF16, &[3, 5]).unwrap();
    let _wide = f.param("wide_f64", DType::F64, &[2, 2]).unwrap();
    let _count = f.input("count", DType::I32, &[4]).unwrap();
    let s = f.reduce(ReduceOp::Sum, x, &[0], false).unwrap();
    f.set_outputs(&[s]).unwrap();
    let g = grad_with_loss(&f, &["x", "lonely_bf16", "wide_f64", "count"]).unwrap();
    // Every constant of the backward graph holds exactly numel * size bytes.
    for (id, node) in g.nodes() {
        if let Op::Constant { value } = node.op() {
            let want = node.dims().iter().product::<usize>() * node.dtype().size_bytes();
            assert_eq!(value.bytes().len(), want, "{}", g.describe(id));
            assert_eq!(value.dims(), node.dims());
        }
    }
    let types: Vec<(DType, Vec<usize>)> = g.outputs().iter().map(|&o| (g.dtype(o), g.dims(o).to_vec())).collect();
    assert_eq!(
        types,
        [
            (DType::F32, vec![]),
            (DType::F32, vec![2]),
            (DType::BF16, vec![3, 5]),
            (DType::F64, vec![2, 2]),
            (DType::I32, vec![4])
        ]
    );
    let mut c = Session::new(Device::Cpu).unwrap().compile(&g).unwrap();
    c.set_param("lonely_bf16", &[1.0; 15]).unwrap();
    c.set_param("wide_f64", &[1.0; 4]).unwrap();
    let out = c.run(&[("x", &[1.0, 2.0]), ("count", &[1.0; 4]), ("d_output", &[2.0])]).unwrap();
    assert_eq!(out[0], [3.0]);
    assert_eq!(out[1], [2.0, 2.0]);
    assert!(out[2..].iter().all(|o| o.iter().all(|&v| v == 0.0)));
}

#[test]
fn misuse_is_an_error_naming_the_culprit() {
    let (f, _) = cubic_sine();
    let e = grad(&f, &["y"]).unwrap_err();
    assert!(e.message().contains("'y'") && e.message().contains("'x'"), "{e}");
    let e = grad(&f, &["x", "x"]).unwrap_err();
    assert!(e.message().contains("twice"), "{e}");
    let mut v = Graph::new("vector_loss");
    let x = v.input("x", DType::F32, &[3]).unwrap();
    let y = v.unary(Unary::Exp, x).unwrap();
    v.set_outputs(&[y]).unwrap();
    let e = grad(&v, &["x"]).unwrap_err();
    assert!(e.message().contains("scalar") && e.message().contains("f32[3]"), "{e}");
    let mut i = Graph::new("int_wrt");
    let n = i.input("n", DType::I64, &[]).unwrap();
    let c = i.cast(n, DType::F32).unwrap();
    i.set_outputs(&[c]).unwrap();
    let e = jvp(&i, &["n"]).unwrap_err();
    assert!(e.message().contains("'n'") && e.message().contains("tangent"), "{e}");
}
