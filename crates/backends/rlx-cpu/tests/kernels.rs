//! Every ISA arm of every multiversioned kernel against the portable arm (bit for bit)
//! and against an f64 oracle; GEMM against an f64 oracle and, when linked, OpenBLAS.

use rlx_cpu::features::Arm;
use rlx_cpu::kernels::rows;
use rlx_oracle::erfc;

/// Deterministic values in [lo, hi).
fn data(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut rng = rlx_oracle::Rng::new(seed);
    (0..n).map(|_| rng.uniform(lo as f64, hi as f64) as f32).collect()
}

#[test]
fn the_expected_arm_is_in_use() {
    // Set by `cargo xtask qemu-test` (no AVX there): proves the portable arms are exercised.
    if let Ok(want) = std::env::var("RLX_EXPECT_ARM") {
        assert_eq!(Arm::best().name(), want);
    }
}

/// Runs `f` under every arm the host has and checks all agree with the portable one bitwise.
fn all_arms_agree(what: &str, f: impl Fn(Arm) -> Vec<f32>) -> Vec<f32> {
    let portable = f(Arm::Portable);
    for arm in Arm::available() {
        let got = f(arm);
        let same = got.iter().zip(&portable).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
        assert!(same && got.len() == portable.len(), "{what}: arm {} differs from portable", arm.name());
    }
    portable
}

fn assert_close(what: &str, got: &[f32], want: &[f64], tol: impl Fn(usize) -> f64) {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() { g.is_nan() } else { (g as f64 - w).abs() <= tol(i) };
        assert!(ok, "{what}[{i}]: got {g:e}, want {w:e}");
    }
}

/// The f32 -> f16 narrowing of casts and KV-cache appends (F16C, 8 at a time, then a
/// tail) gives what `half::f16::from_f32` gives, on exact ties, subnormals, overflow,
/// inf, NaN and -0.
#[test]
fn f16_narrowing_matches_half_value_by_value() {
    use rlx_cpu::kernels::elementwise::narrow_to_half;
    let mut x = vec![
        0.0f32,
        -0.0,
        1.0,
        1.0 + 1.0 / 2048.0, // a tie: rounds to even (1.0)
        1.0 + 3.0 / 2048.0, // a tie: rounds to even (1.0 + 2 / 1024)
        65504.0,            // largest f16
        65520.0,            // rounds to inf
        -1e9,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        6.0e-8, // f16 subnormal
        2.9e-8, // below half the smallest subnormal: 0
        f32::MIN_POSITIVE,
        -3.3e-5,
    ];
    x.extend(data(37, 5, -70000.0, 70000.0));
    for len in [0, 1, 7, 8, 9, 17, x.len()] {
        let mut got = vec![0u16; len];
        narrow_to_half(rlx_ir::DType::F16, &x[..len], &mut got);
        for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
            let want = half::f16::from_f32(v);
            assert!(g == want.to_bits(), "narrow_to_half of {v:e} (index {i}, length {len}): {g:#06x} vs {want}");
        }
    }
}

/// The decode attention loops: each dot's lanes are halved pairwise, each weighted sum
/// runs over the keys in order, on every arm alike; rows of 1 to 130 values cover the
/// 16-lane tail and the 64-value register blocks.
#[test]
fn decode_attention_loops_on_every_arm() {
    use rlx_cpu::kernels::attention::{scaled_dots, weighted_rows};
    const U: f64 = 5.96e-8;
    for width in [1usize, 3, 15, 16, 17, 64, 70, 130] {
        let keys = 9;
        let q = data(width, width as u64, -2.0, 2.0);
        let k = data(keys * width, 100 + width as u64, -2.0, 2.0);
        let dots = all_arms_agree("scaled_dots", |arm| {
            let mut s = vec![0.0; keys];
            scaled_dots(arm, &q, &k, 0.5, &mut s);
            s
        });
        let probs = data(keys, 200 + width as u64, 0.0, 1.0);
        let sums = all_arms_agree("weighted_rows", |arm| {
            let mut o = vec![f32::NAN; width];
            weighted_rows(arm, &probs, &k, &mut o);
            o
        });
        let row = |j: usize| &k[j * width..(j + 1) * width];
        let want_dots: Vec<f64> =
            (0..keys).map(|j| 0.5 * row(j).iter().zip(&q).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>()).collect();
        let abs_dot = |j: usize| row(j).iter().zip(&q).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum::<f64>();
        assert_close(&format!("scaled_dots width {width}"), &dots, &want_dots, |j| 2.0 * width as f64 * U * abs_dot(j));
        let want_sums: Vec<f64> =
            (0..width).map(|t| (0..keys).map(|j| probs[j] as f64 * row(j)[t] as f64).sum()).collect();
        let abs_sum = |t: usize| (0..keys).map(|j| (probs[j] as f64 * row(j)[t] as f64).abs()).sum::<f64>();
        assert_close(&format!("weighted_rows width {width}"), &sums, &want_sums, |t| {
            2.0 * keys as f64 * U * abs_sum(t)
        });
    }
}

