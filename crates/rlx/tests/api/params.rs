//! Param buffers: a KV cache that persists across runs and is shared by a prefill and a
//! decode graph; weights borrowed from outside bytes without a copy; the errors.

use super::compile;
use rlx::prelude::*;
use rlx_oracle::Rng;
use std::sync::Arc;

const D: usize = 4;

/// One attention step over a cache of `cap` rows: appends `seq` new K/V rows at `pos`,
/// then attends causally over the first `pos + seq` rows.
fn step_graph(seq: usize, cap: usize) -> Graph {
    let mut g = Graph::new("step");
    let q = g.input("q", DType::F32, &[1, 1, seq, D]).unwrap();
    let k = g.input("k", DType::F32, &[1, 1, seq, D]).unwrap();
    let v = g.input("v", DType::F32, &[1, 1, seq, D]).unwrap();
    let pos = g.input("pos", DType::I32, &[1]).unwrap();
    let ck = g.param("cache_k", DType::F32, &[1, 1, cap, D]).unwrap();
    let cv = g.param("cache_v", DType::F32, &[1, 1, cap, D]).unwrap();
    let kk = g.kv_append(ck, k, pos, 2).unwrap();
    let vv = g.kv_append(cv, v, pos, 2).unwrap();
    let n = g.scalar(DType::I32, seq as f32).unwrap();
    let len = g.add(pos, n).unwrap();
    let out = g.attention(q, kk, vv, AttentionMask::CausalLen(len), None).unwrap();
    g.set_outputs(&[out]).unwrap();
    g
}

fn rows(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n * D).map(|_| rng.uniform(-1.0, 1.0) as f32).collect()
}

fn run_step(c: &mut CompiledGraph, q: &[f32], k: &[f32], v: &[f32], pos: usize) -> Vec<f32> {
    let pos = [pos as f32];
    c.run(&[("q", q), ("k", k), ("v", v), ("pos", &pos)]).unwrap().remove(0)
}

#[test]
fn a_kv_cache_persists_across_runs_and_is_shared_between_graphs() {
    let mut rng = Rng::new(3);
    let (q, k, v) = (rows(&mut rng, 6), rows(&mut rng, 6), rows(&mut rng, 6));
    let cap = 8;
    let mut prefill = compile(&step_graph(4, cap));
    let mut decode = compile(&step_graph(1, cap));
    prefill.set_param("cache_k", &[0.0; 8 * D]).unwrap();
    prefill.set_param("cache_v", &[0.0; 8 * D]).unwrap();
    for name in ["cache_k", "cache_v"] {
        let shared = prefill.param_buffer(name).unwrap().unwrap();
        decode.bind_param(name, &shared).unwrap();
    }
    // Prefill rows 0..4, then decode rows 4 and 5 one at a time.
    let mut got = run_step(&mut prefill, &q[..4 * D], &k[..4 * D], &v[..4 * D], 0);
    for t in 4..6 {
        let r = t * D..(t + 1) * D;
        got.extend(run_step(&mut decode, &q[r.clone()], &k[r.clone()], &v[r], t));
    }
    // The same six rows in one causal attention, no cache.
    let mut g = Graph::new("full");
    let ids: Vec<NodeId> = ["q", "k", "v"].iter().map(|n| g.input(n, DType::F32, &[1, 1, 6, D]).unwrap()).collect();
    let out = g.attention(ids[0], ids[1], ids[2], AttentionMask::Causal, None).unwrap();
    g.set_outputs(&[out]).unwrap();
    let want = compile(&g).run(&[("q", &q), ("k", &k), ("v", &v)]).unwrap().remove(0);
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!((a - b).abs() <= 1e-6, "row {} col {}: cached {a} vs full {b}", i / D, i % D);
    }
    // Both graphs see one buffer, holding the six appended K rows and zeros after them.
    let cache = decode.param_buffer("cache_k").unwrap().unwrap().read().unwrap().to_f32_vec();
    assert_eq!(&cache[..6 * D], &k[..]);
    assert!(cache[6 * D..].iter().all(|&x| x == 0.0));
    assert!(
        prefill.param_buffer("cache_k").unwrap().unwrap().same_as(&decode.param_buffer("cache_k").unwrap().unwrap())
    );
}

