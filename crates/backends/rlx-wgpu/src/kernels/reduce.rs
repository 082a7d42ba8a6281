//! Reductions and argmax, in the compute type, as `rlx_ir::ops::reduce` describes.
//!
//! A short reduced extent (at most [`SERIAL`] elements) is one thread per output looping
//! over it in row-major order. A longer one is split into chunks of [`CHUNK`] elements, a
//! workgroup of [`WG`] threads per (output, chunk): each thread combines every 256th
//! element of the chunk (at most 32), then a shared-memory tree combines the 256. With
//! more than one chunk the partials go to scratch and the same kernel reduces them again
//! (8192-fold per pass: 2e7 elements take two passes), so no invocation loops more than a
//! few hundred times (see [`MAX_LOOP_TRIPS`]: llvmpipe cuts every invocation's loops off
//! at 65535 iterations in total). Sums are therefore added in a fixed blocked-tree order,
//! not the CPU's; a mean divides once, by the whole count, at the end.

use super::{
    Call, GROUP_INDEX, GROUP_PARAMS, MAX_LOOP_TRIPS, Tensor, WG, Word, fold_groups, scratch, store_round, strides,
    tree, tree_shared, u32s,
};
use rlx_ir::{DType, ReduceOp};

/// Reduced extents up to this stay one thread per output (the loop runs at most
/// `SERIAL * (rank + 1)` times: below 1% of `MAX_LOOP_TRIPS` at rank 8).
pub const SERIAL: usize = 64;
/// Elements per thread in a workgroup pass, and so per workgroup.
const PER_THREAD: usize = 32;
const CHUNK: usize = WG * PER_THREAD;

/// WGSL opening a workgroup-per-row kernel over `x` viewed as `[outer, len, inner]`
/// (metadata words len, inner, rows): `len`, `inner`, the row's first element `base`
/// (its elements are `inner` apart), and an early return for groups past the last row.
pub const ROW_AROUND_AXIS: &str = "    let len = mt[K];
    let inner = mt[K + 1u];
    if (row >= mt[K + 2u]) { return; }
    let base = (row / inner) * len * inner + row % inner;
";

/// `x` viewed as `[outer, len, inner]` around `axis`.
pub fn around(dims: &[usize], axis: usize) -> [usize; 3] {
    [dims[..axis].iter().product(), dims[axis], dims[axis + 1..].iter().product()]
}

/// The start value and combining expression of `op` over `ty` (of `a` and `b`).
fn combine(op: ReduceOp, ty: &str) -> (String, &'static str) {
    match (op, ty) {
        (ReduceOp::Sum | ReduceOp::Mean, _) => (format!("{ty}(0)"), "a + b"),
        (ReduceOp::Prod, _) => (format!("{ty}(1)"), "a * b"),
        (ReduceOp::Max, "f32") => ("-bitcast<f32>(0x7f800000u)".into(), "fmax(a, b)"),
        (ReduceOp::Min, "f32") => ("bitcast<f32>(0x7f800000u)".into(), "fmin(a, b)"),
        (ReduceOp::Max, _) => (
            format!("{ty}({})", if ty == "i32" { "-2147483647 - 1" } else { "-9223372036854775807li - 1li" }),
            "max(a, b)",
        ),
        (ReduceOp::Min, _) => {
            (format!("{ty}({})", if ty == "i32" { "2147483647" } else { "9223372036854775807li" }), "min(a, b)")
        }
    }
}

/// Decodes flat index `{var}` over the `rank = mt[{at}]` dims at `mt[{at} + 1..]` (strides
/// after them) into the offset `{off}` (which must exist, holding the base).
fn decode(var: &str, at: &str, off: &str) -> String {
    format!(
        "{{
        let rk = mt[{at}];
        var rem = {var};
        for (var d = 0u; d < rk; d++) {{
            let ax = rk - 1u - d;
            let dim = mt[{at} + 1u + ax];
            {off} += (rem % dim) * mt[{at} + 1u + rk + ax];
            rem = rem / dim;
        }}
    }}"
    )
}

/// Meta words: kept rank, dims, strides; reduced rank, dims, strides (from `K + skip`).
fn layout_meta(kept: (&[usize], &[usize]), red: (&[usize], &[usize])) -> Vec<u32> {
    let mut meta = vec![kept.0.len() as u32];
    meta.extend(u32s(kept.0.iter().copied()));
    meta.extend(u32s(kept.1.iter().copied()));
    meta.push(red.0.len() as u32);
    meta.extend(u32s(red.0.iter().copied()));
    meta.extend(u32s(red.1.iter().copied()));
    meta
}

