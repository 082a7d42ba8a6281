//! Row gather (semantics in `rlx_ir::ops::gather`).

use crate::arena::{Args, Out, out_mut};
use crate::buffer::Class;
use crate::with_class;
use rlx_ir::{Error, Result};

#[derive(Clone, Debug)]
pub struct GatherPlan {
    pub rows: usize,
    pub row_len: usize,
    /// The table, described for error messages.
    pub table: String,
}

pub fn gather(plan: &GatherPlan, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    let count = ins.slot(1)?.len;
    let w = plan.row_len;
    // A packed f16/bf16 table (an embedding kept in 2 bytes): rows widened as copied.
    if class.is_packed_half() {
        let out: &mut [f32] = out_mut(out)?;
        for pos in 0..count {
            let row = checked_index(ins, 1, pos, plan.rows, &plan.table)?;
            let dst = &mut out[pos * w..(pos + 1) * w];
            match class {
                Class::F16 => super::half_gemm::widen_f16(&ins.get::<half::f16>(0)?[row * w..(row + 1) * w], dst),
                _ => super::half_gemm::widen_bf16(&ins.get::<half::bf16>(0)?[row * w..(row + 1) * w], dst),
            }
        }
        return Ok(());
    }
    with_class!(class, T => {
        let (table, out): (&[T], &mut [T]) = (ins.get(0)?, out_mut(out)?);
        for pos in 0..count {
            let row = checked_index(ins, 1, pos, plan.rows, &plan.table)?;
            out[pos * w..(pos + 1) * w].copy_from_slice(&table[row * w..(row + 1) * w]);
        }
        Ok(())
    })
}

/// Element `pos` of integer operand `operand`, checked against `0..len`.
pub fn checked_index(ins: &Args, operand: usize, pos: usize, len: usize, what: &str) -> Result<usize> {
    let v = ins.index(operand, pos)?;
    usize::try_from(v)
        .ok()
        .filter(|&i| i < len)
        .ok_or_else(|| Error::runtime(format!("index {v} at position {pos} is out of range 0..{len} for {what}")))
}

#[derive(Clone, Debug)]
pub struct ScatterPlan {
    pub rows: usize,
    pub row_len: usize,
}

/// Zeros, then each update row added at its index, in index order (repeats accumulate in
/// a fixed order: the result does not depend on threads).
pub fn scatter_add(plan: &ScatterPlan, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    let count = ins.slot(0)?.len;
    with_class!(class, T => {
        let (updates, out): (&[T], &mut [T]) = (ins.get(1)?, out_mut(out)?);
        out.fill(<T as crate::buffer::Num>::ZERO);
        let w = plan.row_len;
        for pos in 0..count {
            let row = checked_index(ins, 0, pos, plan.rows, "scatter_add's table")?;
            for (o, &u) in out[row * w..(row + 1) * w].iter_mut().zip(&updates[pos * w..(pos + 1) * w]) {
                *o = crate::buffer::Num::add(*o, u);
            }
        }
        Ok(())
    })
}
