//! Softmax and log-softmax along an axis, around the row maximum: one thread per row up
//! to [`SERIAL_ROW`] long, else a workgroup per row (the maximum and the sum of
//! exponentials each a strided per-thread pass and a shared-memory tree), so no
//! invocation loops more than `3 * len / 256` times (see `MAX_LOOP_TRIPS`).

use super::reduce::{ROW_AROUND_AXIS, SERIAL_ROW, around, row_fits};
use super::{Call, GROUP_INDEX, GROUP_PARAMS, Tensor, WG, Word, fold_groups, store_round, tree, tree_shared, u32s};

pub fn softmax(axis: usize, log: bool, x: &Tensor, out: &Tensor) -> Option<Vec<Call>> {
    if x.compute_word(false)? != Word::F32 {
        return None;
    }
    let [outer, len, inner] = around(&x.dims, axis);
    let value = if log { "v - mx - ls" } else { "exp_(v - mx) / s" };
    let store = store_round(out.dtype, value);
    let operands = vec![(0, Word::F32), (1, Word::F32)];
    let rows = outer * inner;
    if len <= SERIAL_ROW {
        let body = format!(
            r#"fn item(i: u32) {{
    let len = mt[K];
    let inner = mt[K + 1u];
    let base = (i / inner) * len * inner + i % inner;
    var mx = -bitcast<f32>(0x7f800000u);
    for (var j = 0u; j < len; j++) {{ mx = fmax(mx, t0[o0(base + j * inner)]); }}
    var s = 0.0;
    for (var j = 0u; j < len; j++) {{ s += exp_(t0[o0(base + j * inner)] - mx); }}
    let ls = log_(s);
    for (var j = 0u; j < len; j++) {{
        let v = t0[o0(base + j * inner)];
        t1[o1(base + j * inner)] = {store};
    }}
}}
"#
        );
        return Some(vec![Call::items(operands, body, u32s([len, inner]), rows)]);
    }
    if !row_fits(len, 3) {
        return None;
    }
    let body = format!(
        r#"{shared}{tmax}{tsum}@compute @workgroup_size({WG})
fn main({GROUP_PARAMS}) {{
    let row = {GROUP_INDEX};
{ROW_AROUND_AXIS}    var mx = -bitcast<f32>(0x7f800000u);
    for (var j = li; j < len; j += {WG}u) {{ mx = fmax(mx, t0[o0(base + j * inner)]); }}
    mx = tree_max(li, mx);
    var s = 0.0;
    for (var j = li; j < len; j += {WG}u) {{ s += exp_(t0[o0(base + j * inner)] - mx); }}
    s = tree_sum(li, s);
    let ls = log_(s);
    for (var j = li; j < len; j += {WG}u) {{
        let v = t0[o0(base + j * inner)];
        t1[o1(base + j * inner)] = {store};
    }}
}}
"#,
        shared = tree_shared("f32"),
        tmax = tree("tree_max", "f32", "fmax(a, b)"),
        tsum = tree("tree_sum", "f32", "a + b"),
    );
    Some(vec![Call::groups(operands, body, u32s([len, inner, rows]), fold_groups(rows))])
}
