//! Data movement (semantics in `rlx_ir::ops::layout`): exact for every storage class.

use crate::arena::{Args, Out, out_mut};
use crate::buffer::{Class, Elem};
use crate::with_class;
use rlx_ir::Result;
use rlx_ir::shape::{broadcast_strides, numel, strides};

/// Reads the source at `base + sum(index[i] * strides[i])` for every output index in
/// row-major order. Transpose, narrow and expand are all this copy with different strides.
#[derive(Clone, Debug)]
pub struct StridedCopy {
    out_dims: Vec<usize>,
    strides: Vec<usize>,
    base: usize,
}

impl StridedCopy {
    /// Output dims with input strides, size-1 axes dropped and adjacent axes merged where
    /// the input steps through them as through one (so the innermost run is as long as it
    /// can be).
    fn merged(out_dims: &[usize], strides: &[usize], base: usize) -> StridedCopy {
        let (mut dims, mut st): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
        for (&d, &s) in out_dims.iter().zip(strides).filter(|&(&d, _)| d != 1) {
            match (dims.last_mut(), st.last_mut()) {
                (Some(ld), Some(ls)) if *ls == s * d => {
                    *ld *= d;
                    *ls = s;
                }
                _ => {
                    dims.push(d);
                    st.push(s);
                }
            }
        }
        StridedCopy { out_dims: dims, strides: st, base }
    }

    pub fn transpose(in_dims: &[usize], perm: &[usize]) -> StridedCopy {
        let s = strides(in_dims);
        let out_dims: Vec<usize> = perm.iter().map(|&p| in_dims[p]).collect();
        let st: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
        StridedCopy::merged(&out_dims, &st, 0)
    }

    pub fn narrow(in_dims: &[usize], axis: usize, start: usize, len: usize) -> StridedCopy {
        let s = strides(in_dims);
        let mut out_dims = in_dims.to_vec();
        out_dims[axis] = len;
        StridedCopy::merged(&out_dims, &s, start * s[axis])
    }

    pub fn expand(in_dims: &[usize], out_dims: &[usize]) -> StridedCopy {
        StridedCopy::merged(out_dims, &broadcast_strides(in_dims, out_dims), 0)
    }
}

pub fn strided_copy(plan: &StridedCopy, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_class!(class, T => {
        strided_typed::<T>(plan, ins.get(0)?, out_mut(out)?);
        Ok(())
    })
}

/// Row by row of the innermost axis: a contiguous source row is one copy, a broadcast
/// one a fill, anything else a strided gather (per-element index stepping cost 13% of a
/// transformer training step).
fn strided_typed<T: Elem>(p: &StridedCopy, x: &[T], out: &mut [T]) {
    let rank = p.out_dims.len();
    if rank == 0 {
        if let Some(o) = out.first_mut() {
            *o = x[p.base];
        }
        return;
    }
    let (inner, step) = (p.out_dims[rank - 1], p.strides[rank - 1]);
    if inner == 0 {
        return;
    }
    let mut index = vec![0usize; rank - 1];
    let mut off = p.base;
    for row in out.chunks_exact_mut(inner).take(numel(&p.out_dims[..rank - 1])) {
        match step {
            1 => row.copy_from_slice(&x[off..off + inner]),
            0 => row.fill(x[off]),
            _ => row.iter_mut().enumerate().for_each(|(i, o)| *o = x[off + i * step]),
        }
        for axis in (0..rank - 1).rev() {
            index[axis] += 1;
            off += p.strides[axis];
            if index[axis] < p.out_dims[axis] {
                break;
            }
            off -= p.strides[axis] * index[axis];
            index[axis] = 0;
        }
    }
}

/// Reshape: the same elements in the same order.
pub fn copy(class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_class!(class, T => {
        out_mut::<T>(out)?.copy_from_slice(ins.get(0)?);
        Ok(())
    })
}

/// Concat: for each outer index, each operand contributes one contiguous chunk.
#[derive(Clone, Debug)]
pub struct ConcatPlan {
    outer: usize,
    /// Per operand, elements per outer index (its axis extent times the inner size).
    chunks: Vec<usize>,
}

impl ConcatPlan {
    pub fn new(operands: &[&[usize]], axis: usize) -> ConcatPlan {
        let outer = numel(&operands[0][..axis]);
        ConcatPlan { outer, chunks: operands.iter().map(|d| numel(&d[axis..])).collect() }
    }
}

pub fn concat(plan: &ConcatPlan, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_class!(class, T => {
        let out: &mut [T] = out_mut(out)?;
        let mut at = 0;
        for o in 0..plan.outer {
            for (k, &chunk) in plan.chunks.iter().enumerate() {
                let src: &[T] = ins.get(k)?;
                out[at..at + chunk].copy_from_slice(&src[o * chunk..(o + 1) * chunk]);
                at += chunk;
            }
        }
        Ok(())
    })
}