#[test]
fn softmax_and_norm_rows_on_every_arm() {
    const U: f64 = 5.96e-8; // f32 unit roundoff
    for len in [1usize, 3, 15, 16, 17, 100, 1000] {
        let rows_n = 5;
        let mut x = data(rows_n * len, len as u64, -20.0, 20.0);
        if len > 3 {
            x[len + 2] = f32::NAN; // row 1 carries a NaN
        }
        let g = data(len, 7, 0.5, 1.5);
        let b = data(len, 8, -1.0, 1.0);
        let sm = all_arms_agree("softmax_rows", |arm| {
            let mut o = vec![0.0; x.len()];
            rows::softmax_rows(arm, &x, &mut o, len);
            o
        });
        let lsm = all_arms_agree("log_softmax_rows", |arm| {
            let mut o = vec![0.0; x.len()];
            rows::log_softmax_rows(arm, &x, &mut o, len);
            o
        });
        let ln = all_arms_agree("layer_norm_rows", |arm| {
            let mut o = vec![0.0; x.len()];
            rows::layer_norm_rows(arm, &x, &mut o, len, 1e-5, Some(&g), Some(&b));
            o
        });
        let rn = all_arms_agree("rms_norm_rows", |arm| {
            let mut o = vec![0.0; x.len()];
            rows::rms_norm_rows(arm, &x, &mut o, len, 1e-5, Some(&g));
            o
        });
        for r in 0..rows_n {
            let row: Vec<f64> = x[r * len..(r + 1) * len].iter().map(|&v| v as f64).collect();
            let has_nan = row.iter().any(|v| v.is_nan());
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
            let nan_or = |v: f64| if has_nan { f64::NAN } else { v };
            let want_sm: Vec<f64> = row.iter().map(|v| nan_or((v - m).exp() / s)).collect();
            let want_lsm: Vec<f64> = row.iter().map(|v| nan_or(v - m - s.ln())).collect();
            let mean = row.iter().sum::<f64>() / len as f64;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / len as f64;
            let ms = row.iter().map(|v| v * v).sum::<f64>() / len as f64;
            let want_ln: Vec<f64> =
                (0..len).map(|j| (row[j] - mean) / (var + 1e-5).sqrt() * g[j] as f64 + b[j] as f64).collect();
            let want_rn: Vec<f64> = (0..len).map(|j| row[j] / (ms + 1e-5).sqrt() * g[j] as f64).collect();
            let at = r * len;
            let k = len as f64 + 16.0;
            // exp's argument x - max carries |x - max| u of error into a relative error.
            assert_close("softmax", &sm[at..at + len], &want_sm, |j| {
                want_sm[j].abs() * U * (k + 40.0 + (row[j] - m).abs())
            });
            assert_close("log_softmax", &lsm[at..at + len], &want_lsm, |_| U * (k + 80.0));
            assert_close("layer_norm", &ln[at..at + len], &want_ln, |_| U * k * 8.0);
            assert_close("rms_norm", &rn[at..at + len], &want_rn, |_| U * k * 8.0);
        }
    }
}

