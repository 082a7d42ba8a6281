//! Block-quantized weight formats (the GGML/GGUF family): layouts, reference
//! dequantization and encoders.
//!
//! A quantized row of `k` values is `k / block_size` blocks of `block_bytes` bytes. Layouts
//! follow ggml (facts cross-checked against the `gguf` Python package's quants.py by the
//! fixtures in crates/rlx-gguf/tests/fixtures). This module is the reference; the CPU
//! backend has fused fast paths checked against it and against f64 decoders in tests.

use crate::{Error, Result};
use half::f16;
use serde::{Deserialize, Serialize};

/// Elements per K-quant super-block.
pub const QK_K: usize = 256;

/// A weight storage scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuantScheme {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
}

impl QuantScheme {
    pub const ALL: [QuantScheme; 14] = [
        QuantScheme::F32,
        QuantScheme::F16,
        QuantScheme::BF16,
        QuantScheme::Q4_0,
        QuantScheme::Q4_1,
        QuantScheme::Q5_0,
        QuantScheme::Q5_1,
        QuantScheme::Q8_0,
        QuantScheme::Q2K,
        QuantScheme::Q3K,
        QuantScheme::Q4K,
        QuantScheme::Q5K,
        QuantScheme::Q6K,
        QuantScheme::Q8K,
    ];

    /// ggml's type id (the GGUF tensor-info field).
    pub fn ggml_type(self) -> u32 {
        match self {
            QuantScheme::F32 => 0,
            QuantScheme::F16 => 1,
            QuantScheme::Q4_0 => 2,
            QuantScheme::Q4_1 => 3,
            QuantScheme::Q5_0 => 6,
            QuantScheme::Q5_1 => 7,
            QuantScheme::Q8_0 => 8,
            QuantScheme::Q2K => 10,
            QuantScheme::Q3K => 11,
            QuantScheme::Q4K => 12,
            QuantScheme::Q5K => 13,
            QuantScheme::Q6K => 14,
            QuantScheme::Q8K => 15,
            QuantScheme::BF16 => 30,
        }
    }

    pub fn from_ggml_type(t: u32) -> Option<QuantScheme> {
        QuantScheme::ALL.into_iter().find(|s| s.ggml_type() == t)
    }

    pub fn name(self) -> &'static str {
        match self {
            QuantScheme::F32 => "F32",
            QuantScheme::F16 => "F16",
            QuantScheme::BF16 => "BF16",
            QuantScheme::Q4_0 => "Q4_0",
            QuantScheme::Q4_1 => "Q4_1",
            QuantScheme::Q5_0 => "Q5_0",
            QuantScheme::Q5_1 => "Q5_1",
            QuantScheme::Q8_0 => "Q8_0",
            QuantScheme::Q2K => "Q2_K",
            QuantScheme::Q3K => "Q3_K",
            QuantScheme::Q4K => "Q4_K",
            QuantScheme::Q5K => "Q5_K",
            QuantScheme::Q6K => "Q6_K",
            QuantScheme::Q8K => "Q8_K",
        }
    }

    /// Values per block.
    pub fn block_size(self) -> usize {
        match self {
            QuantScheme::F32 | QuantScheme::F16 | QuantScheme::BF16 => 1,
            QuantScheme::Q4_0 | QuantScheme::Q4_1 | QuantScheme::Q5_0 | QuantScheme::Q5_1 | QuantScheme::Q8_0 => 32,
            _ => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            QuantScheme::F32 => 4,
            QuantScheme::F16 | QuantScheme::BF16 => 2,
            QuantScheme::Q4_0 => 18,
            QuantScheme::Q4_1 => 20,
            QuantScheme::Q5_0 => 22,
            QuantScheme::Q5_1 => 24,
            QuantScheme::Q8_0 => 34,
            QuantScheme::Q2K => 84,
            QuantScheme::Q3K => 110,
            QuantScheme::Q4K => 144,
            QuantScheme::Q5K => 176,
            QuantScheme::Q6K => 210,
            QuantScheme::Q8K => 292,
        }
    }

    /// Bytes of a row of `k` values, or an error when `k` is not a whole number of blocks.
    pub fn row_bytes(self, k: usize) -> Result<usize> {
        if !k.is_multiple_of(self.block_size()) {
            return Err(Error::shape(format!(
                "{} rows need a multiple of {} values, got {k}",
                self.name(),
                self.block_size()
            )));
        }
        Ok(k / self.block_size() * self.block_bytes())
    }

    /// Whether values are stored as plain floats (F32, F16, BF16: one value a block).
    pub fn is_float(self) -> bool {
        matches!(self, QuantScheme::F32 | QuantScheme::F16 | QuantScheme::BF16)
    }

    /// Schemes `quantize` can encode.
    pub fn can_encode(self) -> bool {
        matches!(
            self,
            QuantScheme::F32
                | QuantScheme::F16
                | QuantScheme::BF16
                | QuantScheme::Q8_0
                | QuantScheme::Q4_0
                | QuantScheme::Q4_1
                | QuantScheme::Q5_0
                | QuantScheme::Q5_1
                | QuantScheme::Q2K
                | QuantScheme::Q3K
                | QuantScheme::Q4K
                | QuantScheme::Q5K
                | QuantScheme::Q6K
        )
    }
}

