//! Pattern-fused kernels (see `rlx_compile::fusion::patterns`): matmul + bias +
//! activation, SwiGLU (with and without its two matmuls), add + norm, RMSNorm * SiLU,
//! L2 normalization. Each computes in f32 with the row kernels and activation functions
//! the unfused ops use; each picks its ISA arm once per call. The matmul operands may be
//! packed f16/bf16 (the matmul family's `product_into` reads either storage).

use super::elementwise::unary_f32_inplace;
use super::matmul::{MatMulPlan, product_into};
use super::quant_matmul::{self, QuantMatMulPlan};
use super::rows;
use crate::arena::{Args, Out};
use crate::features::Arm;
use crate::threads::{MIN_PARALLEL_ELEMS, par_chunks};
use rayon::prelude::*;
use rlx_ir::{Result, Unary};

/// `act(a @ b + bias)`, bias broadcast along rows of `n`: the bias and activation on each
/// row segment where the product leaves it (a packed product's task, on its columns),
/// not in a second pass over the output. MLP 768-3072-768 at batch 32, 2 threads (Intel
/// Xeon model 207): 1.065-1.117 -> 1.061-1.073 ms.
pub fn matmul_bias(plan: &MatMulPlan, act: Option<Unary>, arm: Arm, ins: &Args, out: &mut Out) -> Result<()> {
    let bias: &[f32] = ins.get(2)?;
    let o = out.get::<f32>(0)?;
    let epilogue = |first: usize, segment: &mut [f32]| {
        segment.iter_mut().zip(&bias[first..]).for_each(|(o, &c)| *o += c);
        if let Some(u) = act {
            unary_f32_inplace(arm, u, segment);
        }
    };
    product_into(plan, ins, (0, 1), o, Some(&epilogue))
}

/// `up * silu(gate)`.
pub fn swiglu(arm: Arm, ins: &Args, out: &mut Out) -> Result<()> {
    let (gate, up): (&[f32], &[f32]) = (ins.get(0)?, ins.get(1)?);
    let o = out.get::<f32>(0)?;
    par_chunks(o, |start, chunk| {
        let end = start + chunk.len();
        rows::swiglu_rows(arm, &gate[start..end], &up[start..end], chunk)
    });
    Ok(())
}

/// `(x @ wu) * silu(x @ wg)`; output 1 is the planner's scratch for `x @ wg`.
pub fn swiglu_matmul(plan: &MatMulPlan, arm: Arm, ins: &Args, out: &mut Out) -> Result<()> {
    let (o, gate) = out.pair::<f32>(0, 1)?;
    product_into(plan, ins, (0, 1), gate, None)?;
    product_into(plan, ins, (0, 2), o, None)?;
    par_chunks(o, |start, chunk| rows::swiglu_inplace(arm, &gate[start..start + chunk.len()], chunk));
    Ok(())
}

/// `(x @ Wu^T) * silu(x @ Wg^T)` over quantized weights; output 1 is the planner's scratch
/// for the gate product.
pub fn swiglu_dequant([gate, up]: &[QuantMatMulPlan; 2], arm: Arm, ins: &Args, out: &mut Out) -> Result<()> {
    let (o, g) = out.pair::<f32>(0, 1)?;
    quant_matmul::swiglu_dequant_into((gate, up), arm, ins.get(0)?, (ins.get(1)?, ins.get(2)?), g, o)
}

/// Splits two equal-length row-major buffers into row groups processed in parallel.
fn par_row_pairs(a: &mut [f32], b: &mut [f32], len: usize, f: impl Fn(usize, &mut [f32], &mut [f32]) + Sync) {
    if len == 0 || a.len() < MIN_PARALLEL_ELEMS || crate::threads::current() == 1 {
        return f(0, a, b);
    }
    let chunk = (MIN_PARALLEL_ELEMS / 2).div_ceil(len) * len;
    a.par_chunks_mut(chunk).zip(b.par_chunks_mut(chunk)).enumerate().for_each(|(i, (a, b))| f(i * chunk, a, b));
}

/// Norm of `a + b` over rows of `len`; output 1 receives the sum (emitted, or scratch).
#[allow(clippy::too_many_arguments)]
pub fn add_norm(
    rms: bool,
    eps: f32,
    len: usize,
    gamma: bool,
    beta: bool,
    arm: Arm,
    ins: &Args,
    out: &mut Out,
) -> Result<()> {
    let (a, b): (&[f32], &[f32]) = (ins.get(0)?, ins.get(1)?);
    let g: Option<&[f32]> = if gamma { Some(ins.get(2)?) } else { None };
    let bt: Option<&[f32]> = if beta { Some(ins.get(2 + gamma as usize)?) } else { None };
    let (o, sum) = out.pair::<f32>(0, 1)?;
    par_row_pairs(o, sum, len, |start, o, sum| {
        let end = start + o.len();
        rows::add_norm_rows(arm, &a[start..end], &b[start..end], sum, o, len, eps, rms, g, bt)
    });
    Ok(())
}

/// `rms_norm(x) * gamma * silu(z)`; output 1, when present, receives silu(z).
pub fn rms_norm_mul_silu(eps: f32, len: usize, gamma: bool, arm: Arm, ins: &Args, out: &mut Out) -> Result<()> {
    let x: &[f32] = ins.get(0)?;
    let g: Option<&[f32]> = if gamma { Some(ins.get(1)?) } else { None };
    let z: &[f32] = ins.get(1 + gamma as usize)?;
    if out.len() > 1 {
        let (o, s) = out.pair::<f32>(0, 1)?;
        par_row_pairs(o, s, len, |start, o, s| {
            let end = start + o.len();
            rows::rms_norm_mul_silu_rows(arm, &x[start..end], &z[start..end], o, Some(s), len, eps, g)
        });
    } else {
        let o = out.get::<f32>(0)?;
        crate::threads::par_rows(x, o, len, |start, xr, or| {
            rows::rms_norm_mul_silu_rows(arm, xr, &z[start..start + xr.len()], or, None, len, eps, g)
        });
    }
    Ok(())
}

/// `x / sqrt(sum(x^2) + eps)` per row; output 1, when present, receives the denominator.
pub fn l2_norm(eps: f32, rsqrt: bool, len: usize, arm: Arm, ins: &Args, out: &mut Out) -> Result<()> {
    let x: &[f32] = ins.get(0)?;
    if out.len() > 1 {
        let (o, d) = out.pair::<f32>(0, 1)?;
        rows::l2_norm_rows(arm, x, o, Some(d), len, eps, rsqrt);
    } else {
        let o = out.get::<f32>(0)?;
        crate::threads::par_rows(x, o, len, |_, xr, or| rows::l2_norm_rows(arm, xr, or, None, len, eps, rsqrt));
    }
    Ok(())
}
