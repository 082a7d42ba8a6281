//! KV-cache append (semantics in `rlx_ir::ops::kv_cache`).

use super::elementwise::narrow_to_half;
use crate::arena::{Args, Out, out_mut};
use crate::buffer::Class;
use crate::with_class;
use half::slice::HalfFloatSliceExt;
use rlx_ir::{DType, Error, Result};

#[derive(Clone, Debug)]
pub struct KvAppendPlan {
    pub outer: usize,
    pub capacity: usize,
    pub rows: usize,
    pub inner: usize,
    pub cache: String,
}

/// With `in_place`, the output already holds the cache (the planner gave them one buffer),
/// so only the new rows are written: a decode step costs its new rows, not the cache.
pub fn kv_append(p: &KvAppendPlan, class: Class, in_place: bool, ins: &Args, out: &mut Out) -> Result<()> {
    let pos = ins.index(2, 0)?;
    let start = usize::try_from(pos).ok().filter(|&s| s.checked_add(p.rows).is_some_and(|end| end <= p.capacity));
    let Some(start) = start else {
        return Err(Error::runtime(format!(
            "kv_append: writing {} rows at position {pos} overruns {} (capacity {})",
            p.rows, p.cache, p.capacity
        )));
    };
    // A packed half cache: the new rows come widened (f32 storage holding half values)
    // and are narrowed as they are written, exactly (F16C eight at a time: `half`'s
    // one-value conversion cost ~1.6 us per append of 192 values).
    if matches!(class, Class::F16 | Class::BF16) {
        let new: &[f32] = ins.get(1)?;
        return match class {
            Class::F16 => append_narrowed::<half::f16>(p, start, in_place, ins, out, new, DType::F16),
            _ => append_narrowed::<half::bf16>(p, start, in_place, ins, out, new, DType::BF16),
        };
    }
    with_class!(class, T => {
        let new: &[T] = ins.get(1)?;
        let out: &mut [T] = out_mut(out)?;
        if !in_place {
            out.copy_from_slice(ins.get(0)?);
        }
        let chunk = p.rows * p.inner;
        for o in 0..p.outer {
            let dst = (o * p.capacity + start) * p.inner;
            out[dst..dst + chunk].copy_from_slice(&new[o * chunk..(o + 1) * chunk]);
        }
        Ok(())
    })
}

/// `kv_append` into a packed half cache (`dtype`, stored as `H`) from widened rows.
fn append_narrowed<H: crate::buffer::Elem>(
    p: &KvAppendPlan,
    start: usize,
    in_place: bool,
    ins: &Args,
    out: &mut Out,
    new: &[f32],
    dtype: DType,
) -> Result<()>
where
    [H]: HalfFloatSliceExt,
{
    let out: &mut [H] = out_mut(out)?;
    if !in_place {
        out.copy_from_slice(ins.get(0)?);
    }
    let chunk = p.rows * p.inner;
    for o in 0..p.outer {
        let dst = (o * p.capacity + start) * p.inner;
        narrow_to_half(dtype, &new[o * chunk..(o + 1) * chunk], out[dst..dst + chunk].reinterpret_cast_mut());
    }
    Ok(())
}
