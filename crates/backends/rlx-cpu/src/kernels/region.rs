//! The elementwise-region evaluator: a fused chain runs block by block, each instruction
//! over a block of registers, so the chain makes one pass over memory.
//!
//! Registers hold f32 (bool as 0/1). Each instruction computes exactly what the unfused
//! op's kernel computes — the same f32 functions, then rounding to its dtype — so a fused
//! region returns the same bits as the ops run one by one.
//!
//! Scratch is one block per register, sized from the region's length (which the compiler
//! bounded by the resolved fusion limits), held per worker thread.

use super::elementwise::{Broadcast, binary_f32_slices, unary_f32_slice, unary_sum_f32};
use super::reduce::Pairwise;
use crate::arena::{Args, Out, out_mut};
use crate::buffer::{Class, Num};
use rayon::prelude::*;
use rlx_compile::{Region, RegionOp};
use rlx_ir::ops::reduce::SUM_BLOCK;
use rlx_ir::{CompareOp, DType, Error, ReduceOp, Result};

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
    ins: &'a Inputs<'a>,
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
    let ins = Inputs::new(plan, ins)?;
    let ptrs = Ptrs { ins: &ins, out: out_ptr, out_class };
    let blocks = plan.len.div_ceil(BLOCK);
    let run = |b: usize| block(plan, ptrs, arm, b * BLOCK, ((b + 1) * BLOCK).min(plan.len));
    if plan.len >= crate::threads::MIN_PARALLEL_ELEMS && crate::threads::current() > 1 {
        (0..blocks).into_par_iter().for_each(run);
    } else {
        (0..blocks).for_each(run);
    }
    Ok(())
}

fn check_inputs(ins: &Args) -> Result<()> {
    for k in 0..ins.len() {
        if !matches!(ins.slot(k)?.class, Class::F32 | Class::U8) {
            return Err(Error::internal("region input outside the f32 family"));
        }
    }
    Ok(())
}

fn block(plan: &RegionPlan, p: Ptrs, arm: crate::features::Arm, start: usize, end: usize) {
    let n = end - start;
    crate::threads::with_scratch::<f32, _>(plan.region.ops.len() * BLOCK, |regs| {
        let result = evaluate(plan, p.ins, arm, (start, n, BLOCK), regs);
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

/// Most registers (loads and ops) a region may have: the evaluator keeps one pointer per
/// register on the stack. The CPU's fusion limits allow 40.
pub const MAX_REGISTERS: usize = 64;

/// Runs the region over elements [start, start + n), `n <= width`, in `regs` (one
/// `width`-wide register per instruction); returns the result's `n` values.
fn evaluate<'r>(
    plan: &RegionPlan,
    ins: &'r Inputs,
    arm: crate::features::Arm,
    span: (usize, usize, usize),
    regs: &'r mut [f32],
) -> &'r [f32] {
    evaluate_upto(plan, ins, arm, span, regs, (plan.region.ops.len(), plan.region.result))
}

/// Runs the region's first `count` instructions as [`evaluate`] does and returns register
/// `want`'s values. A load of an f32 input of the region's own shape is read where it
/// lies, not copied.
fn evaluate_upto<'r>(
    plan: &RegionPlan,
    ins: &'r Inputs,
    arm: crate::features::Arm,
    (start, n, width): (usize, usize, usize),
    regs: &'r mut [f32],
    (count, want): (usize, usize),
) -> &'r [f32] {
    let ops = &plan.region.ops[..count];
    assert!(ops.len() <= MAX_REGISTERS && want < count && n <= width && regs.len() >= ops.len() * width);
    let base = regs.as_mut_ptr();
    let mut at = [std::ptr::null::<f32>(); MAX_REGISTERS];
    for (r, (op, dtype)) in ops.iter().enumerate() {
        // SAFETY: register r is regs[r * width..][..n], inside `regs` (asserted above) and
        // disjoint from every register an operand points to (those are < r, or inputs).
        let dst = unsafe { std::slice::from_raw_parts_mut(base.add(r * width), n) };
        // SAFETY: `at[i]`, i < r, points at n readable values: an earlier register, or
        // elements [start, start + n) of an input slot.
        let reg = |i: usize| unsafe { std::slice::from_raw_parts(at[i], n) };
        match op {
            RegionOp::Load(k) if !ins.direct[*k].is_null() => {
                // SAFETY: a slot of plan.len f32 values (Inputs::new); start + n <= plan.len.
                at[r] = unsafe { ins.direct[*k].add(start) };
                continue;
            }
            RegionOp::Load(k) => load(plan, ins.args, *k, start, dst),
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
        at[r] = dst.as_ptr();
    }
    reg_slice(at[want], n)
}

