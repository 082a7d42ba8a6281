//! Elementwise kernels: binary, compare, where, unary, cast (semantics in
//! `rlx_ir::ops::elementwise`).

use crate::arena::{Args, Out, out_mut};
use crate::buffer::{Class, Elem, Float, Num};
use crate::features::Arm;
use crate::threads::par_chunks;
use crate::vmath;
use crate::{multiversion, with_class, with_float};
use rlx_ir::shape::{broadcast_strides, numel};
use rlx_ir::{BinaryOp, CompareOp, DType, Error, Result, Unary};

/// Reads up to three operands broadcast to one output shape.
#[derive(Clone, Debug)]
pub struct Broadcast {
    out_dims: Vec<usize>,
    /// Every operand already has the output's shape: plain zip.
    same_shape: bool,
    /// Dims and per-operand element strides (0 along broadcast axes), with adjacent axes
    /// merged wherever every operand steps through them as one: `for_runs` walks these.
    runs: (Vec<usize>, Vec<Vec<usize>>),
}

impl Broadcast {
    pub fn new(out_dims: &[usize], operands: &[&[usize]]) -> Broadcast {
        let strides: Vec<Vec<usize>> = operands.iter().map(|d| broadcast_strides(d, out_dims)).collect();
        Broadcast {
            out_dims: out_dims.to_vec(),
            same_shape: operands.iter().all(|d| *d == out_dims),
            runs: merge_axes(out_dims, &strides),
        }
    }

    /// Calls `f(out_index, operand_offsets)` for every output element in row-major order.
    pub fn for_each(&self, f: impl FnMut(usize, [usize; 3])) {
        self.for_range(0, numel(&self.out_dims), f)
    }

    /// `for_each` restricted to output elements `start..end`.
    pub fn for_range(&self, start: usize, end: usize, mut f: impl FnMut(usize, [usize; 3])) {
        self.for_runs(start, end, |out, offs, len, step| {
            for i in 0..len {
                f(out + i, [offs[0] + i * step[0], offs[1] + i * step[1], offs[2] + i * step[2]]);
            }
        })
    }

    /// Output elements `start..end` as runs along the innermost (merged) axis:
    /// `f(first_out, operand_offsets, len, operand_steps)`, each step 0 or 1 for a
    /// broadcast or a contiguous operand. Kernels loop a run with the step as a constant,
    /// which vectorizes (the per-element odometer it replaced cost ~15% of a training step).
    pub fn for_runs(&self, start: usize, end: usize, mut f: impl FnMut(usize, [usize; 3], usize, [usize; 3])) {
        if start >= end {
            return;
        }
        if self.same_shape {
            return f(start, [start; 3], end - start, [1; 3]);
        }
        let (dims, strides) = &self.runs;
        let rank = dims.len();
        if rank == 0 {
            return f(start, [0; 3], 1, [0; 3]);
        }
        let stride = |k: usize, axis: usize| strides.get(k).map_or(0, |s| s[axis]);
        let inner = dims[rank - 1].max(1);
        let step = [stride(0, rank - 1), stride(1, rank - 1), stride(2, rank - 1)];
        let mut pos = start;
        while pos < end {
            let (row, col) = (pos / inner, pos % inner);
            let len = (inner - col).min(end - pos);
            let mut offs = [0usize; 3];
            let mut rest = row;
            for axis in (0..rank - 1).rev() {
                let d = dims[axis].max(1);
                let i = rest % d;
                rest /= d;
                for (k, o) in offs.iter_mut().enumerate() {
                    *o += i * stride(k, axis);
                }
            }
            for (k, o) in offs.iter_mut().enumerate() {
                *o += col * step[k];
            }
            f(pos, offs, len, step);
            pos += len;
        }
    }
}

