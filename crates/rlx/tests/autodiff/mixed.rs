//! Every op of the finite-difference table, in f32, compiled under each mixed precision
//! policy against the same graph under `PrecisionPolicy::F32`: the op's values and its
//! gradient (so the derivative ops run mixed too) within a tolerance derived from the
//! half format's unit roundoff and the graph's accumulation depth.

use super::ops::{Case, conv_cases, elementwise_cases, seed_of, sequence_cases, structural_cases};
use super::*;

/// `|got - want| <= rlx_corpus::tolerance(u, error_depth, M)` for each output, M the
/// largest magnitude of any value the f32 run computes (`magnitude`).
fn check_close(case: &str, what: &str, got: &[Vec<f64>], want: &[Vec<f64>], tol: f64) {
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        let err = g.iter().zip(w).fold(0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(err <= tol, "{case} {what} output {k}: error {err:.3e} > {tol:.3e}");
    }
}

/// The largest finite magnitude among every float value `g` computes under f32.
fn magnitude(g: &Graph, feed: &[(String, HostTensor)]) -> f64 {
    let all = rlx_corpus::every_value_as_output(g).unwrap();
    run(&all, PrecisionPolicy::F32, feed).iter().flatten().filter(|v| v.is_finite()).fold(0f64, |m, v| m.max(v.abs()))
}

fn run(g: &Graph, policy: PrecisionPolicy, feed: &[(String, HostTensor)]) -> Vec<Vec<f64>> {
    let options = CompileOptions::default().with_precision(policy);
    let mut c = Session::new(Device::Cpu).unwrap().compile_with(g, &options).unwrap_or_else(|e| panic!("{e}"));
    let refs: Vec<(&str, &HostTensor)> = feed.iter().map(|(n, t)| (n.as_str(), t)).collect();
    c.run_typed(&refs).unwrap_or_else(|e| panic!("{}: {e}", g.name())).iter().map(HostTensor::to_f64_vec).collect()
}

fn check(c: &Case) {
    let seed = seed_of(&c.name);
    let xs = draw_as(&mut Rng::new(seed), &c.specs, DType::F32);
    let loss = scalar_graph_as(&c.specs, &c.build, seed, DType::F32);
    // The op's own output, for the forward check.
    let mut forward = loss.clone();
    let y = forward.nodes().find(|(_, n)| matches!(n.op(), Op::Binary(BinaryOp::Mul))).map(|(_, n)| n.inputs()[0]);
    forward.set_outputs(&[y.expect("scalar_graph multiplies the op's output by W")]).unwrap();
    let wrt: Vec<String> =
        (0..c.specs.len()).filter(|&i| !matches!(c.specs[i], Spec::Int { .. })).map(|i| format!("x{i}")).collect();
    let wrt: Vec<&str> = wrt.iter().map(String::as_str).collect();
    let backward = grad(&loss, &wrt).unwrap();
    let mut grad_feed = named(&xs);
    grad_feed.push(("d_output".into(), HostTensor::from_f32(&[], &[1.0]).unwrap()));
    for (policy, half) in [(PrecisionPolicy::AutoMixedBf16, DType::BF16), (PrecisionPolicy::AutoMixedF16, DType::F16)] {
        let u = half.unit_roundoff();
        for (what, g, feed) in [("values", &forward, &named(&xs)), ("gradient", &backward, &grad_feed)] {
            let depth = rlx_corpus::error_depth(g);
            let tol = rlx_corpus::tolerance(u, depth, magnitude(g, feed));
            let what = format!("{what} under {policy:?}");
            check_close(&c.name, &what, &run(g, policy, feed), &run(g, PrecisionPolicy::F32, feed), tol);
        }
    }
}

fn cases() -> impl Iterator<Item = Case> {
    [elementwise_cases(), structural_cases(), conv_cases(), sequence_cases()]
        .into_iter()
        .flatten()
        // Built around f64 <-> f32 casts (the cast case, the quantized matmul): casts keep
        // their dtypes under every policy.
        .filter(|c| !c.name.starts_with("dequant_matmul") && c.name != "cast_through_f32")
}

#[test]
fn every_op_under_each_mixed_policy_tracks_f32() {
    cases().for_each(|c| check(&c));
}

/// The policies do move compute: a matmul and a gelu run in the half format (their
/// results are representable there), the softmax after them in f32.
#[test]
fn mixed_policies_compute_matmuls_in_half_and_softmax_in_f32() {
    let mut g = Graph::new("placement");
    let x = g.input("x", DType::F32, &[3, 5]).unwrap();
    let w = g.param("w", DType::F32, &[5, 4]).unwrap();
    let h = g.matmul(x, w).unwrap();
    let a = g.unary(Unary::Gelu, h).unwrap();
    let s = g.softmax(a, 1).unwrap();
    g.set_outputs(&[a, s]).unwrap();
    for (policy, half) in [(PrecisionPolicy::AutoMixedBf16, DType::BF16), (PrecisionPolicy::AutoMixedF16, DType::F16)] {
        let options = CompileOptions::default().with_precision(policy);
        let compiled = rlx::compile::compile(&g, &rlx::compile::Target::CPU, &options).unwrap();
        let cg = &compiled.graph;
        let dtype_of = |name: &str| {
            cg.nodes().filter(|(_, n)| n.op().name() == name).map(|(id, _)| cg.dtype(id)).collect::<Vec<_>>()
        };
        assert_eq!(dtype_of("matmul"), [half], "{policy:?}");
        assert_eq!(dtype_of("gelu"), [half], "{policy:?}");
        assert_eq!(dtype_of("softmax"), [DType::F32], "{policy:?}");
        // x and w cast once each, gelu's result once to f32 (shared by softmax and the
        // output).
        assert_eq!(compiled.log.inserted_casts, 3, "{policy:?}");
        assert_eq!(cg.outputs().iter().map(|&o| cg.dtype(o)).collect::<Vec<_>>(), [DType::F32, DType::F32]);
        let mut c = Session::new(Device::Cpu).unwrap().compile_with(&g, &options).unwrap();
        let ws: Vec<f32> = (0..20).map(|i| (i as f32 * 0.37).sin()).collect();
        c.set_param("w", &ws).unwrap();
        let xs: Vec<f32> = (0..15).map(|i| (i as f32 * 0.61).cos()).collect();
        let out = c.run(&[("x", &xs)]).unwrap();
        assert!(out[0].iter().all(|&v| rlx::ir::round_f32_to_dtype(v, half) == v), "{policy:?}: gelu not in {half}");
    }
}
