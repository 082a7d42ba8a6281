//! RLX's compiler: a verified graph in, a schedule of fused kernel steps and a memory plan
//! over one arena out, with a log of every decision and a budget of what it costs.
//!
//! Pipeline: IR passes (`pass`, `passes/`: dce, cse, const_fold, simplify, dce) ->
//! lowering (`schedule`) -> fusion (`fusion/`: patterns, then elementwise regions) ->
//! memory planning (`memory`) -> budget (`budget`).
//!
//! Architecture invariant: rlx-compile depends on rlx-ir only. It knows targets by the
//! facts in [`Target`] (width policy, fusion limits), never by linking a backend.

pub mod budget;
pub mod fusion;
pub mod memory;
mod options;
pub mod pass;
pub mod passes;
pub mod schedule;

pub use budget::{Budget, budget};
pub use fusion::{FusionLimits, resolve_fusion_limits};
pub use memory::{ArenaWidthPolicy, MemoryPlan, Slot, check_plan, plan_memory};
pub use options::{CompileOptions, PrecisionPolicy};
pub use pass::{PassLog, Pipeline};
pub use schedule::{Kernel, Region, RegionOp, Schedule, Step, Value, ValueId, ValueKind};

use rlx_ir::{Graph, Result};

/// What the compiler knows about a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub name: &'static str,
    pub width_policy: ArenaWidthPolicy,
    pub fusion_limits: FusionLimits,
    /// Params get buffers of their own instead of arena bytes (see `memory`).
    pub params_outside_arena: bool,
}

impl Target {
    /// The CPU: f16/bf16 computed in f32 buffers; regions up to 32 ops and 8 inputs
    /// (a block of 256 elements times 40 registers is 40 KiB of scratch, inside L1+L2);
    /// params in their own buffers (weights mapped from a GGUF file, shared KV caches).
    pub const CPU: Target = Target {
        name: "cpu",
        width_policy: ArenaWidthPolicy::F32Uniform,
        fusion_limits: FusionLimits { max_ops: 32, max_inputs: 8, patterns: true },
        params_outside_arena: true,
    };

    pub fn by_name(name: &str) -> Option<Target> {
        match name {
            "cpu" => Some(Target::CPU),
            _ => None,
        }
    }
}

/// A graph compiled for a target.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The graph after the IR passes.
    pub graph: Graph,
    pub schedule: Schedule,
    pub plan: MemoryPlan,
    pub limits: FusionLimits,
    pub log: PassLog,
}

impl Compiled {
    pub fn budget(&self) -> Budget {
        budget(&self.schedule, &self.plan)
    }
}

/// Verifies, optimizes, lowers, fuses and plans `graph` for `target`.
pub fn compile(graph: &Graph, target: &Target, options: &CompileOptions) -> Result<Compiled> {
    graph.verify()?;
    let mut log = PassLog::default();
    let optimized = Pipeline::named("default").expect("the default pipeline exists").run(graph, &mut log)?;
    let mut schedule = Schedule::lower(&optimized)?;
    let limits = resolve_fusion_limits(target, options);
    fusion::fuse(&mut schedule, &limits, &mut log.notes)?;
    schedule.verify()?;
    let plan = plan_memory(&schedule, target.width_policy, options.memory_reuse, target.params_outside_arena)?;
    if options.fusion_log {
        for line in &log.notes {
            eprintln!("[rlx fusion] {line}");
        }
    }
    Ok(Compiled { graph: optimized, schedule, plan, limits, log })
}
