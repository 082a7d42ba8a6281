//! Shapes and data movement: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze,
//! Transpose, Concat, Slice, Split, Expand, Tile, Gather, GatherElements, Pad,
//! DepthToSpace, SpaceToDepth. Shape operands (a Reshape's target, a Slice's starts) must
//! be known at compile time; with the inputs' shapes bound they usually fold.

use super::{OpDef, axes, axis, def, one, sizes};
use crate::import::{Importer, Node};
use crate::ops::elementwise::identity_of;
use rlx_ir::shape::{broadcast_dims, numel};
use rlx_ir::{DType, Error, HostTensor, NodeId, Result};

pub const OPS: &[OpDef] = &[
    def("Shape", 1, shape),
    def("Size", 1, size),
    def("Reshape", 5, reshape),
    def("Flatten", 1, flatten),
    def("Squeeze", 1, squeeze),
    def("Squeeze", 13, squeeze),
    def("Unsqueeze", 1, unsqueeze),
    def("Unsqueeze", 13, unsqueeze),
    def("Transpose", 1, transpose),
    def("Concat", 4, concat),
    def("Slice", 1, slice),
    def("Slice", 10, slice),
    def("Split", 2, split),
    def("Split", 13, split),
    def("Split", 18, split),
    def("Expand", 8, expand),
    def("Tile", 6, tile),
    def("Gather", 1, gather),
    def("GatherElements", 11, gather_elements),
    def("Pad", 2, pad),
    def("Pad", 11, pad),
    def("DepthToSpace", 1, depth_to_space),
    def("SpaceToDepth", 1, space_to_depth),
];

/// An i64 constant.
pub fn i64_const(i: &mut Importer, dims: &[usize], values: &[i64]) -> Result<NodeId> {
    i.g.constant_tensor(HostTensor::from_i64(dims, values)?)
}

/// Shape (opset 15 adds `start` / `end`, which default to the whole shape before).
fn shape(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let dims: Vec<i64> = i.g.dims(x).iter().map(|&d| d as i64).collect();
    let r = dims.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clamp(n.int("start", 0)?);
    let end = clamp(n.int("end", r)?).max(start);
    let part = &dims[start..end];
    one(i64_const(i, &[part.len()], part)?)
}

fn size(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let count = numel(i.g.dims(x)) as i64;
    one(i64_const(i, &[], &[count])?)
}

/// The target dims of a Reshape: 0 copies the input's dim (unless `allowzero`), one -1
/// takes what is left.
fn reshape_dims(from: &[usize], shape: &[i64], allowzero: bool) -> Result<Vec<usize>> {
    let mut dims = Vec::with_capacity(shape.len());
    let mut infer = None;
    for (k, &s) in shape.iter().enumerate() {
        dims.push(match s {
            -1 if infer.is_none() => {
                infer = Some(k);
                1
            }
            0 if !allowzero => *from.get(k).ok_or_else(|| {
                Error::shape(format!("shape {shape:?}: 0 at axis {k} copies a dim the input {from:?} lacks"))
            })?,
            s if s >= 0 => s as usize,
            _ => return Err(Error::shape(format!("shape {shape:?} is not a valid target"))),
        });
    }
    if let Some(k) = infer {
        let known = numel(&dims);
        let total = numel(from);
        if known == 0 || !total.is_multiple_of(known) {
            return Err(Error::shape(format!("cannot reshape {from:?} to {shape:?}")));
        }
        dims[k] = total / known;
    }
    Ok(dims)
}

fn reshape(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let shape = i.const_ints(n, 1)?.ok_or_else(|| Error::graph("input 1 (shape) is required"))?;
    let dims = reshape_dims(i.g.dims(x), &shape, n.int("allowzero", 0)? != 0)?;
    one(i.g.reshape(x, &dims)?)
}

fn flatten(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let a = n.int("axis", 1)?;
    let a = if a == d.len() as i64 { d.len() } else { axis(a, d.len())? };
    one(i.g.reshape(x, &[numel(&d[..a]), numel(&d[a..])])?)
}

/// Axes from the `axes` attribute (before opset 13) or input 1 (from 13).
fn axes_operand(i: &mut Importer, n: &Node) -> Result<Option<Vec<i64>>> {
    if n.since >= 13 { i.const_ints(n, 1) } else { n.ints("axes") }
}

