//! GPU kernels the op suite does not reach, each against the CPU: matmuls over odd and
//! tiled sizes and broadcast batches, quantized matmuls in every GPU scheme with and
//! without q8 activations, zero-element tensors, rotary embeddings at large positions,
//! and a KV cache shared on the device by two programs.

use crate::{compare, gpu_or_skip, magnitude, run_on};
use rlx::prelude::*;
use rlx_corpus::Case;

fn check(case: &Case) {
    let options = CompileOptions::default();
    let fallbacks = rlx::runtime::gpu::host_fallbacks(&case.graph, &options).unwrap();
    assert!(fallbacks.is_empty(), "{}: {fallbacks:?}", case.name);
    let cpu = run_on(Device::Cpu, case, &options).unwrap();
    let gpu = run_on(Device::Gpu, case, &options).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    compare(case, &cpu, &gpu, (f32::EPSILON as f64 / 2.0, magnitude(case))).unwrap();
}

#[test]
fn matmuls_of_odd_and_tiled_sizes() {
    if !gpu_or_skip("matmuls_of_odd_and_tiled_sizes") {
        return;
    }
    for (batch_a, batch_b, m, k, n) in [
        (vec![], vec![], 1, 1, 1),
        (vec![], vec![], 3, 17, 5),
        (vec![], vec![], 64, 64, 64),
        (vec![], vec![], 65, 130, 129),
        (vec![2, 3], vec![3], 17, 33, 1),
        (vec![1, 4], vec![2, 1], 7, 16, 70),
        (vec![], vec![], 1, 1000, 3),
    ] {
        let mut g = Graph::new("matmul");
        let a = g.input("a", DType::F32, &[batch_a.clone(), vec![m, k]].concat()).unwrap();
        let b = g.input("b", DType::F32, &[batch_b.clone(), vec![k, n]].concat()).unwrap();
        let y = g.matmul(a, b).unwrap();
        g.set_outputs(&[y]).unwrap();
        check(&Case::new(&format!("matmul {batch_a:?}x{m}x{k} @ {batch_b:?}x{k}x{n}"), g, k, 7, -1.0, 1.0, 1).unwrap());
    }
}

#[test]
fn quantized_matmuls_in_every_gpu_scheme() {
    if !gpu_or_skip("quantized_matmuls_in_every_gpu_scheme") {
        return;
    }
    for scheme in [QuantScheme::Q4_0, QuantScheme::Q4_1, QuantScheme::Q8_0] {
        for act in [ActivationQuant::F32, ActivationQuant::Q8, ActivationQuant::Q16] {
            for (m, k, n) in [(1, 32, 1), (3, 64, 17), (5, 256, 33), (19, 288, 70), (9, 32, 65)] {
                let mut rng = rlx_oracle::Rng::new(k as u64 + n as u64);
                let w: Vec<f32> = (0..n * k).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
                let bytes = rlx::ir::quant::quantize(scheme, &w).unwrap();
                let row = scheme.row_bytes(k).unwrap();
                let mut g = Graph::new("qmm");
                let x = g.input("x", DType::F32, &[m, k]).unwrap();
                let wq = g.param("w", DType::U8, &[n, row]).unwrap();
                let y = g.dequant_matmul(x, wq, scheme, act).unwrap();
                let d = g.dequantize(wq, scheme).unwrap();
                g.set_outputs(&[y, d]).unwrap();
                let name = format!("{} {act:?} {m}x{k}x{n}", scheme.name());
                let mut case = Case::new(&name, g, k, 9, -1.0, 1.0, 1).unwrap();
                case.params = vec![("w".into(), HostTensor::from_bytes(DType::U8, &[n, row], bytes).unwrap())];
                check(&case);
            }
        }
    }
}

#[test]
fn zero_element_tensors() {
    if !gpu_or_skip("zero_element_tensors") {
        return;
    }
    let mut g = Graph::new("empty");
    let x = g.input("x", DType::F32, &[0, 5]).unwrap();
    let w = g.input("w", DType::F32, &[5, 3]).unwrap();
    let y = g.matmul(x, w).unwrap();
    let t = g.unary(Unary::Tanh, y).unwrap();
    let s = g.reduce(ReduceOp::Sum, x, &[0], false).unwrap();
    let c = g.concat(&[x, x], 0).unwrap();
    g.set_outputs(&[t, s, c]).unwrap();
    check(&Case::new("empty", g, 1, 3, -1.0, 1.0, 1).unwrap());
}

