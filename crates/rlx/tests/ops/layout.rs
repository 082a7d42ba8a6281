use crate::common::*;
use rlx::prelude::*;

/// Distinct values per element so any misplacement shows (bool alternates).
fn distinct(dtype: DType, dims: &[usize]) -> In {
    let n: usize = dims.iter().product();
    let v = (0..n)
        .map(|i| match dtype {
            DType::Bool => (i % 3 == 0) as u8 as f64,
            DType::U8 | DType::I8 => (i % 100) as f64,
            _ => i as f64 * if dtype.is_float() { 0.5 } else { 1.0 },
        })
        .collect();
    input(dtype, dims, v)
}

#[test]
fn reshape_transpose_narrow_expand_are_exact() {
    for dtype in DType::ALL {
        // reshape
        let x = distinct(dtype, &[2, 3, 4]);
        let want = x.values.clone();
        let got = eval_ok(&[x], |g, x| g.reshape(x[0], &[4, 1, 6]));
        assert_exact(&got, dtype, &[4, 1, 6], &want, &format!("reshape {dtype}"));

        // transpose, every permutation of rank 3 and one of rank 4
        let dims = [2usize, 3, 4];
        for perm in [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
            let x = distinct(dtype, &dims);
            let out: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
            let n: usize = out.iter().product();
            let expected: Vec<f64> = (0..n)
                .map(|o| {
                    let oi = unravel(o, &out);
                    let mut src = [0usize; 3];
                    for (i, &p) in perm.iter().enumerate() {
                        src[p] = oi[i];
                    }
                    x.values[ravel(&src, &dims)]
                })
                .collect();
            let got = eval_ok(&[x], |g, x| g.transpose(x[0], &perm));
            assert_exact(&got, dtype, &out, &expected, &format!("transpose {dtype} {perm:?}"));
        }
        let x = distinct(dtype, &[2, 1, 3, 5]);
        let xv = x.values.clone();
        let got = eval_ok(&[x], |g, x| g.transpose(x[0], &[3, 1, 0, 2]));
        let out = [5usize, 1, 2, 3];
        let expected: Vec<f64> = (0..30)
            .map(|o| {
                let i = unravel(o, &out);
                xv[ravel(&[i[2], i[1], i[3], i[0]], &[2, 1, 3, 5])]
            })
            .collect();
        assert_exact(&got, dtype, &out, &expected, &format!("transpose rank 4 {dtype}"));

        // narrow on each axis, including empty windows and the full extent
        for (axis, start, len) in [(0usize, 1usize, 1usize), (1, 0, 3), (1, 2, 1), (2, 1, 2), (2, 4, 0)] {
            let x = distinct(dtype, &dims);
            let mut out = dims.to_vec();
            out[axis] = len;
            let n: usize = out.iter().product();
            let expected: Vec<f64> = (0..n)
                .map(|o| {
                    let mut i = unravel(o, &out);
                    i[axis] += start;
                    x.values[ravel(&i, &dims)]
                })
                .collect();
            let got = eval_ok(&[x], |g, x| g.narrow(x[0], axis, start, len));
            assert_exact(&got, dtype, &out, &expected, &format!("narrow {dtype} axis {axis} {start}+{len}"));
        }

        // expand: new leading axes and stretched size-1 axes
        let x = distinct(dtype, &[3, 1]);
        let xv = x.values.clone();
        let got = eval_ok(&[x], |g, x| g.expand(x[0], &[2, 3, 4]));
        let expected: Vec<f64> = (0..24).map(|o| xv[unravel(o, &[2, 3, 4])[1]]).collect();
        assert_exact(&got, dtype, &[2, 3, 4], &expected, &format!("expand {dtype}"));
    }
}

#[test]
fn concat_joins_along_any_axis() {
    for dtype in DType::ALL {
        for axis in 0..3 {
            let shapes: Vec<Vec<usize>> = [2usize, 0, 3]
                .iter()
                .map(|&len| {
                    let mut d = vec![2usize, 3, 4];
                    d[axis] = len;
                    d
                })
                .collect();
            let ins: Vec<In> = shapes
                .iter()
                .enumerate()
                .map(|(k, d)| {
                    let mut x = distinct(dtype, d);
                    if dtype != DType::Bool {
                        x.values.iter_mut().for_each(|v| *v = (*v + 10.0 * k as f64) % 100.0);
                    }
                    x
                })
                .collect();
            let mut out = vec![2usize, 3, 4];
            out[axis] = 5;
            let n: usize = out.iter().product();
            let expected: Vec<f64> = (0..n)
                .map(|o| {
                    let mut i = unravel(o, &out);
                    // Find the operand holding position i[axis].
                    let mut k = 0;
                    while i[axis] >= shapes[k][axis] {
                        i[axis] -= shapes[k][axis];
                        k += 1;
                    }
                    ins[k].values[ravel(&i, &shapes[k])]
                })
                .collect();
            let got = eval_ok(&ins, |g, x| g.concat(x, axis));
            assert_exact(&got, dtype, &out, &expected, &format!("concat {dtype} axis {axis}"));
        }
    }
}

#[test]
fn layout_ops_reject_bad_arguments() {
    let x = || vec![input(DType::F32, &[2, 3], vec![0.0; 6])];
    let msg = |r: Result<HostTensor>| r.unwrap_err().message().to_string();
    assert!(msg(eval(&x(), |g, x| g.reshape(x[0], &[4]))).contains("f32[2,3]"));
    assert!(msg(eval(&x(), |g, x| g.transpose(x[0], &[0, 0]))).contains("permutation"));
    let m = msg(eval(&x(), |g, x| g.narrow(x[0], 1, 2, 2)));
    assert!(m.contains("start 2") && m.contains("f32[2,3]"), "{m}");
    assert!(msg(eval(&x(), |g, x| g.narrow(x[0], 2, 0, 1))).contains("axis 2"));
    assert!(msg(eval(&x(), |g, x| g.expand(x[0], &[3, 3]))).contains("expand"));
    let two = vec![input(DType::F32, &[2, 3], vec![0.0; 6]), input(DType::F32, &[3, 3], vec![0.0; 9])];
    assert!(msg(eval(&two, |g, x| g.concat(x, 1))).contains("agree"));
    let mixed = vec![input(DType::F32, &[2], vec![0.0; 2]), input(DType::F64, &[2], vec![0.0; 2])];
    assert!(msg(eval(&mixed, |g, x| g.concat(x, 0))).contains("f64"));
}
