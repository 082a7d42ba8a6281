use crate::common::*;
use rlx::prelude::*;

#[test]
fn kv_append_writes_rows_at_the_position() {
    let mut rng = Rng::new(100);
    for dtype in DType::ALL {
        for (cache_dims, new_rows, axis, pos) in [
            (&[1usize, 2, 6, 3][..], 1usize, 2usize, 0i64),
            (&[1, 2, 6, 3], 2, 2, 3),
            (&[1, 2, 6, 3], 2, 2, 4),
            (&[2, 1, 5, 4], 5, 2, 0),
            (&[7, 3], 3, 0, 2),
            (&[4, 4], 0, 0, 4),
        ] {
            let (lo, hi) = if dtype == DType::Bool { (0.0, 1.0) } else { (0.0, 50.0) };
            let cache = rand_input(&mut rng, dtype, cache_dims, lo, hi);
            let mut new_dims = cache_dims.to_vec();
            new_dims[axis] = new_rows;
            let new = rand_input(&mut rng, dtype, &new_dims, lo, hi);
            let expected: Vec<f64> = (0..cache.values.len())
                .map(|flat| {
                    let mut i = unravel(flat, cache_dims);
                    let p = i[axis] as i64 - pos;
                    if p >= 0 && (p as usize) < new_rows {
                        i[axis] = p as usize;
                        new.values[ravel(&i, &new_dims)]
                    } else {
                        cache.values[flat]
                    }
                })
                .collect();
            for pos_dims in [&[][..], &[1]] {
                let p = input(DType::I32, pos_dims, vec![pos as f64]);
                let ins =
                    [input(dtype, cache_dims, cache.values.clone()), input(dtype, &new_dims, new.values.clone()), p];
                let got = eval_ok(&ins, |g, x| g.kv_append(x[0], x[1], x[2], axis));
                assert_exact(
                    &got,
                    dtype,
                    cache_dims,
                    &expected,
                    &format!("kv_append {dtype} {cache_dims:?} pos {pos}"),
                );
            }
        }
    }
}

#[test]
fn kv_append_past_capacity_is_an_error() {
    for pos in [5.0, -1.0] {
        let cache = input(DType::F32, &[1, 1, 6, 2], vec![0.0; 12]);
        let new = input(DType::F32, &[1, 1, 2, 2], vec![1.0; 4]);
        let p = input(DType::I64, &[], vec![pos]);
        let e = eval(&[cache, new, p], |g, x| g.kv_append(x[0], x[1], x[2], 2)).unwrap_err();
        assert!(
            e.message().contains(&format!("position {pos}"))
                && e.message().contains("capacity 6")
                && e.message().contains("'x0'"),
            "{e}"
        );
    }
    let cache = input(DType::F32, &[1, 1, 6, 2], vec![0.0; 12]);
    let new = input(DType::F32, &[1, 1, 2, 3], vec![1.0; 6]);
    let p = input(DType::I64, &[], vec![0.0]);
    let e = eval(&[cache, new, p], |g, x| g.kv_append(x[0], x[1], x[2], 2)).unwrap_err();
    assert!(e.message().contains("do not fit"), "{e}");
}