#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    crate::f16_bits_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Decodes `bytes` (whole blocks) into `out` (`blocks * block_size` values).
pub fn dequantize(scheme: QuantScheme, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let (bs, bb) = (scheme.block_size(), scheme.block_bytes());
    if !bytes.len().is_multiple_of(bb) || bytes.len() / bb * bs != out.len() {
        return Err(Error::shape(format!(
            "dequantize {}: {} bytes do not hold {} values ({bb} bytes per {bs})",
            scheme.name(),
            bytes.len(),
            out.len()
        )));
    }
    for (block, o) in bytes.chunks_exact(bb).zip(out.chunks_exact_mut(bs)) {
        dequantize_block(scheme, block, o);
    }
    Ok(())
}

/// One block. Inlined into kernels' decode loops (where `scheme` is a loop invariant).
#[inline]
pub fn dequantize_block(scheme: QuantScheme, b: &[u8], o: &mut [f32]) {
    match scheme {
        QuantScheme::F32 => o[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        QuantScheme::F16 => o[0] = f16_at(b, 0),
        QuantScheme::BF16 => o[0] = half::bf16::from_le_bytes([b[0], b[1]]).to_f32(),
        QuantScheme::Q4_0 => {
            let d = f16_at(b, 0);
            for j in 0..16 {
                o[j] = d * ((b[2 + j] & 0xF) as i32 - 8) as f32;
                o[j + 16] = d * ((b[2 + j] >> 4) as i32 - 8) as f32;
            }
        }
        QuantScheme::Q4_1 => {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            for j in 0..16 {
                o[j] = d * (b[4 + j] & 0xF) as f32 + m;
                o[j + 16] = d * (b[4 + j] >> 4) as f32 + m;
            }
        }
        QuantScheme::Q5_0 | QuantScheme::Q5_1 => {
            let with_min = scheme == QuantScheme::Q5_1;
            let d = f16_at(b, 0);
            let (m, at) = if with_min { (f16_at(b, 2), 4) } else { (0.0, 2) };
            let qh = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
            let qs = &b[at + 4..at + 20];
            for j in 0..32 {
                let lo = if j < 16 { qs[j] & 0xF } else { qs[j - 16] >> 4 };
                let q = (lo as u32 | (((qh >> j) & 1) << 4)) as i32;
                o[j] = if with_min { d * q as f32 + m } else { d * (q - 16) as f32 };
            }
        }
        QuantScheme::Q8_0 => {
            let d = f16_at(b, 0);
            for j in 0..32 {
                o[j] = d * (b[2 + j] as i8) as f32;
            }
        }
        QuantScheme::Q2K => {
            let (scales, qs) = (&b[0..16], &b[16..80]);
            let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
            // Value e = 128 h + 32 s + l: bits 2s of byte 32h + l. By runs of 16 values
            // (one scale each), with the shift fixed a run, so the loop vectorizes (per
            // value, 2.7 ns of a Q3_K row's decode went to the divisions and variable
            // shifts); each value is the same expression.
            for (run, o) in o[..256].chunks_exact_mut(16).enumerate() {
                let (h, s, half) = (run / 8, (run % 8) / 2, run % 2);
                let sc = scales[run];
                let qs = &qs[h * 32 + 16 * half..][..16];
                for (o, &q) in o.iter_mut().zip(qs) {
                    let q = (q >> (2 * s)) & 3;
                    *o = d * (sc & 0xF) as f32 * q as f32 - dmin * (sc >> 4) as f32;
                }
            }
        }
        QuantScheme::Q3K => {
            let (hmask, qs, d) = (&b[0..32], &b[32..96], f16_at(b, 108));
            let scales = q3k_scales(&b[96..108]);
            // As Q2_K's, by runs of 16; the high bit of value e is bit e / 32 of hmask[e % 32].
            for (i, o) in o[..256].chunks_exact_mut(16).enumerate() {
                let scale = scales[i] as i32;
                let (h, s, half) = (i / 8, (i % 8) / 2, i % 2);
                let (qs, hmask) = (&qs[h * 32 + 16 * half..][..16], &hmask[16 * half..][..16]);
                let j = i / 2;
                for ((o, &q), &m) in o.iter_mut().zip(qs).zip(hmask) {
                    let ql = ((q >> (2 * s)) & 3) as i32;
                    let bit = ((m >> j) & 1) as i32;
                    *o = d * scale as f32 * (ql - 4 * (1 - bit)) as f32;
                }
            }
        }
        QuantScheme::Q4K | QuantScheme::Q5K => {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let (sc, mn) = k_scale_min(&b[4..16]);
            let (qh, qs) =
                if scheme == QuantScheme::Q5K { (Some(&b[16..48]), &b[48..176]) } else { (None, &b[16..144]) };
            for (e, o) in o.iter_mut().enumerate() {
                let j = e / 32;
                let mut q = ((qs[(j / 2) * 32 + e % 32] >> (4 * (j % 2))) & 0xF) as u32;
                if let Some(qh) = qh {
                    q |= (((qh[e % 32] >> j) & 1) as u32) << 4;
                }
                *o = d * sc[j] as f32 * q as f32 - dmin * mn[j] as f32;
            }
        }
        QuantScheme::Q6K => {
            let (ql, qh, scales, d) = (&b[0..128], &b[128..192], &b[192..208], f16_at(b, 208));
            for (e, o) in o.iter_mut().enumerate() {
                let (h, r) = (e / 128, e % 128);
                let lo = (ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
                let hi = (qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
                let q = (lo | (hi << 4)) as i32 - 32;
                *o = d * (scales[e / 16] as i8) as f32 * q as f32;
            }
        }
        QuantScheme::Q8K => {
            let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            for (j, o) in o.iter_mut().enumerate() {
                *o = d * (b[4 + j] as i8) as f32;
            }
        }
    }
}

/// The 8 six-bit scales and mins of a Q4_K / Q5_K super-block (12 packed bytes).
#[inline]
pub fn k_scale_min(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    for j in 0..4 {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0xF) | ((s[j] >> 2) & 0x30);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 2) & 0x30);
    }
    (sc, mn)
}

