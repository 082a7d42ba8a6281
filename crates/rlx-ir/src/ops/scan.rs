//! Scan: a loop over the leading axis of sequences, carrying state.
//!
//! `scan(body, init, bcast, xs, checkpoints)`: `body` is a graph whose inputs are, in
//! order, the carry, the broadcast values and one slice of each sequence, and whose one
//! output has the carry's type. With `L` the common leading extent of `xs`,
//! `c_0 = init`, `c_{t+1} = body(c_t, bcast..., xs[0][t], ...)`, and the result is `c_L`.
//! The internal form `Scan` carries several values (`n_carry`, its result is final carry
//! `output`); the builder above is the one-carry case.
//!
//! `ScanGrad` is the loop the derivatives need: it runs `body` forward from the inits,
//! then `grad_body` backward from the last step, `grad_body` taking
//! `[carries..., bcast..., x slices..., carry cotangents...]` and giving
//! `[carry cotangents..., bcast terms..., x terms...]`. Its result is the final carry
//! cotangent `i`, the sum over steps of bcast term `j`, or x term `k` stacked over steps.
//! It keeps the carries at the start of every `ceil(L / checkpoints)` steps (at most
//! `checkpoints` of them) and recomputes the carries between them segment by segment:
//! memory O(checkpoints + L / checkpoints) carries, time O(L), and the same values for
//! every `checkpoints` in `1..=L`. Each `ScanGrad` node runs the whole backward loop; a
//! scan with several differentiable inputs gets one node per input (the price of
//! single-output nodes: a fused multi-output step would share the loop).
//!
//! Derivatives: the VJP of `Scan` is `ScanGrad` with the body's VJP as `grad_body`; the
//! JVP of `Scan` is a `Scan` of the body's JVP (carry and tangent carried together); the
//! JVP of `ScanGrad` is a `ScanGrad` of both bodies' JVPs. So Hessian-vector products
//! (forward over reverse) work through a checkpointed scan; reverse over reverse does not.

use super::{Op, Operand};
use crate::derivative::{backprop, copy_graph, forward_tangents, free_name, reorder_inputs, zeros_of};
use crate::shape::fmt_type;
use crate::{DType, Error, Graph, NodeId, Result};
use serde::{Deserialize, Serialize};

/// Which result a `ScanGrad` node gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScanGradOutput {
    /// The cotangent of init `i`.
    Carry(usize),
    /// Broadcast term `j`, summed over steps.
    Bcast(usize),
    /// Sequence term `k`, stacked over steps.
    Xs(usize),
}

fn body_types(body: &Graph) -> Vec<(DType, Vec<usize>)> {
    body.inputs().iter().map(|&i| (body.dtype(i), body.dims(i).to_vec())).collect()
}

/// Checks `body` against operands `[inits..., bcast..., xs...]`; returns the length.
fn check_loop(
    body: &Graph,
    n_carry: usize,
    n_bcast: usize,
    ins: &[Operand],
    checkpoints: Option<usize>,
) -> Result<usize> {
    body.verify().map_err(|e| e.context("scan body"))?;
    if let Some(p) = body.params().first() {
        return Err(Error::graph(format!("scan body has a param {}: pass it as a bcast input", body.describe(*p))));
    }
    let types = body_types(body);
    // Counts come from documents: checked, so a huge `n_bcast` cannot wrap the sum.
    let n_xs =
        n_carry.checked_add(n_bcast).and_then(|k| ins.len().checked_sub(k)).filter(|&n| n > 0).ok_or_else(|| {
            Error::graph(format!(
                "scan needs {n_carry} inits, {n_bcast} bcast values and at least one sequence; got {} operands",
                ins.len()
            ))
        })?;
    if types.len() != ins.len() {
        return Err(Error::graph(format!(
            "scan body takes {} inputs, but {n_carry} carries + {n_bcast} bcast + {n_xs} sequences are given",
            types.len()
        )));
    }
    if body.outputs().len() != n_carry {
        return Err(Error::graph(format!("scan body has {} outputs for {n_carry} carries", body.outputs().len())));
    }
    for (i, &o) in body.outputs().iter().enumerate() {
        if (body.dtype(o), body.dims(o)) != (types[i].0, types[i].1.as_slice()) {
            return Err(Error::shape(format!(
                "scan body output {i} is {}, its carry input {}",
                body.describe(o),
                fmt_type(types[i].0, &types[i].1)
            )));
        }
    }
    let len = ins[n_carry + n_bcast].dims.first().copied().unwrap_or(0);
    for (i, (op, (dt, dims))) in ins.iter().zip(&types).enumerate() {
        let want: Vec<usize> = if i >= n_carry + n_bcast {
            if op.dims.first() != Some(&len) {
                return Err(Error::shape(format!(
                    "sequence {} must have leading extent {len}, got {}",
                    i - n_carry - n_bcast,
                    op.ty()
                )));
            }
            [&[len][..], dims].concat()
        } else {
            dims.clone()
        };
        if op.dtype != *dt || op.dims != want.as_slice() {
            return Err(Error::shape(format!(
                "scan operand {i} is {}, the body expects {}",
                op.ty(),
                fmt_type(*dt, &want)
            )));
        }
    }
    if let Some(k) = checkpoints
        && !(1..=len).contains(&k)
    {
        return Err(Error::graph(format!("checkpoints {k} must lie in 1..={len} (the scan's length)")));
    }
    Ok(len)
}

