//! Quantization formats against two outside oracles: the `gguf` Python package's
//! decoder and encoder (fixtures from tests/fixtures/make_quant_fixtures.py), and f64
//! decoders written here, separately from `rlx_ir::quant`.

use rlx_ir::quant::{QuantScheme, dequantize, quantize};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn npy_f32(name: &str) -> Vec<f32> {
    rlx_io::load_npy(fixture(name)).unwrap().to_f32_vec()
}

const FIXTURE_SCHEMES: [(QuantScheme, &str); 10] = [
    (QuantScheme::Q4_0, "Q4_0"),
    (QuantScheme::Q4_1, "Q4_1"),
    (QuantScheme::Q5_0, "Q5_0"),
    (QuantScheme::Q5_1, "Q5_1"),
    (QuantScheme::Q8_0, "Q8_0"),
    (QuantScheme::Q2K, "Q2_K"),
    (QuantScheme::Q3K, "Q3_K"),
    (QuantScheme::Q4K, "Q4_K"),
    (QuantScheme::Q5K, "Q5_K"),
    (QuantScheme::Q6K, "Q6_K"),
];

#[test]
fn dequantize_matches_gguf_python_and_an_f64_decoder() {
    for (scheme, name) in FIXTURE_SCHEMES {
        let blocks = std::fs::read(fixture(&format!("{name}.blocks"))).unwrap();
        let want = npy_f32(&format!("{name}.dequant.npy"));
        let mut got = vec![0f32; want.len()];
        dequantize(scheme, &blocks, &mut got).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{name}[{i}]: rlx {g} vs gguf {w}");
        }
        let f64s: Vec<f64> =
            blocks.chunks(scheme.block_bytes()).flat_map(|b| rlx_oracle::quant::decode_f64(name, b)).collect();
        for (i, (g, w)) in got.iter().zip(&f64s).enumerate() {
            // One f32 rounding per multiply and add of the decode.
            assert!((*g as f64 - w).abs() <= 4e-7 * w.abs().max(1e-6), "{name}[{i}]: rlx {g} vs f64 {w}");
        }
    }
}

#[test]
fn encoders_match_gguf_python() {
    for (scheme, name) in [(QuantScheme::Q8_0, "Q8_0"), (QuantScheme::Q4_0, "Q4_0"), (QuantScheme::Q4_1, "Q4_1")] {
        let x = npy_f32(&format!("{name}.input.npy"));
        let want = std::fs::read(fixture(&format!("{name}.quant"))).unwrap();
        assert_eq!(quantize(scheme, &x).unwrap(), want, "{name}");
    }
}

