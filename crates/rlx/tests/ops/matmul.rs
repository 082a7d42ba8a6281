use crate::common::*;
use rlx::prelude::*;

/// (a dims, b dims, out dims): plain, odd, batched, broadcast batch, empty.
const CASES: &[(&[usize], &[usize], &[usize])] = &[
    (&[1, 1], &[1, 1], &[1, 1]),
    (&[3, 17], &[17, 5], &[3, 5]),
    (&[1, 33], &[33, 7], &[1, 7]),
    (&[2, 3, 4], &[4, 2], &[2, 3, 2]),
    (&[2, 1, 3, 4], &[3, 4, 5], &[2, 3, 3, 5]),
    (&[1, 5, 4], &[3, 4, 2], &[3, 5, 2]),
    (&[0, 3], &[3, 4], &[0, 4]),
    (&[3, 0], &[0, 4], &[3, 4]),
];

/// out[.., i, j] = sum_p a[.., i, p] b[.., p, j] by multi-index, plus sum |a||b| per output.
fn reference(a: &In, b: &In, out: &[usize]) -> (Vec<f64>, Vec<f64>) {
    let (ra, ro) = (a.dims.len(), out.len());
    let k = a.dims[ra - 1];
    let n: usize = out.iter().product();
    let mut vals = Vec::with_capacity(n);
    let mut mags = Vec::with_capacity(n);
    for flat in 0..n {
        let idx = unravel(flat, out);
        let (i, j) = (idx[ro - 2], idx[ro - 1]);
        let (mut s, mut m) = (0.0, 0.0);
        for p in 0..k {
            let mut ia = idx[..ro - 2].to_vec();
            ia.extend([i, p]);
            let mut ib = idx[..ro - 2].to_vec();
            ib.extend([p, j]);
            let x = broadcast_read(&a.values, &a.dims, &ia);
            let y = broadcast_read(&b.values, &b.dims, &ib);
            s += x * y;
            m += (x * y).abs();
        }
        vals.push(s);
        mags.push(m);
    }
    (vals, mags)
}

#[test]
fn float_matmul_matches_reference() {
    let mut rng = Rng::new(10);
    for dtype in FLOATS {
        for (da, db, dout) in CASES {
            let a = rand_input(&mut rng, dtype, da, -2.0, 2.0);
            let b = rand_input(&mut rng, dtype, db, -2.0, 2.0);
            let (expected, mags) = reference(&a, &b, dout);
            let k = da[da.len() - 1] as f64;
            let got = eval_ok(&[a, b], |g, x| g.matmul(x[0], x[1]));
            // Recursive summation: |error| <= k u sum|a_ip b_pj| (+ the store rounding).
            assert_close(
                &got,
                dtype,
                dout,
                &expected,
                |i| bound(dtype, k + 1.0, mags[i], expected[i]),
                &format!("matmul {dtype} {da:?}x{db:?}"),
            );
        }
    }
}

#[test]
fn integer_matmul_is_exact_and_wraps() {
    let mut rng = Rng::new(11);
    for dtype in INTS {
        let (lo, hi) = int_range(dtype);
        for (da, db, dout) in CASES {
            let a = rand_input(&mut rng, dtype, da, lo.max(-100) as f64, hi.min(100) as f64);
            let b = rand_input(&mut rng, dtype, db, lo.max(-100) as f64, hi.min(100) as f64);
            let (exact, _) = reference(&a, &b, dout);
            // Sums of products modulo 2^bits (exact in f64: |sum| < 2^53 here).
            let expected: Vec<i64> = exact
                .iter()
                .map(|&v| match dtype {
                    DType::I8 => v as i64 as i8 as i64,
                    DType::U8 => v as i64 as u8 as i64,
                    DType::I32 => v as i64 as i32 as i64,
                    _ => v as i64,
                })
                .collect();
            let got = eval_ok(&[a, b], |g, x| g.matmul(x[0], x[1]));
            assert_exact_i64(&got, dtype, dout, &expected, &format!("matmul {dtype} {da:?}x{db:?}"));
        }
    }
}

