//! Index-driven ops built from comparisons, gathers and sums: Trilu, CumSum, CumProd, ScatterND,
//! ScatterElements (and the deprecated Scatter), TopK, OneHot, Compress.
//!
//! Runtime indices are handled without new IR ops: a scatter is the IR's `scatter_add`
//! of the updates (and of ones, to know which rows were written) for `none` / `add`, and
//! a one-hot comparison of every update against every row, reduced over the updates, for
//! `mul` / `max` / `min`. TopK ranks each element by pairwise comparison and picks the
//! element of each rank by a one-hot sum (exact: one term is nonzero).

use super::{OpDef, axis, def, one};
use crate::import::{Importer, Node};
use crate::ops::elementwise::identity_of;
use crate::ops::layout::{i64_const, take};
use rlx_ir::shape::{numel, strides};
use rlx_ir::{BinaryOp, CompareOp, DType, Error, HostTensor, NodeId, ReduceOp, Result};

pub const OPS: &[OpDef] = &[
    def("Trilu", 14, trilu),
    def("CumSum", 11, |i, n| cumulative(i, n, BinaryOp::Add)),
    def("CumSum", 14, |i, n| cumulative(i, n, BinaryOp::Add)),
    def("CumProd", 26, |i, n| cumulative(i, n, BinaryOp::Mul)),
    def("ScatterND", 11, scatter_nd),
    def("ScatterND", 13, scatter_nd),
    def("ScatterND", 16, scatter_nd),
    def("ScatterND", 18, scatter_nd),
    def("Scatter", 9, scatter_elements),
    def("ScatterElements", 11, scatter_elements),
    def("ScatterElements", 13, scatter_elements),
    def("ScatterElements", 16, scatter_elements),
    def("ScatterElements", 18, scatter_elements),
    def("TopK", 1, top_k),
    def("TopK", 10, top_k),
    def("TopK", 11, top_k),
    def("OneHot", 9, one_hot),
    def("OneHot", 11, one_hot),
    def("Compress", 9, compress),
    def("Compress", 11, compress),
];

/// Trilu: keeps `j - i >= k` (upper) or `j - i <= k` (lower) of the last two axes; `k`
/// may be a runtime scalar.
fn trilu(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let r = d.len();
    if r < 2 {
        return Err(Error::shape(format!("input must have rank >= 2, got {}", i.g.describe(x))));
    }
    let (rows, cols) = (d[r - 2], d[r - 1]);
    let diff: Vec<i64> = (0..rows * cols).map(|f| (f % cols) as i64 - (f / cols) as i64).collect();
    let diff = i64_const(i, &[rows, cols], &diff)?;
    let k = match i.opt_input(n, 1)? {
        Some(k) => {
            if numel(i.g.dims(k)) != 1 || i.g.dtype(k) != DType::I64 {
                return Err(Error::shape(format!("k must be one int64, got {}", i.g.describe(k))));
            }
            i.g.reshape(k, &[])?
        }
        None => i64_const(i, &[], &[0])?,
    };
    let op = if n.int("upper", 1)? != 0 { CompareOp::Ge } else { CompareOp::Le };
    let keep = i.g.compare(op, diff, k)?;
    let zero = i.g.scalar_like(x, 0.0)?;
    one(i.g.where_(keep, x, zero)?)
}

/// `x` shifted by `s` along `a` (towards higher indices, or lower when `back`), zeros
/// filling the vacated entries.
fn shift(i: &mut Importer, x: NodeId, a: usize, s: usize, back: bool, fill: f64) -> Result<NodeId> {
    let d = i.g.dims(x).to_vec();
    let len = d[a];
    let mut zd = d.clone();
    zd[a] = s.min(len);
    let zeros = i.g.full(i.g.dtype(x), &zd, fill)?;
    if s >= len {
        return Ok(zeros);
    }
    if back {
        let kept = i.g.narrow(x, a, s, len - s)?;
        i.g.concat(&[kept, zeros], a)
    } else {
        let kept = i.g.narrow(x, a, 0, len - s)?;
        i.g.concat(&[zeros, kept], a)
    }
}

