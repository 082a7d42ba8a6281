//! The derivative-rule interface and the helpers the rules share. The rules themselves
//! live in each op family's file, beside the op's shape rule and semantics; the graph
//! transforms that apply them (grad, jvp, hvp) are in `rlx-autodiff`.
//!
//! A rule builds nodes in the graph being transformed, in which the node and its
//! operands already exist (the transform copies the forward graph first). Every rule is
//! made of differentiable ops, so derivatives of derivatives need nothing more.
//! Conventions, as in JAX: integer and bool values have no derivative (`None`); ties in
//! binary `maximum`/`minimum` and in `reduce_max`/`reduce_min` split the derivative evenly
//! (max pooling instead routes it to the window's first maximum, as its forward picks it);
//! `abs`, `relu` have derivative 0 at 0. Index operands (positions, lengths, labels) are
//! widened to i64 before any arithmetic on them, so narrow integer types cannot wrap.
//!
//! Forward over reverse (hvp) is exact everywhere; reverse over reverse through a rule
//! that selects between branches (`prod` with zeros, `pow` at 0) can meet a NaN in the
//! unselected branch times a zero cotangent.

use super::Op;
use crate::shape::numel;
use crate::{DType, Error, Graph, HostTensor, NodeId, Result};

/// One cotangent per operand: `None` where the operand is not differentiable (integers,
/// bools, indices) or receives nothing.
pub type Cotangents = Vec<Option<NodeId>>;

impl Graph {
    /// Whether `id` carries derivatives (a float value).
    pub fn is_differentiable(&self, id: NodeId) -> bool {
        self.dtype(id).is_float()
    }

    /// Reverse mode: the cotangents of node `out`'s operands, given `ct`, the cotangent of
    /// `out` (same type as `out`).
    pub fn vjp(&mut self, out: NodeId, ct: NodeId) -> Result<Cotangents> {
        let node = self.node(out).ok_or_else(|| Error::internal(format!("vjp of unknown node {out}")))?;
        let (op, ins) = (node.op().clone(), node.inputs().to_vec());
        let r = match &op {
            Op::Input { .. } | Op::Param { .. } | Op::Constant { .. } => Ok(Vec::new()),
            Op::Binary(b) => super::elementwise::vjp_binary(self, *b, &ins, out, ct),
            Op::Compare(_) | Op::ArgMax { .. } => Ok(vec![None; ins.len()]),
            Op::Where => super::elementwise::vjp_where(self, &ins, ct),
            Op::Unary(u) => super::elementwise::vjp_unary(self, *u, ins[0], out, ct),
            Op::Cast { .. } => super::elementwise::vjp_cast(self, ins[0], ct),
            Op::MatMul => super::matmul::vjp(self, ins[0], ins[1], ct),
            Op::Reduce { op: r, axes, keep_dims } => super::reduce::vjp(self, *r, axes, *keep_dims, ins[0], out, ct),
            Op::Softmax { axis } => super::softmax::vjp_softmax(self, *axis, out, ct),
            Op::LogSoftmax { axis } => super::softmax::vjp_log_softmax(self, *axis, out, ct),
            Op::LayerNorm { .. } | Op::RmsNorm { .. } => super::norm::vjp(self, &op, &ins, ct),
            Op::Reshape { .. } | Op::Transpose { .. } | Op::Narrow { .. } | Op::Concat { .. } | Op::Expand { .. } => {
                super::layout::vjp(self, &op, &ins, ct)
            }
            Op::Gather => super::gather::vjp_gather(self, &ins, ct),
            Op::ScatterAdd { .. } => super::gather::vjp_scatter_add(self, &ins, ct),
            Op::CrossEntropy => super::loss::vjp(self, ins[0], ins[1], ct),
            Op::Conv2d { .. }
            | Op::MaxPool2d { .. }
            | Op::AvgPool2d { .. }
            | Op::Conv2dGradInput { .. }
            | Op::Conv2dGradWeight { .. }
            | Op::MaxPool2dGrad { .. }
            | Op::MaxPool2dSelect { .. }
            | Op::AvgPool2dGrad { .. } => super::conv::vjp(self, &op, &ins, ct),
            Op::Attention { mask, scale } => super::attention::vjp(self, *mask, *scale, &ins, ct),
            Op::Rope { style, base, rotary_dims } => super::rope::vjp(self, *style, base.0, *rotary_dims, &ins, ct),
            Op::KvAppend { axis } => super::kv_cache::vjp(self, *axis, &ins, ct),
            Op::DequantMatMul { scheme, .. } => super::quant_matmul::vjp(self, *scheme, &ins, ct),
            Op::Dequantize { .. } => Ok(vec![None]),
            Op::Scan { .. } => super::scan::vjp_scan(self, &op, &ins, ct),
            Op::ScanGrad { .. } => Err(Error::unsupported(
                "reverse mode through a scan's backward loop (grad of grad through scan); hvp (forward over reverse) works",
            )),
        };
        r.map_err(|e| e.context(format_args!("vjp of {}", self.describe(out))))
    }