/// The 16 signed sub-block scales of a Q3_K super-block (12 packed bytes: 4 low bits of
/// scale i in byte i % 8 at bit 4 (i / 8), its 2 high bits in byte 8 + i % 4 at bit
/// 2 (i / 4); stored as scale + 32).
#[inline]
pub fn q3k_scales(s: &[u8]) -> [i8; 16] {
    std::array::from_fn(|i| {
        let lo = (s[i % 8] >> (4 * (i / 8))) & 0xF;
        let hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        ((lo | (hi << 4)) as i32 - 32) as i8
    })
}

/// Encodes `values` (a whole number of blocks) in `scheme`.
pub fn quantize(scheme: QuantScheme, values: &[f32]) -> Result<Vec<u8>> {
    let bs = scheme.block_size();
    if !scheme.can_encode() {
        return Err(Error::unsupported(format!("quantizing to {} is not implemented", scheme.name())));
    }
    if !values.len().is_multiple_of(bs) {
        return Err(Error::shape(format!("{} needs a multiple of {bs} values, got {}", scheme.name(), values.len())));
    }
    let mut out = Vec::with_capacity(values.len() / bs * scheme.block_bytes());
    for block in values.chunks_exact(bs) {
        quantize_block(scheme, block, &mut out);
    }
    Ok(out)
}

