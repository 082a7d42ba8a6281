//! vmath accuracy guards: each function over sweeps of its domain against an f64 oracle,
//! in EVERY ISA arm this host runs, with the bounds docs/vmath.md states (measured by
//! tools/vmath/check.py on every f32 of most ranges; the bounds here are those maxima,
//! rounded up). The portable arm returns exactly the scalar functions' bits; the FMA arms
//! may differ in the last bits and must meet the same bounds. NaN in gives NaN out in
//! every arm.

use rlx_cpu::features::Arm;
use rlx_cpu::vmath::{self, SLICE_FUNCTIONS};
use rlx_oracle::Rng;

/// How a function's error is measured.
#[derive(Clone, Copy)]
enum Measure {
    /// |got - want| / |want|, where want is a normal f32.
    Rel(f64),
    /// |got - want|.
    Abs(f64),
    /// |got - want| / max(1, |x|).
    AbsScaled(f64),
}

/// Inputs: uniform samples, log-uniform magnitudes of both signs, and the range edges.
fn sweep(lo: f64, hi: f64, n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    let mut xs: Vec<f32> = (0..n).map(|_| rng.uniform(lo, hi) as f32).collect();
    let (mag_lo, mag_hi) = (lo.abs().min(hi.abs()).max(1e-30), lo.abs().max(hi.abs()));
    for _ in 0..n / 2 {
        let m = (rng.uniform(mag_lo.ln(), mag_hi.ln())).exp();
        for v in [m, -m] {
            if v >= lo && v <= hi {
                xs.push(v as f32);
            }
        }
    }
    xs.extend([lo as f32, hi as f32, 0.0, -0.0].into_iter().filter(|v| (*v as f64) >= lo && (*v as f64) <= hi));
    xs
}

/// The slice kernel called `name`.
fn kernel(name: &str) -> vmath::SliceFn {
    SLICE_FUNCTIONS.iter().find(|f| f.0 == name).map(|f| f.1).expect("a vmath function")
}

fn check(name: &str, oracle: impl Fn(f64) -> f64, xs: &[f32], measure: Measure) {
    for arm in Arm::available() {
        let mut out = vec![0f32; xs.len()];
        kernel(name.split(' ').next().unwrap())(arm, xs, &mut out);
        check_arm(&format!("{name} ({})", arm.name()), &out, &oracle, xs, measure);
    }
}

fn check_arm(name: &str, got: &[f32], oracle: &impl Fn(f64) -> f64, xs: &[f32], measure: Measure) {
    let mut worst = (0.0f64, 0.0f32);
    for (&x, &g) in xs.iter().zip(got) {
        let (got, want) = (g as f64, oracle(x as f64));
        let err = match measure {
            Measure::Rel(_) if want.abs() < f32::MIN_POSITIVE as f64 => continue,
            Measure::Rel(_) => (got - want).abs() / want.abs(),
            Measure::Abs(_) => (got - want).abs(),
            Measure::AbsScaled(_) => (got - want).abs() / (x.abs() as f64).max(1.0),
        };
        assert!(!err.is_nan(), "{name}({x:e}) = {got:e}, oracle {want:e}");
        if err > worst.0 {
            worst = (err, x);
        }
    }
    let bound = match measure {
        Measure::Rel(b) | Measure::Abs(b) | Measure::AbsScaled(b) => b,
    };
    assert!(worst.0 <= bound, "{name}: error {:e} at x = {:e} exceeds the bound {bound:e}", worst.0, worst.1);
}

fn sigmoid64(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}
fn softplus64(x: f64) -> f64 {
    if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() }
}

