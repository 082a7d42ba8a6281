//! `dequant_matmul` on every scheme and arm against an f64 oracle: weights decoded by
//! `rlx_oracle::quant` (written separately from `rlx_ir::quant` and the kernels), the
//! 8- and 16-bit activation quantizations re-derived here from their definition, products
//! summed in f64.

use rlx_cpu::features::Arm;
use rlx_cpu::kernels::quant_matmul::{QuantMatMulPlan, dequant_matmul_into};
use rlx_ir::ActivationQuant;
use rlx_ir::quant::QuantScheme;
use rlx_oracle::Rng;

/// Byte offsets of each block's f16 scale fields (set to sane values so blocks decode to
/// finite numbers; every other byte is random).
fn scale_fields(s: QuantScheme) -> &'static [usize] {
    match s {
        QuantScheme::Q4_0 | QuantScheme::Q5_0 | QuantScheme::Q8_0 => &[0],
        QuantScheme::Q4_1 | QuantScheme::Q5_1 | QuantScheme::Q4K | QuantScheme::Q5K => &[0, 2],
        QuantScheme::Q2K => &[80, 82],
        QuantScheme::Q3K => &[108],
        QuantScheme::Q6K => &[208],
        _ => &[],
    }
}

/// `n` random weight rows of `k` values in `scheme`.
fn random_weights(rng: &mut Rng, s: QuantScheme, n: usize, k: usize) -> Vec<u8> {
    let (bs, bb) = (s.block_size(), s.block_bytes());
    let mut w = Vec::with_capacity(n * k / bs * bb);
    for _ in 0..n * k / bs {
        let mut block: Vec<u8> = (0..bb).map(|_| rng.int(0, 255) as u8).collect();
        match s {
            QuantScheme::F32 => block = (rng.uniform(-1.0, 1.0) as f32).to_le_bytes().to_vec(),
            QuantScheme::F16 => block = half::f16::from_f64(rng.uniform(-1.0, 1.0)).to_le_bytes().to_vec(),
            QuantScheme::BF16 => block = half::bf16::from_f64(rng.uniform(-1.0, 1.0)).to_le_bytes().to_vec(),
            QuantScheme::Q8K => block[..4].copy_from_slice(&(rng.uniform(-0.05, 0.05) as f32).to_le_bytes()),
            _ => {}
        }
        for &at in scale_fields(s) {
            block[at..at + 2].copy_from_slice(&half::f16::from_f64(rng.uniform(-0.05, 0.05)).to_le_bytes());
        }
        w.extend(block);
    }
    w
}

fn decode_rows(s: QuantScheme, w: &[u8]) -> Vec<f64> {
    w.chunks(s.block_bytes()).flat_map(|b| rlx_oracle::quant::decode_f64(s.name(), b)).collect()
}

/// The quantized activation semantics, from the op's documentation: per block of 32,
/// `d = max|x| / levels` (127 or 32767) and `q = round_half_away(x * (1 / d))`, in f32;
/// returns `q * d` (`x` itself for f32).
fn act_reference(x: &[f32], act: ActivationQuant) -> Vec<f64> {
    let Some(levels) = act.levels() else { return x.iter().map(|&v| v as f64).collect() };
    x.chunks(32)
        .flat_map(|block| {
            let amax = block.iter().map(|v| v.abs()).fold(0f32, f32::max);
            let d = amax / levels;
            let inv = if d == 0.0 { 0.0 } else { 1f32 / d };
            block.iter().map(move |&v| {
                let t = (v * inv) as f64;
                let q = t.signum() * (t.abs() + 0.5).floor();
                q * d as f64
            })
        })
        .collect()
}

/// Runs the kernel and checks every element against the f64 product: within the f32
/// summation bound (2 ulps per addition along the longest chain) of sum |x_j w_j|.
fn check(s: QuantScheme, m: usize, k: usize, n: usize, act: ActivationQuant, seed: u64) {
    let mut rng = Rng::new(seed);
    let w = random_weights(&mut rng, s, n, k);
    let x: Vec<f32> = (0..m * k).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
    let wd = decode_rows(s, &w);
    let xd: Vec<f64> = x.chunks(k).flat_map(|row| act_reference(row, act)).collect();
    let plan = QuantMatMulPlan::new(&[m, k], &[n, w.len() / n], s, act, 1);
    for arm in Arm::available() {
        let mut out = vec![f32::NAN; m * n];
        dequant_matmul_into(&plan, arm, &x, &w, &mut out).unwrap();
        for i in 0..m {
            for j in 0..n {
                let terms = (0..k).map(|p| xd[i * k + p] * wd[j * k + p]);
                let (want, mag) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                let tol = (k as f64 / 16.0 + 40.0) * 2.0 * f32::EPSILON as f64 * mag + 1e-30;
                let got = out[i * n + j] as f64;
                assert!(
                    (got - want).abs() <= tol,
                    "{} m{m} k{k} n{n} {act:?} arm {}: out[{i},{j}] = {got}, f64 {want} (tol {tol:.2e})",
                    s.name(),
                    arm.name()
                );
            }
        }
    }
}

