//! Reductions over axes, and argmax.
//!
//! Shape rule: the reduced axes are removed (or kept as 1 with `keep_dims`); axes are
//! distinct and in range; an empty axis list is the identity. `max`/`min` of an empty
//! extent has no value and is rejected when the graph is built; `sum` of nothing is 0,
//! `prod` 1, `mean` NaN (0/0). `mean` takes floats; the others floats and integers
//! (integers wrap).
//!
//! Reference semantics: the reduced elements of each output, taken row-major over the
//! reduced axes, form its sequence `v[0..n)`. A float `sum` (and `mean`, which divides
//! it by `n` once) adds them in the blocked pairwise order [`pairwise_sum`] defines:
//! runs of at most `SUM_BLOCK` elements each fold into `SUM_LANES` lanes (element `j`
//! into lane `j % SUM_LANES`, in order, from +0), the lanes combine as a halving tree
//! (`lane[i] + lane[i + w]` for w = 8, 4, 2, 1), and a longer sequence splits after
//! `ceil(blocks / 2)` blocks into two halves summed the same way and added. The error
//! bound is O((SUM_BLOCK / SUM_LANES + log2 n) eps sum|v|), like NumPy's pairwise sum and
//! unlike one running sum (whose f32 sum of 2e7 ones stops at 16777216), and the order is
//! the same for every layout, ISA and thread count. Integer sums wrap (any order gives
//! the same value); `prod` multiplies in sequence order in the compute type (the GPU
//! backend combines float sums and products in its own workgroup tree, within the
//! pairwise bound);
//! `max`/`min` return NaN if any reduced element is NaN.
//! `argmax` returns the i64 index of the first maximum along `axis`; a NaN counts as
//! the maximum (first NaN wins, as in NumPy).

use super::{Op, Operand, check_axis};
use crate::{DType, Error, Graph, NodeId, Result};
use serde::{Deserialize, Serialize};

/// Elements of a leaf run of the pairwise sum (32 per lane: the first-order error term).
pub const SUM_BLOCK: usize = 512;
/// Accumulator lanes of a leaf run (one AVX-512 register of f32, two of AVX2).
pub const SUM_LANES: usize = 16;

/// The float sum of `v` in the reference order (module docs), in f64 or f32: the
/// definition backends follow and tests compare against.
pub fn pairwise_sum<T: Copy + Default + std::ops::Add<Output = T>>(v: &[T]) -> T {
    if v.len() > SUM_BLOCK {
        let (l, r) = v.split_at(v.len().div_ceil(SUM_BLOCK).div_ceil(2) * SUM_BLOCK);
        return pairwise_sum(l) + pairwise_sum(r);
    }
    let mut lanes = [T::default(); SUM_LANES];
    for (j, &x) in v.iter().enumerate() {
        lanes[j % SUM_LANES] = lanes[j % SUM_LANES] + x;
    }
    let mut w = SUM_LANES / 2;
    while w > 0 {
        for i in 0..w {
            lanes[i] = lanes[i] + lanes[i + w];
        }
        w /= 2;
    }
    lanes[0]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 5] = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod];

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "reduce_sum",
            ReduceOp::Mean => "reduce_mean",
            ReduceOp::Max => "reduce_max",
            ReduceOp::Min => "reduce_min",
            ReduceOp::Prod => "reduce_prod",
        }
    }
}

/// Output dims of reducing `dims` over `axes`.
pub fn reduced_dims(dims: &[usize], axes: &[usize], keep_dims: bool) -> Vec<usize> {
    let mut out = Vec::with_capacity(dims.len());
    for (i, &d) in dims.iter().enumerate() {
        if axes.contains(&i) {
            if keep_dims {
                out.push(1);
            }
        } else {
            out.push(d);
        }
    }
    out
}

pub(crate) fn infer_reduce(op: ReduceOp, x: Operand, axes: &[usize], keep_dims: bool) -> Result<(DType, Vec<usize>)> {
    if x.dtype == DType::Bool {
        return Err(Error::dtype(format!("cannot reduce a bool tensor {} (cast it first)", x.ty())));
    }
    if op == ReduceOp::Mean && !x.dtype.is_float() {
        return Err(Error::dtype(format!("mean takes a float tensor, got {} (cast it first)", x.ty())));
    }
    for (i, &a) in axes.iter().enumerate() {
        check_axis("axis", x, a)?;
        if axes[..i].contains(&a) {
            return Err(Error::shape(format!("axis {a} is listed twice in {axes:?}")));
        }
        if x.dims[a] == 0 && matches!(op, ReduceOp::Max | ReduceOp::Min) {
            return Err(Error::shape(format!(
                "{} over axis {a} of {}: an empty extent has no extremum",
                op.name(),
                x.ty()
            )));
        }
    }
    Ok((x.dtype, reduced_dims(x.dims, axes, keep_dims)))
}

pub(crate) fn infer_argmax(x: Operand, axis: usize, keep_dims: bool) -> Result<(DType, Vec<usize>)> {
    check_axis("axis", x, axis)?;
    if x.dims[axis] == 0 {
        return Err(Error::shape(format!("argmax over empty axis {axis} of {}", x.ty())));
    }
    Ok((DType::I64, reduced_dims(x.dims, &[axis], keep_dims)))
}

impl Graph {
    pub fn reduce(&mut self, op: ReduceOp, x: NodeId, axes: &[usize], keep_dims: bool) -> Result<NodeId> {
        self.push(Op::Reduce { op, axes: axes.to_vec(), keep_dims }, &[x])
    }