/// Every encoder's round trip stays within half a quantization step of its (sub)block,
/// plus the f16 rounding of the step itself. The K-quant encoders fit each sub-block's
/// grid (weighted least squares) instead of spanning its range, so they may clip an
/// extreme: their bounds are the squared error over the row against the range grid's
/// (with exact steps), and the largest error within three steps. (Their error on real
/// weights is checked against llama-quantize's in rlx-models' quantize tests.)
#[test]
fn round_trip_error_within_the_scheme_bound() {
    let mut rng = rlx_oracle::Rng::new(3);
    // Uniform values, and normal ones (weights are bell-shaped; on uniform values the
    // range grid is about the least-squares one already), each with an outlier in 97.
    let uniform: Vec<f32> = (0..4096).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
    let bell: Vec<f32> = (0..4096)
        .map(|_| {
            let (u, v) = (rng.uniform(f64::EPSILON, 1.0), rng.uniform(0.0, 1.0));
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos() / 3.0) as f32
        })
        .collect();
    for (scheme, normal) in [
        QuantScheme::Q8_0,
        QuantScheme::Q4_0,
        QuantScheme::Q4_1,
        QuantScheme::Q5_0,
        QuantScheme::Q5_1,
        QuantScheme::Q2K,
        QuantScheme::Q3K,
        QuantScheme::Q4K,
        QuantScheme::Q5K,
        QuantScheme::Q6K,
        QuantScheme::F16,
        QuantScheme::BF16,
    ]
    .into_iter()
    .flat_map(|s| [(s, false), (s, true)])
    {
        let values = if normal { &bell } else { &uniform };
        let x: Vec<f32> = values.iter().enumerate().map(|(i, &v)| if i % 97 == 0 { 8.0 * v } else { v }).collect();
        let q = quantize(scheme, &x).unwrap();
        assert_eq!(q.len(), scheme.row_bytes(x.len()).unwrap());
        let mut back = vec![0f32; x.len()];
        dequantize(scheme, &q, &mut back).unwrap();
        // (values per step, levels): the grid spacing is range / levels of the block.
        let (group, levels, symmetric) = match scheme {
            QuantScheme::Q8_0 => (32, 127.0, true),
            QuantScheme::Q4_0 => (32, 8.0, true),
            QuantScheme::Q4_1 => (32, 15.0, false),
            QuantScheme::Q5_0 => (32, 16.0, true),
            QuantScheme::Q5_1 => (32, 31.0, false),
            QuantScheme::Q2K => (16, 3.0, false),
            QuantScheme::Q3K => (16, 4.0, true),
            QuantScheme::Q4K => (32, 15.0, false),
            QuantScheme::Q5K => (32, 31.0, false),
            QuantScheme::Q6K => (16, 31.0, true),
            _ => (1, f64::INFINITY, true),
        };
        let fitted = matches!(
            scheme,
            QuantScheme::Q2K | QuantScheme::Q3K | QuantScheme::Q4K | QuantScheme::Q5K | QuantScheme::Q6K
        );
        let (mut sse, mut sse_range) = (0f64, 0f64);
        for (g, (xs, bs)) in x.chunks(group).zip(back.chunks(group)).enumerate() {
            let amax = xs.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
            let (lo, hi) = xs.iter().fold((0f64, 0f64), |(a, b), &v| (a.min(v as f64), b.max(v as f64)));
            let range = if symmetric { amax } else { hi - lo };
            // Q4_0 / Q5_0 map the largest magnitude to -8 / -16, so the opposite extreme
            // clips at +7 / +15: a full step.
            let slack = match scheme {
                _ if fitted => 3.0,
                QuantScheme::Q4_0 | QuantScheme::Q5_0 => 1.0,
                _ => 0.5,
            };
            let half_format_ulp = match scheme {
                QuantScheme::F16 => amax * 2f64.powi(-11),
                QuantScheme::BF16 => amax * 2f64.powi(-8),
                _ => 0.0,
            };
            let bound = slack * range / levels * (1.0 + 2f64.powi(-10)) + amax * 2f64.powi(-10) + half_format_ulp;
            for (&a, &b) in xs.iter().zip(bs) {
                let err = (a as f64 - b as f64).abs();
                assert!(err <= bound + 1e-12, "{} group {g}: |{a} - {b}| = {err:e} > {bound:e}", scheme.name());
                sse += err * err;
            }
            // The range grid: the value of largest magnitude at -nmax of [-nmax, nmax)
            // (symmetric), or min(x, 0) ..= max(x) in `levels` steps.
            let (step, base, q_lo, q_hi) = if symmetric {
                let nmax = if scheme == QuantScheme::Q6K { 32.0 } else { levels };
                let widest = xs.iter().fold(0f64, |m, &v| if (v as f64).abs() > m.abs() { v as f64 } else { m });
                (widest / -nmax, 0.0, -nmax, nmax - 1.0)
            } else {
                (range / levels, lo, 0.0, levels)
            };
            for &a in xs {
                let a = a as f64;
                let q = if step != 0.0 { ((a - base) / step).round().clamp(q_lo, q_hi) } else { 0.0 };
                sse_range += (a - (q * step + base)).powi(2);
            }
        }
        if fitted {
            // The symmetric fits weigh errors by x^2, and the steps are rounded to 6- or
            // 8-bit multiples of the super-block's: their plain squared error on these
            // values is 0.99-1.02 of the range grid's with exact steps, the affine fits'
            // 0.65-0.97 (a grid off by a step or with the offset's sign flipped: 2x and more).
            let most = if symmetric { 1.05 } else { 1.0 };
            assert!(
                sse < most * sse_range,
                "{} ({}): squared error {sse:e}, the range grid's {sse_range:e}",
                scheme.name(),
                if normal { "normal" } else { "uniform" }
            );
        }
    }
}

