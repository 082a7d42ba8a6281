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

/// The angles come from a table shared by every rope of one base and rotary width, grown
/// as positions grow; positions past the table (4096 of them at 128 pairs) and negative
/// ones are computed per call. Each call agrees with the reference either way, in any order.
#[test]
fn rope_angles_agree_from_the_shared_table_and_past_it() {
    let mut rng = Rng::new(91);
    for dtype in [DType::F32, DType::F64] {
        for positions in
            [vec![0.0, 1.0, 2.0], vec![4094.0, 4095.0, 4096.0, 4097.0], vec![5.0, -7.0, 9000.0, 3.0], vec![1.0, 0.0]]
        {
            let s = positions.len();
            let dims = [2, s, 256];
            let x = rand_input(&mut rng, dtype, &dims, -3.0, 3.0);
            let expected = reference(&x, &positions, RopeStyle::NeoX, 12345.0, 256);
            let p = input(DType::I64, &[s], positions.clone());
            let got = eval_ok(&[x, p], |g, v| g.rope(v[0], v[1], RopeStyle::NeoX, 12345.0, None));
            // An angle's rounding grows with it: |pos| ulps of the angle, times |x| <= 3
            // per term.
            let far = positions.iter().fold(1.0f64, |m, p| m.max(p.abs()));
            assert_close(
                &got,
                dtype,
                &dims,
                &expected,
                |i| bound(dtype, 8.0, 6.0 * far, expected[i]),
                &format!("rope {dtype} at {positions:?}"),
            );
        }
    }
}

/// The CPU's f32 rows (vector loops) are, bit for bit, each pair rotated in f64 by the
/// plan's angle (`pos * base^(-2i / r)`, f64 `sin` and `cos`) and rounded once, in both
/// pairings: whole heads and a partial rotary part, even and odd pair counts, positions
/// from the angle table and computed ones (negative, past the table). The GPU rotates in
/// f32 (within the bounds of `rope_matches_reference_for_both_pairings`).
#[test]
fn f32_rope_rounds_the_f64_rotation_once() {
    if matches!(test_device(), Device::Gpu) {
        return;
    }
    let mut rng = Rng::new(91);
    for style in [RopeStyle::NeoX, RopeStyle::GptJ] {
        for (dims, rot, first) in [
            (&[1usize, 9, 12, 64][..], None, 0i64),
            (&[3, 5, 34], None, 7),
            (&[2, 4, 40], Some(34usize), -20),
            (&[1, 3, 64], None, 20_000),
        ] {
            let x = rand_input(&mut rng, DType::F32, dims, -3.0, 3.0);
            let (s, d) = (dims[dims.len() - 2], dims[dims.len() - 1]);
            let r = rot.unwrap_or(d);
            let mut expected = x.values.clone();
            for (row, out) in expected.chunks_mut(d).enumerate() {
                let pos = (first + (row % s) as i64) as f64;
                let src = &x.values[row * d..(row + 1) * d];
                for i in 0..r / 2 {
                    let angle = pos * 10000f64.powf(-2.0 * i as f64 / r as f64);
                    let (a, b) = match style {
                        RopeStyle::NeoX => (i, i + r / 2),
                        RopeStyle::GptJ => (2 * i, 2 * i + 1),
                    };
                    out[a] = f64::from((src[a] * angle.cos() - src[b] * angle.sin()) as f32);
                    out[b] = f64::from((src[a] * angle.sin() + src[b] * angle.cos()) as f32);
                }
            }
            let p = input(DType::I64, &[s], (0..s).map(|i| (first + i as i64) as f64).collect());
            let got = eval_ok(&[x, p], |g, v| g.rope(v[0], v[1], style, 10000.0, rot));
            assert_exact(&got, DType::F32, dims, &expected, &format!("rope f32 {style:?} {dims:?} from {first}"));
        }
    }
}
