use crate::common::*;
use rlx::prelude::*;

#[test]
fn cross_entropy_matches_reference() {
    let mut rng = Rng::new(60);
    for dtype in FLOATS {
        for label_dtype in [DType::I64, DType::I32, DType::U8] {
            for (n, c) in [(1usize, 1usize), (7, 3), (4, 50), (0, 3)] {
                let logits = rand_input(&mut rng, dtype, &[n, c], -8.0, 8.0);
                let labels = rand_input(&mut rng, label_dtype, &[n], 0.0, (c - 1) as f64);
                let mut total = 0.0;
                for i in 0..n {
                    let row = &logits.values[i * c..(i + 1) * c];
                    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
                    total += lse - row[labels.values[i] as usize];
                }
                let expected = total / n as f64;
                let got = eval_ok(&[logits, labels], |g, x| g.cross_entropy(x[0], x[1]));
                let k = (n * (c + 8)) as f64 + 8.0;
                assert_close(
                    &got,
                    dtype,
                    &[],
                    &[expected],
                    |_| bound(dtype, k, 16.0, expected),
                    &format!("cross_entropy {dtype} n={n} c={c}"),
                );
            }
        }
    }
}

#[test]
fn cross_entropy_edge_cases() {
    // -inf logits elsewhere are fine; a -inf logit at the label gives +inf.
    let inf = f64::INFINITY;
    let logits = input(DType::F32, &[2, 3], vec![0.0, -inf, -inf, 1.0, 1.0, -inf]);
    let labels = input(DType::I64, &[2], vec![0.0, 2.0]);
    let got = eval_ok(&[logits, labels], |g, x| g.cross_entropy(x[0], x[1]));
    assert_exact(&got, DType::F32, &[], &[inf], "cross_entropy -inf label");
    let logits = input(DType::F32, &[2, 3], vec![0.0; 6]);
    let labels = input(DType::I64, &[2], vec![0.0, 3.0]);
    let e = eval(&[logits, labels], |g, x| g.cross_entropy(x[0], x[1])).unwrap_err();
    assert!(e.message().contains("index 3") && e.message().contains("position 1"), "{e}");
    let e = eval(&[input(DType::F32, &[2, 3], vec![0.0; 6]), input(DType::I64, &[3], vec![0.0; 3])], |g, x| {
        g.cross_entropy(x[0], x[1])
    })
    .unwrap_err();
    assert!(e.message().contains("f32[2,3]") && e.message().contains("i64[3]"), "{e}");
}
