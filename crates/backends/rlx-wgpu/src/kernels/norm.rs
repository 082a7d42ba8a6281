//! LayerNorm and RmsNorm over the last axis: one thread per row.

use super::{Call, Tensor, Word, store_round};

/// LayerNorm (`rms` false) or RmsNorm over the last axis; operands x, gamma?, beta?.
pub fn norm(rms: bool, eps: f32, gamma: bool, beta: bool, x: &Tensor, out: &Tensor) -> Option<Call> {
    if x.compute_word(false)? != Word::F32 {
        return None;
    }
    let h = *x.dims.last()?;
    let rows = x.numel().checked_div(h).unwrap_or(0);
    let n_in = 1 + gamma as usize + beta as usize;
    let g = if gamma { "t1[o1(j)]".to_string() } else { "1.0".into() };
    let b = if beta { format!("t{k}[o{k}(j)]", k = 1 + gamma as usize) } else { "0.0".into() };
    let centre = if rms { "0.0" } else { "sum / f32(h)" };
    let y = format!("(t0[o0(base + j)] - mean) * inv * {g} + {b}");
    let store = store_round(out.dtype, &y);
    let body = format!(
        r#"fn item(i: u32) {{
    let h = mt[K];
    let eps = bitcast<f32>(mt[K + 1u]);
    let base = i * h;
    var sum = 0.0;
    for (var j = 0u; j < h; j++) {{ sum += t0[o0(base + j)]; }}
    let mean = {centre};
    var sq = 0.0;
    for (var j = 0u; j < h; j++) {{
        let d = t0[o0(base + j)] - mean;
        sq += d * d;
    }}
    let inv = 1.0 / sqrt(sq / f32(h) + eps);
    for (var j = 0u; j < h; j++) {{ t{n_in}[o{n_in}(base + j)] = {store}; }}
}}
"#
    );
    let operands = (0..=n_in).map(|k| (k, Word::F32)).collect();
    Some(Call::items(operands, body, vec![h as u32, eps.to_bits()], rows))
}
