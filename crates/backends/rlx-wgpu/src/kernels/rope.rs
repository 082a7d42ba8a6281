//! Rotary position embeddings. The angle `pos * base^(-2p / r)` is reduced exactly in
//! 64-bit fixed-point turns (integer arithmetic on the host's f64 frequency), so its
//! error does not grow with the position the way an f32 product `pos * freq` does
//! (2e-4 rad at position 2000); sine and cosine are polynomials on the remaining quarter
//! turn.

use super::{Call, Tensor, Word, store_round, u32s};
use rlx_ir::RopeStyle;

/// Per rotary pair, `base^(-2p / r) / 2 pi` turns as a 64-bit fraction (high, low words).
fn turns(base: f32, rotary_dims: usize) -> Vec<u32> {
    let mut words = Vec::new();
    for p in 0..rotary_dims / 2 {
        let inv_freq = (base as f64).powf(-2.0 * p as f64 / rotary_dims as f64);
        let t = inv_freq / std::f64::consts::TAU;
        let whole = t.floor();
        let frac = ((t - whole) * 2f64.powi(64)) as u64;
        words.extend([(frac >> 32) as u32, frac as u32]);
    }
    words
}

pub fn rope(
    style: RopeStyle,
    base: f32,
    rotary_dims: usize,
    x: &Tensor,
    positions: &Tensor,
    out: &Tensor,
) -> Option<Call> {
    if x.compute_word(false)? != Word::F32 {
        return None;
    }
    let pw = positions.index_word()?;
    let d = *x.dims.last()?;
    let s = x.dims[x.dims.len() - 2];
    let mut meta = u32s([d, s, rotary_dims, matches!(style, RopeStyle::NeoX) as usize]);
    meta.extend(turns(base, rotary_dims));
    let pos = match pw {
        Word::U32x2 => "bitcast<i32>(t1[o1(row)].x)",
        _ => "t1[o1(row)]",
    };
    let first = store_round(out.dtype, "x0 * cs.y - x1 * cs.x");
    let second = store_round(out.dtype, "x0 * cs.x + x1 * cs.y");
    let body = format!(
        r#"fn mulhi(a: u32, b: u32) -> u32 {{
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = ((a0 * b0) >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    return a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
}}
// (sin, cos) of pos * 2 pi * (hi + lo 2^-32) 2^-32 turns.
fn sin_cos_turns(pos: i32, hi: u32, lo: u32) -> vec2<f32> {{
    let p = u32(abs(pos));
    var f = p * hi + mulhi(p, lo);
    var g = p * lo;
    if (pos < 0) {{
        g = ~g + 1u;
        f = ~f + select(0u, 1u, g == 0u);
    }}
    let quadrant = (f + 0x20000000u) >> 30u;
    let rest = bitcast<i32>(f - (quadrant << 30u));
    let rhi = rest & ~0xff;
    let rlo = f32(rest & 0xff) + f32(g) * 2.3283064365386963e-10;
    let c = 1.4629180792671596e-9;
    let r = f32(rhi) * c + rlo * c;
    let z = r * r;
    let sn = r * (1.0 + z * (-1.6666666666666666e-1 + z * (8.333333333333333e-3 + z * (-1.984126984126984e-4 + z * 2.7557319223985893e-6))));
    let cs = 1.0 + z * (-0.5 + z * (4.1666666666666664e-2 + z * (-1.388888888888889e-3 + z * (2.48015873015873e-5 + z * -2.755731922398589e-7))));
    switch (quadrant & 3u) {{
        case 0u: {{ return vec2<f32>(sn, cs); }}
        case 1u: {{ return vec2<f32>(cs, -sn); }}
        case 2u: {{ return vec2<f32>(-sn, -cs); }}
        default: {{ return vec2<f32>(-cs, sn); }}
    }}
}}
fn item(i: u32) {{
    let d = mt[K];
    let s = mt[K + 1u];
    let r = mt[K + 2u];
    let neox = mt[K + 3u] == 1u;
    let c = i % d;
    if (c >= r) {{ t2[o2(i)] = t0[o0(i)]; return; }}
    let row = (i / d) % s;
    let half = r / 2u;
    var pair: u32;
    var a: u32;
    if (neox) {{ pair = c % half; a = i - c + pair; }} else {{ pair = c / 2u; a = i - c + 2u * pair; }}
    let b = select(a + 1u, a + half, neox);
    let cs = sin_cos_turns({pos}, mt[K + 4u + 2u * pair], mt[K + 5u + 2u * pair]);
    let x0 = t0[o0(a)];
    let x1 = t0[o0(b)];
    if (i == a) {{ t2[o2(i)] = {first}; }} else {{ t2[o2(i)] = {second}; }}
}}
"#
    );
    Some(Call::items(vec![(0, Word::F32), (1, pw), (2, Word::F32)], body, meta, x.numel()))
}
