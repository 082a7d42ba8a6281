//! 2-D convolution and pooling, NCHW.
//!
//! Shape rule (per spatial axis, `pad_lo + pad_hi` the axis' two paddings):
//! `out = (in + pad_lo + pad_hi - dilation * (kernel - 1) - 1) / stride + 1`, at least 1.
//! Conv: `x [n, c, h, w]`, `w [o, c / groups, kh, kw]`, optional `bias [o]`, with
//! `groups` dividing both c and o; out `[n, o, oh, ow]`. Float only, one dtype.
//!
//! Reference semantics (PyTorch's, cross-correlation):
//! `out[b, f, y, x] = bias[f] + sum_{ci, ky, kx} x[b, g*cg + ci, y*s - pt + ky*d, x*s - pl + kx*d] * w[f, ci, ky, kx]`
//! with g = f / (o / groups) and out-of-range input positions reading 0.
//! Max pooling treats padding as -inf and propagates NaN; average pooling divides by the
//! window size (`count_include_pad`) or by the number of in-range positions.
//!
//! Gradient ops, each the exact transpose of a forward map:
//! - `conv2d_grad_input(g, w)`: `dx[b, c, i, j] = sum g[b, f, y, x] * w[f, ci, ky, kx]` over
//!   every output position and tap that reads input `(i, j)` of channel `c`.
//! - `conv2d_grad_weight(x, g)`: `dw[f, ci, ky, kx] = sum_{b, y, x} g[b, f, y, x] * x[...]`.
//! - `max_pool2d_grad(x, g)`: each window's `g` added at the window's first maximum of `x`
//!   (row-major; NaN counts as the maximum, as in the forward pool).
//! - `max_pool2d_select(x, t)`: each window's `t` at that same position (the JVP of max
//!   pooling; `max_pool2d_grad` is its transpose).
//! - `avg_pool2d_grad(g)`: each window's `g / divisor` added to every in-range position.
//!
//! Derivatives: conv2d is bilinear (`dx = grad_input(ct, w)`, `dw = grad_weight(x, ct)`,
//! `dbias = sum ct over n, h, w`); the grad ops are bilinear / linear too and map onto
//! each other, so derivatives of any order stay within this family.

use super::{Op, Operand, check_float, check_same_dtype};
use crate::{DType, Error, Graph, NodeId, Result};
use serde::{Deserialize, Serialize};

/// Convolution geometry. `padding` is `[top, left, bottom, right]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conv2dParams {
    pub stride: [usize; 2],
    pub padding: [usize; 4],
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl Default for Conv2dParams {
    fn default() -> Self {
        Conv2dParams { stride: [1, 1], padding: [0; 4], dilation: [1, 1], groups: 1 }
    }
}

impl Conv2dParams {
    /// Same padding on all four sides.
    pub fn with_padding(mut self, pad: usize) -> Self {
        self.padding = [pad; 4];
        self
    }
    pub fn with_stride(mut self, stride: usize) -> Self {
        self.stride = [stride; 2];
        self
    }
}

/// Pooling window geometry. `padding` is `[top, left, bottom, right]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolParams {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 4],
}

impl PoolParams {
    /// A `k x k` window moving by `k` (the common non-overlapping pool).
    pub fn square(k: usize) -> PoolParams {
        PoolParams { kernel: [k, k], stride: [k, k], padding: [0; 4] }
    }
}

/// Output extent of one spatial axis, or an error naming it.
pub fn conv_out_extent(
    axis: &str,
    input: usize,
    kernel: usize,
    stride: usize,
    pad: [usize; 2],
    dilation: usize,
) -> Result<usize> {
    if kernel == 0 || stride == 0 || dilation == 0 {
        return Err(Error::shape(format!("{axis}: kernel, stride and dilation must be >= 1")));
    }
    let span = dilation.checked_mul(kernel - 1).and_then(|s| s.checked_add(1));
    let padded = input.checked_add(pad[0]).and_then(|p| p.checked_add(pad[1]));
    match (span, padded) {
        (Some(span), Some(padded)) if padded >= span => Ok((padded - span) / stride + 1),
        _ => Err(Error::shape(format!(
            "{axis}: window of {kernel} (dilation {dilation}) does not fit input {input} padded by {pad:?}"
        ))),
    }
}

