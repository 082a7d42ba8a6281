use crate::common::*;
use rlx::prelude::*;

/// Shape pairs exercising equal shapes, scalars, broadcasting, odd and empty sizes.
const SHAPES: &[(&[usize], &[usize])] = &[
    (&[1], &[1]),
    (&[3], &[3]),
    (&[17], &[1]),
    (&[], &[5]),
    (&[2, 1, 3], &[4, 1]),
    (&[0, 3], &[3]),
    (&[1000], &[1000]),
];

fn out_dims(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
            let db = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
            if da == 1 { db } else { da }
        })
        .collect()
}

/// Evaluates `f` over the broadcast of two inputs, in f64, by multi-index.
fn broadcast2(a: &In, b: &In, f: impl Fn(f64, f64) -> f64) -> (Vec<usize>, Vec<f64>) {
    let dims = out_dims(&a.dims, &b.dims);
    let n: usize = dims.iter().product();
    let v = (0..n)
        .map(|i| {
            let idx = unravel(i, &dims);
            f(broadcast_read(&a.values, &a.dims, &idx), broadcast_read(&b.values, &b.dims, &idx))
        })
        .collect();
    (dims, v)
}

/// Specials placed at the front of a float input: NaN, infinities, signed zeros, and
/// (for f32/f64) a denormal.
fn with_specials(dtype: DType, mut v: Vec<f64>, salt: usize) -> Vec<f64> {
    let denormal = match dtype {
        DType::F32 => 1.0e-40,
        DType::F64 => 1.0e-310,
        DType::F16 => 3.0e-6,
        _ => 1.0e-39,
    };
    let specials = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, round_oracle(denormal, dtype), 1.0, -2.5];
    for (i, slot) in v.iter_mut().enumerate().take(specials.len()) {
        *slot = specials[(i + salt) % specials.len()];
    }
    v
}

fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) }
}
fn nan_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { a.min(b) }
}

#[test]
fn float_arithmetic_is_correctly_rounded() {
    // add/sub/mul/div of two values of one format, computed in f32 (or f64) and rounded
    // to the format, equal the exact result rounded once: the double rounding is
    // innocuous since 24 >= 2*11 + 2 and 53 >= 2*24 + 2.
    let mut rng = Rng::new(1);
    type F = fn(f64, f64) -> f64;
    let ops: [(BinaryOp, F); 6] = [
        (BinaryOp::Add, |a, b| a + b),
        (BinaryOp::Sub, |a, b| a - b),
        (BinaryOp::Mul, |a, b| a * b),
        (BinaryOp::Div, |a, b| a / b),
        (BinaryOp::Max, nan_max),
        (BinaryOp::Min, nan_min),
    ];
    for dtype in FLOATS {
        for (op, f) in ops {
            for (k, (da, db)) in SHAPES.iter().enumerate() {
                let mut a = rand_input(&mut rng, dtype, da, -100.0, 100.0);
                let mut b = rand_input(&mut rng, dtype, db, -3.0, 3.0);
                a.values = with_specials(dtype, a.values, k);
                b.values = with_specials(dtype, b.values, k + 3);
                let (dims, exact) = broadcast2(&a, &b, f);
                let expected: Vec<f64> = exact.iter().map(|&e| round_oracle(e, dtype)).collect();
                let got = eval_ok(&[a, b], |g, x| g.binary(op, x[0], x[1]));
                assert_exact(&got, dtype, &dims, &expected, &format!("{} {dtype} {da:?} {db:?}", op.name()));
            }
        }
    }
}

#[test]
fn float_pow_matches_oracle() {
    let mut rng = Rng::new(2);
    for dtype in FLOATS {
        for (da, db) in SHAPES {
            let a = rand_input(&mut rng, dtype, da, 0.05, 8.0);
            let b = rand_input(&mut rng, dtype, db, -3.0, 3.0);
            let (dims, exact) = broadcast2(&a, &b, f64::powf);
            let got = eval_ok(&[a, b], |g, x| g.pow(x[0], x[1]));
            // powf in the compute type: a few ulps of the result, then the store rounding.
            assert_close(
                &got,
                dtype,
                &dims,
                &exact,
                |i| bound(dtype, 8.0, exact[i].abs(), exact[i]),
                &format!("pow {dtype}"),
            );
        }
    }
    // IEEE special cases.
    let a = input(DType::F32, &[6], vec![-2.0, -2.0, 0.0, f64::NAN, 1.0, 0.0]);
    let b = input(DType::F32, &[6], vec![3.0, 0.5, 0.0, 0.0, f64::NAN, -1.0]);
    let got = eval_ok(&[a, b], |g, x| g.pow(x[0], x[1]));
    assert_exact(&got, DType::F32, &[6], &[-8.0, f64::NAN, 1.0, 1.0, 1.0, f64::INFINITY], "pow specials");
}