#[test]
fn accuracy_within_documented_bounds() {
    use Measure::*;
    let n = 100_000;
    check("exp", f64::exp, &sweep(-87.3, 88.72, n, 1), Rel(1.0e-7));
    check("log", f64::ln, &sweep(2f64.powi(-30), 2f64.powi(30), n, 2), Rel(8.2e-8));
    // Subnormal inputs, down to the smallest.
    let subnormal: Vec<f32> = (0..20_000u32).map(|i| f32::from_bits(1 + i * 419)).collect();
    check("log subnormal", f64::ln, &subnormal, Rel(8.2e-8));
    check("ln_1p", f64::ln_1p, &sweep(-0.999, 1e6, n, 3), Rel(8.2e-8));
    check("ln_1p tiny", f64::ln_1p, &sweep(-1e-4, 1e-4, n, 4), Rel(6.0e-8));
    check("sin", f64::sin, &sweep(-1e6, 1e6, n, 5), Abs(8.3e-8));
    check("cos", f64::cos, &sweep(-1e6, 1e6, n, 6), Abs(8.2e-8));
    check("tan", f64::tan, &sweep(-1e4, 1e4, n, 7), Rel(1.32e-7));
    check("atan", f64::atan, &sweep(-1e30, 1e30, n, 8), Abs(1.02e-7));
    check("tanh", f64::tanh, &sweep(-10.0, 10.0, n, 9), Rel(1.03e-7));
    check("sigmoid", sigmoid64, &sweep(-87.0, 88.0, n, 10), Rel(1.8e-7));
    check("erf", rlx_oracle::erf, &sweep(-6.0, 6.0, n, 11), Abs(7.6e-8));
    check("erf near 0", rlx_oracle::erf, &sweep(-1.0, 1.0, n, 12), Rel(9.0e-8));
    check("erfc", rlx_oracle::erfc, &sweep(-9.1, 9.1, n, 13), Rel(3.2e-7));
    let gelu64 = |x: f64| 0.5 * x * rlx_oracle::erfc(-x / std::f64::consts::SQRT_2);
    check("gelu", gelu64, &sweep(-12.9, 20.0, n, 14), Rel(3.8e-7));
    let gelu_tanh64 = |x: f64| x * sigmoid64((8.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x));
    check("gelu_tanh", gelu_tanh64, &sweep(-20.0, 20.0, n, 15), AbsScaled(1.42e-7));
    check("silu", |x| x * sigmoid64(x), &sweep(-20.0, 20.0, n, 16), Rel(2.4e-7));
    check("softplus", softplus64, &sweep(-20.0, 20.0, n, 17), Rel(1.34e-7));
    check("mish", |x| x * softplus64(x).tanh(), &sweep(-20.0, 20.0, n, 18), Rel(2.4e-7));
    check("log_sigmoid", |x| -softplus64(-x), &sweep(-20.0, 20.0, n, 19), Rel(1.34e-7));
}