#[test]
fn fused_activation_rows_on_every_arm() {
    const U: f64 = 5.96e-8;
    for n in [1usize, 7, 16, 33, 1000] {
        let gate = data(n, 1, -12.0, 12.0);
        let up = data(n, 2, -3.0, 3.0);
        let sw = all_arms_agree("swiglu_rows", |arm| {
            let mut o = vec![0.0; n];
            rows::swiglu_rows(arm, &gate, &up, &mut o);
            o
        });
        let want: Vec<f64> =
            gate.iter().zip(&up).map(|(&g, &u)| u as f64 * g as f64 / (1.0 + (-(g as f64)).exp())).collect();
        // silu's relative error (a few u from exp and one division), times |up|.
        assert_close("swiglu", &sw, &want, |i| 16.0 * U * want[i].abs() + 1e-38);
        let len = n.max(1);
        let bias = data(len, 3, -1.0, 1.0);
        let bg = all_arms_agree("bias_gelu_rows", |arm| {
            let mut o = vec![0.0; n];
            rows::bias_gelu_rows(arm, &gate, &bias, &mut o, len);
            o
        });
        let want: Vec<f64> = gate
            .iter()
            .enumerate()
            .map(|(i, &g)| {
                let z = g as f64 + bias[i % len] as f64;
                0.5 * z * erfc(-z / std::f64::consts::SQRT_2)
            })
            .collect();
        // gelu's own error plus the rounding of z = x + bias (|gelu'| <= 1.13) carried through.
        let z = |i: usize| (gate[i] + bias[i % len]).abs() as f64;
        assert_close("bias_gelu", &bg, &want, |i| 16.0 * U * want[i].abs() + 4.0 * U * z(i) + 1e-38);
    }
}

#[test]
fn gemm_matches_f64_and_openblas() {
    use rlx_cpu::kernels::matmul::Gemm;
    for (m, k, n) in [(1, 1, 1), (1, 300, 77), (37, 1000, 13), (64, 64, 64), (129, 65, 257), (5, 0, 3)] {
        let a = data(m * k, 11, -1.0, 1.0);
        let b = data(k * n, 12, -1.0, 1.0);
        let mut c = vec![f32::NAN; m * n];
        f32::gemm_rows(m, k, n, &a, &b, &mut c, 1);
        let (want, mag) = gemm_reference(&a, &b, (m, k, n));
        assert_close("gemm vs f64", &c, &want, |i| (k as f64 + 2.0) * 5.96e-8 * mag[i] + 1e-30);
        // The same product read through transposed storage: a^T stored [k, m], b^T [n, k].
        let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
        let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        let mut ct = vec![f32::NAN; m * n];
        f32::gemm(m, k, n, &at, (1, m), &bt, (1, k), &mut ct, n, 1);
        assert_close("gemm with transposed operands vs f64", &ct, &want, |i| {
            (k as f64 + 2.0) * 5.96e-8 * mag[i] + 1e-30
        });
        let mut blas = vec![0f32; m * n];
        if rlx_cpu::blas::sgemm(m, k, n, &a, &b, &mut blas, 1) {
            let blas64: Vec<f64> = blas.iter().map(|&v| v as f64).collect();
            assert_close("gemm vs openblas", &c, &blas64, |i| 2.0 * (k as f64 + 2.0) * 5.96e-8 * mag[i] + 1e-30);
        }
    }
}

