//! Gather (embedding rows) and its transpose, scatter-add. An index outside the table
//! sets the error flag (the CPU's message), never a wrap or a clamp.

use super::{Call, IDX64, Tensor, index_expr, u32s, within_loop_limit};

/// `out[i..] = table[indices[i..]]`; an index outside the table sets the error flag.
pub fn gather(table: &Tensor, index: &Tensor, out: &Tensor) -> Option<Call> {
    let word = table.copy_word()?;
    let iw = index.index_word()?;
    let rows = table.dims[0];
    let row = table.numel().checked_div(rows).unwrap_or(0);
    let body = format!(
        "{IDX64}fn item(i: u32) {{
    let row = mt[K];
    let v = i32(mt[K + 1u]);
    let at = i / row;
    let ix = {ix};
    if (ix < 0 || ix >= v) {{ fail(at, ix); return; }}
    t2[o2(i)] = t0[o0(u32(ix) * row + i % row)];
}}
",
        ix = index_expr(iw, 1, "at")
    );
    Some(
        Call::items(
            vec![(0, word), (1, iw), (2, word)],
            body,
            u32s([row.max(1), rows]),
            if row == 0 { 0 } else { out.numel() },
        )
        .checking(),
    )
}

/// `[indices, updates]` -> `[rows, ...]`: zeros plus each update row at its index, added
/// in the order of the indices (one thread per output element scans them all: no float
/// atomics in WGSL, and the CPU's order of additions).
pub fn scatter_add(index: &Tensor, updates: &Tensor, out: &Tensor) -> Option<Call> {
    let iw = index.index_word()?;
    let word = updates.compute_word(false)?;
    let rows = out.dims[0];
    let row = out.numel().checked_div(rows).unwrap_or(0);
    let count = index.numel();
    // Each thread scans every index once.
    within_loop_limit(count)?;
    let ty = word.wgsl();
    let body = format!(
        "{IDX64}fn item(i: u32) {{
    let row = mt[K];
    let rows = i32(mt[K + 1u]);
    let count = mt[K + 2u];
    let r = i32(i / row);
    var acc = {ty}(0);
    for (var p = 0u; p < count; p++) {{
        let ix = {ix};
        if (i == 0u && (ix < 0 || ix >= rows)) {{ fail(p, ix); }}
        if (ix == r) {{ acc += t1[o1(p * row + i % row)]; }}
    }}
    t2[o2(i)] = acc;
}}
",
        ix = index_expr(iw, 0, "p")
    );
    Some(
        Call::items(vec![(0, iw), (1, word), (2, word)], body, u32s([row.max(1), rows, count]), out.numel()).checking(),
    )
}
