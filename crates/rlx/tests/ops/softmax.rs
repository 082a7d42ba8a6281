use crate::common::*;
use rlx::prelude::*;

/// Softmax / log-softmax along `axis` by multi-index.
/// Values, and per element |x - max| (the size of the exponent's argument, whose rounding
/// in the compute type sets the result's relative error).
fn reference(x: &In, axis: usize, log: bool) -> (Vec<f64>, Vec<f64>) {
    let dims = &x.dims;
    let mut spread = Vec::new();
    let vals = (0..x.values.len())
        .map(|flat| {
            let idx = unravel(flat, dims);
            let lane: Vec<f64> = (0..dims[axis])
                .map(|j| {
                    let mut k = idx.clone();
                    k[axis] = j;
                    x.values[ravel(&k, dims)]
                })
                .collect();
            let m = lane.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = lane.iter().map(|v| (v - m).exp()).sum();
            let v = x.values[flat];
            spread.push(v.abs() + m.abs());
            if log { v - m - s.ln() } else { (v - m).exp() / s }
        })
        .collect();
    (vals, spread)
}

#[test]
fn softmax_and_log_softmax_match_reference() {
    let mut rng = Rng::new(30);
    for dtype in FLOATS {
        for log in [false, true] {
            for (dims, axis) in [
                (&[3usize, 4, 5][..], 0),
                (&[3, 4, 5], 1),
                (&[3, 4, 5], 2),
                (&[1, 1], 1),
                (&[2, 1000], 1),
                (&[0, 3], 1),
            ] {
                let x = rand_input(&mut rng, dtype, dims, -20.0, 20.0);
                let (expected, spread) = reference(&x, axis, log);
                let depth = dims[axis] as f64;
                let got = eval_ok(&[x], |g, x| if log { g.log_softmax(x[0], axis) } else { g.softmax(x[0], axis) });
                // exp/ln error relative to the result, plus the sum's depth; log-softmax's
                // x - m - lse carries absolute error of the size of |x| and lse.
                let scale = |i: usize| {
                    if log { expected[i].abs() + spread[i] + 20.0 } else { expected[i].abs() * (1.0 + spread[i]) }
                };
                assert_close(
                    &got,
                    dtype,
                    dims,
                    &expected,
                    |i| bound(dtype, depth + 8.0, scale(i), expected[i]),
                    &format!("softmax log={log} {dtype} {dims:?} axis {axis}"),
                );
            }
        }
    }
}

#[test]
fn softmax_is_stable_and_handles_infinities() {
    let inf = f64::INFINITY;
    // Huge logits do not overflow; -inf entries get probability 0.
    let x = input(DType::F32, &[3, 3], vec![1000.0, 1000.0, -inf, -inf, 0.0, -inf, -inf, -inf, -inf]);
    let got = eval_ok(&[x], |g, x| g.softmax(x[0], 1));
    let nan = f64::NAN;
    assert_exact(&got, DType::F32, &[3, 3], &[0.5, 0.5, 0.0, 0.0, 1.0, 0.0, nan, nan, nan], "softmax specials");
    let x = input(DType::F32, &[1, 3], vec![1000.0, 1000.0, -inf]);
    let got = eval_ok(&[x], |g, x| g.log_softmax(x[0], 1));
    let l2 = -(2f64.ln());
    assert_close(&got, DType::F32, &[1, 3], &[l2, l2, -inf], |_| 1e-6, "log_softmax specials");
    let x = input(DType::F32, &[1, 2], vec![f64::NAN, 1.0]);
    let got = eval_ok(&[x], |g, x| g.softmax(x[0], 1));
    assert_exact(&got, DType::F32, &[1, 2], &[nan, nan], "softmax nan");
}
