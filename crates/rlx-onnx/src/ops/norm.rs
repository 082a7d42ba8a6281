//! Softmax family and normalizations: Softmax / LogSoftmax / Hardmax (flattened to 2-D
//! at `axis` before opset 13, one axis from 13), LayerNormalization, InstanceNormalization,
//! LpNormalization, BatchNormalization (inference form).

use super::{OpDef, axis, def, one};
use crate::import::{Importer, Node};
use rlx_ir::shape::numel;
use rlx_ir::{CompareOp, DType, Error, HostTensor, NodeId, Op, ReduceOp, Result, Unary};

pub const OPS: &[OpDef] = &[
    def("Softmax", 1, |i, n| softmax(i, n, Soft::Softmax)),
    def("Softmax", 13, |i, n| softmax(i, n, Soft::Softmax)),
    def("LogSoftmax", 1, |i, n| softmax(i, n, Soft::Log)),
    def("LogSoftmax", 13, |i, n| softmax(i, n, Soft::Log)),
    def("Hardmax", 1, |i, n| softmax(i, n, Soft::Hard)),
    def("Hardmax", 13, |i, n| softmax(i, n, Soft::Hard)),
    def("LayerNormalization", 17, layer_norm),
    def("InstanceNormalization", 6, instance_norm),
    def("LpNormalization", 1, lp_norm),
    def("BatchNormalization", 7, batch_norm),
    def("BatchNormalization", 9, batch_norm),
    def("BatchNormalization", 14, batch_norm),
    def("BatchNormalization", 15, batch_norm),
];

#[derive(Clone, Copy)]
enum Soft {
    Softmax,
    Log,
    Hard,
}

fn soft_on(i: &mut Importer, x: NodeId, a: usize, kind: Soft) -> Result<NodeId> {
    match kind {
        Soft::Softmax => i.g.softmax(x, a),
        Soft::Log => i.g.log_softmax(x, a),
        Soft::Hard => {
            // One-hot of the first maximum along `a`.
            let idx = i.g.argmax(x, a, true)?;
            let len = i.g.dims(x)[a];
            let mut shape = vec![1; i.g.dims(x).len()];
            shape[a] = len;
            let iota = i.g.iota(rlx_ir::DType::I64, len)?;
            let iota = i.g.reshape(iota, &shape)?;
            let hit = i.g.compare(CompareOp::Eq, iota, idx)?;
            let dtype = i.g.dtype(x);
            let y = i.g.cast(hit, dtype)?;
            let dims = i.g.dims(x).to_vec();
            i.g.broadcast_to(y, &dims)
        }
    }
}

fn softmax(i: &mut Importer, n: &Node, kind: Soft) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    if n.since >= 13 {
        let a = axis(n.int("axis", -1)?, d.len())?;
        return one(soft_on(i, x, a, kind)?);
    }
    // Before 13: the input is seen as [prod(d[..axis]), prod(d[axis..])].
    let a = n.int("axis", 1)?;
    let a = if a == d.len() as i64 { d.len() } else { axis(a, d.len())? };
    let flat = i.g.reshape(x, &[numel(&d[..a]), numel(&d[a..])])?;
    let y = soft_on(i, flat, 1, kind)?;
    one(i.g.reshape(y, &d)?)
}