    /// Forward mode: the tangent of node `out` given one tangent per operand (`None` =
    /// zero); `None` when the result is zero or `out` is not differentiable.
    pub fn jvp(&mut self, out: NodeId, tangents: &[Option<NodeId>]) -> Result<Option<NodeId>> {
        let node = self.node(out).ok_or_else(|| Error::internal(format!("jvp of unknown node {out}")))?;
        let (op, ins) = (node.op().clone(), node.inputs().to_vec());
        if !self.is_differentiable(out) || tangents.iter().all(Option::is_none) {
            return Ok(None);
        }
        let t = tangents;
        let r = match &op {
            Op::Input { .. } | Op::Param { .. } | Op::Constant { .. } => Ok(None),
            Op::Binary(b) => super::elementwise::jvp_binary(self, *b, &ins, out, t),
            Op::Compare(_) | Op::ArgMax { .. } => Ok(None),
            Op::Where => super::elementwise::jvp_where(self, &ins, out, t),
            Op::Unary(u) => super::elementwise::jvp_unary(self, *u, ins[0], out, t[0]),
            Op::Cast { to } => t[0].map(|t| self.cast(t, *to)).transpose(),
            Op::MatMul => super::matmul::jvp(self, ins[0], ins[1], t),
            Op::Reduce { op: r, axes, keep_dims } => super::reduce::jvp(self, *r, axes, *keep_dims, ins[0], out, t[0]),
            Op::Softmax { axis } => super::softmax::jvp_softmax(self, *axis, out, t[0]),
            Op::LogSoftmax { axis } => super::softmax::jvp_log_softmax(self, *axis, out, t[0]),
            Op::LayerNorm { .. } | Op::RmsNorm { .. } => super::norm::jvp(self, &op, &ins, t),
            Op::Reshape { .. } | Op::Transpose { .. } | Op::Narrow { .. } | Op::Concat { .. } | Op::Expand { .. } => {
                super::layout::jvp(self, &op, &ins, out, t)
            }
            Op::Gather => t[0].map(|t| self.gather(t, ins[1])).transpose(),
            Op::ScatterAdd { rows } => t[1].map(|t| self.scatter_add(ins[0], t, *rows)).transpose(),
            Op::CrossEntropy => super::loss::jvp(self, ins[0], ins[1], t[0]),
            Op::Conv2d { .. }
            | Op::MaxPool2d { .. }
            | Op::AvgPool2d { .. }
            | Op::Conv2dGradInput { .. }
            | Op::Conv2dGradWeight { .. }
            | Op::MaxPool2dGrad { .. }
            | Op::MaxPool2dSelect { .. }
            | Op::AvgPool2dGrad { .. } => super::conv::jvp(self, &op, &ins, t),
            Op::Attention { mask, scale } => super::attention::jvp(self, *mask, *scale, &ins, t),
            Op::Rope { style, base, rotary_dims } => {
                t[0].map(|t| self.rope(t, ins[1], *style, base.0, Some(*rotary_dims))).transpose()
            }
            Op::KvAppend { axis } => super::kv_cache::jvp(self, *axis, &ins, t),
            Op::DequantMatMul { scheme, .. } => {
                t[0].map(|t| self.dequant_matmul(t, ins[1], *scheme, super::ActivationQuant::F32)).transpose()
            }
            Op::Dequantize { .. } => Ok(None),
            Op::Scan { .. } => super::scan::jvp_scan(self, &op, &ins, t),
            Op::ScanGrad { .. } => super::scan::jvp_scan_grad(self, &op, &ins, t),
        };
        r.map_err(|e| e.context(format_args!("jvp of {}", self.describe(out))))
    }