#[test]
fn every_scheme_matches_the_f64_oracle() {
    for (i, s) in QuantScheme::ALL.into_iter().enumerate() {
        let bs = s.block_size().max(32);
        // Odd block counts exercise the pair kernels' tails; m <= 8 is the GEMV, m = 9 the
        // direct tile product on AVX2 and AVX-512 and the tiled GEMM on the portable arm (or, with
        // q8, that many quantized rows).
        for (m, blocks, n) in [(1, 1, 1), (1, 3, 17), (5, 2, 3), (2, 19, 9), (9, 3, 5)] {
            let k = blocks * bs;
            for act in [ActivationQuant::F32, ActivationQuant::Q8, ActivationQuant::Q16] {
                check(s, m, k, n, act, 100 + i as u64 * 7 + m as u64);
            }
        }
    }
}

#[test]
fn long_rows_and_tiles_match_the_oracle() {
    // k = 1536 (SmolLM2's FFN), n past one GEMM tile (1024 rows).
    check(QuantScheme::Q4_1, 12, 1536, 1030, ActivationQuant::F32, 1);
    check(QuantScheme::Q4_1, 7, 576, 130, ActivationQuant::F32, 5);
    // The direct tile product's widest case, past one tile and one chunk of weight rows,
    // and the first row count that goes to the GEMM everywhere.
    check(QuantScheme::Q4_1, 128, 576, 141, ActivationQuant::F32, 13);
    check(QuantScheme::Q8_0, 129, 576, 70, ActivationQuant::F32, 14);
    check(QuantScheme::Q4_1, 1, 1536, 65, ActivationQuant::Q8, 2);
    check(QuantScheme::Q8_0, 1, 576, 33, ActivationQuant::Q8, 3);
    check(QuantScheme::Q4_0, 3, 576, 20, ActivationQuant::Q8, 4);
    // Gemma 3 270M's shapes for the unpacked-integer kernels (q8) and the lane decoders
    // (f32 GEMV and tiles).
    check(QuantScheme::Q5_0, 1, 640, 37, ActivationQuant::Q8, 6);
    check(QuantScheme::Q4K, 1, 1024, 21, ActivationQuant::Q8, 7);
    check(QuantScheme::Q6K, 1, 2048, 19, ActivationQuant::Q8, 8);
    check(QuantScheme::Q5_1, 2, 640, 9, ActivationQuant::Q8, 9);
    check(QuantScheme::Q5K, 1, 512, 11, ActivationQuant::Q8, 10);
    // Gemma 3 270M's ffn_down and attn_output re-quantized by llama-quantize as Q2_K / Q3_K.
    check(QuantScheme::Q3K, 3, 2048, 35, ActivationQuant::Q8, 15);
    check(QuantScheme::Q2K, 9, 1024, 21, ActivationQuant::Q8, 16);
    check(QuantScheme::Q3K, 40, 2048, 50, ActivationQuant::Q16, 17);
    // Float weights, one activation row (the GEMV by runs of 32), with a tail.
    for (i, s) in [QuantScheme::F32, QuantScheme::F16, QuantScheme::BF16].into_iter().enumerate() {
        check(s, 1, 577, 19, ActivationQuant::F32, 18 + i as u64);
        check(s, 3, 45, 5, ActivationQuant::F32, 21 + i as u64);
    }
    check(QuantScheme::Q5_0, 6, 640, 33, ActivationQuant::F32, 11);
    check(QuantScheme::Q6K, 12, 2048, 20, ActivationQuant::F32, 12);
}

