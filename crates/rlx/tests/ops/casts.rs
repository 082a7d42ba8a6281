//! Casts between the 16-bit floats and f32 / f64, exhaustively: every one of the 65536
//! bit patterns of f16 and bf16 widened, and, narrowing, every finite value, every
//! midpoint between neighbours (the ties) and the source format's next values on either
//! side of each midpoint, plus overflow, infinities and NaN. Checked through the Cast
//! kernel on a widened input, on a packed param (2-byte storage) and through the f32
//! boundary, against `rlx_oracle`'s bit-layout decoder and nearest-value search.

use super::common::*;
use rlx::prelude::*;

const FORMATS: [(DType, Half, u32, u32); 2] = [(DType::F16, Half::F16, 5, 10), (DType::BF16, Half::BF16, 8, 7)];

/// `cast(x, to)` with `x` an input, and again with `x` a param (which the CPU may keep
/// packed in 2 bytes when its only reader is the cast).
fn cast_both_ways(x: &HostTensor, to: DType) -> [HostTensor; 2] {
    let session = Session::new(test_device()).unwrap();
    let mut g = Graph::new("cast_input");
    let i = g.input("x", x.dtype(), x.dims()).unwrap();
    let o = g.cast(i, to).unwrap();
    g.set_outputs(&[o]).unwrap();
    let from_input = session.compile(&g).unwrap().run_typed(&[("x", x)]).unwrap().remove(0);
    let mut g = Graph::new("cast_param");
    let p = g.param("p", x.dtype(), x.dims()).unwrap();
    let o = g.cast(p, to).unwrap();
    g.set_outputs(&[o]).unwrap();
    let mut c = session.compile(&g).unwrap();
    c.set_param_typed("p", x).unwrap();
    let from_param = c.run_typed(&[]).unwrap().remove(0);
    [from_input, from_param]
}

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || (a == b && a.is_sign_negative() == b.is_sign_negative())
}

#[test]
fn every_half_pattern_widens_exactly() {
    for (dtype, _, e, m) in FORMATS {
        let bits: Vec<u16> = (0..=u16::MAX).collect();
        let bytes = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
        let x = HostTensor::from_bytes(dtype, &[bits.len()], bytes).unwrap();
        for to in [DType::F32, DType::F64] {
            for (path, got) in ["input", "param"].into_iter().zip(cast_both_ways(&x, to)) {
                let got = got.to_f64_vec();
                for (&b, &v) in bits.iter().zip(&got) {
                    let want = decode_small_float(b, e, m);
                    assert!(same(v, want), "{dtype} {b:#06x} -> {to} ({path}): got {v:e}, want {want:e}");
                    if want.is_nan() {
                        assert_eq!(v.is_sign_negative(), b >> 15 == 1, "{dtype} NaN {b:#06x} keeps its sign");
                    }
                }
            }
        }
    }
}

/// Values that probe every rounding decision of a 16-bit format, from the oracle's
/// decoded patterns: each finite value, the midpoint to the next one up, and the
/// `step`-neighbours of that midpoint in the source format; beyond the largest value,
/// the overflow threshold and its neighbours; both signs.
fn probes(e: u32, m: u32, next_up: impl Fn(f64) -> f64, next_down: impl Fn(f64) -> f64) -> Vec<f64> {
    let mut out = Vec::new();
    for b in 0..0x8000u16 {
        let v = decode_small_float(b, e, m);
        let next = decode_small_float(b + 1, e, m);
        if !v.is_finite() {
            continue;
        }
        // Past the largest finite value the "next" is infinity: the midpoint is the
        // overflow threshold max + ulp/2.
        let mid = if next.is_finite() { (v + next) / 2.0 } else { v + (v - decode_small_float(b - 1, e, m)) / 2.0 };
        for x in [v, mid, next_up(mid), next_down(mid)] {
            out.push(x);
            out.push(-x);
        }
    }
    out.extend([f64::INFINITY, f64::NEG_INFINITY, f64::MAX, -f64::MAX]);
    out
}