/// What a reduction reads and writes: the input operand and word, the output operand,
/// dtype and word, the op, and what the final value is divided by (a mean's count).
pub struct Reduction {
    pub op: ReduceOp,
    pub src: (usize, Word),
    pub dst: (usize, Word, DType),
    pub divide: Option<f32>,
    /// The first scratch region the partials may use (this and the next).
    pub first_region: usize,
}

/// The calls of a reduction over `n_red` elements per output (addressed through `red`
/// dims / strides from each output's base, itself decoded over `kept`), `n_out` outputs.
pub fn reduction(r: &Reduction, n_out: usize, kept: (&[usize], &[usize]), red: (&[usize], &[usize])) -> Vec<Call> {
    let n_red: usize = red.0.iter().product();
    let ty = r.src.1.wgsl();
    let (init, step) = combine(r.op, ty);
    let result = |v: &str| match r.divide {
        Some(_) => format!("{v} / bitcast<f32>(mt[K + 1u])"),
        None => v.to_string(),
    };
    if n_red <= SERIAL {
        let store = store_round(r.dst.2, &result("acc"));
        let body = format!(
            r#"fn item(i: u32) {{
    let n = mt[K];
    var base = 0u;
    {kept}
    let r0 = K + 3u + 2u * mt[K + 2u];
    var acc: {ty} = {init};
    for (var j = 0u; j < n; j++) {{
        var off = base;
        {red}
        let a = acc;
        let b = t0[o0(off)];
        acc = {step};
    }}
    t1[o1(i)] = {store};
}}
"#,
            kept = decode("i", "K + 2u", "base"),
            red = decode("j", "r0", "off")
        );
        let mut meta = u32s([n_red]);
        meta.push(r.divide.unwrap_or(1.0).to_bits());
        meta.extend(layout_meta(kept, red));
        return vec![Call::items(vec![(r.src.0, r.src.1), (r.dst.0, r.dst.1)], body, meta, n_out)];
    }
    // Passes: the first over the input's layout, each next over the previous partials
    // ([n_out, chunks] row-major), until one chunk is left.
    let mut passes = Vec::new();
    let (mut len, mut first) = (n_red, true);
    loop {
        let chunks = len.div_ceil(CHUNK).max(1);
        passes.push((len, chunks, first));
        if chunks == 1 {
            break;
        }
        (len, first) = (chunks, false);
    }
    let regions: Vec<u64> =
        passes.iter().take(passes.len() - 1).enumerate().fold(vec![0u64; 2], |mut acc, (p, &(_, chunks, _))| {
            let b = (n_out * chunks * r.src.1.bytes()) as u64;
            acc[p % 2] = acc[p % 2].max(b);
            acc
        });
    let mut sizes = vec![0u64; r.first_region];
    sizes.extend(regions);
    let last = passes.len() - 1;
    let mut calls = Vec::new();
    for (p, &(len, chunks, first)) in passes.iter().enumerate() {
        let src = if first { r.src } else { (scratch(r.first_region + (p - 1) % 2), r.src.1) };
        let (dst, store) = if p == last {
            ((r.dst.0, r.dst.1), store_round(r.dst.2, &result("v")))
        } else {
            ((scratch(r.first_region + p % 2), r.src.1), "v".to_string())
        };
        let mut meta = u32s([len, 0, chunks, n_out * chunks]);
        meta[1] = r.divide.unwrap_or(1.0).to_bits();
        if first {
            meta.extend(layout_meta(kept, red));
        } else {
            meta.extend(layout_meta((&[n_out], &[len]), (&[len], &[1])));
        }
        let body = format!(
            r#"{shared}{tree}@compute @workgroup_size({WG})
fn main({GROUP_PARAMS}) {{
    let g = {GROUP_INDEX};
    let n = mt[K];
    let chunks = mt[K + 2u];
    if (g >= mt[K + 3u]) {{ return; }}
    var base = 0u;
    {kept}
    let r0 = K + 5u + 2u * mt[K + 4u];
    var acc: {ty} = {init};
    let end = min(n, (g % chunks + 1u) * {CHUNK}u);
    for (var j = (g % chunks) * {CHUNK}u + li; j < end; j += {WG}u) {{
        var off = base;
        {red}
        let a = acc;
        let b = t0[o0(off)];
        acc = {step};
    }}
    let v = combine_all(li, acc);
    if (li == 0u) {{ t1[o1(g)] = {store}; }}
}}
"#,
            shared = tree_shared(ty),
            tree = tree("combine_all", ty, step),
            kept = decode("g / chunks", "K + 4u", "base"),
            red = decode("j", "r0", "off")
        );
        calls.push(Call::groups(vec![src, dst], body, meta, fold_groups(n_out * chunks)).with_scratch(sizes.clone()));
    }
    calls
}

