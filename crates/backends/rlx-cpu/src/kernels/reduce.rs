//! Reductions and argmax (semantics in `rlx_ir::ops::reduce`).
//!
//! Float sums and means add in the IR's blocked pairwise order (`rlx_ir::ops::reduce::
//! SUM_BLOCK`, `SUM_LANES`): 16 lanes per block of 512, blocks combined as a balanced
//! tree. The error is O((32 + log2 n) eps sum|x|) instead of the O(n eps) of one running
//! sum (2e7 ones sum to 2e7, not 16777216), the order depends on the reduced sequence
//! alone (never on the layout, the arm or the thread count), and the lanes vectorize.

use crate::arch::Arm;
use crate::arena::{Args, Out, out_mut};
use crate::buffer::{Class, Float, Num};
use crate::{multiversion, threads, with_class};
use rlx_ir::ops::reduce::{SUM_BLOCK, SUM_LANES};
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
    /// The kept and the reduced axes, ascending (the reduced sequence of an output is
    /// row-major over `reduced`).
    kept: Vec<usize>,
    reduced: Vec<usize>,
    /// Row-major input strides (the scattered-axes sum gathers through them).
    strides: Vec<usize>,
    /// Elements of the innermost reduced axes that lie contiguous in the input (the
    /// product of the trailing axes while they are reduced): the scattered-axes sum
    /// gathers runs this long.
    run: usize,
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
        let (reduced, kept) = (0..in_dims.len()).partition(|a| axes.contains(a));
        let strides = rlx_ir::shape::strides(in_dims);
        let run = in_dims
            .iter()
            .rev()
            .zip((0..in_dims.len()).rev())
            .take_while(|(_, a)| axes.contains(a))
            .map(|(d, _)| d)
            .product();
        ReducePlan { op, in_dims: in_dims.to_vec(), out_strides, count, kept, reduced, strides, block, run }
    }
}

pub fn reduce(plan: &ReducePlan, class: Class, arm: Arm, ins: &Args, out: &mut Out) -> Result<()> {
    match (plan.op, class) {
        (ReduceOp::Sum | ReduceOp::Mean, Class::F32) => sum::<f32>(plan, arm, ins.get(0)?, out_mut(out)?),
        (ReduceOp::Sum | ReduceOp::Mean, Class::F64) => sum::<f64>(plan, arm, ins.get(0)?, out_mut(out)?),
        (ReduceOp::Mean, c) => Err(Error::internal(format!("mean on {c:?} storage"))),
        _ => with_class!(class, T => {
            fold::<T>(plan, ins.get(0)?, out_mut(out)?);
            Ok(())
        }),
    }
}

/// Folds the input into the output in the input's row-major order (exact for max / min
/// and integer sums; the defined order for products).
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

/// Float sum (or mean) of each output's reduced elements in the pairwise order.
fn sum<T: Pairwise>(plan: &ReducePlan, arm: Arm, x: &[T], out: &mut [T]) -> Result<()> {
    let r = plan.count;
    match plan.block {
        Some([_, _, 0]) => {}
        // Contiguous runs: one pairwise sum per output.
        Some([_, _, 1]) => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = T::sum_run(arm, &x[i * r..(i + 1) * r]);
            }
        }
        // `r` rows of `inner` columns per output block: the same order per column,
        // vectorized across a tile of columns (the scratch is 16 + depth tile rows, not
        // 16 + depth copies of the output: `[2, 1e8]` over axis 0 asked for 6.4 GB).
        Some([outer, _, inner]) => {
            threads::with_scratch::<T, _>(COLUMN_TILE.min(inner) * (SUM_LANES + tree_depth(r)), |scratch| {
                for o in 0..outer {
                    let (rows, sums) = (&x[o * r * inner..(o + 1) * r * inner], &mut out[o * inner..(o + 1) * inner]);
                    for (t, tile) in sums.chunks_mut(COLUMN_TILE).enumerate() {
                        let from = (t * COLUMN_TILE).min(rows.len());
                        T::sum_columns(arm, &rows[from..], r, inner, tile, scratch);
                    }
                }
            })
        }
        // Reduced axes scattered between kept ones: gather each output's sequence
        // (row-major over the reduced axes), then sum it like a run.
        // Runs of the innermost reduced axes are copied whole, not indexed per element: the
        // bias gradients of the digits CNN ([n, c, h, w] over n, h, w) went 0.307 -> 0.023
        // ms a step (batch 16, AMD EPYC).
        None => threads::with_scratch::<T, _>(r, |seq| {
            let run = plan.run.max(1);
            for (o, dst) in out.iter_mut().enumerate() {
                let base = offset_of(o, &plan.kept, &plan.in_dims, &plan.strides);
                for (j, chunk) in seq.chunks_mut(run).enumerate() {
                    let at = base + offset_of(j * run, &plan.reduced, &plan.in_dims, &plan.strides);
                    chunk.copy_from_slice(&x[at..at + chunk.len()]);
                }
                *dst = T::sum_run(arm, seq);
            }
        }),
    }
    if plan.op == ReduceOp::Mean {
        let n = T::from_usize(r);
        out.iter_mut().for_each(|v| *v = *v / n);
    }
    Ok(())
}