/// The 16-bit path's integer GEMM (2 rows and more on AVX-512 VNNI hosts, past 8 rows on
/// AVX2 ones; the f32 kernels on restored rows elsewhere): every scheme it unpacks, panels of 48 columns with a
/// partial last one, 4-row tiles with a tail.
#[test]
fn q16_gemm_matches_the_oracle() {
    // (The schemes the integer GEMM unpacks are the ones `q8_packed` repacks.)
    for (i, s) in REPACKED.into_iter().enumerate() {
        let k = if s.block_size() == 256 { 512 } else { 96 };
        // 2-row tiles and a last row on AVX2; past one direct tile product (128 rows).
        for (m, n) in [(2, 1), (5, 17), (35, 97), (131, 19)] {
            check(s, m, k, n, ActivationQuant::Q16, 200 + i as u64 * 5 + n as u64);
        }
    }
    check(QuantScheme::Q6K, 64, 2048, 49, ActivationQuant::Q16, 300);
    check(QuantScheme::Q5_0, 36, 640, 256, ActivationQuant::Q16, 301);
}

/// 16-bit activations are quantized, not used as f32: in a block whose largest value is
/// 32767 the scale is 1, so 0.4 drops to 0 and halves round away from zero; the product
/// is exactly the integers' (`check`'s tolerance could not tell f32 from 16 bits on random
/// data: the quantization error is ~1e-5 of a block's maximum).
#[test]
fn q16_activations_round_to_integers_of_the_block_scale() {
    let mut rng = Rng::new(21);
    let (k, n) = (64, 19);
    let mut x = vec![0f32; k];
    x[..8].copy_from_slice(&[32767.0, 0.4, 0.5, -0.5, 2.5, -2.5, 1.49, -7.0]);
    x[32] = -1000.0; // second block: scale 1000 / 32767
    x[33] = 0.01;
    for s in [QuantScheme::Q8_0, QuantScheme::Q4_1, QuantScheme::Q6K] {
        let k = k.max(s.block_size());
        x.resize(k, 0.0);
        let w = random_weights(&mut rng, s, n, k);
        let wd = decode_rows(s, &w);
        let q = act_reference(&x, ActivationQuant::Q16);
        assert_eq!(&q[..8], &[32767.0, 0.0, 1.0, -1.0, 3.0, -3.0, 1.0, -7.0]);
        for m in [1, 3] {
            let xs = x.repeat(m);
            let plan = QuantMatMulPlan::new(&[m, k], &[n, w.len() / n], s, ActivationQuant::Q16, 1);
            // Per column: the 16-bit product, the f32 product and the tolerance.
            let refs: Vec<(f64, f64, f64)> = (0..n)
                .map(|j| {
                    let row = &wd[j * k..][..k];
                    let want: f64 = q.iter().zip(row).map(|(a, b)| a * b).sum();
                    let exact: f64 = x.iter().zip(row).map(|(&a, b)| a as f64 * b).sum();
                    (want, exact, 1e-5 * q.iter().zip(row).map(|(a, b)| (a * b).abs()).sum::<f64>())
                })
                .collect();
            let apart = refs.iter().filter(|(want, exact, tol)| (want - exact).abs() > 2.0 * tol).count();
            assert!(apart > n / 2, "{}: only {apart} columns tell 16 bits from f32", s.name());
            for arm in Arm::available() {
                let mut out = vec![f32::NAN; m * n];
                dequant_matmul_into(&plan, arm, &xs, &w, &mut out).unwrap();
                for (j, &got) in out.iter().enumerate() {
                    let (want, exact, tol) = refs[j % n];
                    let got = got as f64;
                    assert!(
                        (got - want).abs() <= tol && ((want - exact).abs() <= 2.0 * tol || (got - exact).abs() > tol),
                        "{} m {m} {}: out[{j}] = {got}, 16-bit product {want}, f32 product {exact}",
                        s.name(),
                        arm.name()
                    );
                }
            }
        }
    }
}

#[test]
fn q8_activations_are_not_the_f32_product() {
    // The q8 path must quantize: its result differs from the f32 product by more than the
    // rounding bound on random data (a kernel ignoring the flag fails `check` above; this
    // makes sure the two oracles are far enough apart for that to be a real test).
    let mut rng = Rng::new(9);
    let (k, n) = (256, 4);
    let w = random_weights(&mut rng, QuantScheme::Q4_1, n, k);
    let x: Vec<f32> = (0..k).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
    let wd = decode_rows(QuantScheme::Q4_1, &w);
    let (exact, quant) = (x.iter().map(|&v| v as f64).collect::<Vec<_>>(), act_reference(&x, ActivationQuant::Q8));
    let dot = |a: &[f64], j: usize| (0..k).map(|p| a[p] * wd[j * k + p]).sum::<f64>();
    let gap = (0..n).map(|j| (dot(&exact, j) - dot(&quant, j)).abs()).fold(0.0, f64::max);
    assert!(gap > 1e-4, "q8 and f32 products differ by only {gap}");
}