/// `dims` / per-operand `strides` without size-1 axes, and with adjacent axes merged where
/// every operand steps through the pair as through one axis
/// (stride[i] == stride[i + 1] * dims[i + 1]).
fn merge_axes(dims: &[usize], strides: &[Vec<usize>]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut out_dims: Vec<usize> = Vec::new();
    let mut out_strides: Vec<Vec<usize>> = vec![Vec::new(); strides.len()];
    for axis in 0..dims.len() {
        if dims[axis] == 1 {
            continue; // index always 0: the axis moves no operand
        }
        let mergeable = !out_dims.is_empty()
            && strides.iter().zip(&out_strides).all(|(s, o)| *o.last().expect("nonempty") == s[axis] * dims[axis]);
        if mergeable {
            *out_dims.last_mut().expect("nonempty") *= dims[axis];
            for (s, o) in strides.iter().zip(out_strides.iter_mut()) {
                *o.last_mut().expect("nonempty") = s[axis];
            }
        } else {
            out_dims.push(dims[axis]);
            for (s, o) in strides.iter().zip(out_strides.iter_mut()) {
                o.push(s[axis]);
            }
        }
    }
    (out_dims, out_strides)
}

pub fn binary(op: BinaryOp, class: Class, bc: &Broadcast, ins: &Args, out: &mut Out) -> Result<()> {
    with_class!(class, T => binary_typed::<T>(op, bc, ins.get(0)?, ins.get(1)?, out_mut(out)?))
}

fn binary_typed<T: Num>(op: BinaryOp, bc: &Broadcast, a: &[T], b: &[T], out: &mut [T]) -> Result<()> {
    // One monomorphized loop per op, so the scalar function inlines into the run loops.
    match op {
        BinaryOp::Add => binary_runs(bc, a, b, out, T::add),
        BinaryOp::Sub => binary_runs(bc, a, b, out, T::sub),
        BinaryOp::Mul => binary_runs(bc, a, b, out, T::mul),
        BinaryOp::Div => binary_runs(bc, a, b, out, T::div),
        BinaryOp::Max => binary_runs(bc, a, b, out, T::max_nan),
        BinaryOp::Min => binary_runs(bc, a, b, out, T::min_nan),
        BinaryOp::Pow => binary_runs(bc, a, b, out, T::pow),
    }
    Ok(())
}

#[inline(always)]
fn binary_runs<T: Num>(bc: &Broadcast, a: &[T], b: &[T], out: &mut [T], f: impl Fn(T, T) -> T + Sync) {
    par_chunks(out, |start, chunk| {
        bc.for_runs(start, start + chunk.len(), |o, offs, len, step| {
            let dst = &mut chunk[o - start..][..len];
            match (step[0], step[1]) {
                (1, 1) => dst
                    .iter_mut()
                    .zip(&a[offs[0]..][..len])
                    .zip(&b[offs[1]..][..len])
                    .for_each(|((d, &x), &y)| *d = f(x, y)),
                (1, 0) => {
                    let y = b[offs[1]];
                    dst.iter_mut().zip(&a[offs[0]..][..len]).for_each(|(d, &x)| *d = f(x, y))
                }
                (0, 1) => {
                    let x = a[offs[0]];
                    dst.iter_mut().zip(&b[offs[1]..][..len]).for_each(|(d, &y)| *d = f(x, y))
                }
                _ => dst.fill(f(a[offs[0]], b[offs[1]])),
            }
        })
    });
}

/// The scalar function of `op` in type `T` (IEEE for floats, wrapping for integers).
pub fn binary_fn<T: Num>(op: BinaryOp) -> fn(T, T) -> T {
    match op {
        BinaryOp::Add => T::add,
        BinaryOp::Sub => T::sub,
        BinaryOp::Mul => T::mul,
        BinaryOp::Div => T::div,
        BinaryOp::Max => T::max_nan,
        BinaryOp::Min => T::min_nan,
        BinaryOp::Pow => T::pow,
    }
}

/// `dst = x op y` on f32 slices, exactly as the unfused kernel computes each element;
/// the op is matched once, so each loop is monomorphic and vectorizes.
pub fn binary_f32_slices(op: BinaryOp, x: &[f32], y: &[f32], dst: &mut [f32]) {
    #[inline(always)]
    fn each(x: &[f32], y: &[f32], dst: &mut [f32], f: impl Fn(f32, f32) -> f32) {
        dst.iter_mut().zip(x.iter().zip(y)).for_each(|(d, (&a, &b))| *d = f(a, b));
    }
    match op {
        BinaryOp::Add => each(x, y, dst, |a, b| a + b),
        BinaryOp::Sub => each(x, y, dst, |a, b| a - b),
        BinaryOp::Mul => each(x, y, dst, |a, b| a * b),
        BinaryOp::Div => each(x, y, dst, |a, b| a / b),
        BinaryOp::Max => each(x, y, dst, <f32 as Num>::max_nan),
        BinaryOp::Min => each(x, y, dst, <f32 as Num>::min_nan),
        BinaryOp::Pow => each(x, y, dst, <f32 as Num>::pow),
    }
}

