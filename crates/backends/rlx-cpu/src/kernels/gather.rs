//! Row gather (semantics in `rlx_ir::ops::gather`).

use crate::buffer::{Args, Buffer, Class, index_at, out_mut};
use crate::with_class;
use rlx_ir::{Error, Result};

#[derive(Clone, Debug)]
pub struct GatherPlan {
    pub rows: usize,
    pub row_len: usize,
    /// The table, described for error messages.
    pub table: String,
}

pub fn gather(plan: &GatherPlan, class: Class, ins: &Args, out: &mut Buffer) -> Result<()> {
    let indices = ins.buf(1)?;
    with_class!(class, T => {
        let (table, out): (&[T], &mut [T]) = (ins.get(0)?, out_mut(out)?);
        let w = plan.row_len;
        for (pos, dst) in out.chunks_exact_mut(w.max(1)).enumerate().take(indices.len()) {
            let row = checked_index(indices, pos, plan.rows, &plan.table)?;
            if w > 0 {
                dst.copy_from_slice(&table[row * w..(row + 1) * w]);
            }
        }
        Ok(())
    })
}

/// Index `pos` of an integer buffer, checked against `0..len`.
pub fn checked_index(indices: &Buffer, pos: usize, len: usize, what: &str) -> Result<usize> {
    let v = index_at(indices, pos).ok_or_else(|| Error::internal("index operand is not integer storage"))?;
    usize::try_from(v)
        .ok()
        .filter(|&i| i < len)
        .ok_or_else(|| Error::runtime(format!("index {v} at position {pos} is out of range 0..{len} for {what}")))
}
