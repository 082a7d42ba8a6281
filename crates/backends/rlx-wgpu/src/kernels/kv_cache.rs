//! KV-cache append: the new rows written at a position read at run time.

use super::{Call, IDX64, Tensor, index_expr, u32s};

/// `new` written into `out` (already holding the cache) at `pos` along `axis`; a `pos`
/// that does not fit sets the error flag and writes nothing.
pub fn kv_append(axis: usize, cache: &Tensor, new: &Tensor, pos: &Tensor) -> Option<Call> {
    let word = cache.copy_word()?;
    let pw = pos.index_word()?;
    let inner: usize = cache.dims[axis + 1..].iter().product();
    let (s, l) = (cache.dims[axis], new.dims[axis]);
    let body = format!(
        "{IDX64}fn item(i: u32) {{
    let s = mt[K];
    let l = mt[K + 1u];
    let inner = mt[K + 2u];
    let p = {p};
    if (p < 0 || u32(p) + l > s) {{ fail(0u, p); return; }}
    let o = i / (l * inner);
    let j = (i / inner) % l;
    t2[o2((o * s + u32(p) + j) * inner + i % inner)] = t0[o0(i)];
}}
",
        p = index_expr(pw, 1, "0u")
    );
    Some(Call::items(vec![(1, word), (2, pw), (3, word)], body, u32s([s, l, inner.max(1)]), new.numel()).checking())
}