/// Round half away from zero (ggml's `roundf`).
fn round_away(x: f32) -> f32 {
    x.round()
}

fn quantize_block(scheme: QuantScheme, x: &[f32], out: &mut Vec<u8>) {
    let push_f16 = |out: &mut Vec<u8>, v: f32| out.extend_from_slice(&f16::from_f32(v).to_le_bytes());
    match scheme {
        QuantScheme::F32 => out.extend_from_slice(&x[0].to_le_bytes()),
        QuantScheme::F16 => push_f16(out, x[0]),
        QuantScheme::BF16 => out.extend_from_slice(&crate::f32_to_bf16(x[0]).to_le_bytes()),
        QuantScheme::Q8_0 => {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d == 0.0 { 0.0 } else { 1.0 / d };
            push_f16(out, d);
            out.extend(x.iter().map(|&v| round_away(v * id) as i8 as u8));
        }
        QuantScheme::Q4_0 => {
            // The value of largest magnitude maps to -8.
            let max = x.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
            let d = max / -8.0;
            let id = if d == 0.0 { 0.0 } else { 1.0 / d };
            push_f16(out, d);
            let q = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
            out.extend((0..16).map(|j| q(x[j]) | (q(x[j + 16]) << 4)));
        }
        QuantScheme::Q4_1 => {
            let (min, max) = x.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
            let d = (max - min) / 15.0;
            let id = if d == 0.0 { 0.0 } else { 1.0 / d };
            push_f16(out, d);
            push_f16(out, min);
            let q = |v: f32| (((v - min) * id + 0.5) as i32).clamp(0, 15) as u8;
            out.extend((0..16).map(|j| q(x[j]) | (q(x[j + 16]) << 4)));
        }
        QuantScheme::Q5_0 | QuantScheme::Q5_1 => {
            // Q5_0: the value of largest magnitude maps to -16; Q5_1: min..max over 0..31.
            let (d, min, offset) = if scheme == QuantScheme::Q5_0 {
                let max = x.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
                (max / -16.0, 0.0, 16.5)
            } else {
                let (min, max) = x.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
                ((max - min) / 31.0, min, 0.5)
            };
            let id = if d == 0.0 { 0.0 } else { 1.0 / d };
            push_f16(out, d);
            if scheme == QuantScheme::Q5_1 {
                push_f16(out, min);
            }
            let q: Vec<u32> = x.iter().map(|&v| (((v - min) * id + offset) as i32).clamp(0, 31) as u32).collect();
            let qh = q.iter().enumerate().fold(0u32, |h, (j, &v)| h | ((v >> 4) << j));
            out.extend_from_slice(&qh.to_le_bytes());
            out.extend((0..16).map(|j| ((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4)) as u8));
        }
        QuantScheme::Q2K => quantize_q2k(x, out),
        QuantScheme::Q3K => quantize_q3k(x, out),
        QuantScheme::Q4K => quantize_q4k(x, false, out),
        QuantScheme::Q5K => quantize_q4k(x, true, out),
        QuantScheme::Q6K => quantize_q6k(x, out),
        _ => unreachable!("can_encode guards the schemes"),
    }
}

