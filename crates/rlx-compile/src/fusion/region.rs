//! Elementwise regions: chains of elementwise ops over f32-family values (f32, f16, bf16,
//! bool) become one step evaluated in one pass over memory.
//!
//! The region is analysed completely — membership, the step and input limits — before
//! anything is rewritten, so an over-limit chain splits into several regions and no step
//! is ever left reading a value nobody writes.

use super::{Facts, FusionLimits, rewrite};
use crate::schedule::{Kernel, Region, RegionOp, Schedule, Step, ValueId};
use rlx_ir::{DType, Op, Result};
use std::collections::HashMap;

fn f32_family(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16 | DType::Bool)
}

/// Whether step `i` can join a region.
fn candidate(s: &Schedule, i: usize) -> bool {
    let step = &s.steps[i];
    let elementwise =
        matches!(&step.kernel, Kernel::Op(Op::Binary(_) | Op::Compare(_) | Op::Where | Op::Unary(_) | Op::Cast { .. }));
    elementwise
        && step.inputs.iter().chain(&step.outputs).all(|&v| f32_family(s.values[v].dtype))
        // Arithmetic on bools is not defined; a bool only flows into where / cast / compare.
        && !(matches!(&step.kernel, Kernel::Op(Op::Binary(_) | Op::Unary(_))) && s.values[step.outputs[0]].dtype == DType::Bool)
}

pub fn form_regions(s: &mut Schedule, limits: &FusionLimits, log: &mut Vec<String>) -> Result<()> {
    let facts = Facts::of(s);
    let n = s.steps.len();
    let mut absorbed = vec![false; n];
    let mut regions: Vec<Vec<usize>> = Vec::new();
    for tail in (0..n).rev() {
        if absorbed[tail] || !candidate(s, tail) {
            continue;
        }
        let out = s.steps[tail].outputs[0];
        let dims = s.values[out].dims.clone();
        let mut members = vec![tail];
        let mut declined: Vec<String> = Vec::new();
        loop {
            let mut grew = false;
            let frontier: Vec<ValueId> = members.iter().flat_map(|&m| s.steps[m].inputs.clone()).collect();
            for v in frontier {
                let Some(p) = facts.producers[v] else { continue };
                if members.contains(&p) || absorbed[p] || !candidate(s, p) {
                    continue;
                }
                if s.values[v].dims != dims {
                    continue; // a broadcast operand: the region loads it
                }
                if let Some(why) = facts.absorb_blocker(s, v, &members) {
                    declined.push(why);
                    continue;
                }
                if members.len() + 1 > limits.max_ops {
                    declined.push(format!("step {p} would exceed the {}-op limit", limits.max_ops));
                    continue;
                }
                let mut trial = members.clone();
                trial.push(p);
                let inputs = external_inputs(s, &trial, &facts);
                if inputs.len() > limits.max_inputs {
                    declined.push(format!("step {p} would need {} inputs (limit {})", inputs.len(), limits.max_inputs));
                    continue;
                }
                members = trial;
                grew = true;
            }
            if !grew {
                break;
            }
        }
        if members.len() < 2 {
            continue;
        }
        members.sort_unstable();
        for &m in &members {
            absorbed[m] = true;
        }
        declined.dedup();
        let reasons =
            if declined.is_empty() { String::new() } else { format!("; stopped at: {}", declined.join("; ")) };
        log.push(format!("anchor step {tail} ({}): fused {} ops{reasons}", s.describe(out), members.len()));
        regions.push(members);
    }
    let mut replace: Vec<Option<Step>> = vec![None; n];
    let mut remove = vec![false; n];
    for members in regions {
        let tail = *members.last().expect("a region has members");
        let (region, inputs) = build(s, &members, &facts);
        for &m in &members[..members.len() - 1] {
            remove[m] = true;
        }
        replace[tail] = Some(Step {
            kernel: Kernel::Region(region),
            inputs,
            outputs: s.steps[tail].outputs.clone(),
            temps: Vec::new(),
            nodes: members.iter().flat_map(|&m| s.steps[m].nodes.clone()).collect(),
        });
    }
    rewrite(s, replace, &remove);
    Ok(())
}

/// Values the members read that no member writes, in first-use order.
fn external_inputs(s: &Schedule, members: &[usize], facts: &Facts) -> Vec<ValueId> {
    let mut sorted = members.to_vec();
    sorted.sort_unstable();
    let mut inputs = Vec::new();
    for &m in &sorted {
        for &v in &s.steps[m].inputs {
            let inside = facts.producers[v].is_some_and(|p| sorted.contains(&p));
            if !inside && !inputs.contains(&v) {
                inputs.push(v);
            }
        }
    }
    inputs
}