/// A zero activation row gives zeros and a NaN gives NaN in every output, on every arm,
/// path and activation width, with and without a repacked copy of the weight.
#[test]
fn nan_propagates_and_zero_rows_stay_zero() {
    use rlx_cpu::kernels::q8_packed::{Packed, available};
    let mut rng = Rng::new(5);
    let (k, n) = (64, 3);
    for s in REPACKED {
        let k = k.max(s.block_size());
        let w = random_weights(&mut rng, s, n, k);
        let packed = std::sync::Arc::new(Packed::new(s, &w, n, k, None));
        for arm in Arm::available() {
            for act in [ActivationQuant::F32, ActivationQuant::Q8, ActivationQuant::Q16] {
                for repacked in [false, true].into_iter().filter(|&r| !r || available(s, arm)) {
                    let mut plan = QuantMatMulPlan::new(&[1, k], &[n, w.len() / n], s, act, 1);
                    plan.packed = repacked.then(|| packed.clone());
                    let mut x = vec![0f32; k];
                    let mut out = vec![1f32; n];
                    let case = format!("{} ({}, {act:?}, repacked {repacked})", s.name(), arm.name());
                    dequant_matmul_into(&plan, arm, &x, &w, &mut out).unwrap();
                    assert!(out.iter().all(|&v| v == 0.0), "{case}: zero row -> {out:?}");
                    x[k - 1] = f32::NAN;
                    dequant_matmul_into(&plan, arm, &x, &w, &mut out).unwrap();
                    assert!(out.iter().all(|v| v.is_nan()), "{case}: NaN row -> {out:?}");
                }
            }
        }
    }
}

#[test]
fn bad_sizes_are_errors() {
    let plan = QuantMatMulPlan::new(&[1, 64], &[2, 40], QuantScheme::Q4_1, ActivationQuant::F32, 1);
    let mut out = vec![0f32; 2];
    let err = dequant_matmul_into(&plan, Arm::Portable, &[0.0; 64], &[0; 39], &mut out).unwrap_err();
    assert!(err.to_string().contains("Q4_1"), "{err}");
}

