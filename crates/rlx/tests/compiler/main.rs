//! The compiler: every corpus case runs fused and unfused, with and without buffer reuse,
//! and agrees; fusion decisions are the intended ones; random graphs plan safely.

mod planner;
mod region_reduce;

use rlx::compile::{Kernel, Target, compile};
use rlx::prelude::*;
use rlx_corpus::Case;

/// Runs `case` compiled with `options`; outputs in order.
pub fn run(case: &Case, options: &CompileOptions) -> Vec<HostTensor> {
    let s = Session::new(Device::Cpu).unwrap();
    let mut c = s.compile_with(&case.graph, options).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    for (name, t) in &case.params {
        c.set_param_typed(name, t).unwrap();
    }
    let feed: Vec<(&str, &HostTensor)> = case.inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    c.run_typed(&feed).unwrap_or_else(|e| panic!("{}: {e}", case.name))
}

fn options(fusion: bool, reuse: bool) -> CompileOptions {
    CompileOptions::default().with_fusion(fusion).with_memory_reuse(reuse)
}

/// Tolerance for comparing two runs of one output: `depth` roundings of the compute type
/// on the output's magnitude, plus the final rounding for f16/bf16.
fn tolerance(dtype: DType, depth: usize, scale: f64, value: f64) -> f64 {
    let u = if dtype == DType::F64 { 2f64.powi(-53) } else { 2f64.powi(-24) };
    let store = if dtype.is_half() { 2.0 * dtype.unit_roundoff() * value.abs() } else { 0.0 };
    4.0 * depth as f64 * u * (scale + value.abs()) + store
}

#[test]
fn corpus_agrees_fused_unfused_with_and_without_reuse() {
    for case in rlx_corpus::cases().unwrap() {
        let baseline = run(&case, &options(false, false));
        let unfused_reuse = run(&case, &options(false, true));
        assert_eq!(baseline, unfused_reuse, "{}: the memory plan changed results", case.name);
        let fused = run(&case, &options(true, false));
        let fused_reuse = run(&case, &options(true, true));
        assert_eq!(fused, fused_reuse, "{}: the memory plan changed fused results", case.name);
        for (k, (a, b)) in fused.iter().zip(&baseline).enumerate() {
            assert_eq!((a.dtype(), a.dims()), (b.dtype(), b.dims()), "{} output {k}", case.name);
            let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
            let scale = (bv.iter().map(|v| v * v).sum::<f64>() / bv.len().max(1) as f64).sqrt();
            for (i, (&x, &y)) in av.iter().zip(&bv).enumerate() {
                let ok =
                    x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= tolerance(a.dtype(), case.depth, scale, y);
                assert!(ok, "{} output {k}[{i}]: fused {x:e} vs unfused {y:e}", case.name);
            }
        }
    }
}

/// Kernels of the fused schedule of a corpus case.
fn fused_kernels(name: &str) -> Vec<Kernel> {
    let case = rlx_corpus::cases().unwrap().into_iter().find(|c| c.name == name).unwrap();
    let c = compile(&case.graph, &Target::CPU, &options(true, true)).unwrap();
    c.schedule.steps.iter().map(|s| s.kernel.clone()).collect()
}

