//! What a compiled graph costs on a backend, before anything runs (`rlx check`).

use crate::memory::MemoryPlan;
use crate::schedule::{Schedule, ValueKind};

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

pub fn budget(s: &Schedule, plan: &MemoryPlan) -> Budget {
    let bytes = |v: usize| plan.slots[v].map_or(0, |slot| slot.bytes);
    let native = |v: usize| s.values[v].numel() * s.values[v].dtype.size_bytes();
    let materialized = || (0..s.values.len()).filter(|&v| plan.slots[v].is_some() && plan.storage[v] == v);
    let executed = || s.steps.iter().enumerate().filter(|(i, _)| !plan.views[*i]);
    Budget {
        arena_bytes: plan.arena_bytes,
        reuse_saved_bytes: plan.unshared_bytes.saturating_sub(plan.arena_bytes),
        width_overhead_bytes: materialized().map(|v| bytes(v).saturating_sub(native(v))).sum(),
        boundary_bytes_per_run: s.inputs.iter().chain(&s.outputs).map(|&v| native(v)).sum(),
        param_bytes: materialized()
            .filter(|&v| matches!(s.values[v].kind, ValueKind::Param { .. } | ValueKind::Constant(_)))
            .filter(|&v| plan.slots[v].is_some_and(|slot| slot.param.is_none()))
            .map(bytes)
            .sum::<usize>()
            + plan.param_bytes.iter().sum::<usize>(),
        dispatches: executed().count(),
        bytes_moved: executed()
            .map(|(_, st)| st.inputs.iter().chain(&st.outputs).chain(&st.temps).map(|&v| bytes(v)).sum::<usize>())
            .sum(),
    }
}