#[test]
fn nan_and_inf_propagate_through_matmul() {
    // a = [[NaN, 1], [1, 1], [inf, 0]], b = [[1, 2], [3, 4]]
    let a = input(DType::F32, &[3, 2], vec![f64::NAN, 1.0, 1.0, 1.0, f64::INFINITY, 0.0]);
    let b = input(DType::F32, &[2, 2], vec![1.0, 2.0, 3.0, 4.0]);
    let got = eval_ok(&[a, b], |g, x| g.matmul(x[0], x[1]));
    let nan = f64::NAN;
    // inf * 1 + 0 * 3 = inf; the NaN row is NaN.
    assert_exact(&got, DType::F32, &[3, 2], &[nan, nan, 4.0, 6.0, f64::INFINITY, f64::INFINITY], "matmul specials");
}

#[test]
fn matmul_rejects_bad_shapes() {
    let a = input(DType::F32, &[2, 3], vec![0.0; 6]);
    let b = input(DType::F32, &[4, 2], vec![0.0; 8]);
    let e = eval(&[a, b], |g, x| g.matmul(x[0], x[1])).unwrap_err();
    assert!(e.message().contains("f32[2,3]") && e.message().contains("f32[4,2]"), "{e}");
    let a = input(DType::F32, &[3], vec![0.0; 3]);
    let b = input(DType::F32, &[3, 2], vec![0.0; 6]);
    let e = eval(&[a, b], |g, x| g.matmul(x[0], x[1])).unwrap_err();
    assert!(e.message().contains("rank"), "{e}");
    let a = input(DType::F32, &[2, 2, 3], vec![0.0; 12]);
    let b = input(DType::F32, &[3, 3, 2], vec![0.0; 18]);
    assert!(eval(&[a, b], |g, x| g.matmul(x[0], x[1])).unwrap_err().message().contains("batch"));
}

/// `x @ w` (or `x @ w^T` with `w` stored `[n, k]`), `w` an input (widened in the arena)
/// or a param (kept packed in 2 bytes: the matmul is its only reader).
fn half_product(x: &In, w: &In, transposed: bool, w_is_param: bool) -> HostTensor {
    let mut g = Graph::new("half_matmul");
    let xi = g.input("x", x.dtype, &x.dims).unwrap();
    let wi = if w_is_param { g.param("w", w.dtype, &w.dims) } else { g.input("w", w.dtype, &w.dims) }.unwrap();
    let wt = if transposed { g.transpose(wi, &[1, 0]).unwrap() } else { wi };
    let o = g.matmul(xi, wt).unwrap();
    g.set_outputs(&[o]).unwrap();
    let mut c = Session::new(test_device()).unwrap().compile_with(&g, &CompileOptions::default()).unwrap();
    let xt = HostTensor::from_f64_as(x.dtype, &x.dims, &x.values).unwrap();
    let wt = HostTensor::from_f64_as(w.dtype, &w.dims, &w.values).unwrap();
    if w_is_param {
        c.set_param_typed("w", &wt).unwrap();
        c.run_typed(&[("x", &xt)]).unwrap().remove(0)
    } else {
        c.run_typed(&[("x", &xt), ("w", &wt)]).unwrap().remove(0)
    }
}