/// Integer oracle: exact in i128, wrapped to the type by two's complement.
fn wrap(v: i128, dtype: DType) -> i64 {
    match dtype {
        DType::I8 => v as i8 as i64,
        DType::I32 => v as i32 as i64,
        DType::I64 => v as i64,
        DType::U8 => v as u8 as i64,
        _ => unreachable!(),
    }
}

fn int_oracle(op: BinaryOp, a: i64, b: i64, dtype: DType) -> i64 {
    let (a, b) = (a as i128, b as i128);
    match op {
        BinaryOp::Add => wrap(a + b, dtype),
        BinaryOp::Sub => wrap(a - b, dtype),
        BinaryOp::Mul => wrap(a * b, dtype),
        // Truncating division; x / 0 = 0; MIN / -1 wraps to MIN.
        BinaryOp::Div => {
            if b == 0 {
                0
            } else {
                wrap(a / b, dtype)
            }
        }
        BinaryOp::Max => a.max(b) as i64,
        BinaryOp::Min => a.min(b) as i64,
        BinaryOp::Pow => {
            if b < 0 {
                match a {
                    1 => 1,
                    -1 => {
                        if b % 2 == 0 {
                            1
                        } else {
                            -1
                        }
                    }
                    _ => 0,
                }
            } else {
                // Repeated multiplication modulo 2^bits (exponents here are small).
                let mut acc: i128 = 1;
                for _ in 0..b {
                    acc = wrap(acc * a, dtype) as i128;
                }
                acc as i64
            }
        }
    }
}

#[test]
fn integer_arithmetic_is_exact_and_wraps() {
    let mut rng = Rng::new(3);
    for dtype in INTS {
        let (lo, hi) = int_range(dtype);
        for op in BinaryOp::ALL {
            for (da, db) in SHAPES {
                let na: usize = da.iter().product();
                let nb: usize = db.iter().product();
                let mut av: Vec<i64> = (0..na).map(|_| rng.int(lo, hi)).collect();
                let mut bv: Vec<i64> = (0..nb)
                    .map(|_| if op == BinaryOp::Pow { rng.int(lo.max(-3), 9) } else { rng.int(lo, hi) })
                    .collect();
                // Edge values: extremes, zero divisors, -1.
                let edges = [lo, hi, 0, 1, lo.max(-1)];
                for (i, v) in av.iter_mut().enumerate().take(edges.len()) {
                    *v = edges[i];
                }
                for (i, v) in bv.iter_mut().enumerate().take(edges.len()) {
                    *v = if op == BinaryOp::Pow { [3, 0, 2, 1, -1][i].max(lo) } else { edges[(i + 3) % 5] };
                }
                let a = input(dtype, da, av.iter().map(|&v| v as f64).collect());
                let b = input(dtype, db, bv.iter().map(|&v| v as f64).collect());
                let dims = out_dims(da, db);
                let n: usize = dims.iter().product();
                let expected: Vec<i64> = (0..n)
                    .map(|i| {
                        let idx = unravel(i, &dims);
                        let x = av[broadcast_index(da, &idx)];
                        let y = bv[broadcast_index(db, &idx)];
                        int_oracle(op, x, y, dtype)
                    })
                    .collect();
                // i64 extremes do not survive f64, so feed them as exact i64 tensors.
                let got = if dtype == DType::I64 {
                    eval_i64(&av, da, &bv, db, op)
                } else {
                    eval_ok(&[a, b], |g, x| g.binary(op, x[0], x[1]))
                };
                assert_exact_i64(&got, dtype, &dims, &expected, &format!("{} {dtype} {da:?} {db:?}", op.name()));
            }
        }
    }
}

fn eval_i64(a: &[i64], da: &[usize], b: &[i64], db: &[usize], op: BinaryOp) -> HostTensor {
    let mut g = Graph::new("i64");
    let x = g.input("a", DType::I64, da).unwrap();
    let y = g.input("b", DType::I64, db).unwrap();
    let z = g.binary(op, x, y).unwrap();
    g.set_outputs(&[z]).unwrap();
    let mut c = Session::new(test_device()).unwrap().compile(&g).unwrap();
    let (ta, tb) = (HostTensor::from_i64(da, a).unwrap(), HostTensor::from_i64(db, b).unwrap());
    c.run_typed(&[("a", &ta), ("b", &tb)]).unwrap().remove(0)
}