#[test]
fn every_tie_and_neighbour_narrows_to_nearest_even() {
    let f32_up = |x: f64| f32::from_bits((x as f32).to_bits() + 1) as f64;
    let f32_down =
        |x: f64| if x == 0.0 { -f32::from_bits(1) as f64 } else { f32::from_bits((x as f32).to_bits() - 1) as f64 };
    let f64_up = |x: f64| f64::from_bits(x.to_bits() + 1);
    let f64_down = |x: f64| if x == 0.0 { -f64::from_bits(1) } else { f64::from_bits(x.to_bits() - 1) };
    for (dtype, half, e, m) in FORMATS {
        // Midpoints of a 16-bit format are exact in f32 (at most 12 significant bits,
        // exponents inside f32's range), so the f32 probes are exact too.
        let from_f32 = probes(e, m, f32_up, f32_down);
        let from_f64 = probes(e, m, f64_up, f64_down);
        for (src, values) in [(DType::F32, from_f32), (DType::F64, from_f64)] {
            let x = HostTensor::from_f64_as(src, &[values.len()], &values).unwrap();
            let exact = x.to_f64_vec();
            for (path, got) in ["input", "param"].into_iter().zip(cast_both_ways(&x, dtype)) {
                for (&v, &g) in exact.iter().zip(&got.to_f64_vec()) {
                    let want = round_half(v, half);
                    assert!(same(g, want), "{src} {v:e} -> {dtype} ({path}): got {g:e}, want {want:e}");
                }
            }
        }
        // NaN of either sign stays NaN with its sign.
        let nans = HostTensor::from_f32(&[2], &[f32::NAN, -f32::NAN]).unwrap();
        for got in cast_both_ways(&nans, dtype) {
            let got = got.to_f64_vec();
            assert!(got[0].is_nan() && !got[0].is_sign_negative() && got[1].is_nan() && got[1].is_sign_negative());
        }
    }
}

#[test]
fn the_f32_boundary_rounds_like_the_cast() {
    // `run` converts f32 values to a half input by value; `x + 0` returns them.
    let f32_up = |x: f64| f32::from_bits((x as f32).to_bits() + 1) as f64;
    let f32_down =
        |x: f64| if x == 0.0 { -f32::from_bits(1) as f64 } else { f32::from_bits((x as f32).to_bits() - 1) as f64 };
    for (dtype, half, e, m) in FORMATS {
        let values: Vec<f32> = probes(e, m, f32_up, f32_down).into_iter().map(|v| v as f32).collect();
        let mut g = Graph::new("boundary");
        let x = g.input("x", dtype, &[values.len()]).unwrap();
        let zero = g.scalar(dtype, 0.0).unwrap();
        let y = g.add(x, zero).unwrap();
        g.set_outputs(&[y]).unwrap();
        let got = Session::new(test_device()).unwrap().compile(&g).unwrap().run(&[("x", &values)]).unwrap().remove(0);
        for (&v, &g) in values.iter().zip(&got) {
            // x + 0 turns -0 into +0: compare values, not signs of zero.
            let want = round_half(v as f64, half);
            assert!(g as f64 == want || (g.is_nan() && want.is_nan()), "{v:e} -> {dtype}: got {g:e}, want {want:e}");
        }
    }
}

/// A cast to the value's own dtype is a copy: all 65536 patterns of each half format
/// come back byte for byte, from a widened input and from a packed param, except that a
/// signaling NaN comes back quieted (same sign and payload, quiet bit set), as IEEE
/// conversions do: a widened activation passes through f32.
#[test]
fn same_dtype_casts_copy_every_pattern() {
    for (dtype, _, exp_bits, mant_bits) in FORMATS {
        let quiet = 1u16 << (mant_bits - 1);
        let exp_mask = ((1u16 << exp_bits) - 1) << mant_bits;
        let bytes: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
        let x = HostTensor::from_bytes(dtype, &[65536], bytes).unwrap();
        for (path, got) in ["input", "param"].into_iter().zip(cast_both_ways(&x, dtype)) {
            assert_eq!(got.dtype(), dtype);
            for (k, c) in got.bytes().chunks_exact(2).enumerate() {
                let (bits, want) = (u16::from_le_bytes([c[0], c[1]]), k as u16);
                let signaling = want & exp_mask == exp_mask && want & !exp_mask & 0x7fff != 0 && want & quiet == 0;
                let ok = bits == want || (signaling && bits == want | quiet);
                assert!(ok, "{dtype} from {path}: pattern {want:#06x} came back {bits:#06x}");
            }
        }
    }
}
