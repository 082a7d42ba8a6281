//! Control flow: If (a condition known at compile time imports one branch; a runtime
//! condition imports both and selects elementwise where their outputs agree in shape),
//! Scan and Loop, unrolled at import: shapes are static, so a Scan's length is known, and a
//! Loop runs as long as its trip count and condition, which must then be known at import
//! (the model specializes on the small integer or bool inputs they come from). Unrolling
//! imports the body once per step in a scope of its own, so bodies that read outer-scope
//! values need no plumbing; the graph grows with the step count, which is capped.

use super::{OpDef, axis, def};
use crate::import::{Importer, Node};
use crate::proto::GraphProto;
use crate::tensor::to_host;
use rlx_ir::{DType, Error, HostTensor, NodeId, Result};

pub const OPS: &[OpDef] = &[def("If", 1, if_), def("Scan", 8, scan8), def("Scan", 9, scan), def("Loop", 1, loop_)];

/// Most body imports one Scan or Loop unrolls into.
const MAX_STEPS: usize = 1 << 14;

/// Binds a subgraph's own initializers in the current scope, as constants (a subgraph is
/// imported once per branch taken or step unrolled, so its tensors are not params).
fn define_initializers(i: &mut Importer, g: &GraphProto) -> Result<()> {
    if !g.sparse_initializer.is_empty() {
        return Err(Error::unsupported("sparse initializers in a subgraph"));
    }
    for t in &g.initializer {
        let value = to_host(t, i.external()).map_err(|e| e.context(format!("initializer '{}'", t.name())))?;
        let id = i.g.constant_tensor(value)?;
        i.define(t.name(), id);
    }
    Ok(())
}

fn branch(i: &mut Importer, n: &Node, name: &str) -> Result<Vec<NodeId>> {
    let g = n.graph(name)?;
    i.scoped(|i| {
        define_initializers(i, g)?;
        i.import_nodes(g)?;
        g.output.iter().map(|o| i.value(o.name())).collect()
    })
    .map_err(|e| e.context(format!("branch '{name}'")))
}

fn if_(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let cond = i.input(n, 0)?;
    // A condition only known at run time also names the inputs it depends on as wanted:
    // when a branch then fails to import (a shape check the other branch rules out, as in
    // Silero's 8k / 16k branches), the model specializes on them and the If folds.
    if let Ok(c) = i.const_input(n, 0, cond) {
        let v = c.to_f64_vec();
        if v.len() != 1 {
            return Err(Error::shape(format!("the condition must hold one element, got {:?}", c.dims())));
        }
        return branch(i, n, if v[0] != 0.0 { "then_branch" } else { "else_branch" });
    }
    let then = branch(i, n, "then_branch")?;
    let other = branch(i, n, "else_branch")?;
    if then.len() != other.len() {
        return Err(Error::graph(format!("the branches have {} and {} outputs", then.len(), other.len())));
    }
    let c = if i.g.dims(cond).is_empty() { cond } else { i.g.reshape(cond, &[])? };
    then.iter()
        .zip(&other)
        .enumerate()
        .map(|(k, (&a, &b))| {
            if i.g.dims(a) != i.g.dims(b) || i.g.dtype(a) != i.g.dtype(b) {
                return Err(Error::unsupported(format!(
                    "output {k} of the branches differs ({} vs {}) and the condition is only known at run time",
                    i.g.describe(a),
                    i.g.describe(b)
                )));
            }
            i.g.where_(c, a, b)
        })
        .collect()
}

/// Imports `body` once with its inputs bound to `inputs`; returns its outputs.
fn step(i: &mut Importer, body: &GraphProto, inputs: &[NodeId]) -> Result<Vec<NodeId>> {
    if body.input.len() != inputs.len() {
        return Err(Error::graph(format!("the body takes {} inputs, {} are given", body.input.len(), inputs.len())));
    }
    i.scoped(|i| {
        define_initializers(i, body)?;
        for (v, &id) in body.input.iter().zip(inputs) {
            i.define(v.name(), id);
        }
        i.import_nodes(body)?;
        body.output.iter().map(|o| i.value(o.name())).collect()
    })
}

/// `x` with a unit axis inserted at `at`.
fn unsqueeze(i: &mut Importer, x: NodeId, at: usize) -> Result<NodeId> {
    let mut dims = i.g.dims(x).to_vec();
    dims.insert(at.min(dims.len()), 1);
    i.g.reshape(x, &dims)
}

/// Element `t` of `x` along `axis`, without that axis.
fn slice_at(i: &mut Importer, x: NodeId, axis: usize, t: usize) -> Result<NodeId> {
    let s = i.g.narrow(x, axis, t, 1)?;
    let mut dims = i.g.dims(s).to_vec();
    dims.remove(axis);
    i.g.reshape(s, &dims)
}

/// Per-step values stacked along a new axis `at` (in step order, or reversed).
fn stack(i: &mut Importer, mut parts: Vec<NodeId>, at: usize, reverse: bool) -> Result<NodeId> {
    if reverse {
        parts.reverse();
    }
    let parts = parts.into_iter().map(|p| unsqueeze(i, p, at)).collect::<Result<Vec<_>>>()?;
    match parts.as_slice() {
        [one] => Ok(*one),
        _ => i.g.concat(&parts, at),
    }
}