    /// A scalar constant (`dims []`) of `dtype` holding `value` (rounded once).
    pub fn scalar_f64(&mut self, dtype: DType, value: f64) -> Result<NodeId> {
        self.constant_tensor(HostTensor::from_f64_as(dtype, &[], &[value])?)
    }

    /// A scalar constant of `like`'s dtype.
    pub fn scalar_like(&mut self, like: NodeId, value: f64) -> Result<NodeId> {
        self.scalar_f64(self.dtype(like), value)
    }

    /// A constant filled with `value`, of `like`'s dtype and dims.
    pub fn full_like(&mut self, like: NodeId, value: f64) -> Result<NodeId> {
        let dims = self.dims(like).to_vec();
        self.full(self.dtype(like), &dims, value)
    }

    /// A constant of `dtype` and `dims` filled with `value`: a scalar broadcast (no
    /// per-element bytes in the graph).
    pub fn full(&mut self, dtype: DType, dims: &[usize], value: f64) -> Result<NodeId> {
        let s = self.scalar_f64(dtype, value)?;
        if dims.is_empty() { Ok(s) } else { self.expand(s, dims) }
    }

    /// `x` summed down to `dims` (the transpose of broadcasting `dims` to `x`'s dims).
    pub fn sum_to(&mut self, x: NodeId, dims: &[usize]) -> Result<NodeId> {
        let xd = self.dims(x).to_vec();
        if xd == dims {
            return Ok(x);
        }
        let lead = xd
            .len()
            .checked_sub(dims.len())
            .ok_or_else(|| Error::internal(format!("sum_to: {} has fewer axes than {dims:?}", self.describe(x))))?;
        let axes: Vec<usize> = (0..xd.len()).filter(|&i| i < lead || (dims[i - lead] == 1 && xd[i] != 1)).collect();
        let summed = if axes.is_empty() { x } else { self.reduce(super::ReduceOp::Sum, x, &axes, false)? };
        if self.dims(summed) == dims { Ok(summed) } else { self.reshape(summed, dims) }
    }

    /// The last two axes swapped.
    pub fn transpose_last2(&mut self, x: NodeId) -> Result<NodeId> {
        let r = self.dims(x).len();
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        self.transpose(x, &perm)
    }

    /// `x` broadcast to `dims` (no node when it already has them).
    pub fn broadcast_to(&mut self, x: NodeId, dims: &[usize]) -> Result<NodeId> {
        if self.dims(x) == dims { Ok(x) } else { self.expand(x, dims) }
    }

    /// Bool `cond` as 0 / 1 in `dtype`.
    pub fn mask(&mut self, cond: NodeId, dtype: DType) -> Result<NodeId> {
        self.cast(cond, dtype)
    }

    /// `a + b`, where a missing term is zero.
    pub fn add_opt(&mut self, a: Option<NodeId>, b: Option<NodeId>) -> Result<Option<NodeId>> {
        Ok(match (a, b) {
            (Some(a), Some(b)) => Some(self.add(a, b)?),
            (a, None) => a,
            (None, b) => b,
        })
    }

    /// The tangent of an operand, or zeros shaped like it.
    pub fn or_zeros(&mut self, t: Option<NodeId>, like: NodeId) -> Result<NodeId> {
        match t {
            Some(t) => Ok(t),
            None => self.full_like(like, 0.0),
        }
    }

    /// `0, 1, .., n - 1` as `dtype` (an integer or float constant of dims `[n]`).
    pub fn iota(&mut self, dtype: DType, n: usize) -> Result<NodeId> {
        let values: Vec<f64> = (0..n).map(|i| i as f64).collect();
        self.constant_tensor(HostTensor::from_f64_as(dtype, &[n], &values)?)
    }

    /// Elements of `x` per element of a reduction of it over `axes`.
    pub(crate) fn reduced_count(&self, x: NodeId, axes: &[usize]) -> usize {
        numel(&axes.iter().map(|&a| self.dims(x)[a]).collect::<Vec<_>>())
    }
}