#[test]
fn bool_arithmetic_is_rejected() {
    let a = input(DType::Bool, &[2], vec![0.0, 1.0]);
    let b = input(DType::Bool, &[2], vec![1.0, 1.0]);
    let e = eval(&[a, b], |g, x| g.add(x[0], x[1])).unwrap_err();
    assert!(e.message().contains("bool"), "{e}");
}

#[test]
fn comparisons_are_exact_for_every_dtype() {
    let mut rng = Rng::new(4);
    type C = fn(f64, f64) -> bool;
    let ops: [(CompareOp, C); 6] = [
        (CompareOp::Eq, |a, b| a == b),
        (CompareOp::Ne, |a, b| a != b),
        (CompareOp::Lt, |a, b| a < b),
        (CompareOp::Le, |a, b| a <= b),
        (CompareOp::Gt, |a, b| a > b),
        (CompareOp::Ge, |a, b| a >= b),
    ];
    for dtype in DType::ALL {
        for (op, f) in ops {
            for (k, (da, db)) in SHAPES.iter().enumerate() {
                // A narrow range makes ties common.
                let (lo, hi) = if dtype == DType::Bool { (0.0, 1.0) } else { (0.0, 3.0) };
                let mut a = rand_input(&mut rng, dtype, da, lo, hi);
                let mut b = rand_input(&mut rng, dtype, db, lo, hi);
                if dtype.is_float() {
                    a.values = a.values.iter().map(|v| v.floor()).collect();
                    b.values = b.values.iter().map(|v| v.floor()).collect();
                    a.values = with_specials(dtype, a.values, k);
                    b.values = with_specials(dtype, b.values, k + 1);
                }
                let (dims, expected) = broadcast2(&a, &b, |x, y| f(x, y) as u8 as f64);
                let got = eval_ok(&[a, b], |g, x| g.compare(op, x[0], x[1]));
                assert_exact(&got, DType::Bool, &dims, &expected, &format!("{} {dtype} {da:?} {db:?}", op.name()));
            }
        }
    }
}

#[test]
fn where_selects_exactly_with_three_way_broadcast() {
    let mut rng = Rng::new(5);
    for dtype in DType::ALL {
        let cond = rand_input(&mut rng, DType::Bool, &[3, 1], 0.0, 1.0);
        let a = rand_input(&mut rng, dtype, &[1, 4], 0.0, 100.0);
        let b = rand_input(&mut rng, dtype, &[], 0.0, 100.0);
        let dims = [3usize, 4];
        let expected: Vec<f64> = (0..12)
            .map(|i| {
                let idx = unravel(i, &dims);
                if broadcast_read(&cond.values, &cond.dims, &idx) != 0.0 {
                    broadcast_read(&a.values, &a.dims, &idx)
                } else {
                    b.values[0]
                }
            })
            .collect();
        let got = eval_ok(&[cond, a, b], |g, x| g.where_(x[0], x[1], x[2]));
        assert_exact(&got, dtype, &dims, &expected, &format!("where {dtype}"));
    }
    // Empty output.
    let c = input(DType::Bool, &[0], vec![]);
    let a = input(DType::F32, &[1], vec![1.0]);
    let b = input(DType::F32, &[0], vec![]);
    let got = eval_ok(&[c, a, b], |g, x| g.where_(x[0], x[1], x[2]));
    assert_exact(&got, DType::F32, &[0], &[], "where empty");
}

/// f64 reference of each unary function.
fn unary_ref(u: Unary, x: f64) -> f64 {
    let softplus = |x: f64| if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() };
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    match u {
        Unary::Neg => -x,
        Unary::Abs => x.abs(),
        Unary::Exp => x.exp(),
        Unary::Log => x.ln(),
        Unary::Sqrt => x.sqrt(),
        Unary::Rsqrt => 1.0 / x.sqrt(),
        Unary::Recip => 1.0 / x,
        Unary::Relu => {
            if x.is_nan() {
                x
            } else {
                x.max(0.0)
            }
        }
        Unary::Gelu => 0.5 * x * erfc(-x / std::f64::consts::SQRT_2),
        Unary::GeluTanh => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        Unary::Silu => x * sigmoid(x),
        Unary::Sigmoid => sigmoid(x),
        Unary::Tanh => x.tanh(),
        Unary::Softplus => softplus(x),
        Unary::Sin => x.sin(),
        Unary::Cos => x.cos(),
        Unary::Tan => x.tan(),
        Unary::Atan => x.atan(),
        Unary::Erf => erf(x),
        Unary::Ln1p => x.ln_1p(),
        Unary::Mish => x * softplus(x).tanh(),
        Unary::LogSigmoid => -softplus(-x),
    }
}

