//! The elementwise-region evaluator: a fused chain runs block by block, each instruction
//! over a block of registers, so the chain makes one pass over memory.
//!
//! Registers hold f32 (bool as 0/1). Each instruction computes exactly what the unfused
//! op's kernel computes — the same f32 functions, then rounding to its dtype — so a fused
//! region returns the same bits as the ops run one by one.
//!
//! Scratch is one block per register, sized from the region's length (which the compiler
//! bounded by the resolved fusion limits), held per worker thread.

use super::elementwise::{Broadcast, binary_f32_slices, unary_f32_slice};
use crate::arena::{Args, Out};
use crate::buffer::Class;
use rayon::prelude::*;
use rlx_compile::{Region, RegionOp};
use rlx_ir::{CompareOp, DType, Error, Result};

/// Elements per block: 256 f32 = 1 KiB per register; a 40-register region fits in L1+L2.
pub const BLOCK: usize = 256;

#[derive(Clone, Debug)]
pub struct RegionPlan {
    pub region: Region,
    pub len: usize,
    /// Per region input, how it broadcasts to the output.
    pub loads: Vec<Broadcast>,
}

impl RegionPlan {
    pub fn new(region: &Region, out_dims: &[usize], input_dims: &[&[usize]]) -> RegionPlan {
        RegionPlan {
            region: region.clone(),
            len: rlx_ir::shape::numel(out_dims),
            loads: input_dims.iter().map(|d| Broadcast::new(out_dims, &[d])).collect(),
        }
    }
}

/// Raw arena pointers, shareable across the workers of one step.
#[derive(Clone, Copy)]
struct Ptrs<'a> {
    ins: &'a Args<'a>,
    out: *mut u8,
    out_class: Class,
}
// SAFETY: workers write disjoint output blocks and read inputs that no worker writes
// except the block it is computing (an in-place input is read before its block is stored).
unsafe impl Send for Ptrs<'_> {}
unsafe impl Sync for Ptrs<'_> {}

pub fn region(plan: &RegionPlan, arm: crate::features::Arm, ins: &Args, out: &mut Out) -> Result<()> {
    let out_class = out.slot(0)?.class;
    let out_ptr: *mut u8 = match out_class {
        Class::F32 => out.ptr::<f32>(0)?.cast(),
        Class::U8 => out.ptr::<u8>(0)?.cast(),
        c => return Err(Error::internal(format!("region output in {c:?} storage"))),
    };
    for k in 0..ins.len() {
        if !matches!(ins.slot(k)?.class, Class::F32 | Class::U8) {
            return Err(Error::internal("region input outside the f32 family"));
        }
    }
    let ptrs = Ptrs { ins, out: out_ptr, out_class };
    let blocks = plan.len.div_ceil(BLOCK);
    let run = |b: usize| block(plan, ptrs, arm, b * BLOCK, ((b + 1) * BLOCK).min(plan.len));
    if plan.len >= crate::threads::MIN_PARALLEL_ELEMS && crate::threads::current() > 1 {
        (0..blocks).into_par_iter().for_each(run);
    } else {
        (0..blocks).for_each(run);
    }
    Ok(())
}