#[test]
fn rope_at_large_positions() {
    if !gpu_or_skip("rope_at_large_positions") {
        return;
    }
    for style in [RopeStyle::NeoX, RopeStyle::GptJ] {
        let mut g = Graph::new("rope");
        let x = g.input("x", DType::F32, &[2, 5, 64]).unwrap();
        let p = g.input("pos", DType::I64, &[5]).unwrap();
        let y = g.rope(x, p, style, 10000.0, Some(48)).unwrap();
        g.set_outputs(&[y]).unwrap();
        let mut case = Case::new("rope", g, 2, 4, -1.0, 1.0, 1).unwrap();
        case.inputs[1].1 = HostTensor::from_i64(&[5], &[0, 1, 2047, 65_535, 1_000_000]).unwrap();
        check(&case);
    }
}

/// Two GPU programs bound to one host cache buffer share its device copy: what one
/// appends, the other reads.
#[test]
fn a_kv_cache_is_shared_on_the_device() {
    if !gpu_or_skip("a_kv_cache_is_shared_on_the_device") {
        return;
    }
    let step = |n: usize| {
        let mut g = Graph::new("append");
        let cache = g.param("cache", DType::F32, &[1, 8, 2]).unwrap();
        let new = g.input("new", DType::F32, &[1, n, 2]).unwrap();
        let pos = g.input("pos", DType::I32, &[1]).unwrap();
        let c = g.kv_append(cache, new, pos, 1).unwrap();
        let s = g.reduce(ReduceOp::Sum, c, &[1], false).unwrap();
        g.set_outputs(&[s]).unwrap();
        g
    };
    let cache = ParamBuffer::zeroed(DType::F32, &[1, 8, 2]).unwrap();
    let session = Session::new(Device::Gpu).unwrap();
    let (mut prefill, mut decode) = (session.compile(&step(3)).unwrap(), session.compile(&step(1)).unwrap());
    for c in [&mut prefill, &mut decode] {
        c.bind_param("cache", &cache).unwrap();
        assert!(c.updates_in_place("cache").unwrap());
    }
    let out = prefill.run(&[("new", &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), ("pos", &[0.0])]).unwrap();
    assert_eq!(out[0], vec![9.0, 12.0]);
    let out = decode.run(&[("new", &[10.0, 20.0]), ("pos", &[3.0])]).unwrap();
    assert_eq!(out[0], vec![19.0, 32.0], "decode sees what prefill appended");
    let e = decode.run(&[("new", &[1.0, 1.0]), ("pos", &[8.0])]).unwrap_err();
    assert!(e.message().contains("position 8") && e.message().contains("capacity 8"), "{e}");
}

/// Attention over more keys than one pass of the GPU kernel holds (online softmax across
/// passes), GQA, a value width over one column per thread, every mask kind.
#[test]
fn attention_over_long_contexts() {
    if !gpu_or_skip("attention_over_long_contexts") {
        return;
    }
    for (mask, sq) in [("none", 3), ("causal", 5), ("bias", 2), ("causal_len", 4), ("sliding_len", 4)] {
        let mut g = Graph::new("attention");
        let q = g.input("q", DType::F32, &[2, 4, sq, 16]).unwrap();
        let k = g.input("k", DType::F32, &[2, 2, 600, 16]).unwrap();
        let v = g.input("v", DType::F32, &[2, 2, 600, 70]).unwrap();
        let m = match mask {
            "none" => AttentionMask::None,
            "causal" => AttentionMask::Causal,
            "bias" => AttentionMask::Bias(g.input("bias", DType::F32, &[1, 4, sq, 600]).unwrap()),
            "causal_len" => AttentionMask::CausalLen(g.input("len", DType::I64, &[]).unwrap()),
            // A window crossing a chunk of keys.
            _ => AttentionMask::SlidingLen(g.input("len", DType::I64, &[]).unwrap(), 300),
        };
        let y = g.attention(q, k, v, m, None).unwrap();
        g.set_outputs(&[y]).unwrap();
        let mut case = Case::new(&format!("attention {mask}"), g, 600 + 16, 11, -1.0, 1.0, 1).unwrap();
        if let Some(len) = case.inputs.iter_mut().find(|(n, _)| n == "len") {
            len.1 = HostTensor::from_i64(&[], &[517]).unwrap();
        }
        check(&case);
    }
}