pub fn compare(op: CompareOp, class: Class, bc: &Broadcast, ins: &Args, out: &mut Out) -> Result<()> {
    with_class!(class, T => compare_typed::<T>(op, bc, ins.get(0)?, ins.get(1)?, out_mut(out)?))
}

fn compare_typed<T: Elem>(op: CompareOp, bc: &Broadcast, a: &[T], b: &[T], out: &mut [u8]) -> Result<()> {
    // PartialOrd on floats is already IEEE: every comparison with NaN is false, `!=` true.
    let f: fn(&T, &T) -> bool = match op {
        CompareOp::Eq => T::eq,
        CompareOp::Ne => T::ne,
        CompareOp::Lt => T::lt,
        CompareOp::Le => T::le,
        CompareOp::Gt => T::gt,
        CompareOp::Ge => T::ge,
    };
    bc.for_each(|i, o| out[i] = f(&a[o[0]], &b[o[1]]) as u8);
    Ok(())
}

pub fn where_(class: Class, bc: &Broadcast, ins: &Args, out: &mut Out) -> Result<()> {
    let cond: &[u8] = ins.get(0)?;
    with_class!(class, T => {
        let (a, b, out): (&[T], &[T], &mut [T]) = (ins.get(1)?, ins.get(2)?, out_mut(out)?);
        bc.for_each(|i, o| out[i] = if cond[o[0]] != 0 { a[o[1]] } else { b[o[2]] });
        Ok(())
    })
}

pub fn unary(u: Unary, class: Class, arm: Arm, ins: &Args, out: &mut Out) -> Result<()> {
    match class {
        Class::F32 => {
            let (x, out): (&[f32], &mut [f32]) = (ins.get(0)?, out_mut(out)?);
            par_chunks(out, |start, chunk| unary_f32_slice(arm, u, &x[start..start + chunk.len()], chunk));
            Ok(())
        }
        Class::F64 => unary_float::<f64>(u, ins.get(0)?, out_mut(out)?),
        Class::I8 => unary_int::<i8>(u, ins.get(0)?, out_mut(out)?),
        Class::I32 => unary_int::<i32>(u, ins.get(0)?, out_mut(out)?),
        Class::I64 => unary_int::<i64>(u, ins.get(0)?, out_mut(out)?),
        other => Err(Error::internal(format!("{} on {other:?} storage", u.name()))),
    }
}

fn unary_int<T: Num>(u: Unary, x: &[T], out: &mut [T]) -> Result<()> {
    let f: fn(T) -> T = match u {
        Unary::Neg => T::neg,
        Unary::Abs => T::abs,
        Unary::Relu => |v| if v > T::ZERO { v } else { T::ZERO },
        other => return Err(Error::internal(format!("{} on integer storage", other.name()))),
    };
    out.iter_mut().zip(x).for_each(|(o, &v)| *o = f(v));
    Ok(())
}

fn unary_float<T: Float>(u: Unary, x: &[T], out: &mut [T]) -> Result<()> {
    let f = unary_fn::<T>(u);
    par_chunks(out, |start, chunk| chunk.iter_mut().zip(&x[start..]).for_each(|(o, &v)| *o = f(v)));
    Ok(())
}