#[test]
fn half_matmuls_with_packed_or_widened_weights_match_reference() {
    // Sizes around the AMX tile (16 rows, 32 of k, 32-column blocks) and the convert
    // arm's 256-row panels; m >= 16 takes AMX on a CPU that has it.
    let shapes = [(1, 1, 1), (3, 17, 5), (16, 32, 16), (17, 33, 31), (33, 100, 47), (64, 64, 64), (20, 300, 9)];
    let mut rng = Rng::new(12);
    for dtype in [DType::F16, DType::BF16] {
        for (m, k, n) in shapes {
            for transposed in [false, true] {
                let x = rand_input(&mut rng, dtype, &[m, k], -2.0, 2.0);
                let w_dims = if transposed { [n, k] } else { [k, n] };
                let w = rand_input(&mut rng, dtype, &w_dims, -2.0, 2.0);
                // The reference reads w as [k, n].
                let w_kn = if transposed {
                    let v = (0..k * n).map(|i| w.values[(i % n) * k + i / n]).collect();
                    input(dtype, &[k, n], v)
                } else {
                    input(dtype, &[k, n], w.values.clone())
                };
                let (expected, mags) = reference(&x, &w_kn, &[m, n]);
                for param in [false, true] {
                    let got = half_product(&x, &w, transposed, param);
                    let what = format!("{dtype} [{m},{k}]x[{k},{n}] transposed {transposed} param {param}");
                    assert_close(
                        &got,
                        dtype,
                        &[m, n],
                        &expected,
                        |i| bound(dtype, k as f64 + 1.0, mags[i], expected[i]),
                        &what,
                    );
                }
            }
        }
    }
}

#[test]
fn half_matmul_keeps_subnormals_and_specials() {
    // bf16 subnormals (AMX would read them as zero) scaled up by a large weight: the
    // products are normal and must count. 32 rows: the size AMX takes.
    let (m, k, n) = (32, 40, 24);
    let tiny = 2f64.powi(-130); // a bf16 subnormal
    let big = 2f64.powi(100);
    for dtype in [DType::BF16, DType::F16] {
        let (t, b) = if dtype == DType::BF16 { (tiny, big) } else { (2f64.powi(-20), 2f64.powi(10)) };
        let xv: Vec<f64> = (0..m * k).map(|i| if i % 3 == 0 { t * (1 + i % 5) as f64 } else { 0.0 }).collect();
        let wv: Vec<f64> = (0..k * n).map(|i| b * ((i % 7) as f64 - 3.0)).collect();
        let (x, w) = (input(dtype, &[m, k], xv), input(dtype, &[k, n], wv));
        let (expected, mags) = reference(&x, &w, &[m, n]);
        assert!(expected.iter().any(|&v| v != 0.0), "test bug: the subnormals must matter");
        for param in [false, true] {
            let got = half_product(&x, &w, false, param);
            assert_close(
                &got,
                dtype,
                &[m, n],
                &expected,
                |i| bound(dtype, k as f64 + 1.0, mags[i], expected[i]),
                "subnormal x",
            );
        }
    }
    // NaN and infinity through a 32-row bf16 product: row 0 holds a NaN, row 1 an
    // infinity against a positive column.
    let (m, k, n) = (32, 32, 32);
    let mut xv = vec![1.0; m * k];
    xv[0] = f64::NAN;
    xv[k] = f64::INFINITY;
    let x = input(DType::BF16, &[m, k], xv);
    let w = input(DType::BF16, &[k, n], vec![0.5; k * n]);
    for param in [false, true] {
        let got = half_product(&x, &w, false, param).to_f64_vec();
        assert!(got[..n].iter().all(|v| v.is_nan()), "NaN row");
        assert!(got[n..2 * n].iter().all(|&v| v == f64::INFINITY), "inf row");
        assert!(got[2 * n..].iter().all(|&v| v == 16.0), "plain rows");
    }
}

