//! Losses (semantics in `rlx_ir::ops::loss`).

use super::gather::checked_index;
use super::softmax::log_sum_exp;
use crate::arena::{Args, Out, out_mut};
use crate::buffer::{Class, Float, Num};
use crate::with_float;
use rlx_ir::Result;

pub fn cross_entropy(n: usize, c: usize, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_float!(class, T => {
        let (logits, out): (&[T], &mut [T]) = (ins.get(0)?, out_mut(out)?);
        let mut total = T::ZERO;
        for i in 0..n {
            let row = &logits[i * c..(i + 1) * c];
            let label = checked_index(ins, 1, i, c, "cross_entropy labels (classes)")?;
            total += log_sum_exp(row) - row[label];
        }
        out[0] = total / T::from_usize(n);
        Ok(())
    })
}
