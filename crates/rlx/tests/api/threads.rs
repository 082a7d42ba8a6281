use rlx::prelude::*;

/// A graph that takes every parallel path: a large GEMM (split by tiles), a batch of
/// small GEMMs (split by batch), big elementwise ops, softmax / layer-norm rows,
/// attention heads and conv planes.
fn parallel_graph() -> Graph {
    let mut g = Graph::new("threads");
    let x = g.input("x", DType::F32, &[256, 256]).unwrap();
    let w = g.param("w", DType::F32, &[256, 256]).unwrap();
    let h = g.matmul(x, w).unwrap();
    let h = g.unary(Unary::Gelu, h).unwrap();
    let h2 = g.mul(h, x).unwrap();
    let s = g.softmax(h2, 1).unwrap();
    let ln = g.layer_norm(h, None, None, 1e-5).unwrap();
    let small = g.reshape(ln, &[64, 32, 32]).unwrap();
    let bm = g.matmul(small, small).unwrap();
    let q = g.reshape(h, &[2, 8, 64, 64]).unwrap();
    let at = g.attention(q, q, q, AttentionMask::Causal, None).unwrap();
    let img = g.reshape(s, &[4, 4, 64, 64]).unwrap();
    let k = g.reshape(w, &[16, 4, 32, 32]).unwrap();
    let k = g.narrow(k, 2, 0, 3).unwrap();
    let k = g.narrow(k, 3, 0, 3).unwrap();
    let cv = g.conv2d(img, k, None, Conv2dParams::default().with_padding(1)).unwrap();
    let total = g.reduce(ReduceOp::Sum, cv, &[2, 3], false).unwrap();
    g.set_outputs(&[s, bm, at, cv, total]).unwrap();
    g
}

#[test]
fn results_are_bit_identical_for_1_2_and_3_threads() {
    let g = parallel_graph();
    let x: Vec<f32> = (0..256 * 256).map(|i| ((i as f32) * 0.013).sin()).collect();
    let w: Vec<f32> = (0..256 * 256).map(|i| ((i as f32) * 0.007).cos() * 0.1).collect();
    let run = |threads: usize| {
        let s = Session::new(Device::Cpu).unwrap();
        let mut c = s.compile_with(&g, &CompileOptions::default().with_threads(threads)).unwrap();
        c.set_param("w", &w).unwrap();
        c.run_typed(&[("x", &HostTensor::from_f32(&[256, 256], &x).unwrap())]).unwrap()
    };
    let one = run(1);
    for threads in [2, 3] {
        let other = run(threads);
        for (i, (a, b)) in one.iter().zip(&other).enumerate() {
            assert!(a.bytes() == b.bytes(), "output {i} differs between 1 and {threads} threads");
        }
    }
}