/// f32 weights a CPU product reads packed (prepared once, in `packed_gemm`'s layout, where
/// the CPU has the kernel) follow every change: a new `set_param`, a rebinding, and a
/// write through another program sharing the buffer; plain, transposed and batched.
#[test]
fn packed_param_weights_follow_every_change() {
    let (m, k, n) = (5, 40, 70);
    let mut rng = Rng::new(31);
    let x = rand_input(&mut rng, DType::F32, &[2, m, k], -1.0, 1.0);
    let weights: Vec<In> = (0..3).map(|_| rand_input(&mut rng, DType::F32, &[k, n], -1.0, 1.0)).collect();
    let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
    // y = x @ w, and the same product with the weight stored transposed: x @ wt^T.
    let build = |transposed: bool| {
        let mut g = Graph::new("packed");
        let xi = g.input("x", DType::F32, &[2, m, k]).unwrap();
        let w = if transposed {
            let wt = g.param("w", DType::F32, &[n, k]).unwrap();
            g.transpose(wt, &[1, 0]).unwrap()
        } else {
            g.param("w", DType::F32, &[k, n]).unwrap()
        };
        let y = g.matmul(xi, w).unwrap();
        g.set_outputs(&[y]).unwrap();
        Session::new(Device::Cpu).unwrap().compile(&g).unwrap()
    };
    let stored = |w: &In, transposed: bool| -> Vec<f32> {
        if transposed { (0..n * k).map(|i| w.values[(i % k) * n + i / k] as f32).collect() } else { f32s(&w.values) }
    };
    let check = |c: &mut CompiledGraph, w: &In, what: &str| {
        let y = c.run(&[("x", &f32s(&x.values))]).unwrap().remove(0);
        let (want, mag) = reference(&x, w, &[2, m, n]);
        for (i, (&got, (&want, &mag))) in y.iter().zip(want.iter().zip(&mag)).enumerate() {
            let tol = (k as f64 + 2.0) * 6e-8 * mag;
            assert!((got as f64 - want).abs() <= tol, "{what}[{i}]: {got} vs {want}");
        }
    };
    for transposed in [false, true] {
        let mut a = build(transposed);
        let mut b = build(transposed);
        for (i, w) in weights.iter().enumerate() {
            a.set_param("w", &stored(w, transposed)).unwrap();
            check(&mut a, w, &format!("set_param {i} (transposed {transposed})"));
        }
        // b shares a's buffer; a write through a is what b reads next.
        b.bind_param("w", &a.param_buffer("w").unwrap().unwrap()).unwrap();
        check(&mut b, &weights[2], "shared buffer");
        a.set_param("w", &stored(&weights[0], transposed)).unwrap();
        check(&mut b, &weights[0], "shared buffer after a write through the other program");
        // Rebinding to another buffer.
        let mut c = build(transposed);
        c.set_param("w", &stored(&weights[1], transposed)).unwrap();
        b.bind_param("w", &c.param_buffer("w").unwrap().unwrap()).unwrap();
        check(&mut b, &weights[1], "rebound");
    }
}