#[test]
fn special_values() {
    let inf = f32::INFINITY;
    type Case = (&'static str, fn(f32) -> f32, f32, f32);
    let cases: &[Case] = &[
        ("exp", vmath::exp, inf, inf),
        ("exp", vmath::exp, -inf, 0.0),
        ("exp", vmath::exp, 88.72, 3.3931806e38),
        ("exp", vmath::exp, 89.0, inf),
        ("exp", vmath::exp, -103.0, 1.3451e-45),
        ("log", vmath::log, 0.0, -inf),
        ("log", vmath::log, -0.0, -inf),
        ("log", vmath::log, inf, inf),
        ("log", vmath::log, 1.0, 0.0),
        ("ln_1p", vmath::ln_1p, -1.0, -inf),
        ("ln_1p", vmath::ln_1p, 1e-30, 1e-30),
        ("tanh", vmath::tanh, 10.0, 1.0),
        ("tanh", vmath::tanh, -inf, -1.0),
        ("atan", vmath::atan, inf, std::f32::consts::FRAC_PI_2),
        ("atan", vmath::atan, -inf, -std::f32::consts::FRAC_PI_2),
        ("erf", vmath::erf, inf, 1.0),
        ("erf", vmath::erf, -inf, -1.0),
        ("sigmoid", vmath::sigmoid, -inf, 0.0),
        ("sigmoid", vmath::sigmoid, inf, 1.0),
        ("gelu", vmath::gelu, -inf, 0.0),
        ("gelu", vmath::gelu, inf, inf),
        ("silu", vmath::silu, -inf, 0.0),
        ("mish", vmath::mish, -inf, 0.0),
        ("gelu_tanh", vmath::gelu_tanh, -inf, 0.0),
        ("softplus", vmath::softplus, inf, inf),
        ("softplus", vmath::softplus, 100.0, 100.0),
        ("softplus", vmath::softplus, -inf, 0.0),
        ("log_sigmoid", vmath::log_sigmoid, -inf, -inf),
    ];
    for &(name, f, x, want) in cases {
        let got = f(x);
        let close = got == want || (got - want).abs() <= 1e-45 || (got / want - 1.0).abs() < 1e-6;
        assert!(close, "{name}({x}) = {got:e}, want {want:e}");
    }
    // Sign of zero kept where the function is odd at 0.
    for (name, f) in [
        ("sin", vmath::sin as fn(f32) -> f32),
        ("tan", vmath::tan),
        ("atan", vmath::atan),
        ("tanh", vmath::tanh),
        ("erf", vmath::erf),
        ("ln_1p", vmath::ln_1p),
    ] {
        assert!(f(-0.0).is_sign_negative() && f(-0.0) == 0.0, "{name}(-0) must be -0");
    }
    // Out-of-domain inputs give NaN.
    assert!(vmath::log(-1.0).is_nan() && vmath::ln_1p(-2.0).is_nan());
    assert!(vmath::sin(inf).is_nan() && vmath::cos(-inf).is_nan() && vmath::tan(inf).is_nan());
}

#[test]
fn portable_arm_is_the_scalar_and_every_arm_propagates_nan() {
    let mut xs = sweep(-120.0, 120.0, 20_003, 40); // odd length: exercises vector tails
    let nans = [f32::NAN, -f32::NAN, f32::from_bits(0x7fc0_0001), f32::from_bits(0x7f80_0001)];
    xs.extend(nans);
    xs.extend([f32::INFINITY, f32::NEG_INFINITY, 1e-40, -1e-40, 0.0, -0.0]);
    for &(name, kernel, scalar, _, _) in SLICE_FUNCTIONS {
        let mut portable = vec![0f32; xs.len()];
        kernel(Arm::Portable, &xs, &mut portable);
        // A NaN's sign and payload are not part of Rust's float semantics (a vectorized
        // and a scalar build of the same code may give different NaNs): any NaN will do.
        for (i, (&x, &p)) in xs.iter().zip(&portable).enumerate() {
            let s = scalar(x);
            assert!(p.to_bits() == s.to_bits() || (p.is_nan() && s.is_nan()), "{name}: slice and scalar differ at {i}");
        }
        for arm in Arm::available() {
            let mut out = vec![0f32; xs.len()];
            kernel(arm, &xs, &mut out);
            for (k, &v) in out[out.len() - 10..out.len() - 6].iter().enumerate() {
                assert!(v.is_nan(), "{name} arm {}: NaN input {k} gave {v}", arm.name());
            }
            // Infinities and zeros land where the portable arm puts them.
            for (i, (&a, &p)) in out.iter().zip(&portable).enumerate().skip(out.len() - 6) {
                assert!(a == p || (a.is_nan() && p.is_nan()), "{name} arm {}: special input {i}", arm.name());
            }
        }
    }
}

/// Each function's leaf-sum kernel (what a fused `f(x) -> sum` adds per 512-element
/// block) is bit for bit the pairwise sum of that arm's slice output, and its in-place
/// kernel gives the slice output's bits, at every tail length, with NaN, infinities,
/// denormals and signed zeros among the inputs.
#[test]
fn leaf_sums_and_in_place_kernels_agree_with_the_slice_kernel() {
    let mut xs = sweep(-30.0, 30.0, 512, 41);
    for (i, v) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e-40, -0.0].into_iter().enumerate() {
        xs[100 + 97 * i] = v;
    }
    let same = |p: f32, q: f32| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan());
    for &(name, kernel, _, sum, inplace) in SLICE_FUNCTIONS {
        for arm in Arm::available() {
            for len in [0, 1, 3, 15, 16, 17, 100, 511, 512] {
                // The specials sit at 100 and past: the shorter runs are all finite.
                let x = &xs[xs.len() - len..];
                let mut out = vec![0f32; len];
                kernel(arm, x, &mut out);
                let mut in_place = x.to_vec();
                inplace(arm, &mut in_place);
                assert!(
                    out.iter().zip(&in_place).all(|(&p, &q)| same(p, q)),
                    "{name} arm {} in place, {len}",
                    arm.name()
                );
                let want = rlx_ir::ops::reduce::pairwise_sum(&out);
                let got = sum(arm, x);
                assert!(same(got, want), "{name} arm {} over {len}: {got:e} vs {want:e}", arm.name());
            }
        }
    }
}