/// A Scan over sequences `xs` (each with its scan axis and direction): the final states and
/// the per-step scan outputs stacked along their axes (and directions).
fn unroll_scan(
    i: &mut Importer,
    body: &GraphProto,
    mut states: Vec<NodeId>,
    xs: &[(NodeId, usize, bool)],
    outs: &[(i64, bool)],
) -> Result<Vec<NodeId>> {
    let len = xs.first().map(|&(x, a, _)| i.g.dims(x)[a]).ok_or_else(|| Error::graph("Scan has no scan inputs"))?;
    for &(x, a, _) in xs {
        if i.g.dims(x)[a] != len {
            return Err(Error::shape(format!(
                "scan inputs differ in length: {} along axis {a}, not {len}",
                i.g.describe(x)
            )));
        }
    }
    if len == 0 {
        return Err(Error::unsupported("a Scan of length 0 (its outputs' shapes come from the body)"));
    }
    if len > MAX_STEPS {
        return Err(Error::unsupported(format!("a Scan of {len} steps (unrolled: at most {MAX_STEPS})")));
    }
    let n_state = states.len();
    let n_out = body.output.len().checked_sub(n_state).ok_or_else(|| {
        Error::graph(format!("the body has {} outputs for {n_state} state variables", body.output.len()))
    })?;
    if outs.len() != n_out {
        return Err(Error::shape(format!("{} scan output axes / directions for {n_out} scan outputs", outs.len())));
    }
    let mut per_step: Vec<Vec<NodeId>> = vec![Vec::with_capacity(len); n_out];
    for t in 0..len {
        let mut inputs = states.clone();
        for &(x, a, reverse) in xs {
            inputs.push(slice_at(i, x, a, if reverse { len - 1 - t } else { t })?);
        }
        let results = step(i, body, &inputs).map_err(|e| e.context(format!("body, step {t}")))?;
        states = results[..n_state].to_vec();
        for (k, &r) in results[n_state..].iter().enumerate() {
            per_step[k].push(r);
        }
    }
    for (k, parts) in per_step.into_iter().enumerate() {
        let (a, reverse) = outs[k];
        let rank = i.g.dims(parts[0]).len() + 1;
        let a = axis(a, rank)?;
        states.push(stack(i, parts, a, reverse)?);
    }
    Ok(states)
}

/// Directions attribute values: 0 forward, 1 reverse.
fn directions(n: &Node, name: &str, count: usize) -> Result<Vec<bool>> {
    let values = n.ints(name)?.unwrap_or_else(|| vec![0; count]);
    if values.len() != count {
        return Err(Error::shape(format!("{name} has {} values for {count} sequences", values.len())));
    }
    values
        .iter()
        .map(|&d| match d {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(Error::unsupported(format!("{name} value {v} (0 or 1)"))),
        })
        .collect()
}

fn num_scan_inputs(n: &Node, available: usize) -> Result<usize> {
    let m = n.int_opt("num_scan_inputs")?.ok_or_else(|| Error::parse("attribute 'num_scan_inputs' is missing"))?;
    usize::try_from(m)
        .ok()
        .filter(|&m| (1..=available).contains(&m))
        .ok_or_else(|| Error::shape(format!("num_scan_inputs {m} must lie in 1..={available}")))
}

/// Scan 9+: states and scan inputs without a batch axis.
fn scan(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let body = n.graph("body")?;
    let ins = i.inputs(n)?;
    let m = num_scan_inputs(n, ins.len())?;
    let n_state = ins.len() - m;
    let n_out = body.output.len().saturating_sub(n_state);
    let in_axes = n.ints("scan_input_axes")?.unwrap_or_else(|| vec![0; m]);
    let out_axes = n.ints("scan_output_axes")?.unwrap_or_else(|| vec![0; n_out]);
    if in_axes.len() != m || out_axes.len() != n_out {
        return Err(Error::shape(format!(
            "scan_input_axes {in_axes:?} / scan_output_axes {out_axes:?}: {m} scan inputs, {n_out} scan outputs"
        )));
    }
    let in_dirs = directions(n, "scan_input_directions", m)?;
    let out_dirs = directions(n, "scan_output_directions", n_out)?;
    let xs = ins[n_state..]
        .iter()
        .zip(&in_axes)
        .zip(in_dirs)
        .map(|((&x, &a), d)| Ok((x, axis(a, i.g.dims(x).len())?, d)))
        .collect::<Result<Vec<_>>>()?;
    let outs: Vec<(i64, bool)> = out_axes.into_iter().zip(out_dirs).collect();
    unroll_scan(i, body, ins[..n_state].to_vec(), &xs, &outs)
}