fn block(plan: &RegionPlan, p: Ptrs, arm: crate::features::Arm, start: usize, end: usize) {
    let n = end - start;
    let ops = &plan.region.ops;
    crate::threads::with_scratch::<f32, _>(ops.len() * BLOCK, |regs| {
        for (r, (op, dtype)) in ops.iter().enumerate() {
            let (done, rest) = regs.split_at_mut(r * BLOCK);
            let dst = &mut rest[..n];
            let reg = |i: usize| &done[i * BLOCK..i * BLOCK + n];
            match op {
                RegionOp::Load(k) => load(plan, p.ins, *k, start, dst),
                RegionOp::Unary(u, a) => unary_f32_slice(arm, *u, reg(*a), dst),
                RegionOp::Binary(b, x, y) => binary_f32_slices(*b, reg(*x), reg(*y), dst),
                RegionOp::Compare(c, x, y) => compare_slices(*c, reg(*x), reg(*y), dst),
                RegionOp::Where(c, x, y) => {
                    let (c, x, y) = (reg(*c), reg(*x), reg(*y));
                    for i in 0..n {
                        dst[i] = if c[i] != 0.0 { x[i] } else { y[i] };
                    }
                }
                RegionOp::Cast(a) => {
                    let src = reg(*a);
                    if *dtype == DType::Bool {
                        dst.iter_mut().zip(src).for_each(|(d, &v)| *d = (v != 0.0) as u8 as f32);
                    } else {
                        dst.copy_from_slice(src);
                    }
                }
            }
            super::elementwise::round_in_place(*dtype, dst);
        }
        let result = &regs[plan.region.result * BLOCK..plan.region.result * BLOCK + n];
        // SAFETY: [start, end) lies inside the output slot; this worker alone writes it, and
        // every load of this block (including an in-place input's) happened above.
        unsafe {
            match p.out_class {
                Class::F32 => std::slice::from_raw_parts_mut(p.out.cast::<f32>().add(start), n).copy_from_slice(result),
                _ => {
                    let o = std::slice::from_raw_parts_mut(p.out.add(start), n);
                    o.iter_mut().zip(result).for_each(|(o, &v)| *o = (v != 0.0) as u8);
                }
            }
        }
    });
}

/// Region input `k`, elements [start, start + dst.len()) of its broadcast, into `dst`.
fn load(plan: &RegionPlan, ins: &Args, k: usize, start: usize, dst: &mut [f32]) {
    let (Ok(slot), Some(bc)) = (ins.slot(k), plan.loads.get(k)) else { return };
    let end = start + dst.len();
    // SAFETY: the slot lies in the arena; this reads elements the broadcast maps into it,
    // through a shared slice that is dropped before the block is stored.
    unsafe {
        match slot.class {
            Class::F32 => {
                let Ok(ptr) = ins.ptr::<f32>(k) else { return };
                let src = std::slice::from_raw_parts(ptr, slot.len);
                if slot.len == plan.len {
                    dst.copy_from_slice(&src[start..end]);
                } else {
                    bc.for_runs(start, end, |o, offs, len, step| {
                        let d = &mut dst[o - start..][..len];
                        if step[0] == 1 { d.copy_from_slice(&src[offs[0]..][..len]) } else { d.fill(src[offs[0]]) }
                    });
                }
            }
            _ => {
                let Ok(ptr) = ins.ptr::<u8>(k) else { return };
                let src = std::slice::from_raw_parts(ptr, slot.len);
                bc.for_runs(start, end, |o, offs, len, step| {
                    let d = &mut dst[o - start..][..len];
                    if step[0] == 1 {
                        d.iter_mut().zip(&src[offs[0]..][..len]).for_each(|(d, &v)| *d = v as f32);
                    } else {
                        d.fill(src[offs[0]] as f32);
                    }
                });
            }
        }
    }
}

/// `dst = (x op y) as 0 / 1`, the op matched once.
fn compare_slices(op: CompareOp, x: &[f32], y: &[f32], dst: &mut [f32]) {
    #[inline(always)]
    fn each(x: &[f32], y: &[f32], dst: &mut [f32], f: impl Fn(f32, f32) -> bool) {
        dst.iter_mut().zip(x.iter().zip(y)).for_each(|(d, (&a, &b))| *d = f(a, b) as u8 as f32);
    }
    match op {
        CompareOp::Eq => each(x, y, dst, |a, b| a == b),
        CompareOp::Ne => each(x, y, dst, |a, b| a != b),
        CompareOp::Lt => each(x, y, dst, |a, b| a < b),
        CompareOp::Le => each(x, y, dst, |a, b| a <= b),
        CompareOp::Gt => each(x, y, dst, |a, b| a > b),
        CompareOp::Ge => each(x, y, dst, |a, b| a >= b),
    }
}
