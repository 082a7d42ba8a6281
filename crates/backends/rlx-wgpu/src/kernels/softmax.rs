//! Softmax and log-softmax along an axis: one thread per row, around the row maximum.

use super::reduce::around;
use super::{Call, Tensor, Word, store_round, u32s};

pub fn softmax(axis: usize, log: bool, x: &Tensor, out: &Tensor) -> Option<Call> {
    if x.compute_word(false)? != Word::F32 {
        return None;
    }
    let [outer, len, inner] = around(&x.dims, axis);
    let value = if log { "v - mx - ls" } else { "exp_(v - mx) / s" };
    let store = store_round(out.dtype, value);
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
    Some(Call::items(vec![(0, Word::F32), (1, Word::F32)], body, u32s([len, inner]), outer * inner))
}