/// The values of a register; lives as long as the registers and inputs it may point into.
fn reg_slice<'r>(p: *const f32, n: usize) -> &'r [f32] {
    // SAFETY: `p` is a register or input slot pointer with n readable values (see evaluate).
    unsafe { std::slice::from_raw_parts(p, n) }
}

/// A step's region inputs, with the address of each one a load reads where it lies: an
/// f32 (or widened half) input of the region's own shape (no broadcast, no rounding). Resolved once per
/// kernel call, not per block (the per-block lookups were ~3% of param -> exp -> sum).
struct Inputs<'a> {
    args: &'a Args<'a>,
    direct: [*const f32; MAX_REGISTERS],
}
// SAFETY: the pointers address input slots, which no worker writes while the step runs
// except an in-place region's own block, read before it is stored (see `Ptrs`).
unsafe impl Send for Inputs<'_> {}
unsafe impl Sync for Inputs<'_> {}

impl<'a> Inputs<'a> {
    fn new(plan: &RegionPlan, args: &'a Args<'a>) -> Result<Inputs<'a>> {
        check_inputs(args)?;
        if plan.region.ops.len() > MAX_REGISTERS {
            return Err(Error::internal(format!(
                "a region of {} registers (at most {MAX_REGISTERS})",
                plan.region.ops.len()
            )));
        }
        let mut direct = [std::ptr::null(); MAX_REGISTERS];
        for (op, dtype) in &plan.region.ops {
            // A widened f16 / bf16 input holds values of its format already (every
            // writer rounds them): read in place too, with no copy and no rounding pass.
            if let (RegionOp::Load(k), DType::F32 | DType::F16 | DType::BF16) = (op, dtype) {
                let slot = args.slot(*k)?;
                if slot.class == Class::F32 && slot.len == plan.len {
                    direct[*k] = args.ptr::<f32>(*k)?;
                }
            }
        }
        Ok(Inputs { args, direct })
    }
}

/// A region folded by a reduction as it is computed (`Kernel::RegionReduce`): output `o`
/// folds the region's elements `[o * run, (o + 1) * run)`.
#[derive(Clone, Debug)]
pub struct RegionReducePlan {
    pub region: RegionPlan,
    pub op: ReduceOp,
    pub run: usize,
    /// The leaf-sum kernel of the last instruction and its operand's register, when that
    /// instruction is an f32 vmath function.
    last_unary: Option<(crate::vmath::SumFn, usize)>,
}

impl RegionReducePlan {
    pub fn new(region: RegionPlan, op: ReduceOp, run: usize) -> RegionReducePlan {
        let last_unary = match region.region.ops.last() {
            Some((RegionOp::Unary(u, a), DType::F32)) if region.region.result + 1 == region.region.ops.len() => {
                unary_sum_f32(*u).map(|sum| (sum, *a))
            }
            _ => None,
        };
        RegionReducePlan { region, op, run, last_unary }
    }
}

