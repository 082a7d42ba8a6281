//! RLX's compiler: a verified graph in, a schedule of fused kernel steps and a memory plan
//! over one arena out, with a log of every decision and a budget of what it costs.
//!
//! Pipeline: IR passes (`pass`, `passes/`: dce, cse, const_fold, simplify, dce; then,
//! under a mixed precision policy, mixed-precision, const_fold, simplify, cse, dce) ->
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
pub use memory::{ArenaWidthPolicy, MemoryPlan, PackedOperand, Slot, check_plan, plan_memory};
pub use options::{CompileOptions, PrecisionPolicy, parse_bytes};
pub use pass::{PassLog, Pipeline};
pub use schedule::{Kernel, Region, RegionOp, Schedule, Step, Value, ValueId, ValueKind};

use rlx_ir::{Graph, Result};

/// What the compiler knows about a backend.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub name: &'static str,
    pub width_policy: ArenaWidthPolicy,
    /// Which kernel operands the backend reads from packed f16/bf16 storage (the width
    /// policy keeps a half param packed only when all its readers are such operands).
    pub packed_operand: PackedOperand,
    pub fusion_limits: FusionLimits,
    /// Params get buffers of their own instead of arena bytes (see `memory`).
    pub params_outside_arena: bool,
}

impl Target {
    /// The CPU: f16/bf16 activations computed in f32 buffers, f16/bf16 weights packed
    /// where only matmuls, gathers and casts read them; regions up to 32 ops and 8 inputs
    /// (a block of 256 elements times 40 registers is 40 KiB of scratch, inside L1+L2),
    /// a region feeding a reduction evaluated inside it; params in their own buffers (weights mapped from a GGUF file, shared KV caches).
    pub const CPU: Target = Target {
        name: "cpu",
        width_policy: ArenaWidthPolicy::NativeHalfWidened,
        packed_operand: cpu_packed_operand,
        fusion_limits: FusionLimits { max_ops: 32, max_inputs: 8, patterns: true, region_reduce: true },
        params_outside_arena: true,
    };

    /// A GPU through WGSL (rlx-wgpu): 32-bit words for every sub-word type except
    /// quantized weight bytes, which the dequantizing kernels read packed; elementwise
    /// regions up to 32 ops and 6 inputs (each a generated shader; 6 inputs, the output
    /// and the metadata are the 8 storage buffers every WebGPU device binds); no pattern
    /// fusions and no region+reduce (no fused kernels to run them yet); params in buffers of their own
    /// (set_param uploads one param, a KV cache is updated in place).
    pub const GPU: Target = Target {
        name: "gpu",
        width_policy: ArenaWidthPolicy::Words32,
        packed_operand: gpu_packed_operand,
        fusion_limits: FusionLimits { max_ops: 32, max_inputs: 6, patterns: false, region_reduce: false },
        params_outside_arena: true,
    };

    /// This target with another width policy (what `rlx check` prices the policy against).
    pub fn with_width_policy(mut self, policy: ArenaWidthPolicy) -> Target {
        self.width_policy = policy;
        self
    }

    pub fn by_name(name: &str) -> Option<Target> {
        match name {
            "cpu" => Some(Target::CPU),
            "gpu" => Some(Target::GPU),
            _ => None,
        }
    }
}

/// The CPU's packed-operand kernels: the matmul family's operands (its half GEMM converts
/// panels as it packs them), a gather's table (rows widened as they are copied), a cast's
/// source, a KV cache (appended to in place, so an f16 cache takes half the memory) and
/// attention's K and V (the rows a query sees widened as they are read).
fn cpu_packed_operand(kernel: &Kernel, operand: usize) -> bool {
    use rlx_ir::Op;
    match kernel {
        Kernel::Op(Op::MatMul) | Kernel::MatMulT { .. } => operand < 2,
        Kernel::MatMulBias { .. } => operand < 2,
        Kernel::SwiGluMatMul => operand < 3,
        Kernel::Op(Op::Gather | Op::Cast { .. } | Op::KvAppend { .. }) => operand == 0,
        Kernel::Op(Op::Attention { .. }) => operand == 1 || operand == 2,
        _ => false,
    }
}

/// The GPU's packed operands: the weight bytes of quantized matmuls and dequantize.
fn gpu_packed_operand(kernel: &Kernel, operand: usize) -> bool {
    use rlx_ir::Op;
    match kernel {
        Kernel::Op(Op::DequantMatMul { .. }) => operand == 1,
        Kernel::Op(Op::Dequantize { .. }) => operand == 0,
        _ => false,
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
    let mut optimized = Pipeline::named("default").expect("the default pipeline exists").run(graph, &mut log)?;
    if let Some(half) = options.precision.half() {
        optimized = Pipeline::mixed(half).run(&optimized, &mut log)?;
    }
    let mut schedule = Schedule::lower(&optimized)?;
    let limits = resolve_fusion_limits(target, options);
    fusion::fuse(&mut schedule, &limits, &mut log.notes)?;
    schedule.verify()?;
    let plan = plan_memory(
        &schedule,
        (target.width_policy, target.packed_operand),
        options.memory_reuse,
        target.params_outside_arena,
    )?;
    if let Some(limit) = options.memory_limit {
        budget::check_memory(&schedule, &plan, limit)?;
    }
    if options.fusion_log {
        for line in &log.notes {
            eprintln!("[rlx fusion] {line}");
        }
    }
    Ok(Compiled { graph: optimized, schedule, plan, limits, log })
}