/// The vmath slice kernels of `u` (transcendentals), or None for the plain-arithmetic
/// functions and for `log`, which keeps libm's correctly rounded path: it feeds losses.
fn vmath_kernels(u: Unary) -> Option<(vmath::SliceFn, vmath::InplaceFn, vmath::SumFn)> {
    use vmath::*;
    Some(match u {
        Unary::Exp => (exp_slice, exp_inplace, exp_sum),
        Unary::Tanh => (tanh_slice, tanh_inplace, tanh_sum),
        Unary::Sigmoid => (sigmoid_slice, sigmoid_inplace, sigmoid_sum),
        Unary::Softplus => (softplus_slice, softplus_inplace, softplus_sum),
        Unary::Sin => (sin_slice, sin_inplace, sin_sum),
        Unary::Cos => (cos_slice, cos_inplace, cos_sum),
        Unary::Tan => (tan_slice, tan_inplace, tan_sum),
        Unary::Atan => (atan_slice, atan_inplace, atan_sum),
        Unary::Erf => (erf_slice, erf_inplace, erf_sum),
        Unary::Ln1p => (ln_1p_slice, ln_1p_inplace, ln_1p_sum),
        Unary::Gelu => (gelu_slice, gelu_inplace, gelu_sum),
        Unary::GeluTanh => (gelu_tanh_slice, gelu_tanh_inplace, gelu_tanh_sum),
        Unary::Silu => (silu_slice, silu_inplace, silu_sum),
        Unary::Mish => (mish_slice, mish_inplace, mish_sum),
        Unary::LogSigmoid => (log_sigmoid_slice, log_sigmoid_inplace, log_sigmoid_sum),
        Unary::Neg | Unary::Abs | Unary::Log | Unary::Sqrt | Unary::Rsqrt | Unary::Recip | Unary::Relu => return None,
    })
}

/// The leaf-sum kernel of `u` on f32 (see [`vmath::SumFn`]), where `u` is a vmath function.
pub fn unary_sum_f32(u: Unary) -> Option<vmath::SumFn> {
    vmath_kernels(u).map(|k| k.2)
}

/// `body` with `f` bound to the plain-arithmetic function of `u` on f32: relu, neg and
/// abs as closures the loop inlines and the compiler vectorizes (the same expressions as
/// `unary_fn`, so the same bits), the rest through `unary_fn`. Through its pointer relu
/// was a call per element, ~10% of a ResNet-50's time.
macro_rules! with_plain_f32 {
    ($u:expr, $f:ident => $body:expr) => {
        match $u {
            Unary::Relu => {
                let $f = |v: f32| if v > 0.0 || v.is_nan() { v } else { 0.0 };
                $body
            }
            Unary::Neg => {
                let $f = |v: f32| -v;
                $body
            }
            Unary::Abs => {
                let $f = f32::abs;
                $body
            }
            other => {
                let $f = unary_fn::<f32>(other);
                $body
            }
        }
    };
}

/// `out = u(x)` on f32: the one definition the unfused kernel and fused kernels share.
pub fn unary_f32_slice(arm: Arm, u: Unary, x: &[f32], out: &mut [f32]) {
    match vmath_kernels(u) {
        Some((slice, ..)) => slice(arm, x, out),
        None => with_plain_f32!(u, f => out.iter_mut().zip(x).for_each(|(o, &v)| *o = f(v))),
    }
}

/// `v = u(v)` on f32, in place, with the same functions as [`unary_f32_slice`].
pub fn unary_f32_inplace(arm: Arm, u: Unary, v: &mut [f32]) {
    match vmath_kernels(u) {
        Some((_, inplace, _)) => inplace(arm, v),
        None => with_plain_f32!(u, f => v.iter_mut().for_each(|x| *x = f(*x))),
    }
}

/// The scalar function of `u` in type `T`.
pub fn unary_fn<T: Float>(u: Unary) -> fn(T) -> T {
    match u {
        Unary::Neg => |x| -x,
        Unary::Abs => |x| x.abs(),
        Unary::Exp => |x| x.exp(),
        Unary::Log => |x| x.ln(),
        Unary::Sqrt => |x| x.sqrt(),
        Unary::Rsqrt => |x| T::ONE / x.sqrt(),
        Unary::Recip => |x| T::ONE / x,
        Unary::Relu => |x| if x > T::ZERO || x.is_nan() { x } else { T::ZERO },
        // Gelu via erfc and GeluTanh via the logistic form keep full relative accuracy
        // for negative x, where 1 + erf(x) and 1 + tanh(x) cancel.
        Unary::Gelu => |x| gated(x, T::from_f64(0.5) * (-x * T::from_f64(std::f64::consts::FRAC_1_SQRT_2)).erfc()),
        Unary::GeluTanh => |x| {
            // 1 + tanh(z) = 2 sigmoid(2z).
            let z = T::from_f64((8.0 / std::f64::consts::PI).sqrt()) * (x + T::from_f64(0.044715) * x * x * x);
            gated(x, sigmoid(z))
        },
        Unary::Silu => |x| gated(x, sigmoid(x)),
        Unary::Sigmoid => sigmoid,
        Unary::Tanh => |x| x.tanh(),
        Unary::Softplus => softplus,
        Unary::Sin => |x| x.sin(),
        Unary::Cos => |x| x.cos(),
        Unary::Tan => |x| x.tan(),
        Unary::Atan => |x| x.atan(),
        Unary::Erf => |x| x.erf(),
        Unary::Ln1p => |x| x.ln_1p(),
        Unary::Mish => |x| gated(x, softplus(x).tanh()),
        Unary::LogSigmoid => |x| -softplus(-x),
    }
}