fn squeeze(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let drop = match axes_operand(i, n)? {
        Some(a) => axes(&a, d.len())?,
        None => (0..d.len()).filter(|&k| d[k] == 1).collect(),
    };
    if let Some(&k) = drop.iter().find(|&&k| d[k] != 1) {
        return Err(Error::shape(format!("cannot squeeze axis {k} of {}: it is not 1", i.g.describe(x))));
    }
    let dims: Vec<usize> = (0..d.len()).filter(|k| !drop.contains(k)).map(|k| d[k]).collect();
    one(i.g.reshape(x, &dims)?)
}

fn unsqueeze(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let a = axes_operand(i, n)?.ok_or_else(|| Error::graph("axes are required"))?;
    let rank = d.len() + a.len();
    let add = axes(&a, rank)?;
    let mut rest = d.iter();
    let dims: Vec<usize> = (0..rank).map(|k| if add.contains(&k) { 1 } else { *rest.next().unwrap_or(&1) }).collect();
    one(i.g.reshape(x, &dims)?)
}

fn transpose(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let r = i.g.dims(x).len();
    let perm = match n.ints("perm")? {
        Some(p) => {
            let p = sizes(&p, "perm")?;
            if p.len() != r {
                return Err(Error::shape(format!("perm {p:?} for {}", i.g.describe(x))));
            }
            p
        }
        None => (0..r).rev().collect(),
    };
    let y = i.g.transpose(x, &perm)?;
    // A zero padding stays one through the transpose, on the permuted axes.
    if let Some((src, pads)) = i.zero_padded.get(&x).cloned() {
        let src = i.g.transpose(src, &perm)?;
        let moved =
            pads.iter().filter_map(|&[a, lo, hi]| perm.iter().position(|&p| p == a).map(|k| [k, lo, hi])).collect();
        i.zero_padded.insert(y, (src, moved));
    }
    one(y)
}

fn concat(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let xs = i.inputs(n)?;
    let first = *xs.first().ok_or_else(|| Error::graph("needs at least one input"))?;
    let r = i.g.dims(first).len();
    let a = axis(n.int_opt("axis")?.ok_or_else(|| Error::parse("attribute 'axis' is missing"))?, r)?;
    // Empty operands add nothing (exporters emit them for zero-length pieces).
    let parts: Vec<NodeId> = xs.iter().copied().filter(|&x| numel(i.g.dims(x)) > 0).collect();
    match parts.len() {
        0 => one(i.g.concat(&xs, a)?),
        1 if xs.len() > 1 => one(identity_of(i, parts[0])?),
        _ => one(i.g.concat(&parts, a)?),
    }
}

/// `x` with its entries `indices` along `axis` (a constant index list).
pub fn take(i: &mut Importer, x: NodeId, a: usize, indices: &[usize]) -> Result<NodeId> {
    if let Some(start) = indices.first().copied()
        && indices.iter().enumerate().all(|(k, &v)| v == start + k)
    {
        return i.g.narrow(x, a, start, indices.len());
    }
    let idx: Vec<i64> = indices.iter().map(|&v| v as i64).collect();
    let idx = i64_const(i, &[idx.len()], &idx)?;
    gather_axis(i, x, a, idx)
}

/// ONNX Gather: `data.dims[..axis] ++ indices.dims ++ data.dims[axis + 1..]`, through the
/// IR's row gather on `data` with `axis` moved to the front.
fn gather_axis(i: &mut Importer, x: NodeId, a: usize, idx: NodeId) -> Result<NodeId> {
    let r = i.g.dims(x).len();
    let q = i.g.dims(idx).len();
    let front: Vec<usize> = std::iter::once(a).chain((0..r).filter(|&k| k != a)).collect();
    let t = if a == 0 { x } else { i.g.transpose(x, &front)? };
    let y = i.g.gather(t, idx)?;
    if a == 0 {
        return Ok(y);
    }
    // y: [idx (q), pre (a), post (r - a - 1)] -> [pre, idx, post].
    let perm: Vec<usize> = (q..q + a).chain(0..q).chain(q + a..q + r - 1).collect();
    i.g.transpose(y, &perm)
}

/// Indices in `-n..n` made non-negative: at import when constant, by a `where` otherwise.
fn wrap_indices(i: &mut Importer, idx: NodeId, n: usize) -> Result<NodeId> {
    if let Some(t) = i.const_of(idx) {
        let v = t.to_i64_vec();
        if v.iter().all(|&x| x >= 0) {
            return Ok(idx);
        }
        let w: Vec<i64> = v.iter().map(|&x| if x < 0 { x + n as i64 } else { x }).collect();
        let dims = t.dims().to_vec();
        let c = HostTensor::from_i64(&dims, &w)?;
        let c = i.g.constant_tensor(c)?;
        return if t.dtype() == DType::I64 { Ok(c) } else { i.g.cast(c, t.dtype()) };
    }
    let zero = i.g.scalar_like(idx, 0.0)?;
    let size = i.g.scalar_like(idx, n as f64)?;
    let neg = i.g.lt(idx, zero)?;
    let shifted = i.g.add(idx, size)?;
    i.g.where_(neg, shifted, idx)
}

