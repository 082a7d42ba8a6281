//! Fusion passes over a schedule: pattern fusions first, then elementwise regions.
//!
//! Legality, for every pass: a fusion absorbs a value (stops writing it to memory) only if
//! every step that reads it is inside the fused window, judged from the schedule's
//! complete reader lists, and the value is not a graph output. Two readers both inside
//! the window are fine. A fusion that can *emit* the value instead (one writer, the fused
//! step) does so rather than decline.

mod patterns;
mod region;

use crate::schedule::{Schedule, Step, ValueId};
use crate::{CompileOptions, Target};
use rlx_ir::Result;

/// Bounds on one elementwise region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FusionLimits {
    /// Most ops (not counting loads) in one region; 1 disables regions.
    pub max_ops: usize,
    /// Most distinct values a region reads.
    pub max_inputs: usize,
    /// Whether pattern fusions (matmul+bias+act, swiglu, add+norm, ...) run.
    pub patterns: bool,
    /// Whether an elementwise chain feeding a reduction over trailing axes is evaluated
    /// inside the reduction (`Kernel::RegionReduce`) instead of written out.
    pub region_reduce: bool,
}

impl FusionLimits {
    pub const NONE: FusionLimits = FusionLimits { max_ops: 1, max_inputs: 0, patterns: false, region_reduce: false };

    /// Registers a region evaluator needs at most: one per load and one per op.
    pub fn max_registers(&self) -> usize {
        self.max_ops + self.max_inputs
    }
}

/// THE place fusion limits come from: the target's limits, or none when fusion is off.
/// Every consumer (the passes, each backend's region evaluator and its scratch) reads
/// the resolved value, so a limit cannot be enforced in one place and forgotten in another.
pub fn resolve_fusion_limits(target: &Target, options: &CompileOptions) -> FusionLimits {
    if options.fusion { target.fusion_limits } else { FusionLimits::NONE }
}

/// Runs every fusion pass allowed by `limits`, verifying the schedule after each.
pub fn fuse(s: &mut Schedule, limits: &FusionLimits, log: &mut Vec<String>) -> Result<()> {
    type PassFn = fn(&mut Schedule, &FusionLimits, &mut Vec<String>) -> Result<()>;
    let mut passes: Vec<(&str, PassFn)> = Vec::new();
    if limits.patterns {
        passes.extend([
            ("matmul_bias_act", patterns::matmul_bias_act as PassFn),
            ("transpose_matmul", patterns::transpose_matmul),
            ("swiglu", patterns::swiglu),
            ("add_norm", patterns::add_norm),
            ("rms_norm_mul_silu", patterns::rms_norm_mul_silu),
            ("l2_norm", patterns::l2_norm),
            ("norm_reshape", patterns::norm_reshape),
        ]);
    }
    if limits.max_ops > 1 {
        passes.push(("elementwise_regions", region::form_regions));
    }
    if limits.region_reduce {
        passes.push(("region_reduce", region::fuse_reductions));
    }
    for (name, pass) in passes {
        let mut lines = Vec::new();
        pass(s, limits, &mut lines)?;
        log.extend(lines.into_iter().map(|l| format!("{name}: {l}")));
        if cfg!(debug_assertions) {
            s.verify().map_err(|e| e.context(format!("verifier after fusion pass {name}")))?;
        }
    }
    Ok(())
}

/// Read-only facts fusion passes decide with.
pub(crate) struct Facts {
    pub readers: Vec<Vec<usize>>,
    pub producers: Vec<Option<usize>>,
}

impl Facts {
    pub fn of(s: &Schedule) -> Facts {
        Facts { readers: s.readers(), producers: s.producers() }
    }

    /// Why `v` cannot be absorbed into a window of `steps`, if it cannot.
    pub fn absorb_blocker(&self, s: &Schedule, v: ValueId, window: &[usize]) -> Option<String> {
        if s.is_output(v) {
            return Some(format!("{} is a graph output", s.describe(v)));
        }
        let outside: Vec<usize> = self.readers[v].iter().copied().filter(|r| !window.contains(r)).collect();
        (!outside.is_empty())
            .then(|| format!("{} is also read by step(s) {outside:?} outside the window", s.describe(v)))
    }

    /// The step that writes `v` if it is a plain IR op.
    pub fn producer_op<'a>(&self, s: &'a Schedule, v: ValueId) -> Option<(usize, &'a rlx_ir::Op)> {
        let p = self.producers[v]?;
        match &s.steps[p].kernel {
            crate::schedule::Kernel::Op(op) => Some((p, op)),
            _ => None,
        }
    }
}

/// Replaces steps: `replace[i] = Some(step)` puts `step` at position i, `remove[i]` drops
/// step i. Positions keep execution order valid as long as each fused step sits at its
/// window's last step.
pub(crate) fn rewrite(s: &mut Schedule, mut replace: Vec<Option<Step>>, remove: &[bool]) {
    let old = std::mem::take(&mut s.steps);
    s.steps = old
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !remove[*i])
        .map(|(i, step)| replace[i].take().unwrap_or(step))
        .collect();
}