pub fn reduce(op: ReduceOp, axes: &[usize], x: &Tensor, out: &Tensor, int64: bool) -> Option<Vec<Call>> {
    let (wx, wo) = (x.compute_word(int64)?, out.compute_word(int64)?);
    if wx != Word::F32 && op == ReduceOp::Mean {
        return None;
    }
    let st = strides(&x.dims);
    let (kept, red): (Vec<usize>, Vec<usize>) = (0..x.dims.len()).partition(|d| !axes.contains(d));
    let n_red: usize = red.iter().map(|&d| x.dims[d]).product();
    let pick = |ds: &[usize], of: &[usize]| -> Vec<usize> { ds.iter().map(|&d| of[d]).collect() };
    let r = Reduction {
        op,
        src: (0, wx),
        dst: (1, wo, out.dtype),
        divide: (op == ReduceOp::Mean).then_some(n_red as f32),
        first_region: 0,
    };
    Some(reduction(
        &r,
        out.numel(),
        (&pick(&kept, &x.dims), &pick(&kept, &st)),
        (&pick(&red, &x.dims), &pick(&red, &st)),
    ))
}

/// Rows up to this long are one thread per row in the row kernels (three loops over the
/// row: 768 iterations); longer ones are a workgroup per row.
pub const SERIAL_ROW: usize = 256;

/// Whether a workgroup-per-row kernel making `passes` strided passes over a `len`-long
/// row stays within [`MAX_LOOP_TRIPS`] (each pass `len / 256` iterations per thread, each
/// tree 8): rows up to about 5e6 with three passes.
pub fn row_fits(len: usize, passes: usize) -> bool {
    passes * (len.div_ceil(WG) + 8) <= MAX_LOOP_TRIPS
}

/// First maximum along `axis` (a NaN is the maximum, the first NaN wins), as i64.
pub fn argmax(axis: usize, x: &Tensor, out: &Tensor, int64: bool) -> Option<Vec<Call>> {
    let wx = x.compute_word(int64)?;
    if out.elem_bytes != 8 {
        return None;
    }
    let [outer, len, inner] = around(&x.dims, axis);
    let better =
        if wx == Word::F32 { "(is_nan(v) && !is_nan(best)) || (!is_nan(best) && v > best)" } else { "v > best" };
    let operands = vec![(0, wx), (1, Word::U32x2)];
    if len <= SERIAL_ROW {
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
        return Some(vec![Call::items(operands, body, u32s([len, inner]), outer * inner)]);
    }
    if !row_fits(len, 1) {
        return None;
    }
    let ty = wx.wgsl();
    // Each thread's first best over its every-256th elements, then a tree over
    // (value, index) pairs: the better value, on a tie (or two NaNs) the lower index.
    let body = format!(
        r#"var<workgroup> bv: array<{ty}, {WG}>;
var<workgroup> bi: array<u32, {WG}>;
@compute @workgroup_size({WG})
fn main({GROUP_PARAMS}) {{
    let row = {GROUP_INDEX};
{ROW_AROUND_AXIS}    var best = t0[o0(base + li * inner)];
    var at = li;
    for (var j = li + {WG}u; j < len; j += {WG}u) {{
        let v = t0[o0(base + j * inner)];
        if ({better}) {{ best = v; at = j; }}
    }}
    bv[li] = best;
    bi[li] = at;
    workgroupBarrier();
    for (var half = {half}u; half > 0u; half = half >> 1u) {{
        if (li < half) {{
            let v = bv[li + half];
            let j = bi[li + half];
            let best = bv[li];
            let tie = v == best || (is_nan_any(v) && is_nan_any(best));
            if ({better} || (tie && j < bi[li])) {{ bv[li] = v; bi[li] = j; }}
        }}
        workgroupBarrier();
    }}
    if (li == 0u) {{ t1[o1(row)] = vec2<u32>(bi[0], 0u); }}
}}
fn is_nan_any(v: {ty}) -> bool {{ return {nan}; }}
"#,
        half = WG / 2,
        nan = if wx == Word::F32 { "is_nan(v)" } else { "false" }
    );
    // Rows here are longer than 256, so every thread starts on an element of its row.
    Some(vec![Call::groups(operands, body, u32s([len, inner, outer * inner]), fold_groups(outer * inner))])
}