fn regions(kernels: &[Kernel]) -> Vec<usize> {
    kernels
        .iter()
        .filter_map(|k| match k {
            Kernel::Region(r) => {
                Some(r.ops.iter().filter(|(op, _)| !matches!(op, rlx::compile::RegionOp::Load(_))).count())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn long_chains_split_at_the_resolved_limit() {
    let limit = rlx::compile::resolve_fusion_limits(&Target::CPU, &CompileOptions::default()).max_ops;
    assert_eq!(limit, 32);
    assert_eq!(regions(&fused_kernels("chain_1")), Vec::<usize>::new());
    assert_eq!(regions(&fused_kernels("chain_31")), vec![31]);
    assert_eq!(regions(&fused_kernels("chain_32")), vec![32]);
    // 33 = 32 + a lone op that stays a plain step.
    assert_eq!(regions(&fused_kernels("chain_33")), vec![32]);
    assert_eq!(fused_kernels("chain_33").len(), 2);
    let long = regions(&fused_kernels("chain_200"));
    assert_eq!(long.iter().sum::<usize>(), 200);
    assert!(long.iter().all(|&n| n <= 32), "{long:?}");
    // Fusion off: no regions at all.
    let case = rlx_corpus::chain(33).unwrap();
    let off = compile(&case.graph, &Target::CPU, &options(false, true)).unwrap();
    assert!(off.schedule.steps.iter().all(|s| matches!(s.kernel, Kernel::Op(_))));
}

#[test]
fn pattern_fusions_fire_where_legal() {
    let mlp = fused_kernels("mlp");
    assert!(mlp.iter().any(|k| matches!(k, Kernel::MatMulBias { act: Some(Unary::Gelu) })), "{mlp:?}");
    assert!(mlp.iter().any(|k| matches!(k, Kernel::MatMulBias { act: Some(Unary::Relu) })));
    let ffn = fused_kernels("swiglu_ffn");
    assert!(ffn.iter().any(|k| matches!(k, Kernel::SwiGluMatMul)), "{ffn:?}");
    let l2 = fused_kernels("l2_norm");
    assert!(l2.iter().any(|k| matches!(k, Kernel::L2Norm { emit_denom: true, .. })), "{l2:?}");
    // silu(z) and the residual sum are read after their windows: emitted, not dropped.
    let after = fused_kernels("producer_read_after_window");
    assert!(after.iter().any(|k| matches!(k, Kernel::RmsNormMulSilu { emit_silu: true, .. })), "{after:?}");
    assert!(after.iter().any(|k| matches!(k, Kernel::AddNorm { emit_sum: true, .. })), "{after:?}");
    // A reshape after the norm is folded, keeping the reshape's rank for the gather.
    let folded = fused_kernels("rms_norm_reshape_gather");
    assert!(!folded.iter().any(|k| matches!(k, Kernel::Op(Op::Reshape { .. }))), "{folded:?}");
    // Transposes of the last two axes are read through strides, not copied.
    let tm = fused_kernels("transposed_matmuls");
    let flags: Vec<(bool, bool)> = tm
        .iter()
        .filter_map(|k| match k {
            Kernel::MatMulT { ta, tb } => Some((*ta, *tb)),
            _ => None,
        })
        .collect();
    assert_eq!(flags, vec![(false, true), (true, false), (true, true)], "{tm:?}");
    assert!(!tm.iter().any(|k| matches!(k, Kernel::Op(Op::Transpose { .. }))));
    // The block fuses its FFN and its norms.
    let block = fused_kernels("transformer_block");
    assert!(block.iter().any(|k| matches!(k, Kernel::SwiGluMatMul)), "{block:?}");
}

#[test]
fn graph_outputs_and_outside_readers_are_never_absorbed() {
    let case = rlx_corpus::cases().unwrap().into_iter().find(|c| c.name == "chain_output_intermediate").unwrap();
    let c = compile(&case.graph, &Target::CPU, &options(true, true)).unwrap();
    // The output `b` (sqrt) must still be written by some step.
    let b = c.schedule.outputs[1];
    assert!(c.schedule.steps.iter().any(|s| s.outputs.contains(&b)));
    assert!(c.log.notes.iter().any(|l| l.contains("graph output")), "{:?}", c.log.notes);
    // The diamond: both readers of tanh(x) are inside one region.
    assert_eq!(regions(&fused_kernels("two_readers_in_window")), vec![4]);
}

#[test]
fn fusion_log_reports_anchors_and_declines() {
    let case = rlx_corpus::cases().unwrap().into_iter().find(|c| c.name == "transformer_block").unwrap();
    let c = compile(&case.graph, &Target::CPU, &options(true, true)).unwrap();
    let log = c.log.notes.join("\n");
    assert!(log.contains("anchor step"), "{log}");
    assert!(log.contains("swiglu: anchor"), "{log}");
    assert!(log.contains("add_norm: anchor"), "{log}");
}

#[test]
fn reuse_and_views_shrink_the_arena() {
    let cfg = rlx_corpus::TransformerConfig::tiny();
    let g = rlx_corpus::transformer_stack(&cfg, 4).unwrap();
    let with = compile(&g, &Target::CPU, &options(true, true)).unwrap();
    let without = compile(&g, &Target::CPU, &options(true, false)).unwrap();
    assert!(
        with.plan.arena_bytes < without.plan.arena_bytes,
        "{} vs {}",
        with.plan.arena_bytes,
        without.plan.arena_bytes
    );
    assert!(with.plan.views.iter().any(|&v| v), "reshapes run as views");
    assert_eq!(without.plan.arena_bytes, without.plan.unshared_bytes);
    let budget = with.budget();
    assert_eq!(budget.arena_bytes, with.plan.arena_bytes);
    assert_eq!(budget.reuse_saved_bytes, with.plan.unshared_bytes - with.plan.arena_bytes);
}

/// The low-precision family under every policy against its f64 twin (the same graph with
/// every float in f64, fed the same half values): within `rlx_corpus::tolerance`, from
/// the narrowest format's unit roundoff (the graph's or the policy's), the graph's
/// `error_depth` and the largest magnitude any value of the twin reaches. Outputs keep
/// their declared dtypes.
#[test]
fn low_precision_family_tracks_its_f64_twin() {
    for case in rlx_corpus::low_precision_cases().unwrap() {
        let widen = |ts: &[(String, HostTensor)]| -> Vec<(String, HostTensor)> {
            ts.iter()
                .map(|(n, t)| {
                    let w = if t.dtype().is_float() {
                        HostTensor::from_f64_as(DType::F64, t.dims(), &t.to_f64_vec()).unwrap()
                    } else {
                        t.clone()
                    };
                    (n.clone(), w)
                })
                .collect()
        };
        let twin = rlx_corpus::retyped(&case.graph, DType::F64).unwrap();
        let everything = rlx_corpus::every_value_as_output(&twin).unwrap();
        let reference = Case { graph: twin, inputs: widen(&case.inputs), params: widen(&case.params), ..case.clone() };
        let want = run(&reference, &CompileOptions::default());
        let magnitude = run(&Case { graph: everything, ..reference.clone() }, &CompileOptions::default())
            .iter()
            .flat_map(HostTensor::to_f64_vec)
            .filter(|v| v.is_finite())
            .fold(0f64, |m, v| m.max(v.abs()));
        let depth = rlx_corpus::error_depth(&case.graph);
        for policy in [PrecisionPolicy::F32, PrecisionPolicy::AutoMixedBf16, PrecisionPolicy::AutoMixedF16] {
            let u =
                policy.half().map_or(0.0, DType::unit_roundoff).max(rlx_corpus::narrowest_unit_roundoff(&case.graph));
            let tol = rlx_corpus::tolerance(u, depth, magnitude);
            let got = run(&case, &CompileOptions::default().with_precision(policy));
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.dtype(), case.graph.dtype(case.graph.outputs()[k]), "{} {policy:?} output {k}", case.name);
                let err = g.to_f64_vec().iter().zip(w.to_f64_vec()).fold(0f64, |m, (a, b)| m.max((a - b).abs()));
                assert!(err <= tol, "{} {policy:?} output {k}: error {err:.3e} > {tol:.3e}", case.name);
            }
        }
    }
}