/// Element offset of the `i`-th index (row-major) over `axes` of `dims`.
fn offset_of(mut i: usize, axes: &[usize], dims: &[usize], strides: &[usize]) -> usize {
    let mut at = 0;
    for &a in axes.iter().rev() {
        at += (i % dims[a]) * strides[a];
        i /= dims[a];
    }
    at
}

/// Levels of the block tree over `n` elements.
fn tree_depth(n: usize) -> usize {
    n.div_ceil(SUM_BLOCK).max(1).next_power_of_two().trailing_zeros() as usize
}

/// Where the block tree splits `n > SUM_BLOCK` elements: the first half of the blocks
/// (rounded up) on the left.
#[inline(always)]
pub(crate) fn split(n: usize) -> usize {
    n.div_ceil(SUM_BLOCK).div_ceil(2) * SUM_BLOCK
}

/// Columns summed per call of `Pairwise::sum_columns` (4 KiB of f32 per lane row).
const COLUMN_TILE: usize = 1024;

/// Float types summed in the pairwise order (f32 and f64 storage).
pub trait Pairwise: Float {
    fn sum_run(arm: Arm, x: &[Self]) -> Self;
    /// Per column `c < out.len()`, the pairwise sum of `x[j * stride + c]` over rows
    /// `j < rows`. `scratch` holds `out.len() * (SUM_LANES + tree_depth(rows))` elements.
    fn sum_columns(arm: Arm, x: &[Self], rows: usize, stride: usize, out: &mut [Self], scratch: &mut [Self]);
}

/// The pairwise sum of a contiguous run.
#[inline(always)]
fn pairwise_run<T: Float>(x: &[T]) -> T {
    if x.len() > SUM_BLOCK {
        let (l, r) = x.split_at(split(x.len()));
        return pairwise_run(l) + pairwise_run(r);
    }
    let mut lanes = [T::ZERO; SUM_LANES];
    let mut chunks = x.chunks_exact(SUM_LANES);
    for c in &mut chunks {
        for (a, &v) in lanes.iter_mut().zip(c) {
            *a += v;
        }
    }
    for (a, &v) in lanes.iter_mut().zip(chunks.remainder()) {
        *a += v;
    }
    super::rows::fold_lanes(lanes)
}

/// `pairwise_run` of every column of `rows` rows `stride` apart, written to `out` (one
/// element per column): the lanes are `SUM_LANES` rows of scratch, each tree level above
/// the blocks one row more.
#[inline(always)]
fn pairwise_columns<T: Float>(x: &[T], rows: usize, stride: usize, out: &mut [T], scratch: &mut [T]) {
    let width = out.len();
    if rows > SUM_BLOCK {
        let at = split(rows);
        let (right, rest) = scratch.split_at_mut(width);
        pairwise_columns(x, at, stride, out, rest);
        pairwise_columns(&x[at * stride..], rows - at, stride, right, rest);
        out.iter_mut().zip(right.iter()).for_each(|(o, &r)| *o += r);
        return;
    }
    let lanes = &mut scratch[..SUM_LANES * width];
    lanes.fill(T::ZERO);
    for j in 0..rows {
        let lane = &mut lanes[(j % SUM_LANES) * width..][..width];
        lane.iter_mut().zip(&x[j * stride..][..width]).for_each(|(a, &v)| *a += v);
    }
    let mut half = SUM_LANES / 2;
    while half > 0 {
        let (lo, hi) = lanes.split_at_mut(half * width);
        lo.iter_mut().zip(&hi[..half * width]).for_each(|(a, &b)| *a += b);
        half /= 2;
    }
    out.copy_from_slice(&lanes[..width]);
}

macro_rules! impl_pairwise {
    ($t:ty, $run:ident, $cols:ident) => {
        multiversion! {
            fn $run(x: &[$t]) -> $t {
                pairwise_run(x)
            }
        }
        multiversion! {
            fn $cols(x: &[$t], rows: usize, stride: usize, out: &mut [$t], scratch: &mut [$t]) {
                pairwise_columns(x, rows, stride, out, scratch)
            }
        }
        impl Pairwise for $t {
            fn sum_run(arm: Arm, x: &[$t]) -> $t {
                $run(arm, x)
            }
            fn sum_columns(arm: Arm, x: &[$t], rows: usize, stride: usize, out: &mut [$t], scratch: &mut [$t]) {
                $cols(arm, x, rows, stride, out, scratch)
            }
        }
    };
}
impl_pairwise!(f32, sum_run_f32, sum_columns_f32);
impl_pairwise!(f64, sum_run_f64, sum_columns_f64);

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