pub(crate) fn infer_conv2d(
    p: &Conv2dParams,
    x: Operand,
    w: Operand,
    bias: Option<Operand>,
) -> Result<(DType, Vec<usize>)> {
    check_float("x", x)?;
    let mut ops = vec![x, w];
    ops.extend(bias);
    let dtype = check_same_dtype(&ops)?;
    if x.dims.len() != 4 || w.dims.len() != 4 {
        return Err(Error::shape(format!(
            "expects x [n, c, h, w] and w [o, c/groups, kh, kw], got {} and {}",
            x.ty(),
            w.ty()
        )));
    }
    let (c, o, g) = (x.dims[1], w.dims[0], p.groups);
    if g == 0 || c % g != 0 || o % g != 0 || w.dims[1] * g != c {
        return Err(Error::shape(format!(
            "groups {g} must divide channels {c} and filters {o}, with w.dims[1] = c / groups; got x {} and w {}",
            x.ty(),
            w.ty()
        )));
    }
    if let Some(b) = bias
        && b.dims != [o]
    {
        return Err(Error::shape(format!("bias must be [{o}], got {}", b.ty())));
    }
    let oh = conv_out_extent("height", x.dims[2], w.dims[2], p.stride[0], [p.padding[0], p.padding[2]], p.dilation[0])?;
    let ow = conv_out_extent("width", x.dims[3], w.dims[3], p.stride[1], [p.padding[1], p.padding[3]], p.dilation[1])?;
    Ok((dtype, vec![x.dims[0], o, oh, ow]))
}

pub(crate) fn infer_pool(p: &PoolParams, x: Operand) -> Result<(DType, Vec<usize>)> {
    check_float("x", x)?;
    if x.dims.len() != 4 {
        return Err(Error::shape(format!("expects x [n, c, h, w], got {}", x.ty())));
    }
    // Padding below the window size keeps every window on at least one real element.
    let k = [p.kernel[0], p.kernel[1], p.kernel[0], p.kernel[1]];
    if p.padding.iter().zip(k).any(|(&pad, k)| pad >= k) {
        return Err(Error::shape(format!("padding {:?} must be smaller than the window {:?}", p.padding, p.kernel)));
    }
    let oh = conv_out_extent("height", x.dims[2], p.kernel[0], p.stride[0], [p.padding[0], p.padding[2]], 1)?;
    let ow = conv_out_extent("width", x.dims[3], p.kernel[1], p.stride[1], [p.padding[1], p.padding[3]], 1)?;
    Ok((x.dtype, vec![x.dims[0], x.dims[1], oh, ow]))
}

/// The dims conv2d gives for input `x` and weight `w` dims.
fn conv_out(p: &Conv2dParams, x: &[usize; 4], w: &[usize]) -> Result<Vec<usize>> {
    let xo = Operand { dtype: DType::F32, dims: x };
    let wo = Operand { dtype: DType::F32, dims: w };
    Ok(infer_conv2d(p, xo, wo, None)?.1)
}

pub(crate) fn infer_grad_input(
    p: &Conv2dParams,
    input: &[usize; 4],
    g: Operand,
    w: Operand,
) -> Result<(DType, Vec<usize>)> {
    check_float("g", g)?;
    let dtype = check_same_dtype(&[g, w])?;
    if conv_out(p, input, w.dims)? != g.dims {
        return Err(Error::shape(format!("g {} is not conv2d's output for input {input:?} and w {}", g.ty(), w.ty())));
    }
    Ok((dtype, input.to_vec()))
}

pub(crate) fn infer_grad_weight(
    p: &Conv2dParams,
    weight: &[usize; 4],
    x: Operand,
    g: Operand,
) -> Result<(DType, Vec<usize>)> {
    check_float("x", x)?;
    let dtype = check_same_dtype(&[x, g])?;
    let xd: [usize; 4] =
        x.dims.try_into().map_err(|_| Error::shape(format!("x must be [n, c, h, w], got {}", x.ty())))?;
    if conv_out(p, &xd, weight)? != g.dims {
        return Err(Error::shape(format!(
            "g {} is not conv2d's output for x {} and weight {weight:?}",
            g.ty(),
            x.ty()
        )));
    }
    Ok((dtype, weight.to_vec()))
}

pub(crate) fn infer_max_pool_grad(p: &PoolParams, x: Operand, g: Operand) -> Result<(DType, Vec<usize>)> {
    let dtype = check_same_dtype(&[x, g])?;
    if infer_pool(p, x)?.1 != g.dims {
        return Err(Error::shape(format!("g {} is not the pooled shape of x {}", g.ty(), x.ty())));
    }
    Ok((dtype, x.dims.to_vec()))
}

