use crate::common::*;
use rlx::prelude::*;

fn reference(x: &In, positions: &[f64], style: RopeStyle, base: f64, r: usize) -> Vec<f64> {
    let rank = x.dims.len();
    let (s, d) = (x.dims[rank - 2], x.dims[rank - 1]);
    let mut out = x.values.clone();
    for (row, chunk) in out.chunks_mut(d).enumerate() {
        let pos = positions[row % s];
        let src = &x.values[row * d..(row + 1) * d];
        for i in 0..r / 2 {
            let theta = pos / base.powf(2.0 * i as f64 / r as f64);
            let (a, b) = match style {
                RopeStyle::NeoX => (i, i + r / 2),
                RopeStyle::GptJ => (2 * i, 2 * i + 1),
            };
            chunk[a] = src[a] * theta.cos() - src[b] * theta.sin();
            chunk[b] = src[a] * theta.sin() + src[b] * theta.cos();
        }
    }
    out
}

#[test]
fn rope_matches_reference_for_both_pairings() {
    let mut rng = Rng::new(90);
    for dtype in FLOATS {
        for style in [RopeStyle::NeoX, RopeStyle::GptJ] {
            for (dims, rot, pos_dtype, first) in [
                (&[1usize, 1, 1, 2][..], None, DType::I64, 1i64),
                (&[2, 3, 5, 8], None, DType::I32, 0),
                (&[1, 2, 4, 10], Some(6usize), DType::I64, 100),
                (&[7, 16], Some(16), DType::I64, -3),
            ] {
                let x = rand_input(&mut rng, dtype, dims, -3.0, 3.0);
                let s = dims[dims.len() - 2];
                let positions: Vec<f64> = (0..s).map(|i| (first + i as i64) as f64).collect();
                let r = rot.unwrap_or(dims[dims.len() - 1]);
                let expected = reference(&x, &positions, style, 10000.0, r);
                let p = input(pos_dtype, &[s], positions);
                let got = eval_ok(&[x, p], |g, v| g.rope(v[0], v[1], style, 10000.0, rot));
                assert_close(
                    &got,
                    dtype,
                    dims,
                    &expected,
                    |i| bound(dtype, 8.0, 6.0, expected[i]),
                    &format!("rope {style:?} {dtype} {dims:?}"),
                );
            }
        }
    }
}

#[test]
fn rope_rotates_by_the_position_angle() {
    // head_dim 2, position 1: the pair rotates by exactly 1 radian (frequency base^0 = 1).
    let x = input(DType::F64, &[1, 2], vec![1.0, 0.0]);
    let p = input(DType::I64, &[1], vec![1.0]);
    let got = eval_ok(&[x, p], |g, v| g.rope(v[0], v[1], RopeStyle::GptJ, 10000.0, None));
    assert_close(&got, DType::F64, &[1, 2], &[1f64.cos(), 1f64.sin()], |_| 1e-15, "rope unit rotation");
    let x = input(DType::F32, &[2, 5], vec![0.0; 10]);
    let p = input(DType::I64, &[2], vec![0.0; 2]);
    let e = eval(&[x, p], |g, v| g.rope(v[0], v[1], RopeStyle::NeoX, 10000.0, None)).unwrap_err();
    assert!(e.message().contains("even"), "{e}");
}
