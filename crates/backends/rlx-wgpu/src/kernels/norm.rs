//! LayerNorm and RmsNorm over the last axis: one thread per row up to [`SERIAL_ROW`]
//! long, else a workgroup per row (the sum and the sum of squared deviations each a
//! strided per-thread pass and a shared-memory tree: `3 * h / 256` iterations per
//! invocation, see `MAX_LOOP_TRIPS`).

use super::reduce::{SERIAL_ROW, row_fits};
use super::{Call, GROUP_INDEX, GROUP_PARAMS, Tensor, WG, Word, fold_groups, store_round, tree, tree_shared};

/// LayerNorm (`rms` false) or RmsNorm over the last axis; operands x, gamma?, beta?.
pub fn norm(rms: bool, eps: f32, gamma: bool, beta: bool, x: &Tensor, out: &Tensor) -> Option<Vec<Call>> {
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
    let operands = (0..=n_in).map(|k| (k, Word::F32)).collect();
    if h <= SERIAL_ROW {
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
        return Some(vec![Call::items(operands, body, vec![h as u32, eps.to_bits()], rows)]);
    }
    if !row_fits(h, 3) {
        return None;
    }
    // RmsNorm needs no mean: its first pass is skipped (`sum` stays 0).
    let first = if rms { "" } else { "for (var j = li; j < h; j += WGu) { sum += t0[o0(base + j)]; }" };
    let first = first.replace("WGu", &format!("{WG}u"));
    let body = format!(
        r#"{shared}{tsum}@compute @workgroup_size({WG})
fn main({GROUP_PARAMS}) {{
    let row = {GROUP_INDEX};
    let h = mt[K];
    let eps = bitcast<f32>(mt[K + 1u]);
    if (row >= mt[K + 2u]) {{ return; }}
    let base = row * h;
    var sum = 0.0;
    {first}
    sum = tree_sum(li, sum);
    let mean = {centre};
    var sq = 0.0;
    for (var j = li; j < h; j += {WG}u) {{
        let d = t0[o0(base + j)] - mean;
        sq += d * d;
    }}
    sq = tree_sum(li, sq);
    let inv = 1.0 / sqrt(sq / f32(h) + eps);
    for (var j = li; j < h; j += {WG}u) {{ t{n_in}[o{n_in}(base + j)] = {store}; }}
}}
"#,
        shared = tree_shared("f32"),
        tsum = tree("tree_sum", "f32", "a + b"),
    );
    Some(vec![Call::groups(operands, body, vec![h as u32, eps.to_bits(), rows as u32], fold_groups(rows))])
}