/// `x * gate` for a gate that vanishes as x -> -inf, where the product's limit is 0
/// (which -inf * 0 = NaN would miss).
fn gated<T: Float>(x: T, gate: T) -> T {
    if gate == T::ZERO && x.is_infinite() { T::ZERO } else { x * gate }
}

/// 1 / (1 + e^-x), written so neither branch overflows.
fn sigmoid<T: Float>(x: T) -> T {
    if x >= T::ZERO {
        T::ONE / (T::ONE + (-x).exp())
    } else {
        let e = x.exp();
        e / (T::ONE + e)
    }
}

/// ln(1 + e^x) = max(x, 0) + ln(1 + e^-|x|): no overflow for large |x|.
fn softplus<T: Float>(x: T) -> T {
    if x.is_nan() {
        return x;
    }
    let pos = if x > T::ZERO { x } else { T::ZERO };
    pos + (-x.abs()).exp().ln_1p()
}

/// Converts operand 0 (holding `from`) into the output (holding `to`), by value.
pub fn cast(from: DType, to: DType, ins: &Args, out: &mut Out) -> Result<()> {
    let src = ins.slot(0)?.class;
    let dst = out.slot(0)?.class;
    let narrow_float = |d: DType| matches!(d, DType::F32 | DType::F16 | DType::BF16);
    if dst == Class::F32 && narrow_float(from) && narrow_float(to) {
        // Between f32 words (f32 or widened halves): widen or copy exactly, then one
        // rounding to `to`, vectorized (the per-element f64 path cost 4.5% of a bf16
        // training step).
        let o: &mut [f32] = out_mut(out)?;
        match src {
            Class::F32 => {
                let x: &[f32] = ins.get(0)?;
                crate::threads::par_chunks(o, |start, o| {
                    o.copy_from_slice(&x[start..start + o.len()]);
                    round_in_place(to, o);
                });
                return Ok(());
            }
            Class::F16 => super::half_gemm::widen_f16(ins.get::<half::f16>(0)?, o),
            Class::BF16 => super::half_gemm::widen_bf16(ins.get::<half::bf16>(0)?, o),
            other => return Err(rlx_ir::Error::internal(format!("cast from {from} stored as {other:?}"))),
        }
        round_in_place_par(to, o);
        return Ok(());
    }
    if src.is_packed_half() {
        // A packed f16/bf16 param: decode each value exactly, then convert as below.
        let values: Vec<f64> = match src {
            Class::F16 => ins.get::<half::f16>(0)?.iter().map(|h| h.to_f64()).collect(),
            _ => ins.get::<half::bf16>(0)?.iter().map(|h| h.to_f64()).collect(),
        };
        return with_class!(dst, D => {
            let o: &mut [D] = out_mut(out)?;
            o.iter_mut().zip(values).for_each(|(o, v)| *o = D::from_float(v, to));
            Ok(())
        });
    }
    if from.is_float() {
        with_float!(src, S => with_class!(dst, D => {
            let (x, o): (&[S], &mut [D]) = (ins.get(0)?, out_mut(out)?);
            o.iter_mut().zip(x).for_each(|(o, &v)| *o = D::from_float(v.to_f64(), to));
            Ok(())
        }))
    } else {
        with_class!(src, S => with_class!(dst, D => {
            let (x, o): (&[S], &mut [D]) = (ins.get(0)?, out_mut(out)?);
            o.iter_mut().zip(x).for_each(|(o, &v)| *o = D::from_int(v.to_i64(), to));
            Ok(())
        }))
    }
}

