use crate::common::*;
use rlx::prelude::*;

#[test]
fn gather_picks_rows_for_every_table_and_index_dtype() {
    let mut rng = Rng::new(50);
    for table_dtype in DType::ALL {
        for index_dtype in INTS {
            for (table_dims, index_dims) in
                [(&[10usize][..], &[5usize][..]), (&[10, 3], &[2, 3]), (&[5, 2, 2], &[]), (&[4, 3], &[0])]
            {
                let (lo, hi) = if table_dtype == DType::Bool { (0.0, 1.0) } else { (0.0, 100.0) };
                let table = rand_input(&mut rng, table_dtype, table_dims, lo, hi);
                let rows = table_dims[0];
                let idx = rand_input(&mut rng, index_dtype, index_dims, 0.0, (rows - 1) as f64);
                let row_len: usize = table_dims[1..].iter().product();
                let expected: Vec<f64> = idx
                    .values
                    .iter()
                    .flat_map(|&r| table.values[r as usize * row_len..(r as usize + 1) * row_len].to_vec())
                    .collect();
                let mut out = index_dims.to_vec();
                out.extend_from_slice(&table_dims[1..]);
                let got = eval_ok(&[table, idx], |g, x| g.gather(x[0], x[1]));
                assert_exact(&got, table_dtype, &out, &expected, &format!("gather {table_dtype} by {index_dtype}"));
            }
        }
    }
}

#[test]
fn out_of_range_indices_are_errors_naming_the_index() {
    for (bad, pos) in [(5.0, 1usize), (-1.0, 2)] {
        let table = input(DType::F32, &[5, 2], vec![0.0; 10]);
        let mut v = vec![0.0, 1.0, 2.0];
        v[pos] = bad;
        let idx = input(DType::I64, &[3], v);
        let e = eval(&[table, idx], |g, x| g.gather(x[0], x[1])).unwrap_err();
        let m = e.message();
        assert!(
            m.contains(&format!("index {bad}")) && m.contains(&format!("position {pos}")) && m.contains("'x0'"),
            "{m}"
        );
    }
    let table = input(DType::F32, &[5, 2], vec![0.0; 10]);
    let idx = input(DType::F32, &[3], vec![0.0; 3]);
    let e = eval(&[table, idx], |g, x| g.gather(x[0], x[1])).unwrap_err();
    assert!(e.message().contains("integer"), "{e}");
}