/// tanh's error peaks where its two formulas meet: just past the cut, 1 - 2/(e^2a + 1)
/// cancels most. Every f32 in [0.55, 0.9], both signs, in every arm (the cut at 0.625
/// gave 1.46e-7 at 0.630 in the fused arms, which the sampled sweep above missed).
#[test]
fn tanh_every_f32_around_its_cut_within_bound() {
    let xs: Vec<f32> = (0.55f32.to_bits()..=0.9f32.to_bits()).map(f32::from_bits).flat_map(|x| [x, -x]).collect();
    check("tanh", f64::tanh, &xs, Measure::Rel(1.03e-7));
}

/// tanh's AVX-512 arm looks its polynomial up by the top bits of |x|: every f32 within
/// 4096 ulps of each interval's edges (2^-4 * 1.25^k steps up to 16, where a rounding of
/// the interval code would show) and of the cut to exactly 1, both signs, within the
/// bound tools/vmath/tanh_table.py measured over every f32 (8.93e-8); tiny and subnormal
/// inputs give themselves in every arm.
#[test]
fn tanh_avx512_every_f32_near_its_interval_edges() {
    let mut edges: Vec<u32> = (492u32..=524).map(|code| code << 21).collect();
    edges.push(0x4110_2cb4); // the cut
    let xs: Vec<f32> = edges
        .iter()
        .flat_map(|&e| e - 4096..e + 4096)
        .map(f32::from_bits)
        .filter(|x| *x <= 10.0)
        .flat_map(|x| [x, -x])
        .collect();
    if Arm::available().contains(&Arm::Avx512) {
        let mut out = vec![0f32; xs.len()];
        kernel("tanh")(Arm::Avx512, &xs, &mut out);
        check_arm("tanh (avx512)", &out, &f64::tanh, &xs, Measure::Rel(8.93e-8));
    }
    check("tanh", f64::tanh, &xs, Measure::Rel(1.03e-7));
    let tiny: Vec<f32> = (0..4096u32).map(|i| f32::from_bits(1 + i * 235_000)).flat_map(|x| [x, -x]).collect();
    assert!(tiny.iter().all(|x| x.abs() < 2f32.powi(-12)));
    for arm in Arm::available() {
        let mut out = vec![0f32; tiny.len()];
        kernel("tanh")(arm, &tiny, &mut out);
        assert!(tiny.iter().zip(&out).all(|(x, y)| x.to_bits() == y.to_bits()), "tanh(tiny) != tiny in {}", arm.name());
    }
}

/// ln's and ln_1p's AVX-512 arm reads its table by the top bits of u's mantissa in
/// [0.75, 1.5): every f32 within 2048 ulps of each interval's edges, in the binades 2^-4
/// to 2^4 and a subnormal one for ln, and 1 + x on those u for ln_1p, against the bounds
/// tools/vmath/log_table.py measured over every f32 (6.03e-8 and 6.12e-8).
#[test]
fn log_avx512_every_f32_near_its_interval_edges() {
    if !Arm::available().contains(&Arm::Avx512) {
        eprintln!("needs AVX-512: not tested on this CPU");
        return;
    }
    let edges = (0..16).map(|j| 1.0 + j as f32 / 32.0).chain((16..32).map(|j| 0.5 * (1.0 + j as f32 / 32.0)));
    let scales = (-4..=4).map(|k| 2f32.powi(k)).chain([2f32.powi(-140)]);
    let us: Vec<f32> = edges
        .chain([1.5])
        .flat_map(|edge| scales.clone().map(move |s| edge * s))
        .flat_map(|u| (u.to_bits().saturating_sub(2048).max(1)..u.to_bits() + 2048).map(f32::from_bits))
        .collect();
    let mut out = vec![0f32; us.len()];
    kernel("log")(Arm::Avx512, &us, &mut out);
    check_arm("log (avx512)", &out, &f64::ln, &us, Measure::Rel(6.03e-8));
    let xs: Vec<f32> = us.iter().map(|u| u - 1.0).filter(|x| *x > -1.0).collect();
    let mut out = vec![0f32; xs.len()];
    kernel("ln_1p")(Arm::Avx512, &xs, &mut out);
    check_arm("ln_1p (avx512)", &out, &f64::ln_1p, &xs, Measure::Rel(6.12e-8));
}