#[test]
fn a_causal_length_past_the_cache_is_an_error() {
    let mut c = compile(&step_graph(2, 4));
    c.set_param("cache_k", &[0.0; 4 * D]).unwrap();
    c.set_param("cache_v", &[0.0; 4 * D]).unwrap();
    let x = [0.5; 2 * D];
    let e = c.run(&[("q", &x), ("k", &x), ("v", &x), ("pos", &[3.0])]).unwrap_err();
    // kv_append refuses the write first: rows 3..5 do not fit 4.
    assert!(e.message().contains("cache"), "{e}");
}

fn matmul_graph(dtype: DType) -> Graph {
    let mut g = Graph::new("mm");
    let x = g.input("x", DType::F32, &[2, 3]).unwrap();
    let w = g.param("w", dtype, &[3, 2]).unwrap();
    let w = if dtype == DType::F32 { w } else { g.cast(w, DType::F32).unwrap() };
    let y = g.matmul(x, w).unwrap();
    g.set_outputs(&[y]).unwrap();
    g
}

#[test]
fn weights_can_borrow_outside_bytes() {
    let w = [1.0f32, -2.0, 0.5, 4.0, 3.0, -1.0];
    let x = [1.0f32, 2.0, 3.0, -1.0, 0.0, 2.0];
    let mut reference = compile(&matmul_graph(DType::F32));
    reference.set_param("w", &w).unwrap();
    let want = reference.run(&[("x", &x)]).unwrap();
    // The six floats at byte 8 of a larger buffer (aligned: borrowed, no copy) and at
    // byte 6 (misaligned for f32: copied).
    for offset in [8usize, 6] {
        let mut bytes = vec![0xAAu8; 40];
        for (i, v) in w.iter().enumerate() {
            bytes[offset + 4 * i..offset + 4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        let shared: SharedBytes = Arc::new(bytes);
        let base = (*shared).as_ref().as_ptr() as usize;
        let buffer = ParamBuffer::from_bytes(DType::F32, &[3, 2], shared, offset..offset + 24).unwrap();
        assert_eq!(buffer.is_borrowed(), (base + offset).is_multiple_of(4), "offset {offset}");
        let mut c = compile(&matmul_graph(DType::F32));
        c.bind_param("w", &buffer).unwrap();
        assert_eq!(c.run(&[("x", &x)]).unwrap(), want, "offset {offset}");
    }
    // f16 bytes are borrowed packed: the matmul reads its weight in 2 bytes.
    let halves: Vec<u8> = w.iter().flat_map(|&v| rlx::ir::f32_to_f16(v).to_le_bytes()).collect();
    let buffer = ParamBuffer::from_bytes(DType::F16, &[3, 2], Arc::new(halves), 0..12).unwrap();
    assert!(buffer.is_borrowed());
    let mut c = compile(&matmul_graph(DType::F16));
    c.bind_param("w", &buffer).unwrap();
    assert_eq!(c.run(&[("x", &x)]).unwrap(), want);
    assert!(c.param_buffer("w").unwrap().unwrap().same_as(&buffer), "bound without a copy");
}

#[test]
fn binding_errors_name_the_param_and_types() {
    let mut c = compile(&matmul_graph(DType::F32));
    let wrong = ParamBuffer::from_bytes(DType::F32, &[2, 3], Arc::new(vec![0u8; 24]), 0..24).unwrap();
    let e = c.bind_param("w", &wrong).unwrap_err();
    assert!(e.message().contains("'w'") && e.message().contains("f32[3,2]") && e.message().contains("f32[2,3]"), "{e}");
    let e = ParamBuffer::from_bytes(DType::F32, &[3, 2], Arc::new(vec![0u8; 24]), 4..24).unwrap_err();
    assert!(e.message().contains("24 bytes") && e.message().contains("4..24"), "{e}");
    let e = ParamBuffer::from_bytes(DType::F32, &[3, 2], Arc::new(vec![0u8; 24]), 8..32).unwrap_err();
    assert!(e.message().contains("outside"), "{e}");
    // A cache the graph appends to in place cannot borrow read-only bytes.
    let mut step = compile(&step_graph(1, 4));
    let bytes = ParamBuffer::from_bytes(DType::F32, &[1, 1, 4, D], Arc::new(vec![0u8; 64]), 0..64).unwrap();
    assert!(bytes.is_borrowed());
    let e = step.bind_param("cache_k", &bytes).unwrap_err();
    assert!(e.message().contains("cache_k") && e.message().contains("read-only"), "{e}");
    assert!(c.param_buffer("nope").is_err());
}

#[test]
fn programs_sharing_a_cache_run_one_at_a_time() {
    // Two graphs on one cache, each stepping from its own thread: a run either succeeds or
    // reports the other program holding the buffer (then the step is retried).
    let mut a = compile(&step_graph(1, 64));
    a.set_param("cache_k", &[0.25; 64 * D]).unwrap();
    a.set_param("cache_v", &[0.25; 64 * D]).unwrap();
    let mut b = compile(&step_graph(1, 64));
    for name in ["cache_k", "cache_v"] {
        b.bind_param(name, &a.param_buffer(name).unwrap().unwrap()).unwrap();
    }
    let worker = |mut c: CompiledGraph| {
        std::thread::spawn(move || {
            let x = [0.25f32; D];
            let mut busy = 0;
            for t in 0..100 {
                loop {
                    match c.run(&[("q", &x), ("k", &x), ("v", &x), ("pos", &[(t % 64) as f32])]) {
                        Ok(out) => {
                            assert!(out[0].iter().all(|&y| (y - 0.25).abs() < 1e-6), "{out:?}");
                            break;
                        }
                        Err(e) => {
                            assert!(e.message().contains("in use by another program"), "{e}");
                            busy += 1;
                            std::thread::yield_now();
                        }
                    }
                }
            }
            busy
        })
    };
    let (ha, hb) = (worker(a), worker(b));
    let busy = ha.join().unwrap() + hb.join().unwrap();
    eprintln!("{busy} runs found the cache busy");
}

/// Programs that only read a param buffer run at once: two graphs on one owned weight,
/// each stepping from its own thread, never find it busy (one that writes a buffer still
/// runs alone on it, above). `run_side_by_side` gives each graph's results alone, for
/// graphs sharing the weight and one apart, on a pool of 2 and of 1; an input error is
/// its job's own.
#[test]
fn programs_reading_a_param_run_side_by_side() {
    // Large enough not to run inline on the calling thread (each run ~0.1 ms).
    let (m, k, n) = (96, 128, 160);
    let mut g = Graph::new("product");
    let x = g.input("x", DType::F32, &[m, k]).unwrap();
    let w = g.param("w", DType::F32, &[k, n]).unwrap();
    let y = g.matmul(x, w).unwrap();
    g.set_outputs(&[y]).unwrap();
    let mut rng = Rng::new(11);
    let mut values = |len: usize| (0..len).map(|_| rng.uniform(-1.0, 1.0) as f32).collect::<Vec<f32>>();
    let (w1, w2) = (values(k * n), values(k * n));
    let xs: Vec<Vec<f32>> = (0..3).map(|_| values(m * k)).collect();
    for threads in [2, 1] {
        let compile =
            || Session::new(Device::Cpu).unwrap().compile_with(&g, &CompileOptions::default().with_threads(threads));
        let (mut a, mut b, mut c) = (compile().unwrap(), compile().unwrap(), compile().unwrap());
        a.set_param("w", &w1).unwrap();
        b.bind_param("w", &a.param_buffer("w").unwrap().unwrap()).unwrap();
        c.set_param("w", &w2).unwrap();
        let want: Vec<Vec<f32>> =
            [&mut a, &mut b, &mut c].into_iter().zip(&xs).map(|(p, x)| p.run(&[("x", x)]).unwrap().remove(0)).collect();
        let tensors: Vec<HostTensor> = xs.iter().map(|x| HostTensor::from_f32(&[m, k], x).unwrap()).collect();
        let inputs: Vec<[(&str, &HostTensor); 1]> = tensors.iter().map(|t| [("x", t)]).collect();
        let got = CompiledGraph::run_side_by_side(&mut [
            (&mut a, &inputs[0][..]),
            (&mut b, &inputs[1][..]),
            (&mut c, &inputs[2][..]),
        ]);
        for (i, got) in got.into_iter().enumerate() {
            assert_eq!(got.unwrap()[0].to_f32_vec(), want[i], "{threads} threads, job {i}");
        }
        let wrong = HostTensor::from_f32(&[k, m], &xs[1]).unwrap();
        let got = CompiledGraph::run_side_by_side(&mut [(&mut a, &inputs[0][..]), (&mut b, &[("x", &wrong)][..])]);
        assert_eq!(got[0].as_ref().unwrap()[0].to_f32_vec(), want[0]);
        let e = got[1].as_ref().unwrap_err();
        assert!(e.message().contains("'x'") && e.message().contains("f32[128,96]"), "{e}");
        if threads == 1 {
            continue;
        }
        let worker = |mut p: CompiledGraph, x: Vec<f32>, want: Vec<f32>| {
            std::thread::spawn(move || {
                for _ in 0..200 {
                    assert_eq!(p.run(&[("x", &x)]).unwrap()[0], want);
                }
            })
        };
        let (ha, hb) = (worker(a, xs[0].clone(), want[0].clone()), worker(b, xs[1].clone(), want[1].clone()));
        ha.join().unwrap();
        hb.join().unwrap();
    }
}

#[test]
fn a_cache_is_state_whatever_the_memory_options() {
    // In-place appends into a param are semantics, not an optimization: with buffer reuse
    // off the cache still persists.
    let options = CompileOptions::default().with_memory_reuse(false).with_fusion(false);
    let mut c = Session::new(Device::Cpu).unwrap().compile_with(&step_graph(1, 4), &options).unwrap();
    assert!(c.updates_in_place("cache_k").unwrap() && c.updates_in_place("cache_v").unwrap());
    c.set_param("cache_k", &[0.0; 4 * D]).unwrap();
    c.set_param("cache_v", &[0.0; 4 * D]).unwrap();
    let row = [1.0f32, 2.0, 3.0, 4.0];
    run_step(&mut c, &row, &row, &row, 0);
    let cache = c.param_buffer("cache_v").unwrap().unwrap().read().unwrap().to_f32_vec();
    assert_eq!(&cache[..D], &row);
}

#[test]
fn a_cache_with_another_reader_is_not_state() {
    // A second reader of the cache param would see it change mid-run, so the append
    // copies instead: the graph stays a pure function and says so.
    let mut g = step_graph(1, 4);
    let ck = g.params()[0];
    let total = g.reduce(ReduceOp::Sum, ck, &[0, 1, 2, 3], false).unwrap();
    let mut outputs = g.outputs().to_vec();
    outputs.push(total);
    g.set_outputs(&outputs).unwrap();
    let mut c = compile(&g);
    assert!(!c.updates_in_place("cache_k").unwrap());
    assert!(c.updates_in_place("cache_v").unwrap());
    c.set_param("cache_k", &[0.0; 4 * D]).unwrap();
    c.set_param("cache_v", &[0.0; 4 * D]).unwrap();
    let row = [1.0f32; D];
    let pos = [0.0f32];
    c.run(&[("q", &row), ("k", &row), ("v", &row), ("pos", &pos)]).unwrap();
    let cache = c.param_buffer("cache_k").unwrap().unwrap().read().unwrap().to_f32_vec();
    assert!(cache.iter().all(|&x| x == 0.0), "cache_k changed: {cache:?}");
}

#[test]
fn a_written_cache_cannot_alias_another_param() {
    let mut c = compile(&step_graph(1, 4));
    c.set_param("cache_k", &[0.0; 4 * D]).unwrap();
    let shared = c.param_buffer("cache_k").unwrap().unwrap();
    let e = c.bind_param("cache_v", &shared).unwrap_err();
    assert!(e.message().contains("cache_v") && e.message().contains("cache_k"), "{e}");
}
