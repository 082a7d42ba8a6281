use crate::common::*;
use rlx::prelude::*;

#[allow(clippy::too_many_arguments)]
/// `len`: only the first `len` keys exist (a causal length); `None` = all of them.
/// `window`: a causal query sees only that many keys, its own included.
fn reference(
    q: &In,
    k: &In,
    v: &In,
    bias: Option<&In>,
    causal: bool,
    len: Option<usize>,
    window: Option<usize>,
    scale: f64,
) -> Vec<f64> {
    let [b, hq, sq, d] = [q.dims[0], q.dims[1], q.dims[2], q.dims[3]];
    let [hkv, skv, dv] = [k.dims[1], k.dims[2], v.dims[3]];
    let filled = len.unwrap_or(skv);
    let mut out = Vec::new();
    for bi in 0..b {
        for h in 0..hq {
            let kh = h * hkv / hq;
            for i in 0..sq {
                // Query i stands at position i + filled - sq.
                let visible = |j: usize| {
                    j < filled && !(causal && j + sq > i + filled) && window.is_none_or(|w| j + w + sq > i + filled)
                };
                let scores: Vec<f64> = (0..skv)
                    .map(|j| {
                        if !visible(j) {
                            return f64::NEG_INFINITY;
                        }
                        let dot: f64 = (0..d)
                            .map(|t| {
                                q.values[ravel(&[bi, h, i, t], &q.dims)] * k.values[ravel(&[bi, kh, j, t], &k.dims)]
                            })
                            .sum();
                        dot * scale + bias.map_or(0.0, |bb| broadcast_read(&bb.values, &bb.dims, &[bi, h, i, j]))
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let z: f64 = e.iter().sum();
                // Keys past the causal limit or the filled length are not read at all.
                for t in 0..dv {
                    out.push(
                        (0..skv)
                            .filter(|&j| visible(j))
                            .map(|j| e[j] / z * v.values[ravel(&[bi, kh, j, t], &v.dims)])
                            .sum(),
                    );
                }
            }
        }
    }
    out
}

#[test]
fn attention_matches_reference() {
    let mut rng = Rng::new(80);
    // (b, hq, hkv, sq, skv, d, dv, mask, scale)
    #[derive(Clone, Copy)]
    enum M {
        None,
        Causal,
        BiasRow,
        BiasFull,
        /// Causal over the first `len` keys.
        CausalLen(usize),
        /// The same, each query seeing only the last `window` keys.
        SlidingLen(usize, usize),
    }
    let cases = [
        (1usize, 1usize, 1usize, 1usize, 1usize, 1usize, 1usize, M::None, None),
        (2, 4, 4, 5, 5, 8, 8, M::None, None),
        (1, 4, 2, 6, 6, 16, 8, M::Causal, None),
        (2, 6, 1, 1, 9, 8, 8, M::Causal, Some(0.3f32)),
        (1, 2, 2, 3, 7, 4, 5, M::Causal, None),
        (1, 2, 1, 4, 4, 8, 8, M::BiasRow, None),
        (2, 2, 2, 3, 5, 4, 4, M::BiasFull, Some(1.0)),
        (1, 2, 2, 0, 4, 4, 4, M::None, None),
        // A KV cache: a decode step (sq 1) and a prefill chunk over a partly filled cache.
        (1, 6, 2, 1, 12, 8, 8, M::CausalLen(5), None),
        (1, 3, 1, 4, 9, 8, 4, M::CausalLen(4), None),
        (1, 3, 3, 3, 9, 4, 4, M::CausalLen(9), Some(0.5)),
        // Decode steps past one 16-lane accumulator (tails of 4 and 1), and one with
        // enough work (40 heads x 1000 keys x 128) to split its heads across threads.
        (1, 8, 2, 1, 40, 20, 17, M::CausalLen(33), None),
        (1, 40, 8, 1, 1100, 64, 64, M::CausalLen(1000), None),
        // Rows past the weighted sum's 64-value register block (64 + 64 + 2).
        (1, 4, 2, 1, 30, 70, 130, M::CausalLen(25), None),
        // Past one 64-row block of queries, on enough work to run in parallel.
        (1, 3, 1, 70, 80, 16, 16, M::CausalLen(75), None),
        (1, 2, 2, 130, 130, 8, 8, M::Causal, None),
        // Sliding windows: a decode step past the window, a prefill wider than the
        // window (rows of one block see different key ranges), a window of 1, and one
        // wider than the cache.
        (1, 4, 1, 1, 12, 8, 8, M::SlidingLen(9, 3), None),
        (1, 2, 1, 70, 80, 16, 16, M::SlidingLen(75, 17), None),
        (2, 2, 2, 5, 9, 4, 4, M::SlidingLen(7, 1), Some(0.5)),
        (1, 3, 3, 4, 6, 4, 4, M::SlidingLen(6, 100), None),
    ];
    for dtype in FLOATS {
        for &(b, hq, hkv, sq, skv, d, dv, mask, scale) in &cases {
            let q = rand_input(&mut rng, dtype, &[b, hq, sq, d], -2.0, 2.0);
            let k = rand_input(&mut rng, dtype, &[b, hkv, skv, d], -2.0, 2.0);
            let v = rand_input(&mut rng, dtype, &[b, hkv, skv, dv], -2.0, 2.0);
            let mut bias = match mask {
                M::BiasFull => rand_input(&mut rng, dtype, &[b, hq, sq, skv], -1.0, 1.0),
                _ => rand_input(&mut rng, dtype, &[1, 1, sq, skv], -1.0, 1.0),
            };
            if let M::BiasRow = mask {
                // A -inf entry masks a key out.
                bias.values[1] = f64::NEG_INFINITY;
            }
            let s = scale.map_or(1.0 / (d as f64).sqrt(), |s| s as f64);
            let use_bias = matches!(mask, M::BiasRow | M::BiasFull);
            let (causal, len, window) = match mask {
                M::Causal => (true, None, None),
                M::CausalLen(len) => (true, Some(len), None),
                M::SlidingLen(len, w) => (true, Some(len), Some(w)),
                _ => (false, None, None),
            };
            let expected = reference(&q, &k, &v, use_bias.then_some(&bias), causal, len, window, s);
            let fourth = match mask {
                M::CausalLen(len) | M::SlidingLen(len, _) => input(DType::I32, &[], vec![len as f64]),
                _ => bias,
            };
            let got = eval_ok(&[q, k, v, fourth], |g, x| {
                let m = match mask {
                    M::None => AttentionMask::None,
                    M::Causal => AttentionMask::Causal,
                    M::CausalLen(_) => AttentionMask::CausalLen(x[3]),
                    M::SlidingLen(_, w) => AttentionMask::SlidingLen(x[3], w),
                    _ => AttentionMask::Bias(x[3]),
                };
                g.attention(x[0], x[1], x[2], m, scale)
            });
            // Scores carry d-deep dot products (|q||k| <= 4 each) into exp; outputs are
            // convex combinations of |v| <= 2.
            let k_err = (d + skv) as f64 * 4.0 + 16.0;
            assert_close(
                &got,
                dtype,
                &[b, hq, sq, dv],
                &expected,
                |i| bound(dtype, k_err, 8.0, expected[i]),
                &format!("attention {dtype} b{b} hq{hq} hkv{hkv} sq{sq} skv{skv}"),
            );
        }
    }
}

#[test]
fn attention_rejects_bad_shapes() {
    let t = |dims: &[usize]| input(DType::F32, dims, vec![0.0; dims.iter().product()]);
    let e = eval(&[t(&[1, 3, 2, 4]), t(&[1, 2, 2, 4]), t(&[1, 2, 2, 4])], |g, x| {
        g.attention(x[0], x[1], x[2], AttentionMask::None, None)
    })
    .unwrap_err();
    assert!(e.message().contains("heads"), "{e}");
    let e = eval(&[t(&[1, 2, 5, 4]), t(&[1, 2, 3, 4]), t(&[1, 2, 3, 4])], |g, x| {
        g.attention(x[0], x[1], x[2], AttentionMask::Causal, None)
    })
    .unwrap_err();
    assert!(e.message().contains("sq"), "{e}");
    let e = eval(&[t(&[1, 2, 3, 4]), t(&[1, 2, 3, 4]), t(&[1, 2, 3, 4]), t(&[2, 3])], |g, x| {
        g.attention(x[0], x[1], x[2], AttentionMask::Bias(x[3]), None)
    })
    .unwrap_err();
    assert!(e.message().contains("f32[2,3]"), "{e}");
    let e = eval(&[t(&[1, 2, 3, 4]), t(&[1, 2, 3, 4]), t(&[1, 2, 3, 4]), t(&[1])], |g, x| {
        g.attention(x[0], x[1], x[2], AttentionMask::CausalLen(x[3]), None)
    })
    .unwrap_err();
    assert!(e.message().contains("integer scalar"), "{e}");
    // The length is checked when the step runs: sq <= len <= skv.
    for len in [1.0, 4.0] {
        let e = eval(
            &[t(&[1, 2, 2, 4]), t(&[1, 2, 3, 4]), t(&[1, 2, 3, 4]), input(DType::I64, &[1], vec![len])],
            |g, x| g.attention(x[0], x[1], x[2], AttentionMask::CausalLen(x[3]), None),
        )
        .unwrap_err();
        assert!(e.message().contains(&format!("causal length {len}")), "{e}");
    }
    let e = eval(&[t(&[1, 2, 3, 4]), t(&[1, 2, 3, 4]), t(&[1, 2, 3, 4]), input(DType::I64, &[], vec![3.0])], |g, x| {
        g.attention(x[0], x[1], x[2], AttentionMask::SlidingLen(x[3], 0), None)
    })
    .unwrap_err();
    assert!(e.message().contains("window"), "{e}");
}

#[test]
fn attention_with_all_scores_far_below_zero() {
    // Scores -200 and -200: the row maximum must start at -inf, not 0, or every weight
    // underflows to 0 and the row is 0/0.
    let q = input(DType::F32, &[1, 1, 1, 1], vec![20.0]);
    let k = input(DType::F32, &[1, 1, 2, 1], vec![-10.0, -10.0]);
    let v = input(DType::F32, &[1, 1, 2, 1], vec![1.0, 3.0]);
    let got = eval_ok(&[q, k, v], |g, x| g.attention(x[0], x[1], x[2], AttentionMask::None, Some(1.0)));
    assert_exact(&got, DType::F32, &[1, 1, 1, 1], &[2.0], "attention far below zero");
}

#[test]
fn masked_keys_never_reach_earlier_rows() {
    // Row 2's key carries an infinite value; rows 0 and 1 cannot see it and must stay
    // finite (a blocked P·V would multiply it by their zero weights: 0 * inf = NaN).
    let q = input(DType::F32, &[1, 1, 3, 2], vec![0.1, 0.2, 0.3, -0.1, 0.5, 0.5]);
    let k = input(DType::F32, &[1, 1, 3, 2], vec![0.2, 0.1, -0.3, 0.4, 0.0, 1.0]);
    let v = input(DType::F32, &[1, 1, 3, 2], vec![1.0, 2.0, 3.0, 4.0, f64::INFINITY, 0.0]);
    let expected = reference(&q, &k, &v, None, true, None, None, 1.0 / 2f64.sqrt());
    let got = eval_ok(&[q, k, v], |g, x| g.attention(x[0], x[1], x[2], AttentionMask::Causal, None)).to_f64_vec();
    for i in 0..4 {
        assert!((got[i] - expected[i]).abs() < 1e-6, "row {}: {} vs {}", i / 2, got[i], expected[i]);
    }
    assert!(got[4].is_infinite() || got[4].is_nan());
}

/// K and V in f16 or bf16 under an f32 query (a half KV cache): read widened, so the
/// result is the f32 attention of the half values; through a cache appended in place too.
#[test]
fn half_keys_and_values_are_read_widened() {
    let mut rng = Rng::new(81);
    for kv in [DType::F16, DType::BF16] {
        for (sq, skv, len, window) in [(1, 12, 9, None), (5, 16, 16, None), (3, 20, 14, Some(4))] {
            let q = rand_input(&mut rng, DType::F32, &[1, 4, sq, 8], -2.0, 2.0);
            let k = rand_input(&mut rng, kv, &[1, 2, skv, 8], -2.0, 2.0);
            let v = rand_input(&mut rng, kv, &[1, 2, skv, 8], -2.0, 2.0);
            let s = 1.0 / 8f64.sqrt();
            let expected = reference(&q, &k, &v, None, true, Some(len), window, s);
            let got = eval_ok(&[q, k, v, input(DType::I32, &[], vec![len as f64])], |g, x| {
                let mask = match window {
                    Some(w) => AttentionMask::SlidingLen(x[3], w),
                    None => AttentionMask::CausalLen(x[3]),
                };
                g.attention(x[0], x[1], x[2], mask, None)
            });
            let k_err = (8 + skv) as f64 * 4.0 + 16.0;
            assert_close(
                &got,
                DType::F32,
                &[1, 4, sq, 8],
                &expected,
                |i| bound(DType::F32, k_err, 8.0, expected[i]),
                &format!("attention f32 q, {kv} k/v, sq{sq} skv{skv} len{len}"),
            );
        }
    }
}

/// A decode step over an f16 cache with heads of whole vectors (the CPU reads such a
/// cache without widening it first, GQA heads together): the f32 attention of the half
/// values, and on the CPU bit for bit what the same values give from an f32 cache. Groups
/// of 1, 3, 4 and 5 query heads per K/V head (past one pass of 4), 64- and 128-wide
/// values, a sliding window and an empty window; and calls long enough to split their
/// keys and columns across the workers (the same bits: each sum is one chain still).
#[test]
fn a_decode_step_reads_an_f16_cache_as_the_f32_values() {
    let mut rng = Rng::new(82);
    for (hq, hkv, d, dv, skv, len, window) in [
        (3, 3, 64, 64, 40, 17, None),
        (9, 3, 64, 64, 120, 100, None),
        (4, 1, 32, 128, 50, 50, Some(7)),
        (10, 2, 16, 64, 33, 1, None),
        (9, 3, 64, 64, 1100, 1000, None),
        (9, 3, 64, 64, 1100, 1000, Some(701)),
        (10, 2, 64, 128, 1000, 913, None),
    ] {
        let q = rand_input(&mut rng, DType::F32, &[1, hq, 1, d], -2.0, 2.0);
        let k = rand_input(&mut rng, DType::F16, &[1, hkv, skv, d], -2.0, 2.0);
        let v = rand_input(&mut rng, DType::F16, &[1, hkv, skv, dv], -2.0, 2.0);
        let wide = |x: &In| input(DType::F32, &x.dims, x.values.clone());
        let s = 1.0 / (d as f64).sqrt();
        let expected = reference(&q, &k, &v, None, true, Some(len), window, s);
        // K and V as params (a cache): the program keeps an f16 param packed.
        let run = |k: &In, v: &In| {
            let mut g = Graph::new("f16_cache");
            let qn = g.input("q", DType::F32, &q.dims).unwrap();
            let l = g.input("len", DType::I32, &[]).unwrap();
            let kn = g.param("k", k.dtype, &k.dims).unwrap();
            let vn = g.param("v", v.dtype, &v.dims).unwrap();
            let mask = match window {
                Some(w) => AttentionMask::SlidingLen(l, w),
                None => AttentionMask::CausalLen(l),
            };
            let y = g.attention(qn, kn, vn, mask, None).unwrap();
            g.set_outputs(&[y]).unwrap();
            let mut program = Session::new(test_device()).unwrap().compile(&g).unwrap();
            for (name, x) in [("k", k), ("v", v)] {
                program.set_param_typed(name, &HostTensor::from_f64_as(x.dtype, &x.dims, &x.values).unwrap()).unwrap();
            }
            let qt = HostTensor::from_f64_as(DType::F32, &q.dims, &q.values).unwrap();
            let lt = HostTensor::from_f64_as(DType::I32, &[], &[len as f64]).unwrap();
            program.run_typed(&[("q", &qt), ("len", &lt)]).unwrap().remove(0)
        };
        let (half, full) = (run(&k, &v), run(&wide(&k), &wide(&v)));
        let what = format!("f16 cache hq{hq} hkv{hkv} d{d} dv{dv} len{len}");
        let k_err = (d + skv) as f64 * 4.0 + 16.0;
        assert_close(
            &half,
            DType::F32,
            &[1, hq, 1, dv],
            &expected,
            |i| bound(DType::F32, k_err, 8.0, expected[i]),
            &what,
        );
        if std::env::var("RLX_TEST_DEVICE").is_err() {
            let bits = |t: &HostTensor| t.to_f32_vec().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&half), bits(&full), "{what}: differs from the f32 cache");
        }
    }
}