fn gather(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (x, idx) = (i.input(n, 0)?, i.input(n, 1)?);
    let d = i.g.dims(x).to_vec();
    let a = axis(n.int("axis", 0)?, d.len())?;
    let idx = wrap_indices(i, idx, d[a])?;
    one(gather_axis(i, x, a, idx)?)
}

/// GatherElements: `out[.., j, ..] = data[.., indices[.., j, ..], ..]` along `axis`, as a
/// row gather on the flattened data with flat indices computed elementwise.
fn gather_elements(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (x, idx) = (i.input(n, 0)?, i.input(n, 1)?);
    let d = i.g.dims(x).to_vec();
    let id = i.g.dims(idx).to_vec();
    let a = axis(n.int("axis", 0)?, d.len())?;
    if id.len() != d.len() {
        return Err(Error::shape(format!("indices {} and data {} differ in rank", i.g.describe(idx), i.g.describe(x))));
    }
    let idx = wrap_indices(i, idx, d[a])?;
    let idx = if i.g.dtype(idx) == DType::I64 { idx } else { i.g.cast(idx, DType::I64)? };
    // flat = sum_k coord_k * stride_k, with coord_axis = indices.
    let strides = rlx_ir::shape::strides(&d);
    let mut flat = {
        let s = i64_const(i, &[], &[strides[a] as i64])?;
        i.g.mul(idx, s)?
    };
    for k in (0..d.len()).filter(|&k| k != a) {
        let mut shape = vec![1; id.len()];
        shape[k] = id[k];
        let along: Vec<i64> = (0..id[k] as i64).map(|c| c * strides[k] as i64).collect();
        let c = i64_const(i, &shape, &along)?;
        flat = i.g.add(flat, c)?;
    }
    let table = i.g.reshape(x, &[numel(&d)])?;
    one(i.g.gather(table, flat)?)
}

/// The entries of one axis a Slice keeps: `start, start + step, ...` before `end`,
/// after ONNX's clamping rules.
fn slice_indices(dim: usize, start: i64, end: i64, step: i64) -> Result<Vec<usize>> {
    if step == 0 {
        return Err(Error::shape("slice step 0"));
    }
    let n = dim as i64;
    let norm = |v: i64| if v < 0 { v.saturating_add(n) } else { v };
    let (s, e) = (norm(start), norm(end));
    let (s, e) = if step > 0 { (s.clamp(0, n), e.clamp(0, n)) } else { (s.clamp(0, n - 1), e.clamp(-1, n - 1)) };
    let mut out = Vec::new();
    let mut k = s;
    while (step > 0 && k < e) || (step < 0 && k > e) {
        out.push(k as usize);
        k += step;
    }
    Ok(out)
}

fn slice(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let (starts, ends, ax, steps) = if n.since >= 10 {
        let starts = i.const_ints(n, 1)?.ok_or_else(|| Error::graph("input 1 (starts) is required"))?;
        let ends = i.const_ints(n, 2)?.ok_or_else(|| Error::graph("input 2 (ends) is required"))?;
        (starts, ends, i.const_ints(n, 3)?, i.const_ints(n, 4)?)
    } else {
        let starts = n.ints("starts")?.ok_or_else(|| Error::parse("attribute 'starts' is missing"))?;
        let ends = n.ints("ends")?.ok_or_else(|| Error::parse("attribute 'ends' is missing"))?;
        (starts, ends, n.ints("axes")?, None)
    };
    let ax = ax.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || ax.len() != starts.len() || steps.len() != starts.len() {
        return Err(Error::shape(format!(
            "starts {starts:?}, ends {ends:?}, axes {ax:?} and steps {steps:?} differ in length"
        )));
    }
    axes(&ax, d.len())?;
    let mut y = x;
    for k in 0..starts.len() {
        let a = axis(ax[k], d.len())?;
        let keep = slice_indices(d[a], starts[k], ends[k], steps[k])?;
        if keep.len() == d[a] && steps[k] > 0 {
            continue;
        }
        y = if keep.is_empty() { i.g.narrow(y, a, 0, 0)? } else { take(i, y, a, &keep)? };
    }
    if y == x {
        y = identity_of(i, x)?;
    }
    one(y)
}