    /// i64 index of the first maximum along `axis`.
    pub fn argmax(&mut self, x: NodeId, axis: usize, keep_dims: bool) -> Result<NodeId> {
        self.push(Op::ArgMax { axis, keep_dims }, &[x])
    }
}

// Derivatives. sum / mean spread the cotangent evenly; max / min send it to the elements
// equal to the result, split evenly among ties (JAX); prod sends `prod of the others`,
// computed without dividing by zero and exact to second order at inputs holding one or
// two exact zeros (see `partial`).

/// `y` (reduced over `axes`) reshaped with those axes kept as 1, then broadcast to x.
fn expand_back(g: &mut Graph, y: NodeId, x: NodeId, axes: &[usize], keep_dims: bool) -> Result<NodeId> {
    let xd = g.dims(x).to_vec();
    let kept = reduced_dims(&xd, axes, true);
    let y = if keep_dims || g.dims(y) == kept.as_slice() { y } else { g.reshape(y, &kept)? };
    g.broadcast_to(y, &xd)
}

/// d out / d x for reduction `op` (x's dims), or None when it is a constant 1/count.
fn partial(
    g: &mut Graph,
    op: ReduceOp,
    axes: &[usize],
    keep_dims: bool,
    x: NodeId,
    out: NodeId,
) -> Result<Option<NodeId>> {
    let dt = g.dtype(x);
    Ok(match op {
        ReduceOp::Sum | ReduceOp::Mean => None,
        ReduceOp::Max | ReduceOp::Min => {
            let o = expand_back(g, out, x, axes, keep_dims)?;
            let hit = g.eq(x, o)?;
            let hit = g.mask(hit, dt)?;
            let count = g.reduce(ReduceOp::Sum, hit, axes, true)?;
            let xd = g.dims(x).to_vec();
            let count = g.broadcast_to(count, &xd)?;
            Some(g.div(hit, count)?)
        }
        ReduceOp::Prod => {
            let zero = g.scalar_f64(dt, 0.0)?;
            let one = g.scalar_f64(dt, 1.0)?;
            let two = g.scalar_f64(dt, 2.0)?;
            let is_zero = g.eq(x, zero)?;
            let zero_mask = g.mask(is_zero, dt)?;
            let nz = g.reduce(ReduceOp::Sum, zero_mask, axes, true)?;
            let ones = g.full_like(x, 1.0)?;
            let nothing = g.full_like(x, 0.0)?;
            // x with its zeros replaced by 1: a safe divisor, so no branch holds 0/0 (a
            // NaN in an unselected branch still poisons the second derivative).
            let nonzero = g.where_(is_zero, ones, x)?;
            let pnz = g.reduce(ReduceOp::Prod, nonzero, axes, true)?;
            // The sum of the zero elements: 0 in value, but it carries their tangents, so
            // the exact-zero branches keep their dependence on the zeros (second order).
            let zeros_only = g.where_(is_zero, x, nothing)?;
            let zsum = g.reduce(ReduceOp::Sum, zeros_only, axes, true)?;
            let xd = g.dims(x).to_vec();
            let (nz, pnz, zsum) = (g.broadcast_to(nz, &xd)?, g.broadcast_to(pnz, &xd)?, g.broadcast_to(zsum, &xd)?);
            let others = g.div(pnz, nonzero)?;
            // No zero: prod / x. One zero: pnz at the zero, pnz / x * (the zero) elsewhere.
            // Two zeros: pnz * (the other zero) at each zero, 0 (to second order) elsewhere.
            let at_nonzero = g.mul(others, zsum)?;
            let one_zero = g.where_(is_zero, pnz, at_nonzero)?;
            let other_zero = g.sub(zsum, x)?;
            let at_zero = g.mul(pnz, other_zero)?;
            let two_zeros = g.where_(is_zero, at_zero, nothing)?;
            let (none, single, pair) = (g.eq(nz, zero)?, g.eq(nz, one)?, g.eq(nz, two)?);
            let many = g.where_(pair, two_zeros, nothing)?;
            let some = g.where_(single, one_zero, many)?;
            Some(g.where_(none, others, some)?)
        }
    })
}

pub(crate) fn vjp(
    g: &mut Graph,
    op: ReduceOp,
    axes: &[usize],
    keep_dims: bool,
    x: NodeId,
    out: NodeId,
    ct: NodeId,
) -> Result<Vec<Option<NodeId>>> {
    if !g.is_differentiable(x) {
        return Ok(vec![None]);
    }
    let spread = expand_back(g, ct, x, axes, keep_dims)?;
    let r = match partial(g, op, axes, keep_dims, x, out)? {
        Some(d) => g.mul(spread, d)?,
        None if op == ReduceOp::Mean => {
            let n = g.reduced_count(x, axes);
            let inv = g.scalar_like(x, 1.0 / n as f64)?;
            g.mul(spread, inv)?
        }
        None => spread,
    };
    Ok(vec![Some(r)])
}

pub(crate) fn jvp(
    g: &mut Graph,
    op: ReduceOp,
    axes: &[usize],
    keep_dims: bool,
    x: NodeId,
    out: NodeId,
    t: Option<NodeId>,
) -> Result<Option<NodeId>> {
    let Some(t) = t else { return Ok(None) };
    Ok(Some(match partial(g, op, axes, keep_dims, x, out)? {
        Some(d) => {
            let td = g.mul(t, d)?;
            g.reduce(ReduceOp::Sum, td, axes, keep_dims)?
        }
        None => g.reduce(op, t, axes, keep_dims)?,
    }))
}
