//! Reductions and argmax (semantics in `rlx_ir::ops::reduce`).

use crate::arena::{Args, Out, out_mut};
use crate::buffer::{Class, Float, Num};
use crate::with_class;
use rlx_ir::shape::numel;
use rlx_ir::{Error, ReduceOp, Result};

#[derive(Clone, Debug)]
pub struct ReducePlan {
    op: ReduceOp,
    in_dims: Vec<usize>,
    /// Per input axis, the output stride it advances (0 along reduced axes).
    out_strides: Vec<usize>,
    /// Elements folded into each output.
    count: usize,
    /// `[outer, reduced, inner]` when the reduced axes are one contiguous group: the
    /// fast paths (row sums over `inner`-wide rows, or contiguous runs when inner is 1).
    block: Option<[usize; 3]>,
}

impl ReducePlan {
    pub fn new(op: ReduceOp, in_dims: &[usize], axes: &[usize]) -> ReducePlan {
        let mut out_strides = vec![0usize; in_dims.len()];
        let mut stride = 1;
        for axis in (0..in_dims.len()).rev() {
            if !axes.contains(&axis) {
                out_strides[axis] = stride;
                stride *= in_dims[axis];
            }
        }
        let count = axes.iter().map(|&a| in_dims[a]).product();
        // Reduced axes forming one run (after dropping size-1 axes) give [outer, R, inner].
        let live: Vec<usize> = (0..in_dims.len()).filter(|&a| in_dims[a] != 1).collect();
        let reduced: Vec<usize> = live.iter().copied().filter(|a| axes.contains(a)).collect();
        let block = match (reduced.first(), reduced.last()) {
            (Some(&lo), Some(&hi)) if live.iter().filter(|&&a| a > lo && a < hi).all(|a| axes.contains(a)) => {
                Some([numel(&in_dims[..lo]), count, numel(&in_dims[hi + 1..])])
            }
            _ => None,
        };
        ReducePlan { op, in_dims: in_dims.to_vec(), out_strides, count, block }
    }
}

pub fn reduce(plan: &ReducePlan, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    match (plan.op, class) {
        (ReduceOp::Mean, Class::F32) => mean::<f32>(plan, ins.get(0)?, out_mut(out)?),
        (ReduceOp::Mean, Class::F64) => mean::<f64>(plan, ins.get(0)?, out_mut(out)?),
        (ReduceOp::Mean, c) => Err(Error::internal(format!("mean on {c:?} storage"))),
        _ => with_class!(class, T => {
            fold::<T>(plan, ins.get(0)?, out_mut(out)?);
            Ok(())
        }),
    }
}

/// Folds the input into the output in the input's row-major order.
fn fold<T: Num>(plan: &ReducePlan, x: &[T], out: &mut [T]) {
    match plan.op {
        ReduceOp::Sum | ReduceOp::Mean => fold_with(plan, x, out, T::ZERO, T::add),
        ReduceOp::Prod => fold_with(plan, x, out, T::ONE, T::mul),
        ReduceOp::Max => fold_with(plan, x, out, T::MAX_ID, T::max_nan),
        ReduceOp::Min => fold_with(plan, x, out, T::MIN_ID, T::min_nan),
    }
}

/// Every output element folds its inputs in the input's row-major order; with one
/// contiguous group of reduced axes (`block`), that order is kept while whole rows are
/// folded at once (vectorized across `inner`), instead of stepping an index per element.
#[inline(always)]
fn fold_with<T: Num>(plan: &ReducePlan, x: &[T], out: &mut [T], init: T, f: impl Fn(T, T) -> T) {
    out.fill(init);
    if let Some([outer, r, inner]) = plan.block {
        if inner == 0 {
            return; // no outputs
        }
        for o in 0..outer {
            let dst = &mut out[o * inner..(o + 1) * inner];
            let src = &x[o * r * inner..(o + 1) * r * inner];
            if inner == 1 {
                dst[0] = src.iter().fold(dst[0], |acc, &v| f(acc, v));
            } else {
                for row in src.chunks_exact(inner) {
                    dst.iter_mut().zip(row).for_each(|(d, &v)| *d = f(*d, v));
                }
            }
        }
        return;
    }
    let rank = plan.in_dims.len();
    let mut index = vec![0usize; rank];
    let mut o = 0usize;
    for &v in x.iter().take(numel(&plan.in_dims)) {
        out[o] = f(out[o], v);
        for axis in (0..rank).rev() {
            index[axis] += 1;
            o += plan.out_strides[axis];
            if index[axis] < plan.in_dims[axis] {
                break;
            }
            o -= plan.out_strides[axis] * index[axis];
            index[axis] = 0;
        }
    }
}

fn mean<T: Float>(plan: &ReducePlan, x: &[T], out: &mut [T]) -> Result<()> {
    fold::<T>(plan, x, out);
    let n = T::from_usize(plan.count);
    out.iter_mut().for_each(|v| *v = *v / n);
    Ok(())
}

/// (outer, axis length, inner) decomposition of a tensor around one axis.
#[derive(Clone, Copy, Debug)]
pub struct AxisSplit {
    pub outer: usize,
    pub len: usize,
    pub inner: usize,
}

impl AxisSplit {
    pub fn new(dims: &[usize], axis: usize) -> AxisSplit {
        AxisSplit { outer: numel(&dims[..axis]), len: dims[axis], inner: numel(&dims[axis + 1..]) }
    }

    /// Element offset of position `j` along the axis in lane `(o, i)`.
    #[inline]
    pub fn at(&self, o: usize, j: usize, i: usize) -> usize {
        (o * self.len + j) * self.inner + i
    }
}

pub fn argmax(split: &AxisSplit, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    let out: &mut [i64] = out_mut(out)?;
    with_class!(class, T => {
        argmax_typed::<T>(split, ins.get(0)?, out);
        Ok(())
    })
}

fn argmax_typed<T: Num>(s: &AxisSplit, x: &[T], out: &mut [i64]) {
    for o in 0..s.outer {
        for i in 0..s.inner {
            let mut best = 0usize;
            for j in 0..s.len {
                let v = x[s.at(o, j, i)];
                if v.is_nan() {
                    best = j; // the first NaN is the maximum
                    break;
                }
                if v > x[s.at(o, best, i)] {
                    best = j;
                }
            }
            out[o * s.inner + i] = best as i64;
        }
    }
}
