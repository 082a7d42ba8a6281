//! KV-cache append (semantics in `rlx_ir::ops::kv_cache`).

use crate::arena::{Args, Out, out_mut};
use crate::buffer::Class;
use crate::with_class;
use rlx_ir::{Error, Result};

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
    // and are narrowed as they are written, exactly.
    if matches!(class, Class::F16 | Class::BF16) {
        let new: &[f32] = ins.get(1)?;
        return match class {
            Class::F16 => append_narrowed::<half::f16>(p, start, in_place, ins, out, new, super::half_gemm::narrow_f16),
            _ => append_narrowed::<half::bf16>(p, start, in_place, ins, out, new, |src, dst| {
                dst.iter_mut().zip(src).for_each(|(d, &v)| *d = half::bf16::from_f32(v))
            }),
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

/// `kv_append` into a packed half cache from widened rows.
fn append_narrowed<H: crate::buffer::Elem>(
    p: &KvAppendPlan,
    start: usize,
    in_place: bool,
    ins: &Args,
    out: &mut Out,
    new: &[f32],
    narrow: fn(&[f32], &mut [H]),
) -> Result<()> {
    let out: &mut [H] = out_mut(out)?;
    if !in_place {
        out.copy_from_slice(ins.get(0)?);
    }
    let chunk = p.rows * p.inner;
    for o in 0..p.outer {
        let dst = (o * p.capacity + start) * p.inner;
        narrow(&new[o * chunk..(o + 1) * chunk], &mut out[dst..dst + chunk]);
    }
    Ok(())
}