/// The region program of `members` (sorted, so in execution order) and its inputs.
fn build(s: &Schedule, members: &[usize], facts: &Facts) -> (Region, Vec<ValueId>) {
    let inputs = external_inputs(s, members, facts);
    let mut ops: Vec<(RegionOp, DType)> = Vec::new();
    let mut reg: HashMap<ValueId, usize> = HashMap::new();
    for (k, &v) in inputs.iter().enumerate() {
        reg.insert(v, ops.len());
        ops.push((RegionOp::Load(k), s.values[v].dtype));
    }
    for &m in members {
        let step = &s.steps[m];
        let r: Vec<usize> = step.inputs.iter().map(|v| reg[v]).collect();
        let out = step.outputs[0];
        let op = match &step.kernel {
            Kernel::Op(Op::Binary(b)) => RegionOp::Binary(*b, r[0], r[1]),
            Kernel::Op(Op::Compare(c)) => RegionOp::Compare(*c, r[0], r[1]),
            Kernel::Op(Op::Where) => RegionOp::Where(r[0], r[1], r[2]),
            Kernel::Op(Op::Unary(u)) => RegionOp::Unary(*u, r[0]),
            _ => RegionOp::Cast(r[0]),
        };
        reg.insert(out, ops.len());
        ops.push((op, s.values[out].dtype));
    }
    let result = ops.len() - 1;
    (Region { ops, result }, inputs)
}

/// Region + reduce: a reduction whose operand is written by an elementwise region (or one
/// elementwise op) that nothing else reads becomes one `Kernel::RegionReduce` step, so the
/// operand is folded block by block as it is computed and never stored. Only reductions
/// whose outputs each fold one contiguous run (the reduced axes trailing, size-1 axes
/// aside) are fused: the common case (losses, means, softmax sums), and the one whose
/// order of additions the fused kernel reproduces exactly.
pub fn fuse_reductions(s: &mut Schedule, _: &FusionLimits, log: &mut Vec<String>) -> Result<()> {
    let facts = Facts::of(s);
    let n = s.steps.len();
    let mut replace: Vec<Option<Step>> = vec![None; n];
    let mut remove = vec![false; n];
    for i in 0..n {
        let step = &s.steps[i];
        let Kernel::Op(Op::Reduce { op, axes, .. }) = &step.kernel else { continue };
        let v = step.inputs[0];
        if !matches!(s.values[v].dtype, DType::F32 | DType::F16 | DType::BF16) || !trailing(&s.values[v].dims, axes) {
            continue;
        }
        let Some(p) = facts.producers[v] else { continue };
        if remove[p] || replace[p].is_some() {
            continue;
        }
        let (region, inputs) = match &s.steps[p].kernel {
            Kernel::Region(r) => (r.clone(), s.steps[p].inputs.clone()),
            _ if candidate(s, p) => build(s, &[p], &facts),
            _ => continue,
        };
        if let Some(why) = facts.absorb_blocker(s, v, &[p, i]) {
            log.push(format!("step {i} ({}): not fused: {why}", s.describe(step.outputs[0])));
            continue;
        }
        log.push(format!(
            "step {i} ({}): {} fused with its operand's {} ops",
            s.describe(step.outputs[0]),
            op.name(),
            region.ops.len() - inputs.len()
        ));
        remove[p] = true;
        replace[i] = Some(Step {
            kernel: Kernel::RegionReduce { region, dims: s.values[v].dims.clone(), op: *op },
            inputs,
            outputs: step.outputs.clone(),
            temps: Vec::new(),
            nodes: s.steps[p].nodes.iter().chain(&step.nodes).copied().collect(),
        });
    }
    rewrite(s, replace, &remove);
    Ok(())
}

/// Whether reducing `axes` of `dims` folds contiguous runs: every reduced axis of extent
/// above 1 comes after every kept one.
fn trailing(dims: &[usize], axes: &[usize]) -> bool {
    let live = (0..dims.len()).filter(|&a| dims[a] != 1);
    let first_reduced = live.clone().find(|a| axes.contains(a)).unwrap_or(dims.len());
    live.filter(|a| !axes.contains(a)).all(|a| a < first_reduced)
}