/// Sampling domain and error bound (in compute-type roundoffs, relative to a scale that
/// covers cancellation in the formula) per function.
fn unary_domain(u: Unary) -> (f64, f64, fn(f64, f64) -> f64) {
    // scale(x, y): the magnitude the error is relative to.
    let rel: fn(f64, f64) -> f64 = |_, y| y.abs();
    // Formulas of the form x * g(x) lose relative accuracy where g(x) is tiny; their
    // absolute error follows |x|.
    let by_x: fn(f64, f64) -> f64 = |x, y| y.abs() + x.abs();
    match u {
        Unary::Log | Unary::Sqrt | Unary::Rsqrt => (1e-3, 1e3, rel),
        Unary::Ln1p => (-0.9, 100.0, rel),
        Unary::Exp => (-80.0, 80.0, rel),
        Unary::Recip => (0.01, 100.0, rel),
        Unary::Tan => (-1.5, 1.5, rel),
        Unary::Sin | Unary::Cos => (-100.0, 100.0, |_, _| 1.0),
        Unary::Gelu | Unary::GeluTanh | Unary::Silu | Unary::Mish => (-10.0, 10.0, by_x),
        Unary::LogSigmoid | Unary::Softplus => (-30.0, 30.0, by_x),
        _ => (-10.0, 10.0, rel),
    }
}

#[test]
fn unary_float_functions_match_f64_reference() {
    let mut rng = Rng::new(6);
    for dtype in FLOATS {
        for u in Unary::ALL {
            let (lo, hi, scale) = unary_domain(u);
            for n in [1usize, 3, 17, 1000] {
                let x = rand_input(&mut rng, dtype, &[n], lo, hi);
                let xs = x.values.clone();
                let expected: Vec<f64> = xs.iter().map(|&v| unary_ref(u, v)).collect();
                let got = eval_ok(&[x], |g, x| g.unary(u, x[0]));
                assert_close(
                    &got,
                    dtype,
                    &[n],
                    &expected,
                    |i| bound(dtype, 16.0, scale(xs[i], expected[i]), expected[i]),
                    &format!("{} {dtype} n={n}", u.name()),
                );
            }
        }
    }
}

#[test]
fn unary_special_values() {
    let inf = f64::INFINITY;
    let nan = f64::NAN;
    // (function, [f(-inf), f(-0), f(+0), f(+inf)]), limits at the infinities.
    let table: &[(Unary, [f64; 4])] = &[
        (Unary::Neg, [inf, 0.0, -0.0, -inf]),
        (Unary::Abs, [inf, 0.0, 0.0, inf]),
        (Unary::Exp, [0.0, 1.0, 1.0, inf]),
        (Unary::Log, [nan, -inf, -inf, inf]),
        (Unary::Sqrt, [nan, -0.0, 0.0, inf]),
        (Unary::Rsqrt, [nan, -inf, inf, 0.0]),
        (Unary::Recip, [-0.0, -inf, inf, 0.0]),
        (Unary::Relu, [0.0, 0.0, 0.0, inf]),
        (Unary::Gelu, [0.0, 0.0, 0.0, inf]),
        (Unary::GeluTanh, [0.0, 0.0, 0.0, inf]),
        (Unary::Silu, [0.0, 0.0, 0.0, inf]),
        (Unary::Sigmoid, [0.0, 0.5, 0.5, 1.0]),
        (Unary::Tanh, [-1.0, -0.0, 0.0, 1.0]),
        (Unary::Softplus, [0.0, std::f64::consts::LN_2, std::f64::consts::LN_2, inf]),
        (Unary::Sin, [nan, -0.0, 0.0, nan]),
        (Unary::Cos, [nan, 1.0, 1.0, nan]),
        (Unary::Tan, [nan, -0.0, 0.0, nan]),
        (Unary::Atan, [-std::f64::consts::FRAC_PI_2, -0.0, 0.0, std::f64::consts::FRAC_PI_2]),
        (Unary::Erf, [-1.0, -0.0, 0.0, 1.0]),
        (Unary::Ln1p, [nan, -0.0, 0.0, inf]),
        (Unary::Mish, [0.0, 0.0, 0.0, inf]),
        (Unary::LogSigmoid, [-inf, -std::f64::consts::LN_2, -std::f64::consts::LN_2, 0.0]),
    ];
    for dtype in FLOATS {
        for &(u, want) in table {
            let x = input(dtype, &[5], vec![-inf, -0.0, 0.0, inf, nan]);
            let expected: Vec<f64> = want.iter().chain(&[nan]).map(|&v| round_oracle(v, dtype)).collect();
            let got = eval_ok(&[x], |g, x| g.unary(u, x[0]));
            assert_close(
                &got,
                dtype,
                &[5],
                &expected,
                |i| bound(dtype, 4.0, expected[i].abs(), expected[i]),
                &format!("{} {dtype} specials", u.name()),
            );
        }
    }
}