/// CumSum / CumProd as a log-step prefix scan (y = y op y shifted by 1, 2, 4, .., the
/// shift filling with the identity): exact for integers.
fn cumulative(i: &mut Importer, n: &Node, op: BinaryOp) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let a = i.const_ints(n, 1)?.ok_or_else(|| Error::graph("input 1 (axis) is required"))?;
    let [a] = a[..] else { return Err(Error::shape(format!("axis must be one value, got {a:?}"))) };
    let a = axis(a, d.len())?;
    if d.is_empty() {
        return Err(Error::shape(format!("{} of a scalar", n.op_type())));
    }
    let (exclusive, back) = (n.int("exclusive", 0)? != 0, n.int("reverse", 0)? != 0);
    let len = d[a];
    let identity = if op == BinaryOp::Mul { 1.0 } else { 0.0 };
    let mut y = x;
    let mut s = 1;
    while s < len {
        let shifted = shift(i, y, a, s, back, identity)?;
        y = i.g.binary(op, y, shifted)?;
        s *= 2;
    }
    if exclusive && len > 0 {
        y = shift(i, y, a, 1, back, identity)?;
    }
    if y == x {
        y = identity_of(i, x)?;
    }
    one(y)
}

#[derive(Clone, Copy, PartialEq)]
enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

fn reduction(n: &Node) -> Result<Reduction> {
    match n.string("reduction", "none")?.as_str() {
        "none" => Ok(Reduction::None),
        "add" => Ok(Reduction::Add),
        "mul" => Ok(Reduction::Mul),
        "max" => Ok(Reduction::Max),
        "min" => Ok(Reduction::Min),
        other => Err(Error::unsupported(format!("reduction '{other}'"))),
    }
}

/// Integer indices in `-len..len` as non-negative i64.
fn wrap(i: &mut Importer, idx: NodeId, len: NodeId) -> Result<NodeId> {
    let idx = if i.g.dtype(idx) == DType::I64 { idx } else { i.g.cast(idx, DType::I64)? };
    let zero = i.g.scalar_like(idx, 0.0)?;
    let neg = i.g.lt(idx, zero)?;
    let shifted = i.g.add(idx, len)?;
    i.g.where_(neg, shifted, idx)
}

/// `data [r, s]` with rows `rows [u]` (i64 in `0..r`) combined with `updates [u, s]` by
/// `red` (`none`: the written rows replaced; repeated rows then add, which the spec
/// leaves undefined).
fn scatter_rows(i: &mut Importer, data: NodeId, rows: NodeId, updates: NodeId, red: Reduction) -> Result<NodeId> {
    let [r, s] = i.g.dims(data)[..] else { return Err(Error::internal("scatter_rows wants [r, s] data")) };
    let u = i.g.dims(rows)[0];
    if i.g.dtype(data) == DType::Bool {
        return Err(Error::unsupported(format!("scatter into {}", i.g.describe(data))));
    }
    match red {
        Reduction::None | Reduction::Add => {
            let summed = i.g.scatter_add(rows, updates, r)?;
            if red == Reduction::Add {
                return i.g.add(data, summed);
            }
            let ones = i.g.full(DType::F32, &[u], 1.0)?;
            let count = i.g.scatter_add(rows, ones, r)?;
            let count = i.g.reshape(count, &[r, 1])?;
            let zero = i.g.scalar_like(count, 0.0)?;
            let written = i.g.gt(count, zero)?;
            i.g.where_(written, summed, data)
        }
        Reduction::Mul | Reduction::Max | Reduction::Min => {
            // cand[u, r, s] = updates[u, s] where update u writes row r, else a value
            // that leaves the result alone (1 for mul, data itself for max / min).
            if u == 0 {
                return identity_of(i, data);
            }
            let rows = i.g.reshape(rows, &[u, 1, 1])?;
            let all = i.g.iota(DType::I64, r)?;
            let all = i.g.reshape(all, &[1, r, 1])?;
            let hit = i.g.compare(CompareOp::Eq, rows, all)?;
            let upd = i.g.reshape(updates, &[u, 1, s])?;
            let other =
                if red == Reduction::Mul { i.g.scalar_like(data, 1.0)? } else { i.g.reshape(data, &[1, r, s])? };
            let cand = i.g.where_(hit, upd, other)?;
            let cand = i.g.broadcast_to(cand, &[u, r, s])?;
            let op = match red {
                Reduction::Mul => ReduceOp::Prod,
                Reduction::Max => ReduceOp::Max,
                _ => ReduceOp::Min,
            };
            let folded = i.g.reduce(op, cand, &[0], false)?;
            // Every candidate may be an update, so data joins once more.
            match red {
                Reduction::Mul => i.g.mul(data, folded),
                Reduction::Max => i.g.maximum(data, folded),
                _ => i.g.minimum(data, folded),
            }
        }
    }
}