pub(crate) fn infer_scan(
    body: &Graph,
    n_carry: usize,
    n_bcast: usize,
    checkpoints: Option<usize>,
    output: usize,
    ins: &[Operand],
) -> Result<(DType, Vec<usize>)> {
    check_loop(body, n_carry, n_bcast, ins, checkpoints)?;
    let o = ins
        .get(output)
        .filter(|_| output < n_carry)
        .ok_or_else(|| Error::graph(format!("output {output} of {n_carry} carries")))?;
    Ok((o.dtype, o.dims.to_vec()))
}

pub(crate) fn infer_scan_grad(
    body: &Graph,
    grad_body: &Graph,
    n_carry: usize,
    n_bcast: usize,
    checkpoints: Option<usize>,
    output: ScanGradOutput,
    ins: &[Operand],
) -> Result<(DType, Vec<usize>)> {
    let forward = ins.len().checked_sub(n_carry).ok_or_else(|| Error::graph("scan_grad: too few operands"))?;
    let len = check_loop(body, n_carry, n_bcast, &ins[..forward], checkpoints)?;
    let n_xs = forward - n_carry - n_bcast;
    grad_body.verify().map_err(|e| e.context("scan grad body"))?;
    let gin = body_types(grad_body);
    let body_in = body_types(body);
    let expected_in: Vec<(DType, Vec<usize>)> = body_in.iter().chain(&body_in[..n_carry]).cloned().collect();
    if gin != expected_in || grad_body.outputs().len() != n_carry + n_bcast + n_xs {
        return Err(Error::graph(
            "scan grad body must take [carries, bcast, x slices, carry cotangents] and give one term per forward input",
        ));
    }
    for (i, op) in ins[forward..].iter().enumerate() {
        if (op.dtype, op.dims) != (body_in[i].0, body_in[i].1.as_slice()) {
            return Err(Error::shape(format!(
                "cotangent of carry {i} is {}, the carry {}",
                op.ty(),
                fmt_type(body_in[i].0, &body_in[i].1)
            )));
        }
    }
    let term = |k: usize| (grad_body.dtype(grad_body.outputs()[k]), grad_body.dims(grad_body.outputs()[k]).to_vec());
    // check_loop bounded n_carry + n_bcast + n_xs by the operand count; the output's own
    // index is a document's number too.
    let (index, limit) = match output {
        ScanGradOutput::Carry(i) => (Some(i), n_carry),
        ScanGradOutput::Bcast(j) => (n_carry.checked_add(j), n_carry + n_bcast),
        ScanGradOutput::Xs(k) => ((n_carry + n_bcast).checked_add(k), n_carry + n_bcast + n_xs),
    };
    let Some(index) = index.filter(|&i| i < limit) else {
        return Err(Error::graph(format!("scan_grad has no {output:?}")));
    };
    let (dt, dims) = term(index);
    Ok(match output {
        ScanGradOutput::Xs(_) => (dt, [&[len][..], &dims].concat()),
        _ => (dt, dims),
    })
}

