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

use super::{Op, Operand, check_float, check_same_dtype};
use crate::{DType, Error, Graph, NodeId, Result};
use serde::{Deserialize, Serialize};

/// Convolution geometry. `padding` is `[top, left, bottom, right]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

impl Graph {
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
