//! The profiler (`rlx_cpu::profile`): what a profiled run records. One test in its own
//! binary: the table is process-wide.

use rlx_compile::CompileOptions;
use rlx_cpu::{CpuProgram, profile};
use rlx_ir::{DType, Graph, HostTensor, Unary};

#[test]
fn a_profiled_run_records_each_kernel_its_work_and_the_time_around_it() {
    let mut g = Graph::new("profiled");
    let a = g.input("a", DType::F32, &[17, 33]).unwrap();
    let b = g.param("b", DType::F32, &[33, 5]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let e = g.unary(Unary::Exp, c).unwrap();
    g.set_outputs(&[e]).unwrap();
    let mut program = CpuProgram::compile(&g, &CompileOptions::default(), 1).unwrap();
    program.set_param(0, &HostTensor::from_f32(&[33, 5], &[0.01; 165]).unwrap()).unwrap();
    let x = HostTensor::from_f32(&[17, 33], &[0.5; 17 * 33]).unwrap();

    profile::set_enabled(false);
    program.run(&[x.view()]).unwrap();
    assert!(profile::report().is_none(), "recorded while off");

    profile::set_enabled(true);
    for _ in 0..3 {
        program.run(&[x.view()]).unwrap();
    }
    profile::set_enabled(false);
    let table = profile::snapshot();
    let step = table.iter().find(|s| s.name == "profiled").expect("the graph's entry");
    assert_eq!(step.runs, 3);
    let matmul = step.nodes.iter().find(|n| n.label.starts_with("matmul")).expect("a matmul node");
    assert_eq!(matmul.calls, 3);
    assert_eq!(matmul.flops, 3.0 * 2.0 * (17 * 33 * 5) as f64);
    // Operands and result once: a, b and the product, f32.
    assert_eq!(matmul.bytes, 3.0 * 4.0 * (17 * 33 + 33 * 5 + 17 * 5) as f64);
    let kernels: std::time::Duration = step.nodes.iter().map(|n| n.time).sum();
    let parts = kernels + step.run.gaps + step.run.handoff + step.run.copies + step.run.packing;
    assert!(kernels > std::time::Duration::ZERO && parts <= step.run.wall, "{parts:?} > {:?}", step.run.wall);
    let report = profile::report().unwrap();
    assert!(report.contains("profiled: 3 runs") && report.contains("matmul") && report.contains("GFLOP/s"), "{report}");
    profile::reset();
    assert!(profile::report().is_none());
}