/// bf16 param weights the CPU reads packed in its tiled arms' layout (made once per
/// change, where the CPU has a tiled arm: AMX, or AVX512_BF16 on AMD) follow every
/// change: a new `set_param`, a write through another program sharing the buffer, a
/// rebinding; plain and transposed, 34 rows (two batch entries of 17, one product). Each
/// result has the bits of the same product with the weight given as an input (packed
/// per call), and a weight holding bf16 subnormals takes the convert arm.
#[test]
fn packed_bf16_param_weights_follow_every_change() {
    let (m, k, n) = (17, 40, 70);
    let mut rng = Rng::new(32);
    let x = rand_input(&mut rng, DType::BF16, &[2, m, k], -1.0, 1.0);
    let mut weights: Vec<In> = (0..3).map(|_| rand_input(&mut rng, DType::BF16, &[k, n], -1.0, 1.0)).collect();
    // A weight of bf16 subnormals (and zeros) against a large x: the products are normal
    // and must count (the tiled arms would read the weight as zero).
    let tiny = 2f64.powi(-130);
    weights[2].values.iter_mut().enumerate().for_each(|(i, v)| *v = tiny * ((i % 5) as f64 - 2.0));
    let build = |transposed: bool, w_is_param: bool| {
        let mut g = Graph::new("bf16 tiles");
        let xi = g.input("x", DType::BF16, &[2, m, k]).unwrap();
        let dims = if transposed { [n, k] } else { [k, n] };
        let wi = if w_is_param { g.param("w", DType::BF16, &dims) } else { g.input("w", DType::BF16, &dims) };
        let wi = wi.unwrap();
        let w = if transposed { g.transpose(wi, &[1, 0]).unwrap() } else { wi };
        let y = g.matmul(xi, w).unwrap();
        g.set_outputs(&[y]).unwrap();
        Session::new(Device::Cpu).unwrap().compile(&g).unwrap()
    };
    let stored = |w: &In, transposed: bool| -> HostTensor {
        let (dims, values) = if transposed {
            ([n, k], (0..n * k).map(|i| w.values[(i % k) * n + i / k]).collect())
        } else {
            ([k, n], w.values.clone())
        };
        HostTensor::from_f64_as(DType::BF16, &dims, &values).unwrap()
    };
    let scaled = |w: &In| if w.values.iter().all(|v| v.abs() < 1e-30) { 2f64.powi(100) } else { 1.0 };
    for transposed in [false, true] {
        let mut per_call = build(transposed, false);
        let mut check = |c: &mut CompiledGraph, w: &In, what: &str| {
            let xs = HostTensor::from_f64_as(
                DType::BF16,
                &[2, m, k],
                &x.values.iter().map(|v| v * scaled(w)).collect::<Vec<_>>(),
            )
            .unwrap();
            let got = c.run_typed(&[("x", &xs)]).unwrap().remove(0);
            let want = per_call.run_typed(&[("x", &xs), ("w", &stored(w, transposed))]).unwrap().remove(0);
            let bits = |t: &HostTensor| t.to_f32_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{what} (transposed {transposed}): packed once vs per call");
            let xin = input(DType::BF16, &[2, m, k], xs.to_f64_vec());
            let (expected, mags) = reference(&xin, w, &[2, m, n]);
            assert_close(
                &got,
                DType::BF16,
                &[2, m, n],
                &expected,
                |i| bound(DType::BF16, k as f64 + 1.0, mags[i], expected[i]),
                what,
            );
        };
        let mut a = build(transposed, true);
        let mut b = build(transposed, true);
        for (i, w) in weights.iter().enumerate() {
            a.set_param_typed("w", &stored(w, transposed)).unwrap();
            check(&mut a, w, &format!("set_param {i}"));
        }
        // b shares a's buffer; a write through a is what b reads next.
        b.bind_param("w", &a.param_buffer("w").unwrap().unwrap()).unwrap();
        check(&mut b, &weights[2], "shared buffer");
        a.set_param_typed("w", &stored(&weights[0], transposed)).unwrap();
        check(&mut b, &weights[0], "shared buffer after a write through the other program");
        let mut c = build(transposed, true);
        c.set_param_typed("w", &stored(&weights[1], transposed)).unwrap();
        b.bind_param("w", &c.param_buffer("w").unwrap().unwrap()).unwrap();
        check(&mut b, &weights[1], "rebound");
    }
}

