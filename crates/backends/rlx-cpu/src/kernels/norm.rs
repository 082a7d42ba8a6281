//! LayerNorm and RmsNorm over the last axis (semantics in `rlx_ir::ops::norm`).

use super::rows;
use crate::arena::{Args, Out, out_mut};
use crate::buffer::{Class, Float};
use crate::features::Arm;
use crate::threads::par_rows;
use crate::with_float;
use rlx_ir::Result;

#[derive(Clone, Copy, Debug)]
pub struct NormPlan {
    pub rms: bool,
    pub row_len: usize,
    pub eps: f32,
    pub gamma: bool,
    pub beta: bool,
}

pub fn norm(plan: &NormPlan, class: Class, arm: Arm, ins: &Args, out: &mut Out) -> Result<()> {
    if class == Class::F32 {
        let x: &[f32] = ins.get(0)?;
        let gamma: Option<&[f32]> = if plan.gamma { Some(ins.get(1)?) } else { None };
        let beta: Option<&[f32]> = if plan.beta { Some(ins.get(1 + plan.gamma as usize)?) } else { None };
        let (len, eps) = (plan.row_len, plan.eps);
        par_rows(x, out_mut(out)?, len, |_, x, o| {
            if plan.rms {
                rows::rms_norm_rows(arm, x, o, len, eps, gamma)
            } else {
                rows::layer_norm_rows(arm, x, o, len, eps, gamma, beta)
            }
        });
        return Ok(());
    }
    with_float!(class, T => {
        let gamma: Option<&[T]> = if plan.gamma { Some(ins.get(1)?) } else { None };
        let beta: Option<&[T]> = if plan.beta { Some(ins.get(1 + plan.gamma as usize)?) } else { None };
        norm_typed::<T>(plan, ins.get(0)?, gamma, beta, out_mut(out)?);
        Ok(())
    })
}

fn norm_typed<T: Float>(p: &NormPlan, x: &[T], gamma: Option<&[T]>, beta: Option<&[T]>, out: &mut [T]) {
    let h = p.row_len;
    if h == 0 {
        return;
    }
    let n = T::from_usize(h);
    let eps = T::from_f64(p.eps as f64);
    for (row, y) in x.chunks_exact(h).zip(out.chunks_exact_mut(h)) {
        let (center, inv) = if p.rms {
            let ms = row.iter().fold(T::ZERO, |a, &v| a + v * v) / n;
            (T::ZERO, T::ONE / (ms + eps).sqrt())
        } else {
            let mean = row.iter().fold(T::ZERO, |a, &v| a + v) / n;
            let var = row.iter().fold(T::ZERO, |a, &v| a + (v - mean) * (v - mean)) / n;
            (mean, T::ONE / (var + eps).sqrt())
        };
        for (j, (o, &v)) in y.iter_mut().zip(row).enumerate() {
            let mut r = (v - center) * inv;
            if let Some(g) = gamma {
                r *= g[j];
            }
            if let Some(b) = beta {
                r += b[j];
            }
            *o = r;
        }
    }
}