impl Graph {
    /// Runs `body` over the leading axis of `xs` from the carry `init`, with `bcast` fed
    /// unchanged at every step; returns the final carry. `body`'s inputs are the carry,
    /// the bcast values and one slice of each sequence, in that order; it has exactly one
    /// output, shaped and typed like the carry. `checkpoints` (1..=length, None = length)
    /// is how many carries the backward pass keeps; it recomputes the rest, so it changes
    /// memory, never the values of the result or its gradients.
    pub fn scan(
        &mut self,
        body: &Graph,
        init: NodeId,
        bcast: &[NodeId],
        xs: &[NodeId],
        checkpoints: Option<usize>,
    ) -> Result<NodeId> {
        let mut ins = vec![init];
        ins.extend_from_slice(bcast);
        ins.extend_from_slice(xs);
        self.scan_carries(body, &ins, 1, bcast.len(), checkpoints, 0)
    }

    /// The general scan: `ins = [inits (n_carry)..., bcast (n_bcast)..., xs...]`; the
    /// result is final carry `output`.
    pub fn scan_carries(
        &mut self,
        body: &Graph,
        ins: &[NodeId],
        n_carry: usize,
        n_bcast: usize,
        checkpoints: Option<usize>,
        output: usize,
    ) -> Result<NodeId> {
        let op = Op::Scan { body: Box::new(body.clone()), n_carry, n_bcast, checkpoints, output };
        self.push(op, ins)
    }
}

/// The VJP of a body: inputs `[carries, bcast, x slices, carry cotangents]`, outputs the
/// cotangent of every input of the body (zeros for integer ones).
pub(crate) fn vjp_body(body: &Graph, n_carry: usize) -> Result<Graph> {
    let mut g = copy_graph(body, &format!("{}_vjp", body.name()))?;
    let inputs = body.inputs();
    let mut seeds = Vec::new();
    for (i, &o) in body.outputs().iter().enumerate().take(n_carry) {
        let name = free_name(&g, &format!("cotangent_{i}"));
        let (dt, dims) = (body.dtype(o), body.dims(o).to_vec());
        seeds.push((o, g.input(&name, dt, &dims)?));
    }
    let grads = backprop(&mut g, body.len(), &seeds, &inputs)?;
    g.set_outputs(&grads)?;
    Ok(g)
}

/// The JVP of a graph whose inputs and outputs come in groups: inputs
/// `[g0, tangents of g0, g1, tangents of g1, ...]`, outputs likewise per output group.
pub(crate) fn jvp_grouped(graph: &Graph, in_groups: &[usize], out_groups: &[usize]) -> Result<Graph> {
    let mut g = copy_graph(graph, &format!("{}_jvp", graph.name()))?;
    let inputs = graph.inputs();
    let mut pairs = Vec::new();
    for &i in &inputs {
        let name = free_name(&g, &format!("tangent_{}", graph.node(i).and_then(|n| n.leaf_name()).unwrap_or("in")));
        let (dt, dims) = (graph.dtype(i), graph.dims(i).to_vec());
        pairs.push((i, g.input(&name, dt, &dims)?));
    }
    let outputs = graph.outputs().to_vec();
    let tangents = forward_tangents(&mut g, &pairs, &outputs)?;
    let interleave = |groups: &[usize], a: &[NodeId], b: &[NodeId]| -> Vec<NodeId> {
        let mut out = Vec::new();
        let mut at = 0;
        for &n in groups {
            out.extend_from_slice(&a[at..at + n]);
            out.extend_from_slice(&b[at..at + n]);
            at += n;
        }
        out
    };
    let tangent_inputs: Vec<NodeId> = pairs.iter().map(|&(_, t)| t).collect();
    let order = interleave(in_groups, &inputs, &tangent_inputs);
    let outs = interleave(out_groups, &outputs, &tangents);
    reorder_inputs(&g, &order, &outs)
}

/// Operands `a` interleaved with their tangents per group (zeros where none).
fn with_tangents(g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], groups: &[usize]) -> Result<Vec<NodeId>> {
    let mut out = Vec::new();
    let mut at = 0;
    for &n in groups {
        out.extend_from_slice(&ins[at..at + n]);
        for k in at..at + n {
            let tk = match t[k] {
                Some(tk) => tk,
                None => zeros_of(g, ins[k])?,
            };
            out.push(tk);
        }
        at += n;
    }
    Ok(out)
}