/// ScatterND: each index tuple `indices[.., :q]` addresses a slice `data[i0, .., iq-1]`,
/// replaced (or combined) by the matching slice of `updates`.
fn scatter_nd(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (data, idx, upd) = (i.input(n, 0)?, i.input(n, 1)?, i.input(n, 2)?);
    let red = reduction(n)?;
    let (d, id, ud) = (i.g.dims(data).to_vec(), i.g.dims(idx).to_vec(), i.g.dims(upd).to_vec());
    let Some(&q) = id.last() else { return Err(Error::shape("indices must have rank >= 1")) };
    let lead = &id[..id.len() - 1];
    if q > d.len() || ud != [lead, &d[q..]].concat() || !i.g.dtype(idx).is_int() || i.g.dtype(upd) != i.g.dtype(data) {
        return Err(Error::shape(format!(
            "data {}, indices {} and updates {} do not fit ScatterND (updates = indices[:-1] ++ data[q:])",
            i.g.describe(data),
            i.g.describe(idx),
            i.g.describe(upd)
        )));
    }
    let (rows, width, u) = (numel(&d[..q]), numel(&d[q..]), numel(lead));
    // row = sum_k wrap(idx[.., k]) * stride_k over the first q axes.
    let idx = i.g.reshape(idx, &[u, q])?;
    let lens: Vec<i64> = d[..q].iter().map(|&v| v as i64).collect();
    let lens = i64_const(i, &[1, q], &lens)?;
    let idx = wrap(i, idx, lens)?;
    let st: Vec<i64> = strides(&d[..q]).iter().map(|&v| v as i64).collect();
    let st = i64_const(i, &[1, q], &st)?;
    let scaled = i.g.mul(idx, st)?;
    let row = i.g.reduce(ReduceOp::Sum, scaled, &[1], false)?;
    let data2 = i.g.reshape(data, &[rows, width])?;
    let upd2 = i.g.reshape(upd, &[u, width])?;
    let y = scatter_rows(i, data2, row, upd2, red)?;
    one(i.g.reshape(y, &d)?)
}