fn split(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let a = axis(n.int("axis", 0)?, d.len())?;
    let outputs = n.proto.output.len();
    let given = if n.since >= 13 { i.const_ints(n, 1)? } else { n.ints("split")? };
    let parts: Vec<usize> = match given {
        Some(s) => sizes(&s, "split")?,
        None => {
            let count = if n.since >= 18 {
                let k = n.int_opt("num_outputs")?.unwrap_or(outputs as i64);
                usize::try_from(k).ok().filter(|&k| k > 0).ok_or_else(|| Error::shape(format!("num_outputs {k}")))?
            } else {
                outputs.max(1)
            };
            // Equal parts; from opset 18 the last may be smaller (ceil-sized chunks).
            let chunk = d[a].div_ceil(count);
            if n.since < 18 && !d[a].is_multiple_of(count) {
                return Err(Error::shape(format!(
                    "axis {a} of {} does not split into {count} equal parts",
                    i.g.describe(x)
                )));
            }
            (0..count).map(|k| chunk.min(d[a].saturating_sub(k * chunk))).collect()
        }
    };
    if parts.iter().sum::<usize>() != d[a] {
        return Err(Error::shape(format!("split {parts:?} does not add up to axis {a} of {}", i.g.describe(x))));
    }
    let mut start = 0;
    let mut outs = Vec::with_capacity(parts.len());
    for len in parts {
        outs.push(i.g.narrow(x, a, start, len)?);
        start += len;
    }
    Ok(outs)
}

fn expand(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let shape = i.const_ints(n, 1)?.ok_or_else(|| Error::graph("input 1 (shape) is required"))?;
    let shape = sizes(&shape, "shape")?;
    let dims = broadcast_dims(i.g.dims(x), &shape)
        .ok_or_else(|| Error::shape(format!("cannot expand {} to {shape:?}", i.g.describe(x))))?;
    // Expand broadcasts both ways: a 1 in `shape` keeps x's dim.
    let rank = dims.len();
    let padded: Vec<usize> =
        std::iter::repeat_n(1, rank - i.g.dims(x).len()).chain(i.g.dims(x).iter().copied()).collect();
    let x = if padded.len() != i.g.dims(x).len() { i.g.reshape(x, &padded)? } else { x };
    one(i.g.expand(x, &dims)?)
}

fn tile(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let repeats = sizes(&i.const_ints(n, 1)?.ok_or_else(|| Error::graph("input 1 (repeats) is required"))?, "repeats")?;
    if repeats.len() != d.len() {
        return Err(Error::shape(format!("repeats {repeats:?} for {}", i.g.describe(x))));
    }
    // [d0, d1, ..] -> [1, d0, 1, d1, ..] -> [r0, d0, r1, d1, ..] -> [r0 d0, r1 d1, ..].
    let split: Vec<usize> = d.iter().flat_map(|&v| [1, v]).collect();
    let wide: Vec<usize> = d.iter().zip(&repeats).flat_map(|(&v, &r)| [r, v]).collect();
    let out: Vec<usize> = d.iter().zip(&repeats).map(|(&v, &r)| v * r).collect();
    let y = i.g.reshape(x, &split)?;
    let y = i.g.expand(y, &wide)?;
    one(i.g.reshape(y, &out)?)
}