#[test]
fn results_are_bit_identical_across_thread_counts() {
    let mut rng = Rng::new(11);
    // Big enough for every path to split: q8 decode, GEMV (m <= 8) and tiled GEMM.
    let (k, n) = (576, 1100);
    let w = random_weights(&mut rng, QuantScheme::Q4_1, n, k);
    for (m, act) in [
        (1, ActivationQuant::Q8),
        (3, ActivationQuant::F32),
        (1, ActivationQuant::F32),
        (20, ActivationQuant::F32),
        (3, ActivationQuant::Q16),
        (50, ActivationQuant::Q16),
        // Enough values that the rows are quantized on all threads.
        (130, ActivationQuant::Q16),
    ] {
        let x: Vec<f32> = (0..m * k).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
        let run = |threads: usize| {
            let plan = QuantMatMulPlan::new(&[m, k], &[n, w.len() / n], QuantScheme::Q4_1, act, threads);
            let mut out = vec![0f32; m * n];
            rlx_cpu::threads::pool(threads)
                .unwrap()
                .install(|| dequant_matmul_into(&plan, Arm::best(), &x, &w, &mut out))
                .unwrap();
            out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        let one = run(1);
        for threads in [2, 3] {
            assert!(run(threads) == one, "m {m} {act:?}: {threads} threads differ from 1");
        }
    }
    // A K-quant, whose group terms sum 16 quants at a time, quantized on all threads.
    let (k, n, m) = (512, 300, 130);
    let w = random_weights(&mut rng, QuantScheme::Q6K, n, k);
    let x: Vec<f32> = (0..m * k).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
    let one = product_bits(QuantScheme::Q6K, ActivationQuant::Q16, (&w, n), &x, 1);
    assert!(product_bits(QuantScheme::Q6K, ActivationQuant::Q16, (&w, n), &x, 2) == one, "Q6_K: 2 threads differ");
}

/// The bits of `x @ w^T` for the `n` weight rows `w` in `scheme`, on the best arm and
/// `threads` workers.
fn product_bits(
    scheme: QuantScheme,
    act: ActivationQuant,
    (w, n): (&[u8], usize),
    x: &[f32],
    threads: usize,
) -> Vec<u32> {
    let k = w.len() / n / scheme.block_bytes() * scheme.block_size();
    let rows = x.len() / k;
    let plan = QuantMatMulPlan::new(&[rows, k], &[n, w.len() / n], scheme, act, threads);
    let mut out = vec![0f32; rows * n];
    rlx_cpu::threads::pool(threads)
        .unwrap()
        .install(|| dequant_matmul_into(&plan, Arm::best(), x, w, &mut out))
        .unwrap();
    out.iter().map(|v| v.to_bits()).collect()
}

/// A batched decode step's 8-bit matmul: each of `m` activation rows gets, bit for bit,
/// what it gets alone (`m = 1`), whatever else is in the batch and however many threads
/// share it (what makes a server's answers independent of its other requests). Odd
/// widths and batch sizes cover the kernels' remainders (weight rows past a group, the
/// last activation rows of a pass, an odd block count).
#[test]
fn each_row_of_a_q8_batch_equals_that_row_alone() {
    let mut rng = Rng::new(12);
    // (Q3_K: the schemes decoded to f32 for all rows of a pass, `rows_decoded`.)
    for scheme in [
        QuantScheme::Q4_0,
        QuantScheme::Q4_1,
        QuantScheme::Q8_0,
        QuantScheme::Q5_0,
        QuantScheme::Q4K,
        QuantScheme::Q6K,
        QuantScheme::Q3K,
    ] {
        let k = if scheme.block_size() == 256 { 512 } else { 608 };
        for n in [1, 3, 17, 1000] {
            let w = random_weights(&mut rng, scheme, n, k);
            for m in [2, 3, 5, 6, 7, 8, 9, 17] {
                let x: Vec<f32> = (0..m * k).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
                let run = |x: &[f32], threads| product_bits(scheme, ActivationQuant::Q8, (&w, n), x, threads);
                let alone: Vec<u32> = x.chunks(k).flat_map(|row| run(row, 1)).collect();
                for threads in [1, 2] {
                    let batch = run(&x, threads);
                    assert!(
                        batch == alone,
                        "{} n {n} m {m} threads {threads}: a row differs from its solo result",
                        scheme.name()
                    );
                }
            }
        }
    }
}

/// A prompt's 16-bit product: each activation row gets the same bits in a product of any
/// number of rows and threads. Up to 32 rows (16 with AVX2 alone) the packable schemes dot
/// the repacked weights in place, past it they go through the panel GEMM: both give the same integer block sums
/// and the same f32 steps, which this checks (as it checks that where a prompt is cut into
/// pieces does not change its answer). Where the integer GEMM runs at every row count
/// (AVX-512 VNNI) for any rows; with AVX2 alone for products of more than 8 rows (up to 8
/// are restored to f32 for the GEMV, whose last bits differ).
#[test]
fn each_row_of_a_q16_product_equals_that_row_alone() {
    let mut rng = Rng::new(13);
    let any_rows = rlx_cpu::kernels::quant_gemm::vnni(Arm::best());
    for scheme in [QuantScheme::Q4_0, QuantScheme::Q4_1, QuantScheme::Q8_0, QuantScheme::Q5_0, QuantScheme::Q4K] {
        if !rlx_cpu::kernels::quant_gemm::available(scheme, Arm::best()) {
            continue;
        }
        let k = if scheme.block_size() == 256 { 512 } else { 608 };
        for n in [1, 3, 17, 1000] {
            let w = random_weights(&mut rng, scheme, n, k);
            let m = 41;
            // Rows of random values with, in row 0, blocks whose largest magnitude is
            // negative (quants down to -32767: high byte -128) or positive (32767: low
            // byte 255).
            let mut x: Vec<f32> = (0..m * k).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
            x[0] = -1000.0;
            x[32] = 1000.0;
            let run = |x: &[f32], threads| product_bits(scheme, ActivationQuant::Q16, (&w, n), x, threads);
            let all = run(&x, 1);
            for (rows, threads) in [(1, 1), (3, 2), (8, 1), (17, 2), (32, 1), (33, 2)] {
                for (c, xs) in x.chunks(rows * k).enumerate().filter(|(_, xs)| any_rows || xs.len() / k > 8) {
                    let first = c * rows * n;
                    assert!(
                        run(xs, threads) == all[first..][..xs.len() / k * n],
                        "{} n {n}: rows {}.. in a product of {rows} rows ({threads} threads) differ from a product of {m}",
                        scheme.name(),
                        c * rows
                    );
                }
            }
        }
    }
}

/// Blocks of 32 for the activation quantizers: 40 of random values, then (block 40) exact
/// halves under a largest value of `levels` (scale 1, so the products are the values), zeros,
/// signed denormals, a NaN, an infinity, huge values, and a denormal scale (its inverse
/// overflows to inf: the products are +-inf, or 0 * inf).
fn quantizer_blocks(seed: u64, levels: f32) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(seed);
    let mut blocks: Vec<Vec<f32>> = (0..40).map(|_| (0..32).map(|_| rng.uniform(-3.0, 3.0) as f32).collect()).collect();
    let mut halves: Vec<f32> =
        vec![levels, -2.5, 2.5, -0.5, 0.5, 1.5, 0.5 - levels, 0.49999997, -0.49999997, 3.4999998];
    halves.resize(32, -0.0);
    blocks.push(halves);
    blocks.push(vec![0.0; 32]);
    blocks.push((0..32).map(|i| f32::from_bits(i + 1) * if i % 2 == 0 { 1.0 } else { -1.0 }).collect());
    blocks.push((0..32).map(|i| if i == 7 { f32::NAN } else { i as f32 }).collect());
    blocks.push((0..32).map(|i| if i == 30 { f32::NEG_INFINITY } else { i as f32 }).collect());
    blocks.push((0..32).map(|i| 1e30 * (i as f32 - 15.5)).collect());
    blocks.push((0..32).map(|i| 6.5e-40 * (i as f32 - 15.5)).collect());
    blocks
}