/// ScatterElements: `out[.., indices[.., j, ..], ..] = updates[.., j, ..]` along `axis`,
/// as a row scatter on the flattened data with flat indices computed elementwise.
fn scatter_elements(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (data, idx, upd) = (i.input(n, 0)?, i.input(n, 1)?, i.input(n, 2)?);
    let red = reduction(n)?;
    let (d, id) = (i.g.dims(data).to_vec(), i.g.dims(idx).to_vec());
    let a = axis(n.int("axis", 0)?, d.len())?;
    if id.len() != d.len() || i.g.dims(upd) != id || !i.g.dtype(idx).is_int() || i.g.dtype(upd) != i.g.dtype(data) {
        return Err(Error::shape(format!(
            "data {}, indices {} and updates {} must share a rank, indices and updates one shape",
            i.g.describe(data),
            i.g.describe(idx),
            i.g.describe(upd)
        )));
    }
    let len = i64_const(i, &[], &[d[a] as i64])?;
    let idx = wrap(i, idx, len)?;
    let st = strides(&d);
    let s = i64_const(i, &[], &[st[a] as i64])?;
    let mut flat = i.g.mul(idx, s)?;
    for k in (0..d.len()).filter(|&k| k != a) {
        let mut shape = vec![1; id.len()];
        shape[k] = id[k];
        let along: Vec<i64> = (0..id[k] as i64).map(|c| c * st[k] as i64).collect();
        let c = i64_const(i, &shape, &along)?;
        flat = i.g.add(flat, c)?;
    }
    let u = numel(&id);
    let flat = i.g.reshape(flat, &[u])?;
    let data2 = i.g.reshape(data, &[numel(&d), 1])?;
    let upd2 = i.g.reshape(upd, &[u, 1])?;
    let y = scatter_rows(i, data2, flat, upd2, red)?;
    one(i.g.reshape(y, &d)?)
}

/// TopK: the `k` largest (or smallest) entries along `axis`, ties to the lower index.
/// `rank[i] = #{j: x[j] beats x[i]} + #{j < i: x[j] == x[i]}`; output `p` is the element
/// of rank `p` (always sorted, which `sorted = 0` allows).
fn top_k(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let r = d.len();
    let a = axis(n.int("axis", -1)?, r)?;
    let k = if n.since >= 10 {
        let k = i.const_ints(n, 1)?.ok_or_else(|| Error::graph("input 1 (K) is required"))?;
        let [k] = k[..] else { return Err(Error::shape(format!("K must hold one value, got {k:?}"))) };
        k
    } else {
        n.int_opt("k")?.ok_or_else(|| Error::parse("attribute 'k' is missing"))?
    };
    let len = d[a];
    let k = usize::try_from(k)
        .ok()
        .filter(|&k| k <= len)
        .ok_or_else(|| Error::shape(format!("K {k} must be in 0..={len} (axis {a} of {})", i.g.describe(x))))?;
    let largest = n.int("largest", 1)? != 0;
    // Work on [.., len] with the axis last, then move it back.
    let to_last: Vec<usize> = (0..r).filter(|&q| q != a).chain([a]).collect();
    let xt = if a + 1 == r { x } else { i.g.transpose(x, &to_last)? };
    let td = i.g.dims(xt).to_vec();
    let outer = &td[..r - 1];
    let xi = i.g.reshape(xt, &[outer, &[len, 1]].concat())?;
    let xj = i.g.reshape(xt, &[outer, &[1, len]].concat())?;
    let beats = i.g.compare(if largest { CompareOp::Gt } else { CompareOp::Lt }, xj, xi)?;
    let ties = i.g.compare(CompareOp::Eq, xj, xi)?;
    let lower: Vec<f64> = (0..len * len).map(|f| ((f % len) < (f / len)) as u8 as f64).collect();
    let lower = i.g.constant_tensor(HostTensor::from_f64_as(DType::Bool, &[len, len], &lower)?)?;
    let no = i.g.scalar(DType::Bool, 0.0)?;
    let tie_before = i.g.where_(lower, ties, no)?;
    let yes = i.g.scalar(DType::Bool, 1.0)?;
    let ahead = i.g.where_(beats, yes, tie_before)?;
    let ahead = i.g.cast(ahead, DType::I64)?;
    let rank = i.g.reduce(ReduceOp::Sum, ahead, &[r], false)?;
    // sel[.., p, i] = rank[.., i] == p.
    let rank = i.g.reshape(rank, &[outer, &[1, len]].concat())?;
    let ps = i.g.iota(DType::I64, k)?;
    let ps = i.g.reshape(ps, &[vec![1; r - 1], vec![k, 1]].concat())?;
    let sel = i.g.compare(CompareOp::Eq, rank, ps)?;
    let zero = i.g.scalar_like(x, 0.0)?;
    let vals = i.g.where_(sel, xj, zero)?;
    let vals = i.g.reduce(ReduceOp::Sum, vals, &[r], false)?;
    let pos = i.g.iota(DType::I64, len)?;
    let zero_i = i64_const(i, &[], &[0])?;
    let idx = i.g.where_(sel, pos, zero_i)?;
    let idx = i.g.reduce(ReduceOp::Sum, idx, &[r], false)?;
    let back: Vec<usize> = (0..r)
        .map(|q| {
            if q < a {
                q
            } else if q == a {
                r - 1
            } else {
                q - 1
            }
        })
        .collect();
    let mut outs = Vec::with_capacity(2);
    for y in [vals, idx] {
        outs.push(if a + 1 == r { y } else { i.g.transpose(y, &back)? });
    }
    Ok(outs)
}

