//! f64 decoders of the GGML block formats, written from the format descriptions (field by
//! field into plain arrays, then combined), separately from `rlx_ir::quant`.

fn f16(b: &[u8], at: usize) -> f64 {
    crate::decode_small_float(u16::from_le_bytes([b[at], b[at + 1]]), 5, 10)
}

/// One block of the format named as GGML names it ("Q4_1", "Q6_K", ...), as f64.
pub fn decode_f64(scheme: &str, b: &[u8]) -> Vec<f64> {
    let nib = |bytes: &[u8]| -> Vec<u8> { bytes.iter().map(|x| x & 15).chain(bytes.iter().map(|x| x >> 4)).collect() };
    let bits = |bytes: &[u8], i: usize| -> u8 { (bytes[i / 8] >> (i % 8)) & 1 };
    match scheme {
        "Q4_0" => nib(&b[2..18]).iter().map(|&q| f16(b, 0) * (q as f64 - 8.0)).collect(),
        "Q4_1" => nib(&b[4..20]).iter().map(|&q| f16(b, 0) * q as f64 + f16(b, 2)).collect(),
        "Q5_0" => nib(&b[6..22])
            .iter()
            .enumerate()
            .map(|(i, &q)| f16(b, 0) * ((q + 16 * bits(&b[2..6], i)) as f64 - 16.0))
            .collect(),
        "Q5_1" => nib(&b[8..24])
            .iter()
            .enumerate()
            .map(|(i, &q)| f16(b, 0) * (q + 16 * bits(&b[4..8], i)) as f64 + f16(b, 2))
            .collect(),
        "Q8_0" => b[2..34].iter().map(|&q| f16(b, 0) * (q as i8) as f64).collect(),
        "Q2_K" => {
            let (scales, qs, d, dmin) = (&b[0..16], &b[16..80], f16(b, 80), f16(b, 82));
            // 2-bit fields: for each 32-byte half, four passes of 2-bit shifts.
            let mut q = Vec::new();
            for half in qs.chunks(32) {
                for shift in [0, 2, 4, 6] {
                    q.extend(half.iter().map(|x| (x >> shift) & 3));
                }
            }
            q.iter()
                .enumerate()
                .map(|(i, &v)| d * (scales[i / 16] & 15) as f64 * v as f64 - dmin * (scales[i / 16] >> 4) as f64)
                .collect()
        }
        "Q3_K" => {
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
            q.iter()
                .enumerate()
                .map(|(i, &v)| {
                    let high_set = (hm[i % 32] >> (i / 32)) & 1 == 1;
                    d * scale[i / 16] as f64 * (v - if high_set { 0 } else { 4 }) as f64
                })
                .collect()
        }
        "Q4_K" | "Q5_K" => {
            let (d, dmin, s) = (f16(b, 0), f16(b, 2), &b[4..16]);
            let scale = |j: usize| if j < 4 { s[j] & 63 } else { (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4) };
            let min = |j: usize| if j < 4 { s[j + 4] & 63 } else { (s[j + 4] >> 4) | ((s[j] >> 6) << 4) };
            let (qh, qs) =
                if s.len() == 12 && b.len() == 176 { (Some(&b[16..48]), &b[48..176]) } else { (None, &b[16..144]) };
            let mut q = Vec::new();
            for chunk in qs.chunks(32) {
                q.extend(chunk.iter().map(|x| x & 15));
                q.extend(chunk.iter().map(|x| x >> 4));
            }
            q.iter()
                .enumerate()
                .map(|(i, &v)| {
                    let j = i / 32;
                    let v = v as u32 + qh.map_or(0, |h| (((h[i % 32] >> j) & 1) as u32) << 4);
                    d * scale(j) as f64 * v as f64 - dmin * min(j) as f64
                })
                .collect()
        }
        "Q6_K" => {
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
        "Q8_K" => {
            b[4..260].iter().map(|&q| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64 * (q as i8) as f64).collect()
        }
        "F32" => vec![f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64],
        "F16" => vec![f16(b, 0)],
        "BF16" => vec![f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16) as f64],
        other => panic!("no f64 decoder for {other}"),
    }
}