/// Every arm's activation quantizer gives the portable loop's bits (values, scales, sums,
/// both layouts), on blocks of random values, exact halves, denormals, zeros, NaN, inf and
/// huge values; the halves round away from zero, a block holding NaN or inf gives zeros.
#[test]
fn every_arm_quantizes_activations_to_the_portable_bits() {
    use rlx_cpu::kernels::quant_matmul::{QuantizeFn, quantize_kernel, quantize_q8_row};
    let mut blocks = quantizer_blocks(5, 127.0);
    blocks.push((0..32).map(|i| if i == 3 { 0.0 } else { 1e-38 }).collect());
    let x: Vec<f32> = blocks.concat();
    let nb = blocks.len();
    let quantize = |f: QuantizeFn, pairs: bool| {
        let (mut q, mut d, mut s) = (vec![0i8; x.len()], vec![0f32; nb], vec![0f32; nb]);
        f(&x, &mut q, &mut d, &mut s, pairs);
        (q, d.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), s.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
    };
    let (q, _, _) = quantize(quantize_q8_row, false);
    let at = |b: usize| &q[b * 32..][..32];
    assert_eq!(&at(40)[..10], &[127, -3, 3, -1, 1, 2, -127, 0, 0, 3]);
    assert!(at(41).iter().chain(at(43)).chain(at(44)).all(|&v| v == 0));
    assert_eq!((at(46)[0], at(46)[31], at(47)[3], at(47)[4]), (-128, 127, 0, 127));
    for pairs in [false, true] {
        let want = quantize(quantize_q8_row, pairs);
        for arm in Arm::available() {
            assert!(quantize(quantize_kernel(arm), pairs) == want, "{arm:?} pairs {pairs}: bits differ");
        }
    }
}

/// Every arm's 16-bit activation quantizer gives the portable loop's bits, and the values
/// follow the definition (`f32::round` of `x * (1 / d)`, saturated; a NaN product 0) on
/// random values, exact halves, denormals, NaN, inf and huge values.
#[test]
fn every_arm_quantizes_activations_to_16_bits_alike() {
    use rlx_cpu::kernels::quant_matmul::quantize_q16_row;
    let blocks = quantizer_blocks(6, 32767.0);
    let x: Vec<f32> = blocks.concat();
    let nb = blocks.len();
    let quantize = |arm: Arm| {
        let (mut q, mut d, mut s) = (vec![0i16; x.len()], vec![0f32; nb], vec![0f32; nb]);
        quantize_q16_row(arm, &x, &mut q, &mut d, &mut s);
        (q, d.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), s.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
    };
    let want = quantize(Arm::Portable);
    for (b, block) in blocks.iter().enumerate() {
        let amax = block.iter().fold(0f32, |m, &v| if v.abs() > m || v.is_nan() { v.abs() } else { m });
        let d = amax / 32767.0;
        assert_eq!(want.1[b], d.to_bits(), "block {b}: scale");
        let inv = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (j, &v) in block.iter().enumerate() {
            assert_eq!(want.0[b * 32 + j], (v * inv).round() as i16, "block {b} value {j}: {v}");
        }
    }
    assert_eq!(&want.0[40 * 32..][..10], &[32767, -3, 3, -1, 1, 2, -32767, 0, 0, 3]);
    for arm in Arm::available() {
        assert!(quantize(arm) == want, "{arm:?}: bits differ");
    }
}