/// The packed-weight product against an f64 reference at every tail of its 8- and 12-row
/// tiles (6-row tiles on AVX2) and 32-column panels (16-column halves on AVX2), with the
/// weight read row-major and transposed; each output is the f32 FMA chain over k in order
/// (through AVX2's runs of k too), and each output row is bit for bit the same whatever
/// the number of rows around it (across passes over `a` too), the thread count, the arm or
/// the AVX-512 tile shape (AMD's and Intel's, both run on any AVX-512 CPU).
#[test]
fn packed_gemm_matches_f64_at_every_tail() {
    use rlx_cpu::kernels::packed_gemm::{Avx512Tile, Panels, available};
    let arms: Vec<(Arm, Avx512Tile)> = Arm::available()
        .into_iter()
        .filter(|&arm| available(arm))
        .flat_map(|arm| [(arm, Avx512Tile::Amd), (arm, Avx512Tile::Intel)])
        .filter(|&(arm, tile)| arm == Arm::Avx512 || tile == Avx512Tile::Amd)
        .collect();
    if arms.is_empty() {
        eprintln!("packed_gemm needs AVX2 or AVX-512: not tested on this CPU");
        return;
    }
    let pool = rlx_cpu::threads::pool(2).unwrap();
    // 1100: past the depth AVX2 takes in one run (runs of 367, each output's chain stored
    // between them).
    for k in [0, 1, 3, 17, 1000, 1100] {
        for n in [1, 3, 17, 31, 32, 33, 100] {
            let b = data(k * n, 21, -1.0, 1.0);
            let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k.max(1)) * n + i / k.max(1)]).collect();
            let row_major = Panels::pack(&b, (k, n), (n, 1)).unwrap();
            let transposed = Panels::pack(&bt, (k, n), (1, k)).unwrap();
            // 300 rows: more than one of `gemm`'s 1 MiB passes over `a` at k = 1000.
            for m in [1, 3, 5, 7, 8, 9, 12, 13, 17, 33, 300] {
                let a = data(m * k, 22, -1.0, 1.0);
                let (want, mag) = gemm_reference(&a, &b, (m, k, n));
                let mut first_arm: Option<Vec<f32>> = None;
                for &(arm, tile) in &arms {
                    let gemm = |m, a: &[f32], sa, panels, c: &mut [f32], c_row, threads| {
                        rlx_cpu::kernels::packed_gemm::gemm((arm, tile), m, a, sa, panels, c, c_row, threads)
                    };
                    // Output rows 3 floats wider than n: writes past a row's n columns show.
                    let mut padded = vec![f32::NAN; m * (n + 3)];
                    gemm(m, &a, (k, 1), &row_major, &mut padded, n + 3, 1);
                    let what = format!("packed gemm {m}x{k}x{n} on {} ({tile:?})", arm.name());
                    assert!(
                        padded.chunks(n + 3).all(|row| row[n..].iter().all(|v| v.is_nan())),
                        "{what}: wrote past n"
                    );
                    let c: Vec<f32> = padded.chunks(n + 3).flat_map(|row| row[..n].to_vec()).collect();
                    assert_close(&what, &c, &want, |i| (k as f64 + 2.0) * 5.96e-8 * mag[i] + 1e-30);
                    // Each output is one FMA chain over k in order, on every arm.
                    let chain: Vec<f32> = (0..m * n)
                        .map(|i| (0..k).fold(0f32, |acc, p| a[i / n * k + p].mul_add(b[p * n + i % n], acc)))
                        .collect();
                    assert_eq!(bits(&c), bits(&chain), "{what}: not one FMA chain a output");
                    let mut ct = vec![f32::NAN; m * n];
                    pool.install(|| gemm(m, &a, (k, 1), &transposed, &mut ct, n, 2));
                    assert_eq!(bits(&ct), bits(&c), "{what}: transposed weight on 2 threads");
                    // Row 0 alone gives the bits it had among m rows; so does a strided `a`
                    // (a^T stored [k, m]).
                    let mut one = vec![f32::NAN; n];
                    gemm(1, &a, (k, 1), &row_major, &mut one, n, 1);
                    assert_eq!(bits(&one), bits(&c[..n]), "{what}: row 0 alone");
                    gemm(1, &a[(m - 1) * k..], (k, 1), &row_major, &mut one, n, 1);
                    assert_eq!(bits(&one), bits(&c[(m - 1) * n..]), "{what}: the last row alone");
                    let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
                    let mut cs = vec![f32::NAN; m * n];
                    gemm(m, &at, (1, m), &row_major, &mut cs, n, 1);
                    assert_eq!(bits(&cs), bits(&c), "{what}: a read transposed");
                    match &first_arm {
                        Some(first) => assert_eq!(bits(&c), bits(first), "{what}: differs from {}", arms[0].0.name()),
                        None => first_arm = Some(c),
                    }
                }
            }
        }
    }
}