/// Each output is bit for bit what the reduce kernel makes of the written region: sums
/// and means in the same blocked pairwise tree (`reduce::sum_run` on every leaf block of
/// `SUM_BLOCK` elements, leaves combined at the same splits), max / min / prod folded in
/// order. Threads take whole outputs, or, for fewer outputs than threads, subtrees of
/// one output's sum; neither changes the order.
pub fn region_reduce(plan: &RegionReducePlan, arm: crate::features::Arm, ins: &Args, out: &mut Out) -> Result<()> {
    let ins = &Inputs::new(&plan.region, ins)?;
    let out: &mut [f32] = out_mut(out)?;
    let threads = crate::threads::current();
    let parallel = threads > 1 && plan.region.len >= crate::threads::MIN_PARALLEL_ELEMS;
    let fold = |o: usize, split: bool| fold_run(plan, ins, arm, o * plan.run, split.then_some(threads));
    if parallel && out.len() >= threads {
        out.par_iter_mut().enumerate().for_each(|(o, dst)| *dst = fold(o, false));
    } else {
        out.iter_mut().enumerate().for_each(|(o, dst)| *dst = fold(o, parallel));
    }
    if plan.op == ReduceOp::Mean {
        let count = plan.run as f32;
        out.iter_mut().for_each(|v| *v /= count);
    }
    Ok(())
}

/// One output: the fold of `plan.run` region elements from `start`; with `threads`, a
/// sum's top subtrees run in parallel.
fn fold_run(
    plan: &RegionReducePlan,
    ins: &Inputs,
    arm: crate::features::Arm,
    start: usize,
    threads: Option<usize>,
) -> f32 {
    let folded = |init: f32, f: fn(f32, f32) -> f32| {
        crate::threads::with_scratch::<f32, _>(plan.region.region.ops.len() * BLOCK, |regs| {
            let mut acc = init;
            for at in (start..start + plan.run).step_by(BLOCK) {
                let n = BLOCK.min(start + plan.run - at);
                acc = evaluate(&plan.region, ins, arm, (at, n, BLOCK), regs).iter().fold(acc, |a, &v| f(a, v));
            }
            acc
        })
    };
    match plan.op {
        ReduceOp::Sum | ReduceOp::Mean => {
            let levels = threads.map_or(0, |t| t.next_power_of_two().trailing_zeros() as usize + 2);
            pairwise_split(plan, ins, arm, start, plan.run, levels)
        }
        ReduceOp::Max => folded(f32::MAX_ID, f32::max_nan),
        ReduceOp::Min => folded(f32::MIN_ID, f32::min_nan),
        ReduceOp::Prod => folded(1.0, |a, b| a * b),
    }
}

/// The pairwise sum of region elements [start, start + n), its top `levels` splits run
/// on two workers each.
fn pairwise_split(
    plan: &RegionReducePlan,
    ins: &Inputs,
    arm: crate::features::Arm,
    start: usize,
    n: usize,
    levels: usize,
) -> f32 {
    if levels == 0 || n <= crate::threads::MIN_PARALLEL_ELEMS {
        return crate::threads::with_scratch::<f32, _>(plan.region.region.ops.len() * SUM_BLOCK, |regs| {
            pairwise(plan, ins, arm, start, n, regs)
        });
    }
    let at = super::reduce::split(n);
    let (l, r) = rayon::join(
        || pairwise_split(plan, ins, arm, start, at, levels - 1),
        || pairwise_split(plan, ins, arm, start + at, n - at, levels - 1),
    );
    l + r
}

/// `reduce::pairwise_run` over region elements [start, start + n): each leaf block of
/// the tree is evaluated whole (registers `SUM_BLOCK` wide) and summed where it lies. A
/// last instruction that is an f32 vmath function is summed as it is computed (its leaf
/// sum kernel), which overlaps the additions with the function's arithmetic: param ->
/// exp -> sum of 1M went 1780 -> 2380 Melem/s by it (exp alone 3580; AMD EPYC, one thread).
fn pairwise(
    plan: &RegionReducePlan,
    ins: &Inputs,
    arm: crate::features::Arm,
    start: usize,
    n: usize,
    regs: &mut [f32],
) -> f32 {
    if n > SUM_BLOCK {
        let at = super::reduce::split(n);
        return pairwise(plan, ins, arm, start, at, regs) + pairwise(plan, ins, arm, start + at, n - at, regs);
    }
    let span = (start, n, SUM_BLOCK);
    match plan.last_unary {
        Some((sum, operand)) => {
            let count = plan.region.region.ops.len() - 1;
            sum(arm, evaluate_upto(&plan.region, ins, arm, span, regs, (count, operand)))
        }
        None => f32::sum_run(arm, evaluate(&plan.region, ins, arm, span, regs)),
    }
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