/// Pad: constant (with a value), reflect, edge and wrap modes; negative pads crop.
fn pad(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let r = d.len();
    let mode = n.string("mode", "constant")?;
    let (pads, value, ax) = if n.since >= 11 {
        let pads = i.const_ints(n, 1)?.ok_or_else(|| Error::graph("input 1 (pads) is required"))?;
        let value = i.const_floats(n, 2)?.and_then(|v| v.first().copied()).unwrap_or(0.0);
        (pads, value, i.const_ints(n, 3)?)
    } else {
        let pads = n.ints("pads")?.ok_or_else(|| Error::parse("attribute 'pads' is missing"))?;
        (pads, n.float("value", 0.0)? as f64, None)
    };
    let ax = match ax {
        Some(a) => a.iter().map(|&v| axis(v, r)).collect::<Result<Vec<_>>>()?,
        None => (0..r).collect(),
    };
    if pads.len() != 2 * ax.len() {
        return Err(Error::shape(format!("pads {pads:?} need 2 values per padded axis of {}", i.g.describe(x))));
    }
    let mut y = x;
    for (k, &a) in ax.iter().enumerate() {
        let (lo, hi) = (pads[k], pads[k + ax.len()]);
        if lo == 0 && hi == 0 {
            continue;
        }
        let len = i.g.dims(y)[a] as i64;
        // Crops first (negative pads), then the padding proper.
        let (crop_lo, crop_hi) = ((-lo).max(0), (-hi).max(0));
        if crop_lo + crop_hi > len {
            return Err(Error::shape(format!("pads {pads:?} crop more than axis {a} of {}", i.g.describe(x))));
        }
        if crop_lo + crop_hi > 0 {
            y = i.g.narrow(y, a, crop_lo as usize, (len - crop_lo - crop_hi) as usize)?;
        }
        let (lo, hi) = (lo.max(0) as usize, hi.max(0) as usize);
        if lo + hi == 0 {
            continue;
        }
        let m = i.g.dims(y)[a];
        y = match mode.as_str() {
            "constant" => {
                let mut parts = Vec::new();
                for count in [lo, 0, hi] {
                    if count == 0 {
                        parts.push(y);
                        continue;
                    }
                    let mut dims = i.g.dims(y).to_vec();
                    dims[a] = count;
                    let dtype = i.g.dtype(y);
                    parts.push(i.g.full(dtype, &dims, value)?);
                }
                let parts: Vec<NodeId> = if lo == 0 {
                    parts[1..].to_vec()
                } else if hi == 0 {
                    parts[..2].to_vec()
                } else {
                    parts
                };
                i.g.concat(&parts, a)?
            }
            "reflect" | "edge" | "wrap" => {
                if m == 0 || (mode == "reflect" && m < 2 && lo + hi > 0) {
                    return Err(Error::shape(format!("{mode} padding of an axis of length {m}")));
                }
                let index = |p: i64| -> usize {
                    let m = m as i64;
                    (match mode.as_str() {
                        "edge" => p.clamp(0, m - 1),
                        "wrap" => p.rem_euclid(m),
                        _ => {
                            let period = 2 * (m - 1);
                            let q = p.rem_euclid(period);
                            if q < m { q } else { period - q }
                        }
                    }) as usize
                };
                let keep: Vec<usize> = (-(lo as i64)..(m + hi) as i64).map(index).collect();
                take(i, y, a, &keep)?
            }
            other => return Err(Error::unsupported(format!("pad mode '{other}'"))),
        };
    }
    if y == x {
        y = identity_of(i, x)?;
    } else if mode == "constant" && value == 0.0 && pads.iter().all(|&p| p >= 0) {
        let padded: Vec<[usize; 3]> = ax
            .iter()
            .enumerate()
            .map(|(k, &a)| [a, pads[k] as usize, pads[k + ax.len()] as usize])
            .filter(|&[_, lo, hi]| lo + hi > 0)
            .collect();
        i.zero_padded.insert(y, (x, padded));
    }
    one(y)
}

fn depth_to_space(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let b = usize::try_from(n.int("blocksize", 0)?).ok().filter(|&b| b > 0).ok_or_else(|| Error::parse("blocksize"))?;
    let [nb, c, h, w] = d[..] else { return Err(Error::shape(format!("needs NCHW, got {}", i.g.describe(x)))) };
    if !c.is_multiple_of(b * b) {
        return Err(Error::shape(format!("channels {c} not divisible by blocksize^2 {}", b * b)));
    }
    let oc = c / (b * b);
    let crd = n.string("mode", "DCR")? == "CRD";
    let (split, perm) = if crd {
        (vec![nb, oc, b, b, h, w], [0, 1, 4, 2, 5, 3])
    } else {
        (vec![nb, b, b, oc, h, w], [0, 3, 4, 1, 5, 2])
    };
    let y = i.g.reshape(x, &split)?;
    let y = i.g.transpose(y, &perm)?;
    one(i.g.reshape(y, &[nb, oc, h * b, w * b])?)
}

fn space_to_depth(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let b = usize::try_from(n.int("blocksize", 0)?).ok().filter(|&b| b > 0).ok_or_else(|| Error::parse("blocksize"))?;
    let [nb, c, h, w] = d[..] else { return Err(Error::shape(format!("needs NCHW, got {}", i.g.describe(x)))) };
    if !h.is_multiple_of(b) || !w.is_multiple_of(b) {
        return Err(Error::shape(format!("spatial dims {h}x{w} not divisible by blocksize {b}")));
    }
    let y = i.g.reshape(x, &[nb, c, h / b, b, w / b, b])?;
    let y = i.g.transpose(y, &[0, 3, 5, 1, 2, 4])?;
    one(i.g.reshape(y, &[nb, c * b * b, h / b, w / b])?)
}
