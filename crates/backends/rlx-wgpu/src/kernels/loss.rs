//! Softmax cross-entropy: one workgroup; each thread takes every 256th row (log-sum-exp
//! around the row maximum minus the label's logit), then thread 0 adds the 256 partial
//! sums in order and divides by the row count (NaN for none, as the reference says).

use super::{Call, IDX64, Tensor, Word, index_expr, store_round, u32s};

pub fn cross_entropy(logits: &Tensor, labels: &Tensor, out: &Tensor) -> Option<Call> {
    if logits.compute_word(false)? != Word::F32 {
        return None;
    }
    let lw = labels.index_word()?;
    let (n, c) = (logits.dims[0], logits.dims[1]);
    let store = store_round(out.dtype, "total / f32(n)");
    let body = format!(
        "{IDX64}var<workgroup> part: array<f32, 256>;
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) li: u32) {{
    let n = mt[K];
    let c = mt[K + 1u];
    var acc = 0.0;
    for (var i = li; i < n; i += 256u) {{
        let label = {label};
        if (label < 0 || label >= i32(c)) {{ fail(i, label); continue; }}
        var mx = -bitcast<f32>(0x7f800000u);
        for (var j = 0u; j < c; j++) {{ mx = fmax(mx, t0[o0(i * c + j)]); }}
        var s = 0.0;
        for (var j = 0u; j < c; j++) {{ s += exp_(t0[o0(i * c + j)] - mx); }}
        acc += (mx + log_(s)) - t0[o0(i * c + u32(label))];
    }}
    part[li] = acc;
    workgroupBarrier();
    if (li == 0u) {{
        var total = 0.0;
        for (var k = 0u; k < 256u; k++) {{ total += part[k]; }}
        t2[o2(0u)] = {store};
    }}
}}
",
        label = index_expr(lw, 1, "i")
    );
    Some(Call::groups(vec![(0, Word::F32), (1, lw), (2, Word::F32)], body, u32s([n, c]), [1, 1, 1]).checking())
}
