//! Scaled dot-product attention with GQA (semantics in `rlx_ir::ops::attention`).

use crate::arena::{Args, Out, out_mut};
use crate::buffer::{Class, Float};
use crate::with_float;
use rayon::prelude::*;
use rlx_ir::Result;
use rlx_ir::shape::broadcast_strides;

#[derive(Clone, Debug)]
pub struct AttentionPlan {
    pub b: usize,
    pub hq: usize,
    pub hkv: usize,
    pub sq: usize,
    pub skv: usize,
    pub d: usize,
    pub dv: usize,
    pub scale: f64,
    pub causal: bool,
    /// Strides of the bias over `[b, hq, sq, skv]` when there is one.
    pub bias_strides: Option<Vec<usize>>,
}

impl AttentionPlan {
    pub fn new(
        q: &[usize],
        k: &[usize],
        v: &[usize],
        bias: Option<&[usize]>,
        scale: Option<f32>,
        causal: bool,
    ) -> AttentionPlan {
        let full = [q[0], q[1], q[2], k[2]];
        AttentionPlan {
            b: q[0],
            hq: q[1],
            hkv: k[1],
            sq: q[2],
            skv: k[2],
            d: q[3],
            dv: v[3],
            scale: scale.map_or(1.0 / (q[3] as f64).sqrt(), f64::from),
            causal,
            bias_strides: bias.map(|d| broadcast_strides(d, &full)),
        }
    }
}

pub fn attention(p: &AttentionPlan, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_float!(class, T => {
        let bias: Option<&[T]> = if p.bias_strides.is_some() { Some(ins.get(3)?) } else { None };
        attention_typed::<T>(p, ins.get(0)?, ins.get(1)?, ins.get(2)?, bias, out_mut(out)?);
        Ok(())
    })
}

fn attention_typed<T: Float>(p: &AttentionPlan, q: &[T], k: &[T], v: &[T], bias: Option<&[T]>, out: &mut [T]) {
    let group = p.hq / p.hkv;
    let scale = T::from_f64(p.scale);
    let head_out = p.sq * p.dv;
    if head_out == 0 {
        return;
    }
    // One task per (batch, query head): heads are independent.
    let per_head = |bh: usize, out: &mut [T]| {
        crate::threads::with_scratch::<T, _>(p.skv, |scores| {
            let (b, h) = (bh / p.hq, bh % p.hq);
            let kbase = (b * p.hkv + h / group) * p.skv;
            for (i, orow) in out.chunks_exact_mut(p.dv).enumerate() {
                let qrow = &q[((b * p.hq + h) * p.sq + i) * p.d..][..p.d];
                // Keys visible to query i: all, or up to i aligned to the cache's end.
                let visible = if p.causal { i + p.skv - p.sq + 1 } else { p.skv };
                let mut max = T::MAX_ID;
                for (j, s) in scores.iter_mut().enumerate().take(visible) {
                    let krow = &k[(kbase + j) * p.d..][..p.d];
                    let dot = qrow.iter().zip(krow).fold(T::ZERO, |a, (&x, &y)| a + x * y);
                    let mut score = dot * scale;
                    if let (Some(bias), Some(st)) = (bias, &p.bias_strides) {
                        score += bias[b * st[0] + h * st[1] + i * st[2] + j * st[3]];
                    }
                    *s = score;
                    max = max.max_nan(score);
                }
                let mut sum = T::ZERO;
                for s in scores.iter_mut().take(visible) {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                orow.fill(T::ZERO);
                for (j, &s) in scores.iter().enumerate().take(visible) {
                    let w = s / sum;
                    let vrow = &v[(kbase + j) * p.dv..][..p.dv];
                    orow.iter_mut().zip(vrow).for_each(|(o, &x)| *o += w * x);
                }
            }
        })
    };
    if rayon::current_num_threads() > 1 && p.b * p.hq > 1 {
        out.par_chunks_mut(head_out).enumerate().for_each(|(bh, o)| per_head(bh, o));
    } else {
        out.chunks_mut(head_out).enumerate().for_each(|(bh, o)| per_head(bh, o));
    }
}
