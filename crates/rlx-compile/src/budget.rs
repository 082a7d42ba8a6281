//! What a compiled graph costs on a backend, before anything runs (`rlx check`).

use crate::memory::MemoryPlan;
use crate::schedule::{Schedule, ValueKind};
use rlx_ir::{Error, Result};

/// Every figure is in bytes except `dispatches`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    /// The one arena the runtime allocates.
    pub arena_bytes: usize,
    /// Arena bytes saved by reusing dead buffers (and by views and in-place steps).
    pub reuse_saved_bytes: usize,
    /// Extra bytes the width policy spends storing f16/bf16 values widened.
    pub width_overhead_bytes: usize,
    /// Bytes copied across the host boundary per run: inputs in, outputs out.
    pub boundary_bytes_per_run: usize,
    /// Bytes of params (in the arena, or in their own buffers where the target keeps them
    /// outside) and constants (in the arena).
    pub param_bytes: usize,
    /// Kernel calls per run (views cost none).
    pub dispatches: usize,
    /// Estimated bytes kernels read and write per run.
    pub bytes_moved: usize,
}

/// Totals saturate: a plan near the address space's size must print a large number, not
/// a wrapped one.
pub fn budget(s: &Schedule, plan: &MemoryPlan) -> Budget {
    let total = |it: &mut dyn Iterator<Item = usize>| it.fold(0usize, usize::saturating_add);
    let bytes = |v: usize| plan.slots[v].map_or(0, |slot| slot.bytes);
    let native = |v: usize| s.values[v].numel() * s.values[v].dtype.size_bytes();
    let materialized = || (0..s.values.len()).filter(|&v| plan.slots[v].is_some() && plan.storage[v] == v);
    let executed = || s.steps.iter().enumerate().filter(|(i, _)| !plan.views[*i]);
    Budget {
        arena_bytes: plan.arena_bytes,
        reuse_saved_bytes: plan.unshared_bytes.saturating_sub(plan.arena_bytes),
        width_overhead_bytes: total(&mut materialized().map(|v| bytes(v).saturating_sub(native(v)))),
        boundary_bytes_per_run: total(&mut s.inputs.iter().chain(&s.outputs).map(|&v| native(v))),
        param_bytes: total(
            &mut materialized()
                .filter(|&v| matches!(s.values[v].kind, ValueKind::Param { .. } | ValueKind::Constant(_)))
                .filter(|&v| plan.slots[v].is_some_and(|slot| slot.param.is_none()))
                .map(bytes)
                .chain(plan.param_bytes.iter().copied()),
        ),
        dispatches: executed().count(),
        bytes_moved: total(
            &mut executed()
                .map(|(_, st)| total(&mut st.inputs.iter().chain(&st.outputs).chain(&st.temps).map(|&v| bytes(v)))),
        ),
    }
}

/// Refuses a plan whose host memory (the arena, params in their own buffers, and one
/// run's outputs) exceeds `limit` bytes, naming the largest tensor: allocating it would
/// abort the process (Rust aborts on a failed infallible allocation) or swap.
pub fn check_memory(s: &Schedule, plan: &MemoryPlan, limit: u64) -> Result<()> {
    let native = |v: usize| s.values[v].numel() as u128 * s.values[v].dtype.size_bytes() as u128;
    let params: u128 = plan.param_bytes.iter().map(|&b| b as u128).sum();
    let outputs: u128 = s.outputs.iter().map(|&v| native(v)).sum();
    let total = plan.arena_bytes as u128 + params + outputs;
    if total <= limit as u128 {
        return Ok(());
    }
    let largest =
        (0..s.values.len()).filter(|&v| plan.slots[v].is_some() || s.outputs.contains(&v)).max_by_key(|&v| native(v));
    let culprit =
        largest.map_or(String::new(), |v| format!("; the largest tensor is {} ({} bytes)", s.describe(v), native(v)));
    Err(Error::runtime(format!(
        "graph '{}' needs {total} bytes of memory (arena {}, params {params}, outputs {outputs}), over the {limit} \
         bytes available{culprit} (set RLX_MEMORY_LIMIT to change the limit)",
        s.name, plan.arena_bytes
    )))
}
