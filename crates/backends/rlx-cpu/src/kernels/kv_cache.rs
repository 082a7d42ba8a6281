//! KV-cache append (semantics in `rlx_ir::ops::kv_cache`).

use crate::buffer::{Args, Buffer, Class, index_at, out_mut};
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

pub fn kv_append(p: &KvAppendPlan, class: Class, ins: &Args, out: &mut Buffer) -> Result<()> {
    let pos = index_at(ins.buf(2)?, 0).ok_or_else(|| Error::internal("kv_append pos is not integer storage"))?;
    let start = usize::try_from(pos).ok().filter(|&s| s.checked_add(p.rows).is_some_and(|end| end <= p.capacity));
    let Some(start) = start else {
        return Err(Error::runtime(format!(
            "kv_append: writing {} rows at position {pos} overruns {} (capacity {})",
            p.rows, p.cache, p.capacity
        )));
    };
    with_class!(class, T => {
        let (cache, new, out): (&[T], &[T], &mut [T]) = (ins.get(0)?, ins.get(1)?, out_mut(out)?);
        out.copy_from_slice(cache);
        let chunk = p.rows * p.inner;
        for o in 0..p.outer {
            let dst = (o * p.capacity + start) * p.inner;
            out[dst..dst + chunk].copy_from_slice(&new[o * chunk..(o + 1) * chunk]);
        }
        Ok(())
    })
}