/// Quantized param weights that the CPU repacks for its 8- and 16-bit activation products
/// (16 rows side by side, where it has the VNNI kernels) follow every change: a new
/// `set_param`, a write through another program sharing the buffer, a rebinding. Each
/// result has the bits of the same weights given as a constant (read where they lie).
#[test]
fn repacked_quantized_weights_follow_every_change() {
    let (m, k, n) = (3, 96, 37);
    let mut rng = Rng::new(41);
    let x: Vec<f32> = (0..m * k).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
    for scheme in [QuantScheme::Q4_0, QuantScheme::Q4_1, QuantScheme::Q5_0, QuantScheme::Q8_0] {
        let row = scheme.row_bytes(k).unwrap();
        let weights: Vec<HostTensor> = (0..3)
            .map(|_| {
                let w: Vec<f32> = (0..n * k).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
                HostTensor::from_bytes(DType::U8, &[n, row], rlx::ir::quant::quantize(scheme, &w).unwrap()).unwrap()
            })
            .collect();
        // y8, y16 = x @ W^T with 8- and 16-bit activations; W a param or a constant.
        let build = |constant: Option<&HostTensor>| {
            let mut g = Graph::new("repacked");
            let xi = g.input("x", DType::F32, &[m, k]).unwrap();
            let w = match constant {
                Some(t) => g.constant_tensor(t.clone()).unwrap(),
                None => g.param("w", DType::U8, &[n, row]).unwrap(),
            };
            let y8 = g.dequant_matmul(xi, w, scheme, ActivationQuant::Q8).unwrap();
            let y16 = g.dequant_matmul(xi, w, scheme, ActivationQuant::Q16).unwrap();
            g.set_outputs(&[y8, y16]).unwrap();
            Session::new(Device::Cpu).unwrap().compile(&g).unwrap()
        };
        let bits = |c: &mut CompiledGraph| -> Vec<u32> {
            c.run(&[("x", &x)]).unwrap().concat().iter().map(|v| v.to_bits()).collect()
        };
        let want: Vec<Vec<u32>> = weights.iter().map(|w| bits(&mut build(Some(w)))).collect();
        assert!(want[0] != want[1], "{}: different weights give different products", scheme.name());
        let (mut a, mut b) = (build(None), build(None));
        for (i, w) in weights.iter().enumerate() {
            a.set_param_typed("w", w).unwrap();
            assert!(bits(&mut a) == want[i], "{}: set_param {i}", scheme.name());
        }
        b.bind_param("w", &a.param_buffer("w").unwrap().unwrap()).unwrap();
        assert!(bits(&mut b) == want[2], "{}: shared buffer", scheme.name());
        a.set_param_typed("w", &weights[0]).unwrap();
        assert!(bits(&mut b) == want[0], "{}: after a write through the other program", scheme.name());
        let mut c = build(None);
        c.set_param_typed("w", &weights[1]).unwrap();
        b.bind_param("w", &c.param_buffer("w").unwrap().unwrap()).unwrap();
        assert!(bits(&mut b) == want[1], "{}: rebound", scheme.name());
    }
}

/// `(x @ Wu^T) * silu(x @ Wg^T)` with quantized weights fuses into one kernel (x quantized
/// once, each column chunk's gate, up and SwiGLU on one worker where both weights take the
/// repacked VNNI kernels; the two products then the SwiGLU elsewhere) and gives the bits
/// of the products apart followed by the fused SwiGLU: schemes alike and mixed, ones without repacked kernels, 8-bit,
/// 16-bit and f32 activations, 1 to 17 rows, 1 and 2 threads, widths not a multiple of 16.
#[test]
fn quantized_swiglu_fuses_with_the_same_bits() {
    let (k, n) = (96, 40);
    let mut rng = Rng::new(57);
    let pairs = [
        (QuantScheme::Q4_1, QuantScheme::Q4_1),
        (QuantScheme::Q4_0, QuantScheme::Q8_0),
        (QuantScheme::Q5_0, QuantScheme::Q4_1),
        (QuantScheme::Q4K, QuantScheme::Q6K),
    ];
    for (gate_scheme, up_scheme) in pairs {
        let (k, n) = if gate_scheme == QuantScheme::Q4K { (256, 24) } else { (k, n) };
        let weight = |rng: &mut Rng, scheme: QuantScheme| {
            let w: Vec<f32> = (0..n * k).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
            HostTensor::from_bytes(
                DType::U8,
                &[n, scheme.row_bytes(k).unwrap()],
                rlx::ir::quant::quantize(scheme, &w).unwrap(),
            )
            .unwrap()
        };
        let (wg, wu) = (weight(&mut rng, gate_scheme), weight(&mut rng, up_scheme));
        for activations in [ActivationQuant::Q8, ActivationQuant::Q16, ActivationQuant::F32] {
            for m in [1, 3, 8, 17] {
                let x: Vec<f32> = (0..m * k).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
                // With the gate product also an output, the products stay apart and only
                // the SwiGLU fuses: the kernels as they were before this fusion.
                let run = |products_apart: bool, threads: usize| {
                    let mut g = Graph::new("quantized_swiglu");
                    let xi = g.input("x", DType::F32, &[m, k]).unwrap();
                    let wgi = g.param("wg", DType::U8, wg.dims()).unwrap();
                    let wui = g.param("wu", DType::U8, wu.dims()).unwrap();
                    let gate = g.dequant_matmul(xi, wgi, gate_scheme, activations).unwrap();
                    let up = g.dequant_matmul(xi, wui, up_scheme, activations).unwrap();
                    let act = g.unary(Unary::Silu, gate).unwrap();
                    let y = g.mul(act, up).unwrap();
                    let outputs = if products_apart { vec![y, gate] } else { vec![y] };
                    g.set_outputs(&outputs).unwrap();
                    let options = CompileOptions::default().with_threads(threads);
                    let plan = rlx::compile::compile(&g, &rlx::compile::Target::CPU, &options).unwrap();
                    let kernels: Vec<_> = plan.schedule.steps.iter().map(|s| s.kernel.clone()).collect();
                    let fused = kernels.iter().any(|k| matches!(k, rlx::compile::Kernel::SwiGluDequant { .. }));
                    assert_eq!(fused, !products_apart, "{kernels:?}");
                    let mut c = Session::new(Device::Cpu).unwrap().compile_with(&g, &options).unwrap();
                    c.set_param_typed("wg", &wg).unwrap();
                    c.set_param_typed("wu", &wu).unwrap();
                    c.run(&[("x", &x)]).unwrap()[0].iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
                };
                let want = run(true, 1);
                let what = format!("{} x {} {activations:?} m {m}", gate_scheme.name(), up_scheme.name());
                assert!(want.iter().any(|&b| f32::from_bits(b) != 0.0), "{what}: all zero");
                for threads in [1, 2] {
                    assert!(run(false, threads) == want, "{what}, {threads} threads: fused differs");
                }
            }
        }
    }
}

