//! Softmax and log-softmax along one axis (semantics in `rlx_ir::ops::softmax`).

use super::reduce::AxisSplit;
use super::rows;
use crate::arena::{Args, Out, out_mut};
use crate::buffer::{Class, Float};
use crate::features::Arm;
use crate::threads::par_rows;
use crate::with_float;
use rlx_ir::Result;

pub fn softmax(split: &AxisSplit, log: bool, class: Class, arm: Arm, ins: &Args, out: &mut Out) -> Result<()> {
    if class == Class::F32 && split.inner == 1 {
        // Contiguous rows: the multiversioned row kernels, arm chosen once per call.
        let (x, out): (&[f32], &mut [f32]) = (ins.get(0)?, out_mut(out)?);
        let len = split.len;
        par_rows(x, out, len, |_, x, o| {
            if log { rows::log_softmax_rows(arm, x, o, len) } else { rows::softmax_rows(arm, x, o, len) }
        });
        return Ok(());
    }
    with_float!(class, T => {
        softmax_typed::<T>(split, log, ins.get(0)?, out_mut(out)?);
        Ok(())
    })
}

fn softmax_typed<T: Float>(s: &AxisSplit, log: bool, x: &[T], out: &mut [T]) {
    for o in 0..s.outer {
        for i in 0..s.inner {
            let max = (0..s.len).fold(T::MAX_ID, |m, j| m.max_nan(x[s.at(o, j, i)]));
            let sum = (0..s.len).fold(T::ZERO, |acc, j| acc + (x[s.at(o, j, i)] - max).exp());
            if log {
                let lse = sum.ln();
                (0..s.len).for_each(|j| out[s.at(o, j, i)] = x[s.at(o, j, i)] - max - lse);
            } else {
                (0..s.len).for_each(|j| out[s.at(o, j, i)] = (x[s.at(o, j, i)] - max).exp() / sum);
            }
        }
    }
}

/// ln(sum exp(row)) computed around the row maximum (NaN if the row holds one).
pub fn log_sum_exp<T: Float>(row: &[T]) -> T {
    let max = row.iter().fold(T::MAX_ID, |m, &v| m.max_nan(v));
    max + row.iter().fold(T::ZERO, |acc, &v| acc + (v - max).exp()).ln()
}