/// A compiled product against an f32 param weight gives each row the bits it has alone,
/// whatever the batch around it: 1, 17 and 300 rows (past one pass of the packed
/// product's row chunks), the weight plain and transposed, on 1 and 2 threads.
#[test]
fn param_products_give_a_row_the_same_bits_in_every_batch() {
    use rlx_compile::CompileOptions;
    use rlx_cpu::CpuProgram;
    use rlx_ir::{DType, Graph, HostTensor};
    if !rlx_cpu::kernels::packed_gemm::available(Arm::best()) {
        eprintln!("products read the weight packed only with AVX2 or AVX-512: not tested on this CPU");
        return;
    }
    // k past the `gemm` crate's depth blocks (which sum a product in pieces).
    let (k, n) = (1100, 45);
    let w = data(k * n, 51, -1.0, 1.0);
    let x = data(300 * k, 52, -1.0, 1.0);
    // x @ w for the rows of `x` given, one program each.
    let product = |x: &[f32], transposed: bool, threads: usize| -> Vec<f32> {
        let rows = x.len() / k;
        let mut g = Graph::new("param product");
        let xi = g.input("x", DType::F32, &[rows, k]).unwrap();
        let wi = if transposed {
            let wt = g.param("w", DType::F32, &[n, k]).unwrap();
            g.transpose(wt, &[1, 0]).unwrap()
        } else {
            g.param("w", DType::F32, &[k, n]).unwrap()
        };
        let y = g.matmul(xi, wi).unwrap();
        g.set_outputs(&[y]).unwrap();
        let mut program = CpuProgram::compile(&g, &CompileOptions::default(), threads).unwrap();
        let (dims, stored) = if transposed {
            ([n, k], (0..n * k).map(|i| w[(i % k) * n + i / k]).collect())
        } else {
            ([k, n], w.clone())
        };
        program.set_param(0, &HostTensor::from_f32(&dims, &stored).unwrap()).unwrap();
        let input = HostTensor::from_f32(&[rows, k], x).unwrap();
        program.run(&[input.view()]).unwrap().remove(0).to_f32_vec()
    };
    for transposed in [false, true] {
        let what = format!("x @ w (w transposed: {transposed})");
        let all = product(&x, transposed, 2);
        let (want, mag) = gemm_reference(&x, &w, (300, k, n));
        assert_close(&what, &all, &want, |i| (k as f64 + 2.0) * 5.96e-8 * mag[i] + 1e-30);
        assert_eq!(bits(&product(&x, transposed, 1)), bits(&all), "{what}: 1 thread");
        assert_eq!(bits(&product(&x[..17 * k], transposed, 2)), bits(&all[..17 * n]), "{what}: 17 rows");
        for row in [0, 299] {
            let alone = product(&x[row * k..(row + 1) * k], transposed, 1);
            assert_eq!(bits(&alone), bits(&all[row * n..(row + 1) * n]), "{what}: row {row} alone");
        }
    }
}

/// f32 products with few outputs over a long inner dimension, `b` read transposed (the
/// shape of a small conv's weight gradient, which take one dot product per output):
/// against f64, written and accumulated, with tails of the 16-value steps, a NaN and an
/// infinity; one thread and two alike.
#[test]
fn few_long_dot_products_match_f64() {
    use rlx_cpu::kernels::matmul::Gemm;
    let pool = rlx_cpu::threads::pool(2).unwrap();
    for (m, k, n) in [(1, 256, 1), (3, 1000, 17), (9, 4096, 32), (16, 257, 32), (2, 300, 256)] {
        let a = data(m * k, 41, -1.0, 1.0);
        let mut bt = data(n * k, 42, -1.0, 1.0);
        // b^T row j holds column j of b.
        let b: Vec<f32> = (0..k * n).map(|i| bt[(i % n) * k + i / n]).collect();
        let (want, mag) = gemm_reference(&a, &b, (m, k, n));
        let what = format!("{m}x{k}x{n}");
        let mut c = vec![f32::NAN; m * n];
        f32::gemm_acc(m, k, n, &a, (k, 1), &bt, (1, k), &mut c, n, 1, false);
        assert_close(&what, &c, &want, |i| (k as f64 + 2.0) * 5.96e-8 * mag[i] + 1e-30);
        let mut two = vec![f32::NAN; m * n];
        pool.install(|| f32::gemm_acc(m, k, n, &a, (k, 1), &bt, (1, k), &mut two, n, 2, false));
        assert_eq!(bits(&two), bits(&c), "{what}: 2 threads");
        // Accumulating onto c doubles it (each addition of equal values is exact).
        f32::gemm_acc(m, k, n, &a, (k, 1), &bt, (1, k), &mut two, n, 1, true);
        assert_eq!(bits(&two), bits(&c.iter().map(|v| v * 2.0).collect::<Vec<_>>()), "{what}: accumulated");
        // A NaN in b's last column, an infinity in its first: only those outputs change.
        bt[(n - 1) * k + k - 1] = f32::NAN;
        bt[0] = f32::INFINITY;
        f32::gemm_acc(m, k, n, &a, (k, 1), &bt, (1, k), &mut c, n, 1, false);
        for i in 0..m {
            assert!(c[i * n + n - 1].is_nan(), "{what}: NaN in b");
            assert!(c[i * n].is_infinite() || (n == 1 && c[i * n].is_nan()), "{what}: inf in b");
        }
    }
}

/// `a [m, k] @ b [k, n]` in f64, and the sum of |terms| of each output.
fn gemm_reference(a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize)) -> (Vec<f64>, Vec<f64>) {
    let (mut want, mut mag) = (vec![0f64; m * n], vec![0f64; m * n]);
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                let t = a[i * k + p] as f64 * b[p * n + j] as f64;
                want[i * n + j] += t;
                mag[i * n + j] += t.abs();
            }
        }
    }
    (want, mag)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}
