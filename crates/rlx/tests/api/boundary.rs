use crate::compile;
use rlx::prelude::*;

/// `x + 0` with x declared `dtype`.
fn plus_zero(dtype: DType) -> Graph {
    let mut g = Graph::new("plus_zero");
    let x = g.input("x", dtype, &[4]).unwrap();
    let zero = g.scalar(dtype, 0.0).unwrap();
    let y = g.add(x, zero).unwrap();
    g.set_outputs(&[y]).unwrap();
    g
}

#[test]
fn half_inputs_are_converted_never_reinterpreted() {
    for dtype in [DType::F16, DType::BF16] {
        let mut c = compile(&plus_zero(dtype));
        // Through the f32 entry point: values converted to the declared dtype.
        let out = c.run(&[("x", &[1.0, 2.0, 3.0, 4.0])]).unwrap();
        assert_eq!(out, vec![vec![1.0, 2.0, 3.0, 4.0]], "{dtype} via run");
        // Through run_typed with the declared dtype: bytes pass through.
        let t = HostTensor::from_f32_as(dtype, &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        let out = c.run_typed(&[("x", &t)]).unwrap();
        assert_eq!(out[0].dtype(), dtype);
        assert_eq!(out[0].bytes(), t.bytes(), "{dtype} via run_typed keeps the bytes");
        // An f32 tensor for a half input is converted by value, as `run` does.
        let f = HostTensor::from_f32(&[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(c.run_typed(&[("x", &f)]).unwrap()[0].to_f32_vec(), vec![1.0, 2.0, 3.0, 4.0]);
    }
}

#[test]
fn f32_values_round_to_nearest_even_at_a_half_boundary() {
    // 1 + 2^-8 is the bf16 tie between 1 and 1 + 2^-7: even is 1. 1 + 3*2^-9 rounds up.
    let mut c = compile(&plus_zero(DType::BF16));
    let out = c.run(&[("x", &[1.0 + 1.0 / 256.0, 1.0 + 3.0 / 512.0, 65504.0, -0.0])]).unwrap();
    assert_eq!(out[0], vec![1.0, 1.0 + 1.0 / 128.0, 65536.0, 0.0]);
    let mut c = compile(&plus_zero(DType::F16));
    let out = c.run(&[("x", &[1.0 + 1.0 / 2048.0, 70000.0, 6.0e-8, -1.0])]).unwrap();
    assert_eq!(out[0], vec![1.0, f32::INFINITY, 5.9604645e-8, -1.0]);
}

#[test]
fn f64_graphs_round_trip_bit_exactly() {
    // Values that f32 cannot hold: any f32 detour would change them.
    let a = [0.1, 1.0 + 2f64.powi(-40), -3.0e-300, 1.0e300, std::f64::consts::PI];
    let b = [0.2, 2f64.powi(-45), 7.0e-301, -1.0e299, 1.0e-20];
    let mut g = Graph::new("f64");
    let x = g.input("a", DType::F64, &[5]).unwrap();
    let y = g.input("b", DType::F64, &[5]).unwrap();
    let s = g.add(x, y).unwrap();
    let p = g.mul(x, y).unwrap();
    let q = g.div(s, p).unwrap();
    g.set_outputs(&[s, p, q, x]).unwrap();
    let mut c = compile(&g);
    let ta = HostTensor::from_f64(&[5], &a).unwrap();
    let tb = HostTensor::from_f64(&[5], &b).unwrap();
    let out = c.run_typed(&[("a", &ta), ("b", &tb)]).unwrap();
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let sum: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    let prod: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
    let quot: Vec<f64> = sum.iter().zip(&prod).map(|(x, y)| x / y).collect();
    assert_eq!(bits(&out[0].to_f64_vec()), bits(&sum));
    assert_eq!(bits(&out[1].to_f64_vec()), bits(&prod));
    assert_eq!(bits(&out[2].to_f64_vec()), bits(&quot));
    assert_eq!(out[3].bytes(), ta.bytes());
    // The f32 entry point widens f32 values to f64 exactly: no "narrowing" conversion.
    let out = c.run(&[("a", &[0.1f32, 1.5, -2.0, 3.0, 4.0]), ("b", &[0.0f32; 5])]).unwrap();
    assert_eq!(out[3], vec![0.1f32, 1.5, -2.0, 3.0, 4.0]);
}

#[test]
fn typed_params_follow_the_same_rules_as_typed_inputs() {
    let mut g = Graph::new("param");
    let x = g.input("x", DType::BF16, &[3]).unwrap();
    let w = g.param("w", DType::BF16, &[3]).unwrap();
    let y = g.mul(x, w).unwrap();
    g.set_outputs(&[y]).unwrap();
    let mut c = compile(&g);
    let f32_values = HostTensor::from_f32(&[3], &[1.0, 2.0, 0.5]).unwrap();
    // An f32 tensor is converted for a bf16 param exactly as for a bf16 input.
    c.set_param_typed("w", &f32_values).unwrap();
    let x_bf16 = HostTensor::from_f32_as(DType::BF16, &[3], &[3.0, 3.0, 3.0]).unwrap();
    assert_eq!(c.run_typed(&[("x", &x_bf16)]).unwrap()[0].to_f32_vec(), vec![3.0, 6.0, 1.5]);
    assert_eq!(c.run_typed(&[("x", &f32_values)]).unwrap()[0].to_f32_vec(), vec![1.0, 4.0, 0.25]);
    // Integers are never silently converted to floats, for params or inputs.
    let ints = HostTensor::from_i64(&[3], &[1, 2, 3]).unwrap();
    assert!(c.set_param_typed("w", &ints).unwrap_err().message().contains("i64[3]"));
    assert!(c.run_typed(&[("x", &ints)]).unwrap_err().message().contains("i64[3]"));
}

#[test]
fn integer_and_bool_boundaries() {
    let mut g = Graph::new("ints");
    let x = g.input("x", DType::I32, &[3]).unwrap();
    let b = g.input("b", DType::Bool, &[3]).unwrap();
    let zero = g.scalar(DType::I32, 0.0).unwrap();
    let y = g.where_(b, x, zero).unwrap();
    let m = g.gt(x, zero).unwrap();
    g.set_outputs(&[y, m]).unwrap();
    let mut c = compile(&g);
    let out = c.run(&[("x", &[-5.0, 7.0, 16_777_216.0]), ("b", &[1.0, 0.0, 1.0])]).unwrap();
    assert_eq!(out, vec![vec![-5.0, 0.0, 16_777_216.0], vec![0.0, 1.0, 1.0]]);
    // A non-integer value for an integer input is an error naming it, not a truncation.
    let e = c.run(&[("x", &[1.5, 0.0, 0.0]), ("b", &[1.0, 0.0, 1.0])]).unwrap_err();
    assert!(e.message().contains("'x'") && e.message().contains("1.5") && e.message().contains("index 0"), "{e}");
    let e = c.run(&[("x", &[1.0, 0.0, 0.0]), ("b", &[1.0, 2.0, 1.0])]).unwrap_err();
    assert!(e.message().contains("'b'") && e.message().contains("bool"), "{e}");
}

#[test]
fn half_intermediates_are_rounded_on_every_store() {
    // (1 + eps) - 1 where 1 + eps rounds to 1 in the format: an intermediate kept in f32
    // would leave eps behind. The graph's one output hides nothing: the sum is internal.
    for (dtype, eps) in [(DType::F16, 2f32.powi(-12)), (DType::BF16, 2f32.powi(-9))] {
        let mut g = Graph::new("chain");
        let one = g.input("one", dtype, &[1]).unwrap();
        let e = g.input("eps", DType::F32, &[1]).unwrap();
        let e = g.cast(e, dtype).unwrap();
        let s = g.add(one, e).unwrap();
        let d = g.sub(s, one).unwrap();
        g.set_outputs(&[d]).unwrap();
        let out = compile(&g).run(&[("one", &[1.0]), ("eps", &[eps])]).unwrap();
        assert_eq!(out[0], vec![0.0], "{dtype}");
    }
}

/// A half graph (matmul, gelu, softmax in f16 / bf16) through both entry points, against
/// an f64 oracle on the same half values: `run` takes f32 values (rounded to the format
/// on the way in) and returns f32; `run_typed` takes and returns the format's bytes.
#[test]
fn half_graphs_compute_through_run_and_run_typed() {
    for dtype in [DType::F16, DType::BF16] {
        let mut g = Graph::new("half_net");
        let x = g.input("x", dtype, &[3, 5]).unwrap();
        let w = g.param("w", dtype, &[5, 4]).unwrap();
        let h = g.matmul(x, w).unwrap();
        let h = g.unary(Unary::Gelu, h).unwrap();
        let p = g.softmax(h, 1).unwrap();
        g.set_outputs(&[h, p]).unwrap();
        let xs: Vec<f32> = (0..15).map(|i| (i as f32 * 0.731).sin() * 1.7).collect();
        let ws: Vec<f32> = (0..20).map(|i| (i as f32 * 0.377).cos()).collect();
        let rounded = |v: &[f32]| HostTensor::from_f32_as(dtype, &[v.len()], v).unwrap().to_f64_vec();
        let (xr, wr) = (rounded(&xs), rounded(&ws));
        // Oracle: f64 product and gelu, each rounded to the format as the graph stores them.
        let round = |v: f64| HostTensor::from_f64_as(dtype, &[], &[v]).unwrap().to_f64_vec()[0];
        let mut want_h = vec![0.0; 12];
        for i in 0..3 {
            for j in 0..4 {
                let dot = round((0..5).map(|k| xr[i * 5 + k] * wr[k * 4 + j]).sum());
                want_h[i * 4 + j] = round(0.5 * dot * (1.0 + rlx_oracle::erf(dot / 2f64.sqrt())));
            }
        }
        let mut want_p = vec![0.0; 12];
        for i in 0..3 {
            let row = &want_h[i * 4..i * 4 + 4];
            let m = row.iter().fold(f64::MIN, |a, &b| a.max(b));
            let z: f64 = row.iter().map(|v| (v - m).exp()).sum();
            for j in 0..4 {
                want_p[i * 4 + j] = (row[j] - m).exp() / z;
            }
        }
        // One rounding of the dot product carried through gelu (|x gelu'(x)| <= 2 |gelu|
        // here) plus the store: 4 u of the largest value; softmax of those inputs in f32,
        // then stored.
        let u = dtype.unit_roundoff();
        let check = |got: &[f64], want: &[f64], what: &str| {
            let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
            for (k, (a, b)) in got.iter().zip(want).enumerate() {
                assert!((a - b).abs() <= 4.0 * u * scale, "{dtype} {what}[{k}]: {a} vs {b}");
            }
        };
        let mut c = compile(&g);
        c.set_param("w", &ws).unwrap();
        let out = c.run(&[("x", &xs)]).unwrap();
        let as_f64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
        check(&as_f64(&out[0]), &want_h, "run h");
        check(&as_f64(&out[1]), &want_p, "run p");
        let t = HostTensor::from_f32_as(dtype, &[3, 5], &xs).unwrap();
        let typed = c.run_typed(&[("x", &t)]).unwrap();
        assert_eq!((typed[0].dtype(), typed[1].dtype()), (dtype, dtype));
        check(&typed[0].to_f64_vec(), &want_h, "run_typed h");
        check(&typed[1].to_f64_vec(), &want_p, "run_typed p");
        // Both entry points computed the same values.
        assert_eq!(typed[0].to_f32_vec(), out[0]);
    }
}

/// `run_typed_with` shows the outputs where the program keeps them: the same dtypes,
/// dims and bytes as `run_typed` returns, for f32, half (stored widened or not) and
/// integer outputs, run after run.
#[test]
fn run_typed_with_shows_what_run_typed_returns() {
    for dtype in [DType::F16, DType::BF16] {
        let mut g = Graph::new("outputs");
        let x = g.input("x", DType::F32, &[3, 5]).unwrap();
        let h = g.cast(x, dtype).unwrap();
        let h = g.unary(Unary::Tanh, h).unwrap();
        let s = g.softmax(x, 1).unwrap();
        let i = g.cast(x, DType::I32).unwrap();
        g.set_outputs(&[s, h, i]).unwrap();
        let mut c = compile(&g);
        for run in 0..3 {
            let xs: Vec<f32> = (0..15).map(|k| ((k + 7 * run) as f32 * 0.731).sin() * 3.7).collect();
            let x = HostTensor::from_f32(&[3, 5], &xs).unwrap();
            let want = c.run_typed(&[("x", &x)]).unwrap();
            let mut seen = Vec::new();
            c.run_typed_with(&[("x", &x)], &mut |outs| seen = outs.iter().map(|o| o.to_host()).collect()).unwrap();
            assert_eq!(seen, want, "{dtype} run {run}");
        }
    }
}