pub(crate) fn infer_max_pool_select(p: &PoolParams, x: Operand, t: Operand) -> Result<(DType, Vec<usize>)> {
    let dtype = check_same_dtype(&[x, t])?;
    if t.dims != x.dims {
        return Err(Error::shape(format!("t {} must have x's dims {}", t.ty(), x.ty())));
    }
    Ok((dtype, infer_pool(p, x)?.1))
}

pub(crate) fn infer_avg_pool_grad(p: &PoolParams, input: &[usize; 4], g: Operand) -> Result<(DType, Vec<usize>)> {
    let pooled = infer_pool(p, Operand { dtype: g.dtype, dims: input })?.1;
    if pooled != g.dims {
        return Err(Error::shape(format!("g {} is not the pooled shape of input {input:?}", g.ty())));
    }
    Ok((g.dtype, input.to_vec()))
}

impl Graph {
    /// The gradient of `conv2d` with respect to an input of dims `input`.
    pub fn conv2d_grad_input(
        &mut self,
        g: NodeId,
        w: NodeId,
        params: Conv2dParams,
        input: [usize; 4],
    ) -> Result<NodeId> {
        self.push(Op::Conv2dGradInput { params, input }, &[g, w])
    }

    /// The gradient of `conv2d` with respect to a weight of dims `weight`.
    pub fn conv2d_grad_weight(
        &mut self,
        x: NodeId,
        g: NodeId,
        params: Conv2dParams,
        weight: [usize; 4],
    ) -> Result<NodeId> {
        self.push(Op::Conv2dGradWeight { params, weight }, &[x, g])
    }

    pub fn max_pool2d_grad(&mut self, x: NodeId, g: NodeId, params: PoolParams) -> Result<NodeId> {
        self.push(Op::MaxPool2dGrad { params }, &[x, g])
    }

    pub fn max_pool2d_select(&mut self, x: NodeId, t: NodeId, params: PoolParams) -> Result<NodeId> {
        self.push(Op::MaxPool2dSelect { params }, &[x, t])
    }

    pub fn avg_pool2d_grad(
        &mut self,
        g: NodeId,
        params: PoolParams,
        count_include_pad: bool,
        input: [usize; 4],
    ) -> Result<NodeId> {
        self.push(Op::AvgPool2dGrad { params, count_include_pad, input }, &[g])
    }

    /// NCHW convolution (cross-correlation, as in PyTorch) with optional bias.
    pub fn conv2d(&mut self, x: NodeId, w: NodeId, bias: Option<NodeId>, params: Conv2dParams) -> Result<NodeId> {
        let inputs: Vec<NodeId> = [Some(x), Some(w), bias].into_iter().flatten().collect();
        self.push(Op::Conv2d { params, bias: bias.is_some() }, &inputs)
    }

    pub fn max_pool2d(&mut self, x: NodeId, params: PoolParams) -> Result<NodeId> {
        self.push(Op::MaxPool2d { params }, &[x])
    }

    pub fn avg_pool2d(&mut self, x: NodeId, params: PoolParams, count_include_pad: bool) -> Result<NodeId> {
        self.push(Op::AvgPool2d { params, count_include_pad }, &[x])
    }
}

/// `[n, c, h, w]` of a 4-d value.
fn dims4(g: &Graph, x: NodeId) -> Result<[usize; 4]> {
    g.dims(x).try_into().map_err(|_| Error::internal(format!("{} is not 4-d", g.describe(x))))
}

