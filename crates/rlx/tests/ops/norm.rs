use crate::common::*;
use rlx::prelude::*;

fn reference(x: &In, gamma: Option<&[f64]>, beta: Option<&[f64]>, eps: f64, rms: bool) -> Vec<f64> {
    let h = *x.dims.last().unwrap();
    let mut out = Vec::new();
    for row in x.values.chunks(h.max(1)) {
        let n = row.len() as f64;
        let mean = if rms { 0.0 } else { row.iter().sum::<f64>() / n };
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        let inv = 1.0 / (var + eps).sqrt();
        for (j, v) in row.iter().enumerate() {
            out.push((v - mean) * inv * gamma.map_or(1.0, |g| g[j]) + beta.map_or(0.0, |b| b[j]));
        }
    }
    out
}

#[test]
fn layer_norm_and_rms_norm_match_reference() {
    let mut rng = Rng::new(40);
    for dtype in FLOATS {
        for rms in [false, true] {
            for dims in [&[1usize, 1][..], &[3, 17], &[2, 3, 64], &[5], &[0, 4], &[2, 0], &[300, 129]] {
                for (use_gamma, use_beta) in [(false, false), (true, false), (true, true), (false, true)] {
                    if rms && use_beta {
                        continue;
                    }
                    let h = *dims.last().unwrap();
                    let x = rand_input(&mut rng, dtype, dims, -4.0, 6.0);
                    let gamma = rand_input(&mut rng, dtype, &[h], 0.5, 2.0);
                    let beta = rand_input(&mut rng, dtype, &[h], -1.0, 1.0);
                    let eps = 1e-5f32;
                    let expected = reference(
                        &x,
                        use_gamma.then_some(&gamma.values[..]),
                        use_beta.then_some(&beta.values[..]),
                        eps as f64,
                        rms,
                    );
                    let ins = vec![x, gamma, beta];
                    let got = eval_ok(&ins, |g, x| {
                        let gm = use_gamma.then_some(x[1]);
                        if rms {
                            g.rms_norm(x[0], gm, eps)
                        } else {
                            g.layer_norm(x[0], gm, use_beta.then_some(x[2]), eps)
                        }
                    });
                    // Normalized values are O(1); errors scale with the row length and gamma.
                    assert_close(
                        &got,
                        dtype,
                        dims,
                        &expected,
                        |i| bound(dtype, 4.0 * h as f64 + 16.0, 4.0 + expected[i].abs(), expected[i]),
                        &format!("norm rms={rms} {dtype} {dims:?} gamma={use_gamma} beta={use_beta}"),
                    );
                }
            }
        }
    }
}

#[test]
fn constant_rows_normalize_to_beta_and_nan_propagates() {
    let x = input(DType::F32, &[2, 3], vec![7.0, 7.0, 7.0, 1.0, f64::NAN, 2.0]);
    let b = input(DType::F32, &[3], vec![0.5, -0.5, 2.0]);
    let got = eval_ok(&[x, b], |g, x| g.layer_norm(x[0], None, Some(x[1]), 1e-5));
    let nan = f64::NAN;
    assert_exact(&got, DType::F32, &[2, 3], &[0.5, -0.5, 2.0, nan, nan, nan], "layer_norm constant row");
    let e = eval(&[input(DType::F32, &[2, 3], vec![0.0; 6]), input(DType::F32, &[2], vec![1.0; 2])], |g, x| {
        g.rms_norm(x[0], Some(x[1]), 1e-6)
    })
    .unwrap_err();
    assert!(e.message().contains("f32[2]") && e.message().contains("f32[2,3]"), "{e}");
    let e = eval(&[input(DType::F32, &[2], vec![0.0; 2])], |g, x| g.rms_norm(x[0], None, f32::NAN)).unwrap_err();
    assert!(e.message().contains("eps"), "{e}");
}