/// gelu's AVX-512 arm looks its polynomial up by the top bits of |x| (clamped at 14.8):
/// every f32 within 4096 ulps of each interval's edges (2^-4 * 1.25^k steps up to 16)
/// and of the clamp, both signs, within the bound tools/vmath/gelu_table.py measured over
/// every f32 of [-12.9, 6] (2.561e-7) where gelu is a normal f32; past 6 it is x itself,
/// and subnormal results stay within half the least subnormal (of x/2 for tiny x), or
/// |x|/2 + 1 of them below -12.9, where Phi(x) is subnormal.
#[test]
fn gelu_avx512_every_f32_near_its_interval_edges() {
    if !Arm::available().contains(&Arm::Avx512) {
        eprintln!("needs AVX-512: not tested on this CPU");
        return;
    }
    let gelu64 = |x: f64| 0.5 * x * rlx_oracle::erfc(-x / std::f64::consts::SQRT_2);
    let mut edges: Vec<u32> = (492u32..=524).map(|code| code << 21).collect();
    edges.push(14.8f32.to_bits());
    let xs: Vec<f32> =
        edges.iter().flat_map(|&e| e - 4096..e + 4096).map(f32::from_bits).flat_map(|x| [x, -x]).collect();
    let mut out = vec![0f32; xs.len()];
    kernel("gelu")(Arm::Avx512, &xs, &mut out);
    let normal: Vec<(f32, f32)> = xs.iter().copied().zip(out.iter().copied()).filter(|(x, _)| *x >= -12.9).collect();
    let (inside, got): (Vec<f32>, Vec<f32>) = normal.iter().copied().unzip();
    check_arm("gelu (avx512)", &got, &gelu64, &inside, Measure::Rel(2.57e-7));
    for (&x, &y) in xs.iter().zip(&out) {
        if x >= 6.0 {
            assert_eq!(y.to_bits(), x.to_bits(), "gelu({x:e}) on avx512");
        }
        // Below -12.9 Phi(x) itself is subnormal, rounded once, then multiplied by x.
        let want = gelu64(x as f64);
        let ulps = if x >= -12.9 { 0.5 } else { 0.5 * x.abs() as f64 + 1.0 };
        if want.abs() < f32::MIN_POSITIVE as f64 {
            assert!((y as f64 - want).abs() <= ulps * 2f64.powi(-149), "gelu({x:e}) = {y:e}, oracle {want:e}");
        }
    }
    let specials = [f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, f32::NAN];
    let mut out = [0f32; 5];
    kernel("gelu")(Arm::Avx512, &specials, &mut out);
    let bits = |v: &[f32]| v[..4].iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&out), bits(&[f32::INFINITY, -0.0, 0.0, -0.0]), "gelu(inf, -inf, 0, -0) on avx512");
    assert!(out[4].is_nan());
}

/// The functions whose AVX-512 arm is a table-driven kernel of its own.
const TABLE_DRIVEN_AVX512: [&str; 4] = ["log", "ln_1p", "tanh", "gelu"];