/// An affine K-quant super-block of 256 values in `S` sub-blocks: per sub-block the step
/// and offset that fit its values best ([`fit_affine`]), as multiples `sc` and `mn` (up
/// to `codes`) of the f16 `d` and `dmin`; then each value rounded on its final grid (up to
/// `top`). Returns `(d, dmin, sc, mn)`.
///
/// A fit, not the sub-block's range: on SmolLM2's Q4_K tensors the relative RMS error
/// goes from 0.0244 (range rounded outwards) to 0.0186, llama-quantize's 0.0186; Gemma 3
/// 270M at Q3_K_M (Q4_K its attention output and FFN down) from perplexity 27.95 to 26.83,
/// llama-quantize's file 26.73.
fn affine_k<const S: usize>(x: &[f32], top: f32, codes: f32, q: &mut [u8; 256]) -> (f32, f32, [u8; S], [u8; S]) {
    let group = 256 / S;
    let fits: [(f32, f32); S] = std::array::from_fn(|j| fit_affine(&x[j * group..][..group], top));
    let dmin = f16::from_f32(fits.iter().fold(0f32, |m, f| m.max(f.1)) / codes).to_f32();
    let d = f16::from_f32(fits.iter().fold(0f32, |m, f| m.max(f.0)) / codes).to_f32();
    let mn: [u8; S] = std::array::from_fn(|j| if dmin > 0.0 { (fits[j].1 / dmin).round().min(codes) as u8 } else { 0 });
    let sc: [u8; S] = std::array::from_fn(|j| if d > 0.0 { (fits[j].0 / d).round().min(codes) as u8 } else { 0 });
    for (e, qv) in q.iter_mut().enumerate() {
        let (step, base) = (d * sc[e / group] as f32, dmin * mn[e / group] as f32);
        *qv = if step > 0.0 { ((x[e] + base) / step).round().clamp(0.0, top) as u8 } else { 0 };
    }
    (d, dmin, sc, mn)
}