/// One f32 row against Q4_0 / Q4_1 / Q8_0 weights (a prompt's last-token logits): every
/// arm does the same multiplies and adds in the same order, so the bits agree across arms
/// (the AVX-512 arm has its own kernel for this case).
#[test]
fn one_f32_row_has_the_same_bits_on_every_arm() {
    let mut rng = Rng::new(77);
    // The float schemes at lengths with a tail past the runs of 32 too.
    let floats = [QuantScheme::F32, QuantScheme::F16, QuantScheme::BF16];
    for s in [QuantScheme::Q4_0, QuantScheme::Q4_1, QuantScheme::Q8_0].into_iter().chain(floats) {
        let tails = if floats.contains(&s) { [(1, 5), (45, 3), (577, 17)].as_slice() } else { &[] };
        for &(k, n) in [(32, 1), (96, 3), (640, 17), (64, 1000)].iter().chain(tails) {
            let w = random_weights(&mut rng, s, n, k);
            let mut x: Vec<f32> = (0..k).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
            x[k / 2] = 1e-40; // a denormal activation
            let plan = QuantMatMulPlan::new(&[1, k], &[n, w.len() / n], s, ActivationQuant::F32, 1);
            let run = |arm: Arm| {
                let mut out = vec![f32::NAN; n];
                dequant_matmul_into(&plan, arm, &x, &w, &mut out).unwrap();
                out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            };
            let portable = run(Arm::Portable);
            for arm in Arm::available() {
                assert!(run(arm) == portable, "{} k {k} n {n}: {} differs from portable", s.name(), arm.name());
            }
        }
    }
}

/// The bits of `plan`'s product of `x` and `w` on `arm`, on the calling thread.
/// The schemes `q8_packed` repacks 16 rows side by side.
const REPACKED: [QuantScheme; 10] = rlx_cpu::kernels::q8_packed::SCHEMES;

fn arm_bits(plan: &QuantMatMulPlan, arm: Arm, x: &[f32], w: &[u8]) -> Vec<u32> {
    let mut out = vec![f32::NAN; plan.m * plan.n];
    dequant_matmul_into(plan, arm, x, w, &mut out).unwrap();
    out.iter().map(|v| v.to_bits()).collect()
}

/// The direct tile product (9 to 128 f32 rows): the AVX2 kernel runs each output's 16 lane
/// chains as the AVX-512 one does, so the two give the same bits (where the host has
/// both); odd sizes cover the row, column and `k` tails.
#[test]
fn the_direct_tile_product_has_the_same_bits_on_avx2_and_avx512() {
    if Arm::best() < Arm::Avx512 {
        return;
    }
    let mut rng = Rng::new(78);
    for (s, m, k, n) in
        [(QuantScheme::Q4_1, 9, 576, 70), (QuantScheme::Q8_0, 17, 96, 5), (QuantScheme::Q6K, 128, 256, 67)]
    {
        let w = random_weights(&mut rng, s, n, k);
        let x: Vec<f32> = (0..m * k).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
        let plan = QuantMatMulPlan::new(&[m, k], &[n, w.len() / n], s, ActivationQuant::F32, 1);
        let run = |arm| arm_bits(&plan, arm, &x, &w);
        assert!(run(Arm::Avx2) == run(Arm::Avx512), "{} m {m} k {k} n {n}: AVX2 and AVX-512 differ", s.name());
    }
}

/// The 8-bit products on repacked weights: the AVX2 kernel's integer block sums and f32
/// steps are the AVX-512 VNNI kernel's, so the two give the same bits (where the host has
/// both), for every packable scheme, one and several activation rows, a partial group.
#[test]
fn the_repacked_q8_product_has_the_same_bits_on_avx2_and_avx512() {
    use rlx_cpu::kernels::q8_packed::available_q16;
    if !available_q16(QuantScheme::Q4_1, Arm::best()) {
        return;
    }
    let mut rng = Rng::new(79);
    for s in REPACKED {
        for (m, k, n) in [(1, 608_usize, 17), (3, 64, 40), (8, 1536, 33), (11, 96, 16)] {
            // K-quants: whole super-blocks of 256.
            let k = if s.block_size() == 256 { k.div_ceil(256) * 256 } else { k };
            let w = random_weights(&mut rng, s, n, k);
            let x: Vec<f32> = (0..m * k).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
            let plan = QuantMatMulPlan::new(&[m, k], &[n, w.len() / n], s, ActivationQuant::Q8, 1);
            let run = |arm| arm_bits(&plan, arm, &x, &w);
            assert!(run(Arm::Avx2) == run(Arm::Avx512), "{} m {m} k {k} n {n}: AVX2 and AVX-512 differ", s.name());
        }
    }
}