/// A KV cache param in f16, appended in place and read by attention: the program keeps
/// it packed (2 bytes an element) and updates it in place across runs.
#[test]
fn a_half_cache_param_is_appended_in_place() {
    for kv in [DType::F16, DType::BF16] {
        let mut g = Graph::new("half_cache");
        let q = g.input("q", DType::F32, &[1, 1, 1, 4]).unwrap();
        let new = g.input("new", DType::F32, &[1, 1, 1, 4]).unwrap();
        let pos = g.input("pos", DType::I32, &[1]).unwrap();
        let cache = g.param("cache", kv, &[1, 1, 3, 4]).unwrap();
        let narrow = g.cast(new, kv).unwrap();
        let appended = g.kv_append(cache, narrow, pos, 2).unwrap();
        let one = g.scalar(DType::I32, 1.0).unwrap();
        let len = g.add(pos, one).unwrap();
        let y = g.attention(q, appended, appended, AttentionMask::CausalLen(len), Some(1.0)).unwrap();
        g.set_outputs(&[y]).unwrap();
        let mut program = Session::new(Device::Cpu).unwrap().compile(&g).unwrap();
        let buffer = rlx::runtime::ParamBuffer::zeroed(kv, &[1, 1, 3, 4]).unwrap();
        program.bind_param("cache", &buffer).unwrap();
        assert!(program.updates_in_place("cache").unwrap(), "{kv}");
        // Rows 1, 2, 3 (x 1.1, rounded to the cache's type); q = 0 averages the rows seen.
        let zero = HostTensor::from_f32(&[1, 1, 1, 4], &[0.0; 4]).unwrap();
        let mut rows = Vec::new();
        for step in 0..3 {
            let row = [1.1 * (step + 1) as f32; 4];
            rows.push(HostTensor::from_f32_as(kv, &[4], &row).unwrap().to_f32_vec()[0]);
            let new = HostTensor::from_f32(&[1, 1, 1, 4], &row).unwrap();
            let pos = HostTensor::from_f32_as(DType::I32, &[1], &[step as f32]).unwrap();
            let out = program.run_typed(&[("q", &zero), ("new", &new), ("pos", &pos)]).unwrap().remove(0);
            let mean = rows.iter().sum::<f32>() / rows.len() as f32;
            assert!(
                (out.to_f32_vec()[0] - mean).abs() <= 1e-6 * mean,
                "{kv} step {step}: {:?} vs {mean}",
                out.to_f32_vec()
            );
        }
    }
}