/// LayerNormalization over axes `axis..`: the IR's last-axis norm on the flattened tail
/// (gamma and beta reshaped to match), with the stash outputs (mean, inv std dev) when
/// asked for.
fn layer_norm(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let a = axis(n.int("axis", -1)?, d.len())?;
    let eps = n.float("epsilon", 1e-5)?;
    if n.int("stash_type", 1)? != 1 {
        return Err(Error::unsupported("stash_type other than float"));
    }
    let (scale, bias) = (i.input(n, 1)?, i.opt_input(n, 2)?);
    let inner = numel(&d[a..]);
    let flat_dims = [d[..a].to_vec(), vec![inner]].concat();
    let xf = if a + 1 == d.len() { x } else { i.g.reshape(x, &flat_dims)? };
    // gamma / beta broadcast to the normalized dims, then flattened.
    let tail = d[a..].to_vec();
    let flat_param = |i: &mut Importer, p: NodeId| -> Result<NodeId> {
        let p = i.g.broadcast_to(p, &tail)?;
        if tail.len() == 1 { Ok(p) } else { i.g.reshape(p, &[inner]) }
    };
    let g = flat_param(i, scale)?;
    let b = bias.map(|b| flat_param(i, b)).transpose()?;
    let y = i.g.layer_norm(xf, Some(g), b, eps)?;
    let y = if a + 1 == d.len() { y } else { i.g.reshape(y, &d)? };
    let mut outs = vec![y];
    if n.proto.output.iter().skip(1).any(|o| !o.is_empty()) {
        let stat_dims: Vec<usize> = (0..d.len()).map(|k| if k < a { d[k] } else { 1 }).collect();
        let red: Vec<usize> = (a..d.len()).collect();
        let mean = i.g.reduce(ReduceOp::Mean, x, &red, true)?;
        let c = i.g.sub(x, mean)?;
        let sq = i.g.mul(c, c)?;
        let var = i.g.reduce(ReduceOp::Mean, sq, &red, true)?;
        let e = i.g.scalar_like(var, eps as f64)?;
        let v = i.g.add(var, e)?;
        let inv = i.g.unary(Unary::Rsqrt, v)?;
        debug_assert_eq!(i.g.dims(mean), &stat_dims[..]);
        outs.extend([mean, inv]);
    }
    Ok(outs)
}

/// `(x - mean) / sqrt(var + eps)` over `axes`, then `* scale + bias` (per channel).
fn normalize(i: &mut Importer, x: NodeId, axes: &[usize], eps: f64) -> Result<NodeId> {
    let mean = i.g.reduce(ReduceOp::Mean, x, axes, true)?;
    let c = i.g.sub(x, mean)?;
    let sq = i.g.mul(c, c)?;
    let var = i.g.reduce(ReduceOp::Mean, sq, axes, true)?;
    let e = i.g.scalar_like(var, eps)?;
    let v = i.g.add(var, e)?;
    let inv = i.g.unary(Unary::Rsqrt, v)?;
    i.g.mul(c, inv)
}

/// A per-channel vector `[c]` shaped to broadcast over `[n, c, ...]` of rank `rank`.
pub fn per_channel(i: &mut Importer, v: NodeId, rank: usize) -> Result<NodeId> {
    let c = i.g.dims(v).iter().product::<usize>();
    let mut dims = vec![1; rank];
    if rank > 1 {
        dims[1] = c;
    }
    i.g.reshape(v, &dims)
}

fn instance_norm(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (x, scale, bias) = (i.input(n, 0)?, i.input(n, 1)?, i.input(n, 2)?);
    let r = i.g.dims(x).len();
    if r < 3 {
        return Err(Error::shape(format!("needs [n, c, ...], got {}", i.g.describe(x))));
    }
    let eps = n.float("epsilon", 1e-5)? as f64;
    let y = normalize(i, x, &(2..r).collect::<Vec<_>>(), eps)?;
    let s = per_channel(i, scale, r)?;
    let b = per_channel(i, bias, r)?;
    let y = i.g.mul(y, s)?;
    one(i.g.add(y, b)?)
}

fn lp_norm(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let a = axis(n.int("axis", -1)?, i.g.dims(x).len())?;
    let norm = match n.int("p", 2)? {
        1 => {
            let ab = i.g.unary(Unary::Abs, x)?;
            i.g.reduce(ReduceOp::Sum, ab, &[a], true)?
        }
        2 => {
            let sq = i.g.mul(x, x)?;
            let s = i.g.reduce(ReduceOp::Sum, sq, &[a], true)?;
            i.g.unary(Unary::Sqrt, s)?
        }
        p => return Err(Error::unsupported(format!("p = {p}"))),
    };
    one(i.g.div(x, norm)?)
}

