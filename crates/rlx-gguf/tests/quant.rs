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

fn f16(b: &[u8], at: usize) -> f64 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f64()
}

/// An f64 decoder per scheme: unpack every field into plain arrays first, then combine.
fn decode_f64(s: QuantScheme, b: &[u8]) -> Vec<f64> {
    let nib = |bytes: &[u8]| -> Vec<u8> { bytes.iter().map(|x| x & 15).chain(bytes.iter().map(|x| x >> 4)).collect() };
    let bits = |bytes: &[u8], i: usize| -> u8 { (bytes[i / 8] >> (i % 8)) & 1 };
    match s {
        QuantScheme::Q4_0 => nib(&b[2..18]).iter().map(|&q| f16(b, 0) * (q as f64 - 8.0)).collect(),
        QuantScheme::Q4_1 => nib(&b[4..20]).iter().map(|&q| f16(b, 0) * q as f64 + f16(b, 2)).collect(),
        QuantScheme::Q5_0 => nib(&b[6..22]).iter().enumerate().map(|(i, &q)| f16(b, 0) * ((q + 16 * bits(&b[2..6], i)) as f64 - 16.0)).collect(),
        QuantScheme::Q5_1 => nib(&b[8..24]).iter().enumerate().map(|(i, &q)| f16(b, 0) * (q + 16 * bits(&b[4..8], i)) as f64 + f16(b, 2)).collect(),
        QuantScheme::Q8_0 => b[2..34].iter().map(|&q| f16(b, 0) * (q as i8) as f64).collect(),
        QuantScheme::Q2K => {
            let (scales, qs, d, dmin) = (&b[0..16], &b[16..80], f16(b, 80), f16(b, 82));
            // 2-bit fields: for each 32-byte half, four passes of 2-bit shifts.
            let mut q = Vec::new();
            for half in qs.chunks(32) {
                for shift in [0, 2, 4, 6] {
                    q.extend(half.iter().map(|x| (x >> shift) & 3));
                }
            }
            q.iter().enumerate().map(|(i, &v)| d * (scales[i / 16] & 15) as f64 * v as f64 - dmin * (scales[i / 16] >> 4) as f64).collect()
        }
        QuantScheme::Q3K => {
            let (hm, qs, sc, d) = (&b[0..32], &b[32..96], &b[96..108], f16(b, 108));
            let mut scale = [0i32; 16];
            for (i, s) in scale.iter_mut().enumerate() {
                let low = if i < 8 { sc[i] & 15 } else { sc[i - 8] >> 4 };
                let high = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
                *s = (low | (high << 4)) as i32 - 32;
            }
            let mut q = Vec::new();
            for half in qs.chunks(32) {
                for shift in [0, 2, 4, 6] {
                    q.extend(half.iter().map(|x| ((x >> shift) & 3) as i32));
                }
            }
            q.iter().enumerate().map(|(i, &v)| {
                let high_set = (hm[i % 32] >> (i / 32)) & 1 == 1;
                d * scale[i / 16] as f64 * (v - if high_set { 0 } else { 4 }) as f64
            }).collect()
        }
        QuantScheme::Q4K | QuantScheme::Q5K => {
            let (d, dmin, s) = (f16(b, 0), f16(b, 2), &b[4..16]);
            let scale = |j: usize| if j < 4 { s[j] & 63 } else { (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4) };
            let min = |j: usize| if j < 4 { s[j + 4] & 63 } else { (s[j + 4] >> 4) | ((s[j] >> 6) << 4) };
            let (qh, qs) = if s.len() == 12 && b.len() == 176 { (Some(&b[16..48]), &b[48..176]) } else { (None, &b[16..144]) };
            let mut q = Vec::new();
            for chunk in qs.chunks(32) {
                q.extend(chunk.iter().map(|x| x & 15));
                q.extend(chunk.iter().map(|x| x >> 4));
            }
            q.iter().enumerate().map(|(i, &v)| {
                let j = i / 32;
                let v = v as u32 + qh.map_or(0, |h| (((h[i % 32] >> j) & 1) as u32) << 4);
                d * scale(j) as f64 * v as f64 - dmin * min(j) as f64
            }).collect()
        }
        QuantScheme::Q6K => {
            let (ql, qh, sc, d) = (&b[0..128], &b[128..192], &b[192..208], f16(b, 208));
            let mut out = vec![0f64; 256];
            for half in 0..2 {
                for l in 0..32 {
                    let (lo, hi) = (&ql[half * 64..], &qh[half * 32..]);
                    let vals = [
                        (lo[l] & 15) | ((hi[l] & 3) << 4),
                        (lo[l + 32] & 15) | (((hi[l] >> 2) & 3) << 4),
                        (lo[l] >> 4) | (((hi[l] >> 4) & 3) << 4),
                        (lo[l + 32] >> 4) | (((hi[l] >> 6) & 3) << 4),
                    ];
                    for (k, &v) in vals.iter().enumerate() {
                        let e = half * 128 + k * 32 + l;
                        out[e] = d * (sc[e / 16] as i8) as f64 * (v as i32 - 32) as f64;
                    }
                }
            }
            out
        }
        other => panic!("no f64 decoder for {}", other.name()),
    }
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
        let f64s: Vec<f64> = blocks.chunks(scheme.block_bytes()).flat_map(|b| decode_f64(scheme, b)).collect();
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
    for scheme in [QuantScheme::Q8_0, QuantScheme::Q4_0, QuantScheme::Q4_1, QuantScheme::Q4K, QuantScheme::Q6K, QuantScheme::F16, QuantScheme::BF16] {
        let x: Vec<f32> = (0..4096).map(|i| (rng.uniform(-1.0, 1.0) * if i % 97 == 0 { 8.0 } else { 1.0 }) as f32).collect();
        let q = quantize(scheme, &x).unwrap();
        assert_eq!(q.len(), scheme.row_bytes(x.len()).unwrap());
        let mut back = vec![0f32; x.len()];
        dequantize(scheme, &q, &mut back).unwrap();
        // (values per step, levels): the grid spacing is range / levels of the block.
        let (group, levels, symmetric) = match scheme {
            QuantScheme::Q8_0 => (32, 127.0, true),
            QuantScheme::Q4_0 => (32, 8.0, true),
            QuantScheme::Q4_1 => (32, 15.0, false),
            QuantScheme::Q4K => (32, 15.0, false),
            QuantScheme::Q6K => (16, 31.0, true),
            _ => (1, f64::INFINITY, true),
        };
        for (g, (xs, bs)) in x.chunks(group).zip(back.chunks(group)).enumerate() {
            let amax = xs.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
            let range = if symmetric { amax } else {
                let (lo, hi) = xs.iter().fold((0f64, 0f64), |(a, b), &v| (a.min(v as f64), b.max(v as f64)));
                hi - lo
            };
            // K-quant steps are 6-bit multiples of a super-block scale: one more step of
            // slack. Q4_0 maps the largest magnitude to -8, so the opposite extreme clips at
            // +7: a full step.
            let slack = match scheme {
                QuantScheme::Q4K | QuantScheme::Q6K => 1.5,
                QuantScheme::Q4_0 => 1.0,
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
    assert!(quantize(QuantScheme::Q3K, &[0.0; 256]).unwrap_err().message().contains("Q3_K"));
}