/// Scan 8: a leading batch axis on every state and scan input (the scan axis is 1), an
/// optional `sequence_lens` first input (only full lengths are supported).
fn scan8(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let body = n.graph("body")?;
    let ins: Vec<NodeId> = (1..n.n_inputs()).filter_map(|k| i.opt_input(n, k).transpose()).collect::<Result<_>>()?;
    let m = num_scan_inputs(n, ins.len())?;
    let n_state = ins.len() - m;
    let n_out = body.output.len().saturating_sub(n_state);
    let batch = ins.first().and_then(|&x| i.g.dims(x).first().copied()).unwrap_or(0);
    for (k, &x) in ins.iter().enumerate() {
        // States are [batch, ...], scan inputs [batch, seq, ...].
        let rank = if k < n_state { 1 } else { 2 };
        if i.g.dims(x).len() < rank || i.g.dims(x)[0] != batch {
            return Err(Error::shape(format!(
                "Scan 8 operand {k} must have rank >= {rank} and the leading batch axis {batch}, got {}",
                i.g.describe(x)
            )));
        }
    }
    if let Some(lens) = i.const_ints(n, 0)? {
        let full = ins.get(n_state).map_or(0, |&x| i.g.dims(x).get(1).copied().unwrap_or(0)) as i64;
        if lens.iter().any(|&l| l != full) {
            return Err(Error::unsupported(format!("sequence_lens {lens:?} shorter than the sequence length {full}")));
        }
    }
    let dirs = directions(n, "directions", m)?;
    if batch == 0 {
        return Err(Error::unsupported("a Scan over an empty batch"));
    }
    let outs = vec![(0, false); n_out];
    let mut per_batch: Vec<Vec<NodeId>> = Vec::with_capacity(batch);
    for b in 0..batch {
        let mut states = Vec::with_capacity(n_state);
        for &s in &ins[..n_state] {
            states.push(slice_at(i, s, 0, b)?);
        }
        let mut xs = Vec::with_capacity(m);
        for (&x, &d) in ins[n_state..].iter().zip(&dirs) {
            xs.push((slice_at(i, x, 0, b)?, 0, d));
        }
        per_batch.push(unroll_scan(i, body, states, &xs, &outs)?);
    }
    (0..n_state + n_out).map(|k| stack(i, per_batch.iter().map(|r| r[k]).collect(), 0, false)).collect()
}

fn loop_(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let body = n.graph("body")?;
    let trip = match i.opt_input(n, 0)? {
        None => None,
        Some(_) => {
            let v = i.const_ints(n, 0)?.unwrap_or_default();
            match v.as_slice() {
                [m] => Some(*m),
                _ => return Err(Error::shape(format!("the trip count M must hold one element, got {v:?}"))),
            }
        }
    };
    let mut go = match i.opt_input(n, 1)? {
        None => true,
        Some(c) => {
            let v = i.const_input(n, 1, c)?.to_f64_vec();
            match v.as_slice() {
                [c] => *c != 0.0,
                _ => return Err(Error::shape(format!("the condition must hold one element, got {v:?}"))),
            }
        }
    };
    if trip.is_none() && i.opt_input(n, 1)?.is_none() {
        return Err(Error::unsupported("a Loop with neither a trip count nor a condition runs forever"));
    }
    let mut carried: Vec<NodeId> =
        (2..n.n_inputs()).filter_map(|k| i.opt_input(n, k).transpose()).collect::<Result<_>>()?;
    let n_carried = carried.len();
    let n_scan = body.output.len().checked_sub(1 + n_carried).ok_or_else(|| {
        Error::graph(format!(
            "the body has {} outputs for a condition and {n_carried} carried values",
            body.output.len()
        ))
    })?;
    let mut per_step: Vec<Vec<NodeId>> = vec![Vec::new(); n_scan];
    let mut it: usize = 0;
    while go && trip.is_none_or(|m| (it as i64) < m) {
        if it >= MAX_STEPS {
            return Err(Error::unsupported(format!("a Loop of more than {MAX_STEPS} iterations (unrolled)")));
        }
        let count = i.g.constant_tensor(HostTensor::from_i64(&[], &[it as i64])?)?;
        let cond = i.g.constant_tensor(HostTensor::from_bytes(DType::Bool, &[], vec![1])?)?;
        let mut inputs = vec![count, cond];
        inputs.extend_from_slice(&carried);
        let results = step(i, body, &inputs).map_err(|e| e.context(format!("body, iteration {it}")))?;
        let c = i.const_of(results[0]).map(|c| c.to_f64_vec());
        go = match c.as_deref() {
            Some([c]) => *c != 0.0,
            Some(v) => return Err(Error::shape(format!("the body's condition must hold one element, got {v:?}"))),
            None => {
                return Err(Error::unsupported(
                    "the Loop's condition depends on values only known at run time (it is unrolled at import)",
                ));
            }
        };
        carried = results[1..1 + n_carried].to_vec();
        for (k, &r) in results[1 + n_carried..].iter().enumerate() {
            per_step[k].push(r);
        }
        it += 1;
    }
    if n_scan > 0 && it == 0 {
        return Err(Error::unsupported("a Loop of no iterations with scan outputs (their shapes come from the body)"));
    }
    for parts in per_step {
        carried.push(stack(i, parts, 0, false)?);
    }
    Ok(carried)
}