/// Rounds a widened f16/bf16 result to its format, in place (a no-op for other dtypes).
/// Both arms are branch-free per element so they vectorize (the per-element dtype match
/// cost 11% of a 1024^3 bf16 GEMM call rounding its output).
pub fn round_in_place(dtype: DType, values: &mut [f32]) {
    match dtype {
        DType::BF16 => round_bf16_slice(Arm::best(), values),
        DType::F16 => round_f16_in_place(values),
        _ => {}
    }
}

/// [`round_in_place`] split across the current pool's workers: a whole kernel's output
/// (a bf16 training step rounds MiBs of them; one thread did all of it).
pub fn round_in_place_par(dtype: DType, values: &mut [f32]) {
    if dtype.is_half() {
        crate::threads::par_chunks(values, |_, chunk| round_in_place(dtype, chunk));
    }
}

/// f32 values -> f16/bf16 bits, rounding to nearest even (exact for the widened values
/// the arena holds); F16C converts eight at a time.
pub fn narrow_to_half(dtype: DType, values: &[f32], out: &mut [u16]) {
    if dtype == DType::F16 {
        #[cfg(target_arch = "x86_64")]
        if crate::features::features().f16c && crate::features::features().avx {
            // SAFETY: features() detected F16C and AVX.
            return unsafe { narrow_f16_f16c(values, out) };
        }
        out.iter_mut().zip(values).for_each(|(o, &x)| *o = rlx_ir::f32_to_f16(x).to_bits());
    } else {
        out.iter_mut().zip(values).for_each(|(o, &x)| *o = rlx_ir::f32_to_bf16(x).to_bits());
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
fn narrow_f16_f16c(values: &[f32], out: &mut [u16]) {
    use std::arch::x86_64::{__m128i, _mm_storeu_si128, _mm256_cvtps_ph, _mm256_loadu_ps};
    let n = values.len().min(out.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n elements of both slices.
        unsafe {
            let h = _mm256_cvtps_ph::<0>(_mm256_loadu_ps(values.as_ptr().add(i)));
            _mm_storeu_si128(out.as_mut_ptr().add(i) as *mut __m128i, h);
        }
        i += 8;
    }
    for j in i..n {
        out[j] = rlx_ir::f32_to_f16(values[j]).to_bits();
    }
}

multiversion! {
    /// f32 -> bf16 -> f32 in place: round to nearest even by integer add, NaN quieted;
    /// masks instead of a branch so each arm vectorizes at its width (the SSE2 build of
    /// this loop was 12% of a bf16 training step).
    fn round_bf16_slice(values: &mut [f32]) {
        for x in values.iter_mut() {
            let bits = x.to_bits();
            let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) & 0xffff_0000;
            let quiet_nan = (bits | 0x0040_0000) & 0xffff_0000;
            let nan_mask = 0u32.wrapping_sub(((bits & 0x7fff_ffff) > 0x7f80_0000) as u32);
            *x = f32::from_bits((rounded & !nan_mask) | (quiet_nan & nan_mask));
        }
    }
}

fn round_f16_in_place(values: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::features::features().f16c && crate::features::features().avx {
        // SAFETY: features() detected F16C and AVX.
        return unsafe { round_f16_f16c(values) };
    }
    values.iter_mut().for_each(|x| *x = rlx_ir::round_f32_to_dtype(*x, DType::F16));
}

/// `vcvtps2ph` rounds to nearest even (imm 0) with IEEE subnormals, overflow to inf and
/// NaN quieted keeping the top payload bits: the same bits as `rlx_ir::f32_to_f16`
/// (pinned exhaustively by the casts tests).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
fn round_f16_f16c(values: &mut [f32]) {
    use std::arch::x86_64::{_mm256_cvtph_ps, _mm256_cvtps_ph, _mm256_loadu_ps, _mm256_storeu_ps};
    let mut chunks = values.chunks_exact_mut(8);
    for c in &mut chunks {
        // SAFETY: c holds 8 f32.
        unsafe {
            let h = _mm256_cvtps_ph::<0>(_mm256_loadu_ps(c.as_ptr()));
            _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }
    for x in chunks.into_remainder() {
        *x = rlx_ir::round_f32_to_dtype(*x, DType::F16);
    }
}
