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

#[test]
fn unimplemented_precision_policies_are_refused_not_ignored() {
    let mut g = Graph::new("p");
    let x = g.input("x", DType::F32, &[1]).unwrap();
    g.set_outputs(&[x]).unwrap();
    let s = Session::new(Device::Cpu).unwrap();
    let e =
        s.compile_with(&g, &CompileOptions::default().with_precision(PrecisionPolicy::AutoMixedBf16)).err().unwrap();
    assert!(e.message().contains("AutoMixedBf16"), "{e}");
    assert!(s.compile_with(&g, &CompileOptions::default().with_fusion(false)).is_ok());
}

#[test]
fn graph_with_no_outputs_runs_to_nothing() {
    let mut g = Graph::new("empty");
    g.input("x", DType::F32, &[2]).unwrap();
    let mut c = compile(&g);
    assert!(c.run(&[("x", &[1.0, 2.0])]).unwrap().is_empty());
}