/// `act(x @ w + b)` fuses into one kernel that adds the bias and applies the activation
/// to each row segment as the product's task that wrote it finishes (a packed weight) and
/// gives the bits of the three ops apart: 1 to 33 rows (several register tiles), widths
/// of one panel, several, and a partial last one, with and without each activation, 1
/// and 2 threads.
#[test]
fn matmul_bias_activation_fuses_with_the_same_bits() {
    let mut rng = Rng::new(91);
    // The last one large enough for the product to split across threads.
    for (k, n) in [(40, 32), (96, 70), (33, 200), (512, 100)] {
        let w: Vec<f32> = (0..k * n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
        let bias: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
        for m in [1, 5, 17, 33] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
            for act in [None, Some(Unary::Gelu), Some(Unary::Relu), Some(Unary::Tanh)] {
                let run = |fusion: bool, threads: usize| {
                    let mut g = Graph::new("matmul_bias");
                    let xi = g.input("x", DType::F32, &[m, k]).unwrap();
                    let wi = g.param("w", DType::F32, &[k, n]).unwrap();
                    let bi = g.param("b", DType::F32, &[n]).unwrap();
                    let y = g.matmul(xi, wi).unwrap();
                    let mut y = g.add(y, bi).unwrap();
                    if let Some(u) = act {
                        y = g.unary(u, y).unwrap();
                    }
                    g.set_outputs(&[y]).unwrap();
                    let options = CompileOptions::default().with_threads(threads).with_fusion(fusion);
                    let plan = rlx::compile::compile(&g, &rlx::compile::Target::CPU, &options).unwrap();
                    let fused =
                        plan.schedule.steps.iter().any(|s| matches!(s.kernel, rlx::compile::Kernel::MatMulBias { .. }));
                    assert_eq!(
                        fused,
                        fusion,
                        "{:?}",
                        plan.schedule.steps.iter().map(|s| &s.kernel).collect::<Vec<_>>()
                    );
                    let mut c = Session::new(Device::Cpu).unwrap().compile_with(&g, &options).unwrap();
                    c.set_param("w", &w).unwrap();
                    c.set_param("b", &bias).unwrap();
                    c.run(&[("x", &x)]).unwrap()[0].iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
                };
                let want = run(false, 1);
                for threads in [1, 2] {
                    assert!(run(true, threads) == want, "{m} x {k} x {n}, {act:?}, {threads} threads: fused differs");
                }
            }
        }
    }
}