#[test]
fn unary_denormal_inputs() {
    // Denormal inputs are values like any other: no flush to zero.
    for (dtype, tiny) in [(DType::F32, 1.0e-40f64), (DType::F64, 1.0e-310)] {
        let t = round_oracle(tiny, dtype);
        for (u, want) in
            [(Unary::Neg, -t), (Unary::Abs, t), (Unary::Relu, t), (Unary::Sin, t), (Unary::Tanh, t), (Unary::Exp, 1.0)]
        {
            let got = eval_ok(&[input(dtype, &[1], vec![t])], |g, x| g.unary(u, x[0]));
            assert_exact(&got, dtype, &[1], &[want], &format!("{} {dtype} denormal", u.name()));
        }
    }
}

#[test]
fn unary_on_signed_integers_wraps() {
    for dtype in [DType::I8, DType::I32, DType::I64] {
        let (lo, hi) = int_range(dtype);
        let v = [lo, lo + 1, -7, -1, 0, 1, 9, hi];
        let t = HostTensor::from_i64(&[8], &v).unwrap();
        for (u, f) in [
            (Unary::Neg, (|x: i128| -x) as fn(i128) -> i128),
            (Unary::Abs, |x: i128| x.abs()),
            (Unary::Relu, |x: i128| x.max(0)),
        ] {
            let mut g = Graph::new("int_unary");
            let x = g.input("x", DType::I64, &[8]).unwrap();
            let x = g.cast(x, dtype).unwrap();
            let y = g.unary(u, x).unwrap();
            g.set_outputs(&[y]).unwrap();
            let mut c = Session::new(test_device()).unwrap().compile(&g).unwrap();
            let got = c.run_typed(&[("x", &t)]).unwrap().remove(0);
            let expected: Vec<i64> = v.iter().map(|&x| wrap(f(x as i128), dtype)).collect();
            assert_exact_i64(&got, dtype, &[8], &expected, &format!("{} {dtype}", u.name()));
        }
    }
    // Unsigned and bool operands are rejected when the graph is built.
    let e = eval(&[input(DType::U8, &[1], vec![1.0])], |g, x| g.unary(Unary::Neg, x[0])).unwrap_err();
    assert!(e.message().contains("u8"), "{e}");
    let e = eval(&[input(DType::I32, &[1], vec![1.0])], |g, x| g.unary(Unary::Exp, x[0])).unwrap_err();
    assert!(e.message().contains("float") && e.message().contains("i32"), "{e}");
}

/// Independent cast oracle on values given in f64 (exact for every source used here).
fn cast_oracle(v: f64, from: DType, to: DType) -> f64 {
    if to == DType::Bool {
        return (v != 0.0) as u8 as f64;
    }
    if to.is_float() {
        return round_oracle(v, to);
    }
    let (lo, hi) = int_range(to);
    if from.is_float() {
        // Truncate toward zero, saturate, NaN -> 0.
        if v.is_nan() { 0.0 } else { v.trunc().clamp(lo as f64, hi as f64) }
    } else {
        wrap(v as i128, to) as f64
    }
}

