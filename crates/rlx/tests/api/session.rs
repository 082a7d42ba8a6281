use crate::compile;
use rlx::prelude::*;

#[test]
fn cpu_is_available_and_fastest() {
    assert!(is_available(Device::Cpu));
    assert_eq!(fastest_device(), Device::Cpu);
    assert!(Session::new(Device::Cpu).is_ok());
}

#[test]
fn compile_once_run_many() {
    let mut g = Graph::new("scale");
    let x = g.input("x", DType::F32, &[3]).unwrap();
    let s = g.param("s", DType::F32, &[1]).unwrap();
    let y = g.mul(x, s).unwrap();
    g.set_outputs(&[y]).unwrap();
    let mut c = compile(&g);
    c.set_param("s", &[2.0]).unwrap();
    for k in 0..5 {
        let v = [k as f32, 1.0, -1.0];
        assert_eq!(c.run(&[("x", &v)]).unwrap()[0], vec![2.0 * k as f32, 2.0, -2.0]);
    }
    // A param keeps its value across runs until set again.
    c.set_param("s", &[-1.0]).unwrap();
    assert_eq!(c.run(&[("x", &[1.0, 2.0, 3.0])]).unwrap()[0], vec![-1.0, -2.0, -3.0]);
}

/// A mixed policy moves f32 compute only: an f64 graph and an explicitly bf16 op run
/// bit-identically to the f32 policy, and the signature (input and output dtypes) stays.
#[test]
fn mixed_policies_leave_f64_and_declared_half_ops_alone() {
    let mut g = Graph::new("p");
    let x = g.input("x", DType::F64, &[3, 3]).unwrap();
    let y = g.matmul(x, x).unwrap();
    let h = g.cast(y, DType::BF16).unwrap();
    let h = g.unary(Unary::Exp, h).unwrap();
    g.set_outputs(&[y, h]).unwrap();
    let s = Session::new(Device::Cpu).unwrap();
    let xs = HostTensor::from_f64_as(DType::F64, &[3, 3], &[0.1, -0.2, 0.3, 0.4, 0.5, -0.6, 0.7, 0.8, 0.9]).unwrap();
    let run = |p: PrecisionPolicy| {
        let mut c = s.compile_with(&g, &CompileOptions::default().with_precision(p)).unwrap();
        c.run_typed(&[("x", &xs)]).unwrap()
    };
    let reference = run(PrecisionPolicy::F32);
    assert_eq!((reference[0].dtype(), reference[1].dtype()), (DType::F64, DType::BF16));
    for p in [PrecisionPolicy::AutoMixedBf16, PrecisionPolicy::AutoMixedF16] {
        assert_eq!(run(p), reference, "{p:?}");
    }
}

#[test]
fn graph_with_no_outputs_runs_to_nothing() {
    let mut g = Graph::new("empty");
    g.input("x", DType::F32, &[2]).unwrap();
    let mut c = compile(&g);
    assert!(c.run(&[("x", &[1.0, 2.0])]).unwrap().is_empty());
}