/// Blocks no weight file should hold but a user's tensor can: zeros, constants, values
/// too small or too large for an f16 step, infinities and NaN. Every encoder returns a
/// whole encoding; zeros come back as zeros, constants and denormal-sized values close
/// (within the format's step, or at zero where the step underflows f16), and a NaN or
/// infinity spoils no block but its own.
#[test]
fn encoders_take_zeros_constants_tiny_huge_and_non_finite_blocks() {
    let schemes = QuantScheme::ALL.into_iter().filter(|s| s.can_encode() && !s.is_float());
    for scheme in schemes {
        let bs = scheme.block_size().max(256);
        let block = |f: &dyn Fn(usize) -> f32| (0..bs).map(f).collect::<Vec<f32>>();
        let cases: [(&str, Vec<f32>); 7] = [
            ("zeros", block(&|_| 0.0)),
            ("a constant", block(&|_| 0.37)),
            ("a negative constant", block(&|_| -0.37)),
            ("denormals", block(&|i| if i % 3 == 0 { 1e-40 } else { -2e-39 })),
            ("huge values", block(&|i| if i % 2 == 0 { 1e30 } else { -3e29 })),
            ("an infinity", block(&|i| if i == 5 { f32::INFINITY } else { 0.5 })),
            ("a NaN", block(&|i| if i == 7 { f32::NAN } else { 0.5 })),
        ];
        for (what, values) in cases {
            // The block of interest between two ordinary ones.
            let ordinary = block(&|i| (i as f32 * 0.37).sin());
            let x: Vec<f32> = ordinary.iter().chain(&values).chain(&ordinary).copied().collect();
            let q = quantize(scheme, &x).unwrap();
            assert_eq!(q.len(), scheme.row_bytes(x.len()).unwrap(), "{} {what}", scheme.name());
            // The neighbours encode as they do alone.
            let alone = quantize(scheme, &ordinary).unwrap();
            let n = alone.len();
            assert!(q[..n] == alone[..] && q[2 * n..] == alone[..], "{} {what}: a neighbouring block", scheme.name());
            let mut back = vec![0f32; x.len()];
            dequantize(scheme, &q, &mut back).unwrap();
            let mid = &back[bs..2 * bs];
            match what {
                "zeros" => assert!(mid.iter().all(|&v| v == 0.0), "{} zeros: {mid:?}", scheme.name()),
                "a constant" | "a negative constant" => {
                    for (&a, &b) in values.iter().zip(mid) {
                        assert!((a - b).abs() <= 0.37 / 32.0, "{} {what}: {a} -> {b}", scheme.name());
                    }
                }
                "denormals" => assert!(mid.iter().all(|v| v.abs() <= 2e-39), "{} denormals: {mid:?}", scheme.name()),
                _ => {}
            }
        }
    }
}

#[test]
fn bad_lengths_are_errors() {
    let mut out = vec![0f32; 32];
    let e = dequantize(QuantScheme::Q4_1, &[0u8; 19], &mut out).unwrap_err();
    assert!(e.message().contains("Q4_1") && e.message().contains("19"), "{e}");
    assert!(quantize(QuantScheme::Q8_0, &[0.0; 31]).is_err());
    assert!(quantize(QuantScheme::Q8K, &[0.0; 256]).unwrap_err().message().contains("Q8_K"));
}
