//! Linear quantization: QuantizeLinear, DequantizeLinear (per tensor, per axis, blocked)
//! and DynamicQuantizeLinear, for 8-bit integers (RLX has no 2-, 4- or 16-bit or float8
//! types). Computed in the scale's float type: `y = saturate(round(x / scale) + zp)`
//! with ties to even, and `y = (x - zp) * scale`.

use super::{OpDef, axis, def, one};
use crate::import::{Importer, Node};
use crate::ops::elementwise::round_half_even;
use crate::ops::layout::take;
use rlx_ir::{DType, Error, NodeId, ReduceOp, Result};

pub const OPS: &[OpDef] = &[
    def("QuantizeLinear", 10, quantize),
    def("QuantizeLinear", 13, quantize),
    def("QuantizeLinear", 19, quantize),
    def("QuantizeLinear", 21, quantize),
    def("DequantizeLinear", 10, dequantize),
    def("DequantizeLinear", 13, dequantize),
    def("DequantizeLinear", 19, dequantize),
    def("DequantizeLinear", 21, dequantize),
    def("DynamicQuantizeLinear", 11, dynamic_quantize),
];

/// The saturation range of an 8-bit quantized type.
fn range_of(dtype: DType) -> Result<(f64, f64)> {
    match dtype {
        DType::U8 => Ok((0.0, 255.0)),
        DType::I8 => Ok((-128.0, 127.0)),
        other => Err(Error::unsupported(format!("quantized type {other:?} (8-bit integers only)"))),
    }
}

/// `scale` (or a zero point) shaped to broadcast against `x`: a scalar as is, a 1-D
/// vector along `axis`, a blocked tensor (x's rank, `ceil(d / block)` along `axis`)
/// repeated `block` times along it.
fn broadcast_param(i: &mut Importer, n: &Node, p: NodeId, x: NodeId) -> Result<NodeId> {
    let (pd, xd) = (i.g.dims(p).to_vec(), i.g.dims(x).to_vec());
    if pd.iter().product::<usize>() == 1 && pd.len() <= 1 {
        return i.g.reshape(p, &[]);
    }
    let a = axis(n.int("axis", 1)?, xd.len())?;
    let block = n.int("block_size", 0)?;
    if block <= 0 {
        if pd != [xd[a]] {
            return Err(Error::shape(format!("per-axis {} must be [{}] (axis {a})", i.g.describe(p), xd[a])));
        }
        let mut dims = vec![1; xd.len()];
        dims[a] = xd[a];
        return i.g.reshape(p, &dims);
    }
    let block = block as usize;
    let blocks = xd[a].div_ceil(block);
    let mut want = xd.clone();
    want[a] = blocks;
    if pd != want {
        return Err(Error::shape(format!("blocked {} must be {want:?} (axis {a}, block {block})", i.g.describe(p))));
    }
    let rows: Vec<usize> = (0..xd[a]).map(|k| k / block).collect();
    take(i, p, a, &rows)
}

fn to_float(i: &mut Importer, v: NodeId, dtype: DType) -> Result<NodeId> {
    if i.g.dtype(v) == dtype { Ok(v) } else { i.g.cast(v, dtype) }
}

/// `saturate(round(x / scale) + zp)` into `to`.
fn quantize_to(i: &mut Importer, x: NodeId, scale: NodeId, zp: Option<NodeId>, to: DType) -> Result<NodeId> {
    let (lo, hi) = range_of(to)?;
    let f = i.g.dtype(scale);
    let xf = to_float(i, x, f)?;
    let q = i.g.div(xf, scale)?;
    let mut q = round_half_even(i, q)?;
    if let Some(zp) = zp {
        let z = to_float(i, zp, f)?;
        q = i.g.add(q, z)?;
    }
    let (lo, hi) = (i.g.scalar_like(q, lo)?, i.g.scalar_like(q, hi)?);
    let q = i.g.maximum(q, lo)?;
    let q = i.g.minimum(q, hi)?;
    i.g.cast(q, to)
}

fn quantize(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (x, scale) = (i.input(n, 0)?, i.input(n, 1)?);
    let zp = i.opt_input(n, 2)?;
    let to = match (zp, n.int_opt("output_dtype")?) {
        (Some(z), _) => i.g.dtype(z),
        (None, Some(t)) if t != 0 => crate::tensor::dtype_of(t as i32)?,
        (None, _) => DType::U8,
    };
    if n.int("saturate", 1)? == 0 {
        return Err(Error::unsupported("saturate = 0 (float8 outputs)"));
    }
    let s = broadcast_param(i, n, scale, x)?;
    let z = zp.map(|z| broadcast_param(i, n, z, x)).transpose()?;
    one(quantize_to(i, x, s, z, to)?)
}

fn dequantize(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (x, scale) = (i.input(n, 0)?, i.input(n, 1)?);
    let zp = i.opt_input(n, 2)?;
    let f = i.g.dtype(scale);
    if !f.is_float() {
        return Err(Error::dtype(format!("scale must be a float tensor, got {}", i.g.describe(scale))));
    }
    let s = broadcast_param(i, n, scale, x)?;
    let mut y = to_float(i, x, f)?;
    if let Some(zp) = zp {
        let z = broadcast_param(i, n, zp, x)?;
        let z = to_float(i, z, f)?;
        y = i.g.sub(y, z)?;
    }
    let y = i.g.mul(y, s)?;
    let out = match n.int_opt("output_dtype")? {
        Some(t) if t != 0 => crate::tensor::dtype_of(t as i32)?,
        _ => f,
    };
    one(to_float(i, y, out)?)
}

/// DynamicQuantizeLinear: uint8 with `scale = (max(0, max x) - min(0, min x)) / 255` and
/// `zp = saturate(round(-min(0, min x) / scale))`; outputs y, scale, zero point.
fn dynamic_quantize(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    if i.g.dtype(x) != DType::F32 {
        return Err(Error::dtype(format!("x must be f32, got {}", i.g.describe(x))));
    }
    let all: Vec<usize> = (0..i.g.dims(x).len()).collect();
    let zero = i.g.scalar_like(x, 0.0)?;
    let (mx, mn) = if all.is_empty() {
        (x, x)
    } else {
        (i.g.reduce(ReduceOp::Max, x, &all, false)?, i.g.reduce(ReduceOp::Min, x, &all, false)?)
    };
    let mx = i.g.maximum(mx, zero)?;
    let mn = i.g.minimum(mn, zero)?;
    let spread = i.g.sub(mx, mn)?;
    let q = i.g.scalar_like(x, 255.0)?;
    let scale = i.g.div(spread, q)?;
    let neg = i.g.sub(zero, mn)?;
    let zp = i.g.div(neg, scale)?;
    let zp = round_half_even(i, zp)?;
    let (lo, hi) = (i.g.scalar_like(x, 0.0)?, i.g.scalar_like(x, 255.0)?);
    let zp = i.g.maximum(zp, lo)?;
    let zp = i.g.minimum(zp, hi)?;
    let zp = i.g.cast(zp, DType::U8)?;
    let y = quantize_to(i, x, scale, Some(zp), DType::U8)?;
    Ok(vec![y, scale, zp])
}