pub(crate) fn vjp(g: &mut Graph, op: &Op, ins: &[NodeId], ct: NodeId) -> Result<Vec<Option<NodeId>>> {
    if !g.is_differentiable(ins[0]) {
        return Ok(vec![None; ins.len()]);
    }
    Ok(match *op {
        Op::Conv2d { params, bias } => {
            let (x, w) = (ins[0], ins[1]);
            let dx = g.conv2d_grad_input(ct, w, params, dims4(g, x)?)?;
            let dw = g.conv2d_grad_weight(x, ct, params, dims4(g, w)?)?;
            let mut out = vec![Some(dx), Some(dw)];
            if bias {
                out.push(Some(g.reduce(super::ReduceOp::Sum, ct, &[0, 2, 3], false)?));
            }
            out
        }
        Op::MaxPool2d { params } => vec![Some(g.max_pool2d_grad(ins[0], ct, params)?)],
        Op::AvgPool2d { params, count_include_pad } => {
            vec![Some(g.avg_pool2d_grad(ct, params, count_include_pad, dims4(g, ins[0])?)?)]
        }
        // <c, grad_input(g, w)> = <conv(c, w), g>: d/dg = conv(c, w), d/dw = grad_weight(c, g).
        Op::Conv2dGradInput { params, .. } => {
            let (gr, w) = (ins[0], ins[1]);
            vec![Some(g.conv2d(ct, w, None, params)?), Some(g.conv2d_grad_weight(ct, gr, params, dims4(g, w)?)?)]
        }
        // <c, grad_weight(x, g)> = <conv(x, c), g>: d/dx = grad_input(g, c), d/dg = conv(x, c).
        Op::Conv2dGradWeight { params, .. } => {
            let (x, gr) = (ins[0], ins[1]);
            vec![Some(g.conv2d_grad_input(gr, ct, params, dims4(g, x)?)?), Some(g.conv2d(x, ct, None, params)?)]
        }
        // Piecewise constant in x; linear in the routed values, each the other's transpose.
        Op::MaxPool2dGrad { params } => vec![None, Some(g.max_pool2d_select(ins[0], ct, params)?)],
        Op::MaxPool2dSelect { params } => vec![None, Some(g.max_pool2d_grad(ins[0], ct, params)?)],
        Op::AvgPool2dGrad { params, count_include_pad, .. } => {
            vec![Some(g.avg_pool2d(ct, params, count_include_pad)?)]
        }
        _ => return Err(Error::internal(format!("{} is not a conv op", op.name()))),
    })
}

pub(crate) fn jvp(g: &mut Graph, op: &Op, ins: &[NodeId], t: &[Option<NodeId>]) -> Result<Option<NodeId>> {
    // Bilinear ops: f(ta, b) + f(a, tb); linear ones: f(t).
    let bilinear =
        |g: &mut Graph, f: &dyn Fn(&mut Graph, NodeId, NodeId) -> Result<NodeId>| -> Result<Option<NodeId>> {
            let left = t[0].map(|ta| f(g, ta, ins[1])).transpose()?;
            let right = t[1].map(|tb| f(g, ins[0], tb)).transpose()?;
            g.add_opt(left, right)
        };
    match *op {
        Op::Conv2d { params, bias } => {
            let r = bilinear(g, &|g, x, w| g.conv2d(x, w, None, params))?;
            match t.get(2).copied().flatten().filter(|_| bias) {
                Some(tb) => {
                    let o = g.dims(tb)[0];
                    let tb = g.reshape(tb, &[1, o, 1, 1])?;
                    let out_dims = infer_conv_dims(g, params, ins)?;
                    let tb = g.broadcast_to(tb, &out_dims)?;
                    g.add_opt(r, Some(tb))
                }
                None => Ok(r),
            }
        }
        Op::MaxPool2d { params } => t[0].map(|tx| g.max_pool2d_select(ins[0], tx, params)).transpose(),
        Op::AvgPool2d { params, count_include_pad } => {
            t[0].map(|tx| g.avg_pool2d(tx, params, count_include_pad)).transpose()
        }
        Op::Conv2dGradInput { params, input } => bilinear(g, &|g, a, b| g.conv2d_grad_input(a, b, params, input)),
        Op::Conv2dGradWeight { params, weight } => bilinear(g, &|g, a, b| g.conv2d_grad_weight(a, b, params, weight)),
        Op::MaxPool2dGrad { params } => t[1].map(|tg| g.max_pool2d_grad(ins[0], tg, params)).transpose(),
        Op::MaxPool2dSelect { params } => t[1].map(|tt| g.max_pool2d_select(ins[0], tt, params)).transpose(),
        Op::AvgPool2dGrad { params, count_include_pad, input } => {
            t[0].map(|tg| g.avg_pool2d_grad(tg, params, count_include_pad, input)).transpose()
        }
        _ => Err(Error::internal(format!("{} is not a conv op", op.name()))),
    }
}

/// conv2d's output dims for operands `ins`.
fn infer_conv_dims(g: &Graph, params: Conv2dParams, ins: &[NodeId]) -> Result<Vec<usize>> {
    let x = Operand { dtype: g.dtype(ins[0]), dims: g.dims(ins[0]) };
    let w = Operand { dtype: g.dtype(ins[1]), dims: g.dims(ins[1]) };
    Ok(infer_conv2d(&params, x, w, None)?.1)
}
