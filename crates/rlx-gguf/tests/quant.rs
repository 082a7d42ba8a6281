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
/// plus the f16 rounding of the step itself.
#[test]
fn round_trip_error_within_the_scheme_bound() {
    let mut rng = rlx_oracle::Rng::new(3);
    for scheme in [
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
    ] {
        let x: Vec<f32> =
            (0..4096).map(|i| (rng.uniform(-1.0, 1.0) * if i % 97 == 0 { 8.0 } else { 1.0 }) as f32).collect();
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
        for (g, (xs, bs)) in x.chunks(group).zip(back.chunks(group)).enumerate() {
            let amax = xs.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
            let range = if symmetric {
                amax
            } else {
                let (lo, hi) = xs.iter().fold((0f64, 0f64), |(a, b), &v| (a.min(v as f64), b.max(v as f64)));
                hi - lo
            };
            // K-quant steps are 4- or 6-bit multiples of a super-block scale: one more
            // step of slack. Q4_0 / Q5_0 map the largest magnitude to -8 / -16, so the
            // opposite extreme clips at +7 / +15: a full step (Q3_K: both).
            let slack = match scheme {
                QuantScheme::Q2K | QuantScheme::Q3K | QuantScheme::Q4K | QuantScheme::Q5K | QuantScheme::Q6K => 1.5,
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
