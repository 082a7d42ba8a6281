//! Reductions and argmax: one thread per output element, looping over the reduced
//! extent in row-major order in the compute type, as `rlx_ir::ops::reduce` describes.

use super::{Call, Tensor, Word, store_round, strides, u32s};
use rlx_ir::ReduceOp;

/// `x` viewed as `[outer, len, inner]` around `axis`.
pub fn around(dims: &[usize], axis: usize) -> [usize; 3] {
    [dims[..axis].iter().product(), dims[axis], dims[axis + 1..].iter().product()]
}

pub fn reduce(op: ReduceOp, axes: &[usize], x: &Tensor, out: &Tensor, int64: bool) -> Option<Call> {
    let (wx, wo) = (x.compute_word(int64)?, out.compute_word(int64)?);
    let ty = wx.wgsl();
    if ty != "f32" && op == ReduceOp::Mean {
        return None;
    }
    let st = strides(&x.dims);
    let (kept, red): (Vec<usize>, Vec<usize>) = (0..x.dims.len()).partition(|d| !axes.contains(d));
    let n_red: usize = red.iter().map(|&d| x.dims[d]).product();
    let mut meta = u32s([n_red, kept.len()]);
    meta.extend(u32s(kept.iter().map(|&d| x.dims[d])));
    meta.extend(u32s(kept.iter().map(|&d| st[d])));
    meta.push(red.len() as u32);
    meta.extend(u32s(red.iter().map(|&d| x.dims[d])));
    meta.extend(u32s(red.iter().map(|&d| st[d])));
    let (init, step) = match (op, ty) {
        (ReduceOp::Sum | ReduceOp::Mean, _) => (format!("{ty}(0)"), "acc + v"),
        (ReduceOp::Prod, _) => (format!("{ty}(1)"), "acc * v"),
        (ReduceOp::Max, "f32") => ("-bitcast<f32>(0x7f800000u)".into(), "fmax(acc, v)"),
        (ReduceOp::Min, "f32") => ("bitcast<f32>(0x7f800000u)".into(), "fmin(acc, v)"),
        (ReduceOp::Max, _) => (
            format!("{ty}({})", if ty == "i32" { "-2147483647 - 1" } else { "-9223372036854775807li - 1li" }),
            "max(acc, v)",
        ),
        (ReduceOp::Min, _) => {
            (format!("{ty}({})", if ty == "i32" { "2147483647" } else { "9223372036854775807li" }), "min(acc, v)")
        }
    };
    let result = if op == ReduceOp::Mean { "acc / f32(n)".to_string() } else { "acc".to_string() };
    let store = store_round(out.dtype, &result);
    let body = format!(
        r#"fn item(i: u32) {{
    let n = mt[K];
    let kr = mt[K + 1u];
    var rem = i;
    var base = 0u;
    for (var d = 0u; d < kr; d++) {{
        let ax = kr - 1u - d;
        let dim = mt[K + 2u + ax];
        base += (rem % dim) * mt[K + 2u + kr + ax];
        rem = rem / dim;
    }}
    let r0 = K + 2u + 2u * kr;
    let rr = mt[r0];
    var acc: {ty} = {init};
    for (var j = 0u; j < n; j++) {{
        var rj = j;
        var off = base;
        for (var d = 0u; d < rr; d++) {{
            let ax = rr - 1u - d;
            let dim = mt[r0 + 1u + ax];
            off += (rj % dim) * mt[r0 + 1u + rr + ax];
            rj = rj / dim;
        }}
        let v = t0[o0(off)];
        acc = {step};
    }}
    t1[o1(i)] = {store};
}}
"#
    );
    Some(Call::items(vec![(0, wx), (1, wo)], body, meta, out.numel()))
}

/// First maximum along `axis` (a NaN is the maximum, the first NaN wins), as i64.
pub fn argmax(axis: usize, x: &Tensor, out: &Tensor, int64: bool) -> Option<Call> {
    let wx = x.compute_word(int64)?;
    if out.elem_bytes != 8 {
        return None;
    }
    let [outer, len, inner] = around(&x.dims, axis);
    let better =
        if wx == Word::F32 { "(is_nan(v) && !is_nan(best)) || (!is_nan(best) && v > best)" } else { "v > best" };
    let body = format!(
        r#"fn item(i: u32) {{
    let len = mt[K];
    let inner = mt[K + 1u];
    let base = (i / inner) * len * inner + i % inner;
    var best = t0[o0(base)];
    var at = 0u;
    for (var j = 1u; j < len; j++) {{
        let v = t0[o0(base + j * inner)];
        if ({better}) {{ best = v; at = j; }}
    }}
    t1[o1(i)] = vec2<u32>(at, 0u);
}}
"#
    );
    Some(Call::items(vec![(0, wx), (1, Word::U32x2)], body, u32s([len, inner]), outer * inner))
}