/// The fused arms compute the same operations, so AVX-512 and AVX2 agree bit for bit
/// where both run the auto-vectorized code, over magnitudes from subnormal to huge, both
/// signs, the neighbourhoods of 0, 1 and -1, and the special values. ln, ln_1p, tanh and
/// gelu are the exceptions: their AVX-512 arms are table-driven (no division), with their own
/// bits and their own tests below.
#[test]
fn avx512_arm_equals_the_avx2_arm_bit_for_bit() {
    let arms = Arm::available();
    if !(arms.contains(&Arm::Avx512) && arms.contains(&Arm::Avx2)) {
        eprintln!("needs AVX-512 and AVX2: not tested on this CPU");
        return;
    }
    let mut xs: Vec<f32> = Vec::new();
    for e in -149..128 {
        // Either side of sqrt(2) (0x3fb504f3), where ln halves the mantissa.
        let sqrt2 = [f32::from_bits(0x3fb504f2), f32::from_bits(0x3fb504f3), f32::from_bits(0x3fb504f4)];
        for m in [1.0f32, 1.1, 1.25, 1.5, 1.75, 1.9999999].into_iter().chain(sqrt2) {
            let v = m * 2f32.powi(e);
            xs.extend([v, -v]);
        }
    }
    xs.extend((0..4000).map(|i| 1.0 + (i as f32 - 2000.0) * 1e-4));
    xs.extend((0..4000).map(|i| -1.0 + i as f32 * 2.5e-8));
    xs.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE, 1e-45, -1e-45, f32::MAX]);
    xs.extend(sweep(-100.0, 100.0, 10_007, 43));
    for &(name, kernel, _, _, _) in SLICE_FUNCTIONS.iter().filter(|f| !TABLE_DRIVEN_AVX512.contains(&f.0)) {
        let (mut a, mut b) = (vec![0f32; xs.len()], vec![0f32; xs.len()]);
        kernel(Arm::Avx512, &xs, &mut a);
        kernel(Arm::Avx2, &xs, &mut b);
        for (i, (&p, &q)) in a.iter().zip(&b).enumerate() {
            assert!(
                p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()),
                "{name}({:e}): avx512 {p:e} vs avx2 {q:e}",
                xs[i]
            );
        }
    }
}

/// Every f32 within 3 ulps of the f32 nearest k*pi/2, for every k with |k| <= 3900 (the
/// f32 reduction's whole range: |x| <= 6000 takes it), both signs: the inputs where the
/// reduced argument cancels most, and where tan leaves the f32 reduction for the f64 one.
fn near_multiples_of_pi_over_2() -> Vec<f32> {
    let mut xs = Vec::new();
    for k in 1..=3900 {
        let c = (k as f64 * std::f64::consts::FRAC_PI_2) as f32;
        for d in -3i32..=3 {
            let v = f32::from_bits(c.to_bits().wrapping_add_signed(d));
            xs.extend([v, -v]);
        }
    }
    xs
}

/// sin, cos and tan below 6000 (the f32 argument reduction, `reduce_short`) within the
/// same bounds as the f64 reduction: dense sweeps, the neighbourhoods of every multiple
/// of pi/2 in range, and the range's edge.
#[test]
fn trig_short_range_within_bounds() {
    use Measure::*;
    let mut xs = sweep(-6000.0, 6000.0, 200_000, 44);
    xs.extend(near_multiples_of_pi_over_2());
    xs.extend((0..2000).map(|i| 5999.0 + i as f32 * 1e-3));
    check("sin", f64::sin, &xs, Abs(8.3e-8));
    check("cos", f64::cos, &xs, Abs(8.2e-8));
    check("tan", f64::tan, &xs, Rel(1.32e-7));
}

/// A value's result does not depend on what shares its chunk: the same inputs alone and
/// with a value past the f32 reduction's range (or a NaN) beside them give the same bits, in every arm, through the slice, in-place and
/// leaf-sum kernels.
#[test]
fn trig_value_does_not_depend_on_its_neighbours() {
    let alone = sweep(-6000.0, 6000.0, 4_001, 45);
    let mut mixed = alone.clone();
    for (i, v) in mixed.iter_mut().enumerate().step_by(97) {
        *v = [1e5, f32::NAN, 3.0 * std::f32::consts::FRAC_PI_2, -7e3][i % 4];
    }
    for &(name, kernel, _, sum, inplace) in SLICE_FUNCTIONS.iter().filter(|f| ["sin", "cos", "tan"].contains(&f.0)) {
        for arm in Arm::available() {
            let (mut a, mut b) = (vec![0f32; alone.len()], vec![0f32; alone.len()]);
            kernel(arm, &alone, &mut a);
            kernel(arm, &mixed, &mut b);
            for (i, (&p, &q)) in a.iter().zip(&b).enumerate() {
                if alone[i] == mixed[i] {
                    assert_eq!(p.to_bits(), q.to_bits(), "{name} arm {} at x = {:e}", arm.name(), alone[i]);
                }
            }
            let mut in_place = mixed.clone();
            inplace(arm, &mut in_place);
            assert!(in_place.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan())));
            let leaf = &alone[..512];
            assert_eq!(sum(arm, leaf).to_bits(), rlx_ir::ops::reduce::pairwise_sum(&a[..512]).to_bits(), "{name}");
        }
    }
}