/// Random elementwise programs (unary, binary, compare, where, casts between f32, f16 and
/// bf16, broadcast operands), fused into generated regions on the GPU and run unfused
/// on the CPU: every region instruction's dtype and rounding, every broadcast index.
#[test]
fn random_elementwise_regions() {
    if !gpu_or_skip("random_elementwise_regions") {
        return;
    }
    const UNARY: [Unary; 8] =
        [Unary::Tanh, Unary::Sigmoid, Unary::Neg, Unary::Abs, Unary::Silu, Unary::Exp, Unary::Sin, Unary::Gelu];
    const BINARY: [BinaryOp; 5] = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Max, BinaryOp::Min];
    const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
    let mut rng = rlx_oracle::Rng::new(2026);
    let mut pick = |n: usize| rng.int(0, n as i64 - 1) as usize;
    for case in 0..24 {
        let mut g = Graph::new(&format!("region_{case}"));
        let dtype = FLOATS[pick(3)];
        let x = g.input("x", dtype, &[7, 1, 13]).unwrap();
        let y = g.input("y", dtype, &[5, 13]).unwrap();
        let z = g.input("z", dtype, &[1]).unwrap();
        let mut values = vec![x, y, z];
        let depth = 3 + pick(10);
        for _ in 0..depth {
            let a = values[pick(values.len())];
            let b = values[pick(values.len())];
            let (da, db) = (g.dtype(a), g.dtype(b));
            let b = if da == db { b } else { g.cast(b, da).unwrap() };
            let next = match pick(5) {
                0 => g.unary(UNARY[pick(UNARY.len())], a).unwrap(),
                1 | 2 => g.binary(BINARY[pick(BINARY.len())], a, b).unwrap(),
                3 => {
                    let c = g.compare(CompareOp::Lt, a, b).unwrap();
                    g.where_(c, a, b).unwrap()
                }
                _ => g.cast(a, FLOATS[pick(3)]).unwrap(),
            };
            values.push(next);
        }
        let last = *values.last().unwrap();
        let out = g.cast(last, DType::F32).unwrap();
        g.set_outputs(&[out]).unwrap();
        let case = Case::new(&format!("region_{case}"), g, depth + 1, 100 + case, -2.0, 2.0, 1).unwrap();
        let cpu = run_on(Device::Cpu, &case, &CompileOptions { fusion: false, ..CompileOptions::default() }).unwrap();
        let gpu = run_on(Device::Gpu, &case, &CompileOptions::default()).unwrap();
        let u = rlx_corpus::narrowest_unit_roundoff(&case.graph);
        compare(&case, &cpu, &gpu, (u, magnitude(&case))).unwrap();
    }
}

/// Steps without a GPU kernel (f64 arithmetic here) run on the host between kernels,
/// are listed by name, and the results match the CPU's.
#[test]
fn host_fallbacks_run_between_kernels() {
    if !gpu_or_skip("host_fallbacks_run_between_kernels") {
        return;
    }
    let mut g = Graph::new("fallback");
    let x = g.input("x", DType::F32, &[3, 17]).unwrap();
    let t = g.unary(Unary::Tanh, x).unwrap();
    let wide = g.cast(t, DType::F64).unwrap();
    let sq = g.mul(wide, wide).unwrap();
    let back = g.cast(sq, DType::F32).unwrap();
    let y = g.add(back, x).unwrap();
    g.set_outputs(&[y]).unwrap();
    let fallbacks = rlx::runtime::gpu::host_fallbacks(&g, &CompileOptions::default()).unwrap();
    assert_eq!(fallbacks.len(), 3, "{fallbacks:?}");
    assert!(fallbacks.iter().any(|f| f.contains("mul") && f.contains("f64[3,17]")), "{fallbacks:?}");
    let case = Case::new("fallback", g, 3, 12, -1.0, 1.0, 1).unwrap();
    let options = CompileOptions::default();
    let cpu = run_on(Device::Cpu, &case, &options).unwrap();
    let gpu = run_on(Device::Gpu, &case, &options).unwrap();
    compare(&case, &cpu, &gpu, (f32::EPSILON as f64 / 2.0, magnitude(&case))).unwrap();
}