pub(crate) fn vjp_scan(g: &mut Graph, op: &Op, ins: &[NodeId], ct: NodeId) -> Result<Vec<Option<NodeId>>> {
    let Op::Scan { body, n_carry, n_bcast, checkpoints, output } = op else {
        return Err(Error::internal("vjp_scan of another op"));
    };
    let (n_carry, n_bcast, checkpoints, output) = (*n_carry, *n_bcast, *checkpoints, *output);
    let grad_body = Box::new(vjp_body(body, n_carry)?);
    let mut operands = ins.to_vec();
    for (i, &init) in ins.iter().enumerate().take(n_carry) {
        operands.push(if i == output { ct } else { zeros_of(g, init)? });
    }
    let n_xs = ins.len() - n_carry - n_bcast;
    let mut grads = Vec::new();
    for (p, &input) in ins.iter().enumerate() {
        if !g.is_differentiable(input) {
            grads.push(None);
            continue;
        }
        let which = if p < n_carry {
            ScanGradOutput::Carry(p)
        } else if p < n_carry + n_bcast {
            ScanGradOutput::Bcast(p - n_carry)
        } else {
            ScanGradOutput::Xs(p - n_carry - n_bcast)
        };
        let op = Op::ScanGrad {
            body: body.clone(),
            grad_body: grad_body.clone(),
            n_carry,
            n_bcast,
            checkpoints,
            output: which,
        };
        grads.push(Some(g.push(op, &operands)?));
    }
    debug_assert_eq!(grads.len(), n_carry + n_bcast + n_xs);
    Ok(grads)
}

pub(crate) fn jvp_scan(g: &mut Graph, op: &Op, ins: &[NodeId], t: &[Option<NodeId>]) -> Result<Option<NodeId>> {
    let Op::Scan { body, n_carry, n_bcast, checkpoints, output } = op else {
        return Err(Error::internal("jvp_scan of another op"));
    };
    let (n_carry, n_bcast, checkpoints, output) = (*n_carry, *n_bcast, *checkpoints, *output);
    let n_xs = ins.len() - n_carry - n_bcast;
    let augmented = jvp_grouped(body, &[n_carry, n_bcast, n_xs], &[n_carry])?;
    let operands = with_tangents(g, ins, t, &[n_carry, n_bcast, n_xs])?;
    Ok(Some(g.scan_carries(&augmented, &operands, 2 * n_carry, 2 * n_bcast, checkpoints, n_carry + output)?))
}

pub(crate) fn jvp_scan_grad(g: &mut Graph, op: &Op, ins: &[NodeId], t: &[Option<NodeId>]) -> Result<Option<NodeId>> {
    let Op::ScanGrad { body, grad_body, n_carry, n_bcast, checkpoints, output } = op else {
        return Err(Error::internal("jvp_scan_grad of another op"));
    };
    let (n_carry, n_bcast, checkpoints, output) = (*n_carry, *n_bcast, *checkpoints, *output);
    let n_xs = ins.len() - 2 * n_carry - n_bcast;
    let forward = jvp_grouped(body, &[n_carry, n_bcast, n_xs], &[n_carry])?;
    let backward = jvp_grouped(grad_body, &[n_carry, n_bcast, n_xs, n_carry], &[n_carry, n_bcast, n_xs])?;
    let operands = with_tangents(g, ins, t, &[n_carry, n_bcast, n_xs, n_carry])?;
    let output = match output {
        ScanGradOutput::Carry(i) => ScanGradOutput::Carry(n_carry + i),
        ScanGradOutput::Bcast(j) => ScanGradOutput::Bcast(n_bcast + j),
        ScanGradOutput::Xs(k) => ScanGradOutput::Xs(n_xs + k),
    };
    let op = Op::ScanGrad {
        body: Box::new(forward),
        grad_body: Box::new(backward),
        n_carry: 2 * n_carry,
        n_bcast: 2 * n_bcast,
        checkpoints,
        output,
    };
    Ok(Some(g.push(op, &operands)?))
}