#[test]
fn casts_between_every_pair_of_dtypes() {
    for from in DType::ALL {
        let source: Vec<f64> = match from {
            DType::Bool => vec![0.0, 1.0, 1.0, 0.0],
            DType::U8 => vec![0.0, 1.0, 127.0, 128.0, 200.0, 255.0],
            DType::I8 => vec![-128.0, -1.0, 0.0, 1.0, 100.0, 127.0],
            DType::I32 => vec![-2147483648.0, -70000.0, -1.0, 0.0, 255.0, 256.0, 65519.0, 65520.0, 2147483647.0],
            DType::I64 => vec![-9.0e15, -3.0e9, -129.0, 0.0, 300.0, 4097.0, 16_777_217.0, 9.0e15],
            _ => vec![
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                -0.0,
                0.0,
                0.5,
                -1.75,
                2.5,
                127.9,
                -128.9,
                255.5,
                300.0,
                -300.0,
                65504.0,
                70000.0,
                1.0e-5,
                3.0e9,
                -3.0e9,
                1.0e20,
                1.0 + 1.0 / 1024.0 + 1.0 / 4096.0,
            ],
        };
        // Every source value representable in `from`.
        let source: Vec<f64> = source.iter().map(|&v| round_oracle(v, from)).collect();
        for to in DType::ALL {
            let expected: Vec<f64> = source.iter().map(|&v| cast_oracle(v, from, to)).collect();
            let n = source.len();
            let got = eval_ok(&[input(from, &[n], source.clone())], |g, x| g.cast(x[0], to));
            assert_exact(&got, to, &[n], &expected, &format!("cast {from} -> {to}"));
        }
    }
}

#[test]
fn cast_from_f64_and_i64_rounds_once() {
    // f64 just above the f16 tie 1 + 2^-11: a two-step f64 -> f32 -> f16 would hit the
    // tie and round down; one correct rounding goes up.
    let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-30);
    let got = eval_ok(&[input(DType::F64, &[1], vec![x])], |g, v| g.cast(v[0], DType::F16));
    assert_exact(&got, DType::F16, &[1], &[1.0 + 2f64.powi(-10)], "f64 -> f16");
    // i64 just above the bf16 tie between 2^30 and 2^30 + 2^23 (i64 -> f32 would round
    // onto the tie first).
    let v: i64 = (1 << 30) + (1 << 22) + 1;
    let mut g = Graph::new("c");
    let i = g.input("i", DType::I64, &[1]).unwrap();
    let o = g.cast(i, DType::BF16).unwrap();
    g.set_outputs(&[o]).unwrap();
    let mut c = Session::new(test_device()).unwrap().compile(&g).unwrap();
    let got = c.run_typed(&[("i", &HostTensor::from_i64(&[1], &[v]).unwrap())]).unwrap().remove(0);
    assert_exact(&got, DType::BF16, &[1], &[2f64.powi(30) + 2f64.powi(23)], "i64 -> bf16");
    // Beyond 2^53, where i64 -> f64 itself rounds: 2^60 + 2^52 + 1 sits just above the
    // bf16 tie, and a plain i64 -> f64 would land on the tie and round down.
    let big: i64 = (1 << 60) + (1 << 52) + 1;
    let got = c.run_typed(&[("i", &HostTensor::from_i64(&[1], &[big]).unwrap())]).unwrap().remove(0);
    assert_exact(&got, DType::BF16, &[1], &[2f64.powi(60) + 2f64.powi(53)], "large i64 -> bf16");
}

#[test]
fn unary_large_arguments_do_not_overflow_intermediates() {
    // softplus, mish, log-sigmoid, sigmoid, silu, gelu and tanh stay finite where a naive
    // formula's exp overflows (e^100 > f32::MAX).
    for dtype in FLOATS {
        let big = if dtype == DType::F16 { [-1000.0, -100.0, 100.0, 1000.0] } else { [-1.0e30, -100.0, 100.0, 1.0e30] };
        for u in [
            Unary::Softplus,
            Unary::Mish,
            Unary::LogSigmoid,
            Unary::Sigmoid,
            Unary::Silu,
            Unary::Gelu,
            Unary::GeluTanh,
            Unary::Tanh,
        ] {
            let xs: Vec<f64> = big.iter().map(|&v| round_oracle(v, dtype)).collect();
            let expected: Vec<f64> = xs.iter().map(|&v| unary_ref(u, v)).collect();
            let got = eval_ok(&[input(dtype, &[4], xs.clone())], |g, x| g.unary(u, x[0]));
            // mish(-100) = -100 * tanh(e^-100): the gate is an f32 subnormal, whose
            // absolute quantum the factor x magnifies.
            let tol = |i: usize| bound(dtype, 8.0, expected[i].abs(), expected[i]) + min_subnormal(dtype) * xs[i].abs();
            assert_close(&got, dtype, &[4], &expected, tol, &format!("{} {dtype} large", u.name()));
        }
    }
}