/// Inference BatchNormalization: `(x - mean) / sqrt(var + eps) * scale + bias` per
/// channel, with the per-channel factor and offset computed once from the params (the
/// compiler folds them when the params are constants).
fn batch_norm(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    if n.int("training_mode", 0)? != 0 || n.proto.output.iter().skip(1).any(|o| !o.is_empty()) {
        return Err(Error::unsupported("training mode (running statistics outputs)"));
    }
    let x = i.input(n, 0)?;
    let (scale, bias, mean, var) = (i.input(n, 1)?, i.input(n, 2)?, i.input(n, 3)?, i.input(n, 4)?);
    let r = i.g.dims(x).len();
    let eps = n.float("epsilon", 1e-5)? as f64;
    if let Some(y) = fold_into_conv(i, n, x, [scale, bias, mean, var], eps)? {
        return one(y);
    }
    let e = i.g.scalar_like(var, eps)?;
    let v = i.g.add(var, e)?;
    let inv = i.g.unary(Unary::Rsqrt, v)?;
    let factor = i.g.mul(scale, inv)?;
    let shift = i.g.mul(mean, factor)?;
    let offset = i.g.sub(bias, shift)?;
    let f = per_channel(i, factor, r)?;
    let o = per_channel(i, offset, r)?;
    let y = i.g.mul(x, f)?;
    one(i.g.add(y, o)?)
}

/// A batch norm right after a 2-D conv whose weight, bias and statistics are known at
/// import becomes that conv with scaled weights and a shifted bias (computed once in f64,
/// rounded once to f32), so it costs nothing at run time: `w' = w f` and
/// `b' = (b - mean) f + beta` with `f = gamma / sqrt(var + eps)` per output channel. The
/// original conv stays for any other reader (dead code otherwise).
fn fold_into_conv(i: &mut Importer, n: &Node, x: NodeId, stats: [NodeId; 4], eps: f64) -> Result<Option<NodeId>> {
    let Some(conv) = i.g.node(x).cloned() else { return Ok(None) };
    let Op::Conv2d { params, bias: has_bias } = *conv.op() else { return Ok(None) };
    let (input, w) = (conv.inputs()[0], conv.inputs()[1]);
    let (Some(Op::Param { name: w_name }), DType::F32) = (i.g.node(w).map(|n| n.op().clone()), i.g.dtype(w)) else {
        return Ok(None);
    };
    let out_channels = i.g.dims(w)[0];
    let mut values = Vec::with_capacity(5);
    for id in stats.into_iter().chain(has_bias.then(|| conv.inputs()[2])) {
        match i.host_value(id) {
            Some(t) if t.len() == out_channels => values.push(t.to_f64_vec()),
            _ => return Ok(None),
        }
    }
    let Some(weight) = i.host_value(w) else { return Ok(None) };
    let factor: Vec<f64> = (0..out_channels).map(|c| values[0][c] / (values[3][c] + eps).sqrt()).collect();
    let shift: Vec<f64> = (0..out_channels)
        .map(|c| (values.get(4).map_or(0.0, |b| b[c]) - values[2][c]) * factor[c] + values[1][c])
        .collect();
    let tag = n.proto.output.first().map_or("", String::as_str);
    let w_dims = i.g.dims(w).to_vec();
    let folded_w = i.derived_param(&format!("{w_name}|bn:{tag}"), || {
        let per = weight.len() / out_channels.max(1);
        let v: Vec<f64> = weight.to_f64_vec().iter().enumerate().map(|(k, &v)| v * factor[k / per.max(1)]).collect();
        HostTensor::from_f64_as(DType::F32, &w_dims, &v)
    })?;
    let folded_b = i.derived_param(&format!("{w_name}|bn-bias:{tag}"), || {
        HostTensor::from_f64_as(DType::F32, &[out_channels], &shift)
    })?;
    Ok(Some(i.g.conv2d(input, folded_w, Some(folded_b), params)?))
}
