//! Data movement: one strided-copy kernel (transpose, narrow, expand, reshape, concat, a
//! cache copied before its append), gather and kv_append. Elements move as raw words
//! (one or two u32 per element), so every dtype the arena holds moves the same way.

use super::{Call, Tensor, Word, strides, u32s};

/// Copies the index space `dims` from `src[src_base + sum c * src_strides]` to
/// `dst[dst_base + sum c * dst_strides]`; operands (src position, dst position).
/// Bodies name their bindings `t0, t1, ..` in the order of `Call::operands`.
pub fn copy_nd(
    (src, dst): (usize, usize),
    word: Word,
    dims: &[usize],
    (src_base, src_strides): (usize, &[usize]),
    (dst_base, dst_strides): (usize, &[usize]),
) -> Call {
    let mut meta = u32s([dims.len(), src_base, dst_base]);
    meta.extend(u32s(dims.iter().copied()));
    meta.extend(u32s(src_strides.iter().copied()));
    meta.extend(u32s(dst_strides.iter().copied()));
    let body = "fn item(i: u32) {
    let r = mt[K];
    var rem = i;
    var s = mt[K + 1u];
    var d = mt[K + 2u];
    for (var q = 0u; q < r; q++) {
        let ax = r - 1u - q;
        let c = rem % mt[K + 3u + ax];
        rem = rem / mt[K + 3u + ax];
        s += c * mt[K + 3u + r + ax];
        d += c * mt[K + 3u + 2u * r + ax];
    }
    t1[o1(d)] = t0[o0(s)];
}
"
    .to_string();
    Call::items(vec![(src, word), (dst, word)], body, meta, dims.iter().product())
}

/// A contiguous copy of `n` elements from operand `src` to operand `dst`.
pub fn copy_flat((src, dst): (usize, usize), word: Word, n: usize) -> Call {
    copy_nd((src, dst), word, &[n], (0, &[1]), (0, &[1]))
}

pub fn transpose(perm: &[usize], x: &Tensor, out: &Tensor) -> Option<Call> {
    let st = strides(&x.dims);
    let src: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
    Some(copy_nd((0, 1), x.copy_word()?, &out.dims, (0, &src), (0, &strides(&out.dims))))
}

pub fn narrow(axis: usize, start: usize, x: &Tensor, out: &Tensor) -> Option<Call> {
    let st = strides(&x.dims);
    Some(copy_nd((0, 1), x.copy_word()?, &out.dims, (start * st[axis], &st), (0, &strides(&out.dims))))
}

pub fn expand(x: &Tensor, out: &Tensor) -> Option<Call> {
    let own = strides(&x.dims);
    let pad = out.dims.len() - x.dims.len();
    let src: Vec<usize> =
        (0..out.dims.len()).map(|d| if d < pad || x.dims[d - pad] == 1 { 0 } else { own[d - pad] }).collect();
    Some(copy_nd((0, 1), x.copy_word()?, &out.dims, (0, &src), (0, &strides(&out.dims))))
}

/// One copy per input into its place along `axis`.
pub fn concat(axis: usize, ins: &[Tensor], out: &Tensor) -> Option<Vec<Call>> {
    let ost = strides(&out.dims);
    let mut at = 0;
    let mut calls = Vec::new();
    for (k, t) in ins.iter().enumerate() {
        calls.push(copy_nd((k, ins.len()), t.copy_word()?, &t.dims, (0, &strides(&t.dims)), (at * ost[axis], &ost)));
        at += t.dims[axis];
    }
    Some(calls)
}