/// The step `s` and offset `o >= 0` for which `s * q - o`, `q = round((x + o) / s)` in
/// `[0, top]`, is closest to `x` in weighted squared error, over 21 grids: the range
/// `min(x, 0) ..= max(x)` in `top - 1 ..= top + 1` steps, each refit by weighted least
/// squares for its `q` (the offset held at 0 where the fit would make it negative).
fn fit_affine(x: &[f32], top: f32) -> (f32, f32) {
    let (min, max) = x.iter().fold((0f32, f32::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
    if max <= min || !(max - min).is_finite() {
        return (0.0, -min);
    }
    // The weights: large values matter most to a product, but a sub-block of small ones
    // still gets a grid (with x^2 alone it would be fit to its one largest value).
    let rms = (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt();
    let weight = |v: f32| rms + v.abs();
    let mut best = (f32::INFINITY, (max - min) / top, -min);
    for i in -10..=10 {
        let inv = (top + 0.1 * i as f32) / (max - min);
        let (mut sw, mut sq, mut sqq, mut sx, mut sxq) = (0f32, 0f32, 0f32, 0f32, 0f32);
        for &v in x {
            let q = ((v - min) * inv).round().clamp(0.0, top);
            let w = weight(v);
            (sw, sq, sqq, sx, sxq) = (sw + w, sq + w * q, sqq + w * q * q, sx + w * v, sxq + w * v * q);
        }
        // Minimise sum w (s q + m - x)^2 over s and m <= 0.
        let det = sw * sqq - sq * sq;
        if det <= 0.0 {
            continue;
        }
        let (mut s, mut m) = ((sw * sxq - sx * sq) / det, (sqq * sx - sq * sxq) / det);
        if m > 0.0 {
            (s, m) = (sxq / sqq, 0.0);
        }
        if s <= 0.0 {
            continue;
        }
        let err: f32 = x
            .iter()
            .map(|&v| {
                let q = ((v - m) / s).round().clamp(0.0, top);
                weight(v) * (s * q + m - v).powi(2)
            })
            .sum();
        if err < best.0 {
            best = (err, s, -m);
        }
    }
    (best.1, best.2)
}

/// Q4_K (Q5_K with `five`): per 32-value sub-block an affine 4-bit (5-bit) grid whose
/// scale and offset are 6-bit multiples of the super-block's f16 `d` and `dmin`.
fn quantize_q4k(x: &[f32], five: bool, out: &mut Vec<u8>) {
    let mut q = [0u8; 256];
    let (d, dmin, sc, mn) = affine_k::<8>(x, if five { 31.0 } else { 15.0 }, 63.0, &mut q);
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend_from_slice(&f16::from_f32(dmin).to_le_bytes());
    let mut packed = [0u8; 12];
    for j in 0..4 {
        packed[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        packed[j + 4] = (mn[j] & 63) | ((mn[j + 4] >> 4) << 6);
        packed[j + 8] = (sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4);
    }
    out.extend_from_slice(&packed);
    if five {
        // Bit j of qh[l] is value 32 j + l's fifth bit.
        let mut qh = [0u8; 32];
        for (e, &v) in q.iter().enumerate() {
            qh[e % 32] |= (v >> 4) << (e / 32);
        }
        out.extend_from_slice(&qh);
    }
    for c in 0..4 {
        for l in 0..32 {
            out.push((q[c * 64 + l] & 0xF) | ((q[c * 64 + 32 + l] & 0xF) << 4));
        }
    }
}

/// Packs 2-bit values (`q[e] < 4`, a super-block of 256) as Q2_K and Q3_K store their low
/// bits: value `e = 128 h + 32 s + l` at bits `2 s` of byte `32 h + l`.
fn pack_2bit(q: &[u8; 256]) -> [u8; 64] {
    let mut qs = [0u8; 64];
    for (e, &v) in q.iter().enumerate() {
        qs[32 * (e / 128) + e % 32] |= (v & 3) << (2 * ((e / 32) % 4));
    }
    qs
}

/// Q2_K: per 16-value sub-block an affine 2-bit grid whose scale and offset are 4-bit
/// multiples of the super-block's f16 `d` and `dmin` ([`affine_k`]).
fn quantize_q2k(x: &[f32], out: &mut Vec<u8>) {
    let mut q = [0u8; 256];
    let (d, dmin, sc, mn) = affine_k::<16>(x, 3.0, 15.0, &mut q);
    out.extend((0..16).map(|j| sc[j] | (mn[j] << 4)));
    out.extend_from_slice(&pack_2bit(&q));
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend_from_slice(&f16::from_f32(dmin).to_le_bytes());
}

/// Q3_K: per 16-value sub-block a symmetric 3-bit grid ([-4, 3]) whose step is a signed
/// 6-bit multiple ([-32, 31]) of the super-block's f16 `d` ([`symmetric_k`]).
fn quantize_q3k(x: &[f32], out: &mut Vec<u8>) {
    let (d, sc, q) = symmetric_k(x, 4, 32);
    // hmask: bit e / 32 of byte e % 32 is value e's third bit.
    let mut hmask = [0u8; 32];
    for (e, &v) in q.iter().enumerate() {
        hmask[e % 32] |= (v >> 2) << (e / 32);
    }
    out.extend_from_slice(&hmask);
    out.extend_from_slice(&pack_2bit(&q));
    // Scale i + 32 (6 bits): its low 4 bits in byte i % 8 at bit 4 (i / 8), its high 2
    // in byte 8 + i % 4 at bit 2 (i / 4) (`q3k_scales` reads them back).
    let mut packed = [0u8; 12];
    for (i, &s) in sc.iter().enumerate() {
        let v = (s + 32) as u8;
        packed[i % 8] |= (v & 0xF) << (4 * (i / 8));
        packed[8 + i % 4] |= (v >> 4) << (2 * (i / 4));
    }
    out.extend_from_slice(&packed);
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
}

/// A symmetric K-quant super-block of 256 values in 16 sub-blocks of 16 (Q3_K, Q6_K):
/// per sub-block the step that fits its values best ([`fit_symmetric`], values in
/// `[-nmax, nmax)`), the 16 steps as signed multiples (in `[-codes, codes)`) of the f16
/// `d`, the sub-block of largest step at `-codes`; then each value rounded on its final
/// grid. Returns `(d, sc, q + nmax)`.
fn symmetric_k(x: &[f32], nmax: i32, codes: i32) -> (f32, [i32; 16], [u8; 256]) {
    let scale: [f32; 16] = std::array::from_fn(|j| fit_symmetric(&x[j * 16..][..16], nmax));
    let widest = scale.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    let d = f16::from_f32(widest / -(codes as f32)).to_f32();
    let sc: [i32; 16] =
        std::array::from_fn(|j| if d != 0.0 { ((scale[j] / d).round() as i32).clamp(-codes, codes - 1) } else { 0 });
    let q = std::array::from_fn(|e| {
        let step = d * sc[e / 16] as f32;
        let v = if step != 0.0 { (x[e] / step).round().clamp(-nmax as f32, (nmax - 1) as f32) as i32 } else { 0 };
        (v + nmax) as u8
    });
    (d, sc, q)
}

/// The step `s` for which `s * q`, `q = round(x / s)` in `[-nmax, nmax)`, is closest to `x`
/// in squared error weighted by `x^2` (the large values matter most to a product), over
/// 21 grids: the value of largest magnitude at `-nmax - 1 ..= -nmax + 1` steps, each
/// step then refit by least squares for its `q`. The largest value at exactly `-nmax`
/// clips the other sign's extreme at `nmax - 1` (a 3-bit grid is [-4, 3]); a wider step
/// can cost less than that.
fn fit_symmetric(x: &[f32], nmax: i32) -> f32 {
    let widest = x.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    if widest == 0.0 || !widest.is_finite() {
        return widest / -(nmax as f32);
    }
    let (lo, hi) = (-nmax as f32, (nmax - 1) as f32);
    let mut best = (f32::NEG_INFINITY, widest / -(nmax as f32));
    for i in -10..=10 {
        let inv = -(nmax as f32 + 0.1 * i as f32) / widest;
        let (mut xq, mut qq) = (0f32, 0f32);
        for &v in x {
            let q = (v * inv).round().clamp(lo, hi);
            let w = v * v;
            xq += w * v * q;
            qq += w * q * q;
        }
        // The error at the least-squares step is sum(w x^2) - xq^2 / qq: the larger
        // xq^2 / qq, the better.
        if qq > 0.0 && xq * xq / qq > best.0 {
            best = (xq * xq / qq, xq / qq);
        }
    }
    best.1
}

/// Q6_K: per 16-value sub-block a symmetric 6-bit grid ([-32, 31]) whose step is an i8
/// multiple of the super-block's f16 `d` ([`symmetric_k`]).
fn quantize_q6k(x: &[f32], out: &mut Vec<u8>) {
    let (d, sc, q) = symmetric_k(x, 32, 128);
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for (e, &qv) in q.iter().enumerate() {
        let (h, r) = (e / 128, e % 128);
        ql[h * 64 + r % 64] |= (qv & 0xF) << (4 * (r / 64));
        qh[h * 32 + r % 32] |= (qv >> 4) << (2 * (r / 32));
    }
    out.extend_from_slice(&ql);
    out.extend_from_slice(&qh);
    out.extend(sc.iter().map(|&s| s as i8 as u8));
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
}
