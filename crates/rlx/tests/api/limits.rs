//! Sizes and counts from documents and users: checked arithmetic and the memory budget
//! turn what used to wrap, panic or abort into one error naming the culprit.

use rlx::prelude::*;

/// A scan whose `n_bcast` is 2^64 - 1 passed the loader (the arity sum wrapped to
/// `n_carry`) and panicked in the CPU kernel; now its arity refuses it.
#[test]
fn a_scan_with_a_huge_bcast_count_is_refused_when_loaded() {
    let mut body = Graph::new("body");
    let c = body.input("c", DType::F32, &[2]).unwrap();
    let x = body.input("x", DType::F32, &[2]).unwrap();
    let y = body.add(c, x).unwrap();
    body.set_outputs(&[y]).unwrap();
    let mut g = Graph::new("loop");
    let init = g.input("init", DType::F32, &[2]).unwrap();
    let xs = g.input("xs", DType::F32, &[5, 2]).unwrap();
    let out = g.scan(&body, init, &[], &[xs], None).unwrap();
    g.set_outputs(&[out]).unwrap();
    let doc = g.to_json().unwrap();
    assert!(Graph::from_json(&doc).is_ok(), "the valid document loads");
    assert!(doc.contains("\"n_bcast\": 0"), "test bug: the document's field moved: {doc}");
    for huge in [u64::MAX, u64::MAX - 1, 1 << 63] {
        let bad = doc.replace("\"n_bcast\": 0", &format!("\"n_bcast\": {huge}"));
        let e = Graph::from_json(&bad).expect_err("a wrapped arity must not load");
        let msg = e.to_string();
        assert!(msg.contains("scan takes at least") && msg.contains("operands, got 2"), "{huge}: {msg}");
    }
}

/// Five f32[2^60] inputs live at once need 5 x 2^62 bytes: the planner's sum used to
/// wrap (and `rlx check` printed a wrapped arena size); now the plan is refused, naming
/// a tensor.
#[test]
fn a_plan_past_the_address_space_is_an_error() {
    let mut g = Graph::new("huge");
    let n = 1usize << 60;
    let xs: Vec<NodeId> = (0..5).map(|i| g.input(&format!("x{i}"), DType::F32, &[n]).unwrap()).collect();
    let mut s = xs[0];
    for &x in &xs[1..] {
        s = g.add(s, x).unwrap();
    }
    g.set_outputs(&[s]).unwrap();
    let e = Session::new(Device::Cpu).unwrap().compile_with(&g, &CompileOptions::default()).err().expect("refused");
    assert!(e.to_string().contains("overflows the address space at"), "{e}");
}

/// A plan above the memory limit is refused at compile with the bytes and the largest
/// tensor named, before anything is allocated: a 3e8-element output aborted the process
/// under a 4 GiB limit.
#[test]
fn a_plan_above_the_memory_limit_is_refused_at_compile() {
    let mut g = Graph::new("big");
    let x = g.input("x", DType::F32, &[300_000_000]).unwrap();
    let y = g.unary(Unary::Exp, x).unwrap();
    g.set_outputs(&[y]).unwrap();
    let options = CompileOptions { memory_limit: Some(1 << 30), ..CompileOptions::default() };
    let e = Session::new(Device::Cpu).unwrap().compile_with(&g, &options).err().expect("refused");
    let msg = e.to_string();
    assert!(msg.contains("over the 1073741824 bytes available"), "{msg}");
    assert!(msg.contains("f32[300000000]") && msg.contains("(1200000000 bytes)"), "{msg}");
    // Without an explicit limit the machine's own is used (where it can be read): 2^50
    // bytes fit nowhere.
    assert!(cfg!(not(target_os = "linux")) || rlx::runtime::memory::available_bytes().is_some());
    let mut g = Graph::new("bigger");
    let x = g.input("x", DType::F32, &[1 << 48]).unwrap();
    let y = g.unary(Unary::Neg, x).unwrap();
    g.set_outputs(&[y]).unwrap();
    if rlx::runtime::memory::available_bytes().is_some() {
        let e = Session::new(Device::Cpu).unwrap().compile_with(&g, &CompileOptions::default()).err().expect("refused");
        assert!(e.to_string().contains("bytes available"), "{e}");
    }
    // The same graphs compile under a limit that holds them.
    let options = CompileOptions { memory_limit: Some(u64::MAX), ..CompileOptions::default() };
    let mut small = Graph::new("small");
    let x = small.input("x", DType::F32, &[3]).unwrap();
    let y = small.unary(Unary::Neg, x).unwrap();
    small.set_outputs(&[y]).unwrap();
    assert!(Session::new(Device::Cpu).unwrap().compile_with(&small, &options).is_ok());
}

#[test]
fn memory_limits_parse_with_units() {
    use rlx::compile::parse_bytes;
    assert_eq!(parse_bytes("4G").unwrap(), 4 << 30);
    assert_eq!(parse_bytes("512MiB").unwrap(), 512 << 20);
    assert_eq!(parse_bytes(" 1000 ").unwrap(), 1000);
    assert_eq!(parse_bytes("3kb").unwrap(), 3 << 10);
    for bad in ["", "G", "-1", "4X", "99999999999T"] {
        let e = parse_bytes(bad).expect_err(bad);
        assert!(e.to_string().contains("is not a byte count"), "{bad}: {e}");
    }
}

/// A zero-element tensor whose other dims multiply past usize (`f32[0,2,3,2^64-1]`)
/// passed the byte check and overflowed the attention kernel's strides (graph_run
/// fuzzer); the product of the nonzero dims must fit, as in NumPy.
#[test]
fn empty_tensors_with_overflowing_dims_are_refused() {
    let mut g = Graph::new("empty");
    let e = g.input("q", DType::F32, &[0, 2, 3, usize::MAX]).expect_err("refused");
    assert!(e.to_string().contains("shape [0,2,3,18446744073709551615] of f32 overflows usize"), "{e}");
    let e = g.input("r", DType::F32, &[0, 1 << 62]).expect_err("4 bytes x 2^62 overflows");
    assert!(e.to_string().contains("overflows usize"), "{e}");
    // Zero-element tensors whose nonzero dims fit stay valid.
    let x = g.input("x", DType::F32, &[0, 1 << 40]).unwrap();
    let y = g.unary(Unary::Neg, x).unwrap();
    g.set_outputs(&[y]).unwrap();
    let mut c = Session::new(Device::Cpu).unwrap().compile_with(&g, &CompileOptions::default()).unwrap();
    let out = c.run(&[("x", &[])]).unwrap();
    assert!(out[0].is_empty());
}

/// A norm's eps is checked by its shape rule, so `Graph::push` (and so importers and
/// transforms) cannot build a NaN or negative eps the builders refuse.
#[test]
fn norm_eps_is_checked_by_the_shape_rule() {
    use rlx::ir::{F32Attr, Op};
    let mut g = Graph::new("norm");
    let x = g.input("x", DType::F32, &[2, 3]).unwrap();
    for eps in [f32::NAN, f32::INFINITY, -1.0] {
        for op in [
            Op::RmsNorm { eps: F32Attr(eps), gamma: false },
            Op::LayerNorm { eps: F32Attr(eps), gamma: false, beta: false },
        ] {
            let e = g.push(op, &[x]).expect_err("refused");
            assert!(e.to_string().contains("eps"), "{eps}: {e}");
        }
    }
}
