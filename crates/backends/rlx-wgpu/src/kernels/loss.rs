//! Softmax cross-entropy, in two parts: each row's loss (log-sum-exp around the row
//! maximum minus the label's logit) into scratch, by one thread per row up to
//! [`SERIAL_ROW`] classes, else a workgroup per row (maximum and sum of exponentials as
//! strided passes and shared-memory trees); then the mean of the row losses by the
//! reduction kernels (a blocked tree: NaN for no rows, as the reference says). SmolLM2's
//! 49152 classes took two serial loops of 49152 per row before, past llvmpipe's 65535
//! iterations per invocation (see `MAX_LOOP_TRIPS`).

use super::reduce::{Reduction, SERIAL_ROW, reduction, row_fits};
use super::{
    Call, GROUP_INDEX, GROUP_PARAMS, IDX64, Tensor, WG, Word, fold_groups, index_expr, scratch, tree, tree_shared, u32s,
};
use rlx_ir::ReduceOp;

pub fn cross_entropy(logits: &Tensor, labels: &Tensor, out: &Tensor) -> Option<Vec<Call>> {
    if logits.compute_word(false)? != Word::F32 {
        return None;
    }
    let lw = labels.index_word()?;
    let (n, c) = (logits.dims[0], logits.dims[1]);
    let label = index_expr(lw, 1, "i");
    let operands = vec![(0, Word::F32), (1, lw), (scratch(0), Word::F32)];
    let losses = if c <= SERIAL_ROW {
        let body = format!(
            "{IDX64}fn item(i: u32) {{
    let c = mt[K + 1u];
    let label = {label};
    if (label < 0 || label >= i32(c)) {{ fail(i, label); t2[o2(i)] = 0.0; return; }}
    var mx = -bitcast<f32>(0x7f800000u);
    for (var j = 0u; j < c; j++) {{ mx = fmax(mx, t0[o0(i * c + j)]); }}
    var s = 0.0;
    for (var j = 0u; j < c; j++) {{ s += exp_(t0[o0(i * c + j)] - mx); }}
    t2[o2(i)] = (mx + log_(s)) - t0[o0(i * c + u32(label))];
}}
"
        );
        Call::items(operands, body, u32s([n, c]), n)
    } else {
        if !row_fits(c, 2) {
            return None;
        }
        let body = format!(
            "{IDX64}{shared}{tmax}{tsum}@compute @workgroup_size({WG})
fn main({GROUP_PARAMS}) {{
    let i = {GROUP_INDEX};
    let n = mt[K];
    let c = mt[K + 1u];
    if (i >= n) {{ return; }}
    var mx = -bitcast<f32>(0x7f800000u);
    for (var j = li; j < c; j += {WG}u) {{ mx = fmax(mx, t0[o0(i * c + j)]); }}
    mx = tree_max(li, mx);
    var s = 0.0;
    for (var j = li; j < c; j += {WG}u) {{ s += exp_(t0[o0(i * c + j)] - mx); }}
    s = tree_sum(li, s);
    if (li == 0u) {{
        let label = {label};
        if (label < 0 || label >= i32(c)) {{ fail(i, label); t2[o2(i)] = 0.0; return; }}
        t2[o2(i)] = (mx + log_(s)) - t0[o0(i * c + u32(label))];
    }}
}}
",
            shared = tree_shared("f32"),
            tmax = tree("tree_max", "f32", "fmax(a, b)"),
            tsum = tree("tree_sum", "f32", "a + b"),
        );
        Call::groups(operands, body, u32s([n, c]), fold_groups(n))
    };
    let mean = Reduction {
        op: ReduceOp::Mean,
        src: (scratch(0), Word::F32),
        dst: (2, Word::F32, out.dtype),
        divide: Some(n as f32),
        first_region: 1,
    };
    let mut calls = reduction(&mean, 1, (&[], &[]), (&[n], &[1]));
    // Region 0 holds the row losses; the mean's partials (if any) follow it.
    let mut sizes = calls.first().map_or_else(Vec::new, |c| c.scratch.clone());
    sizes.resize(sizes.len().max(1), 0);
    sizes[0] = (n * 4) as u64;
    for call in &mut calls {
        call.scratch = sizes.clone();
    }
    let mut all = vec![losses.checking().with_scratch(sizes)];
    all.extend(calls);
    Some(all)
}
