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