/// A 16-bit product reading the repacked copy of its weight (a param's, filling the GEMM's
/// panels from it, or dotting it in place, AVX2 or VNNI) gives the bits of the same product
/// in the GEMM's panels unpacked from the weight itself, on every arm that runs the
/// integer GEMM; partial panels and groups (odd `n`), one to 129 rows. The plain product
/// runs over the rows padded to 33 (each row's outputs do not depend on the others): up to
/// 32 rows it would dot the weight in place too, and on AVX2 without VNNI up to 8 rows of
/// the plain weight are restored to f32.
#[test]
fn a_q16_product_on_the_repacked_weight_has_the_bits_of_the_plain_one() {
    use rlx_cpu::kernels::q8_packed::Packed;
    use rlx_cpu::kernels::quant_gemm::available;
    let mut rng = Rng::new(80);
    for s in REPACKED {
        for (m, k, n) in
            [(1, 64_usize, 17), (3, 96, 31), (5, 608, 50), (8, 64, 16), (17, 608, 33), (33, 96, 100), (129, 64, 50)]
        {
            let k = if s.block_size() == 256 { k.div_ceil(256) * 256 } else { k };
            let w = random_weights(&mut rng, s, n, k);
            let x: Vec<f32> = (0..m * k).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
            let mut plan = QuantMatMulPlan::new(&[m, k], &[n, w.len() / n], s, ActivationQuant::Q16, 1);
            for arm in Arm::available().into_iter().filter(|&arm| available(s, arm)) {
                let run = |plan: &QuantMatMulPlan| arm_bits(plan, arm, &x, &w);
                // The plain product over at least 33 rows (the first m are x's).
                let padded = m.max(33);
                let x_padded: Vec<f32> = x.iter().chain(x.iter().cycle().take((padded - m) * k)).copied().collect();
                let plain_plan = QuantMatMulPlan::new(&[padded, k], &[n, w.len() / n], s, ActivationQuant::Q16, 1);
                let plain = arm_bits(&plain_plan, arm, &x_padded, &w)[..m * n].to_vec();
                plan.packed = Some(std::sync::Arc::new(Packed::new(s, &w, n, k, None)));
                assert!(
                    run(&plan) == plain,
                    "{} m {m} k {k} n {n} arm {}: differs on the repacked weight",
                    s.name(),
                    arm.name()
                );
            }
        }
    }
}

/// Once a weight has a repacked copy, no product reads its blocks again (a model releases
/// their pages after repacking; a read brings them back): 8- and 16-bit products of one to
/// 33 rows give the same bits with the blocks overwritten by garbage, on every arm that
/// runs the scheme repacked.
#[test]
fn products_on_a_repacked_weight_never_read_its_blocks() {
    use rlx_cpu::kernels::q8_packed::{Packed, available};
    let mut rng = Rng::new(82);
    for s in REPACKED {
        let (k, n) = (s.block_size().max(32) * 4, 40);
        let w = random_weights(&mut rng, s, n, k);
        // All ones: NaN scales, which would show in any output computed from them.
        let garbage = vec![0xFF; w.len()];
        let packed = std::sync::Arc::new(Packed::new(s, &w, n, k, None));
        for act in [ActivationQuant::Q8, ActivationQuant::Q16] {
            for m in [1, 5, 33] {
                let x: Vec<f32> = (0..m * k).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
                let mut plan = QuantMatMulPlan::new(&[m, k], &[n, w.len() / n], s, act, 1);
                plan.packed = Some(packed.clone());
                for arm in Arm::available().into_iter().filter(|&arm| available(s, arm)) {
                    let want = arm_bits(&plan, arm, &x, &w);
                    assert!(want.iter().all(|&b| f32::from_bits(b).is_finite()), "{} {act:?}: not finite", s.name());
                    assert!(
                        arm_bits(&plan, arm, &x, &garbage) == want,
                        "{} {act:?} m {m} arm {}: read the weight's blocks",
                        s.name(),
                        arm.name()
                    );
                }
            }
        }
    }
}