/// OneHot: `values[1]` where `indices` (wrapped modulo `depth` when negative) equals the
/// position along the new axis `axis`, `values[0]` elsewhere.
fn one_hot(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (idx, values) = (i.input(n, 0)?, i.input(n, 2)?);
    let depth = i.const_floats(n, 1)?.ok_or_else(|| Error::graph("input 1 (depth) is required"))?;
    let [depth] = depth[..] else { return Err(Error::shape(format!("depth must hold one value, got {depth:?}"))) };
    if !(depth >= 1.0 && depth <= (1u64 << 40) as f64) {
        return Err(Error::shape(format!("depth {depth} must be a positive count")));
    }
    let depth = depth as usize;
    if numel(i.g.dims(values)) != 2 {
        return Err(Error::shape(format!("values must be [off, on], got {}", i.g.describe(values))));
    }
    let id = i.g.dims(idx).to_vec();
    let r = id.len() + 1;
    let a = axis(n.int("axis", -1)?, r)?;
    let idx = i.g.cast(idx, DType::I64)?;
    let len = i64_const(i, &[], &[depth as i64])?;
    let idx = wrap(i, idx, len)?;
    let mut shaped = id.clone();
    shaped.insert(a, 1);
    let idx = i.g.reshape(idx, &shaped)?;
    let mut pd = vec![1; r];
    pd[a] = depth;
    let pos = i.g.iota(DType::I64, depth)?;
    let pos = i.g.reshape(pos, &pd)?;
    let hit = i.g.compare(CompareOp::Eq, idx, pos)?;
    let values = i.g.reshape(values, &[2])?;
    let off = i.g.narrow(values, 0, 0, 1)?;
    let off = i.g.reshape(off, &[])?;
    let on = i.g.narrow(values, 0, 1, 1)?;
    let on = i.g.reshape(on, &[])?;
    one(i.g.where_(hit, on, off)?)
}

/// Compress with a condition known at compile time: the entries along `axis` (of the
/// flattened input without one) whose condition is true.
fn compress(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let cid = i.input(n, 1)?;
    let cond = i.const_input(n, 1, cid)?.to_i64_vec();
    let (x, a) = match n.int_opt("axis")? {
        Some(v) => {
            let r = i.g.dims(x).len();
            (x, axis(v, r)?)
        }
        None => {
            let all = numel(i.g.dims(x));
            (i.g.reshape(x, &[all])?, 0)
        }
    };
    let len = i.g.dims(x)[a];
    if cond.len() > len {
        return Err(Error::shape(format!("condition has {} entries, axis {a} only {len}", cond.len())));
    }
    let keep: Vec<usize> = cond.iter().enumerate().filter(|&(_, &c)| c != 0).map(|(k, _)| k).collect();
    one(if keep.is_empty() { i.g.narrow(x, a, 0, 0)? } else { take(i, x, a, &keep)? })
}
