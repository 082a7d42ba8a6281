//! The whole-graph derivative passes: reverse mode (cotangents from seeded outputs back
//! to leaves) and forward mode (tangents from leaves to outputs), applying each node's
//! rule (`Graph::vjp` / `Graph::jvp`, in the op family files). `rlx-autodiff` builds the
//! public transforms on these; scan's rules use them on its body.

use crate::{Error, Graph, HostTensor, NodeId, Result};

/// A copy of `g` node for node (ids are preserved), named `name`.
pub fn copy_graph(g: &Graph, name: &str) -> Result<Graph> {
    let mut out = Graph::new(name);
    for (_, node) in g.nodes() {
        if node.op().is_leaf() {
            out.push_leaf(node.op().clone(), node.dtype(), node.dims())?;
        } else {
            out.push(node.op().clone(), node.inputs())?;
        }
    }
    out.set_outputs(g.outputs())?;
    Ok(out)
}

/// `base`, or `base_2`, `base_3`, ...: the first name no leaf of `g` uses.
pub fn free_name(g: &Graph, base: &str) -> String {
    if g.find_leaf(base).is_none() {
        return base.to_string();
    }
    (2..).map(|k| format!("{base}_{k}")).find(|n| g.find_leaf(n).is_none()).expect("some suffix is free")
}

/// Zeros of `id`'s dims and dtype, as a constant holding every byte (a bf16 value gets 2
/// bytes per element, an f64 one 8).
pub fn zeros_of(g: &mut Graph, id: NodeId) -> Result<NodeId> {
    let (dt, dims) = (g.dtype(id), g.dims(id).to_vec());
    g.constant_tensor(HostTensor::zeros(dt, &dims)?)
}

/// Reverse mode over the first `n` nodes of `g`: cotangents seeded at each `(output,
/// seed)` pair and pulled back to each of `leaves` (zeros of the leaf's type where none
/// arrives). Only nodes on a float path from a leaf to a seeded output are visited.
pub fn backprop(g: &mut Graph, n: usize, seeds: &[(NodeId, NodeId)], leaves: &[NodeId]) -> Result<Vec<NodeId>> {
    let ids: Vec<NodeId> = g.nodes().take(n).map(|(id, _)| id).collect();
    let mut live = vec![false; n];
    for &id in &ids {
        let node = g.node(id).expect("node of g");
        live[id.index()] =
            leaves.contains(&id) || (g.is_differentiable(id) && node.inputs().iter().any(|i| live[i.index()]));
    }
    let mut ct: Vec<Option<NodeId>> = vec![None; n];
    for &(out, seed) in seeds {
        if out.index() >= n {
            return Err(Error::internal(format!("backprop: seed at {out} past the {n} nodes")));
        }
        ct[out.index()] = g.add_opt(ct[out.index()], Some(seed))?;
    }
    for &id in ids.iter().rev() {
        let Some(c) = ct[id.index()] else { continue };
        let node = g.node(id).expect("node of g");
        if !live[id.index()] || node.op().is_leaf() {
            continue;
        }
        let inputs = node.inputs().to_vec();
        let cts = g.vjp(id, c)?;
        for (input, c_in) in inputs.into_iter().zip(cts) {
            if let Some(c_in) = c_in
                && live[input.index()]
            {
                ct[input.index()] = g.add_opt(ct[input.index()], Some(c_in))?;
            }
        }
    }
    leaves.iter().map(|&l| ct[l.index()].map_or_else(|| zeros_of(g, l), Ok)).collect()
}

/// Forward mode over `g`: with `tangents` given for some leaves, the tangent of each of
/// `outputs` (zeros of the output's type where none flows).
pub fn forward_tangents(g: &mut Graph, tangents: &[(NodeId, NodeId)], outputs: &[NodeId]) -> Result<Vec<NodeId>> {
    let ids: Vec<NodeId> = g.nodes().map(|(id, _)| id).collect();
    let mut tan: Vec<Option<NodeId>> = vec![None; ids.len()];
    for &(leaf, t) in tangents {
        if g.is_differentiable(leaf) {
            tan[leaf.index()] = Some(t);
        }
    }
    for &id in &ids {
        let node = g.node(id).expect("node of g");
        if node.op().is_leaf() {
            continue;
        }
        let ts: Vec<Option<NodeId>> = node.inputs().iter().map(|i| tan.get(i.index()).copied().flatten()).collect();
        if ts.iter().all(Option::is_none) {
            continue;
        }
        tan[id.index()] = g.jvp(id, &ts)?;
    }
    outputs.iter().map(|&o| tan[o.index()].map_or_else(|| zeros_of(g, o), Ok)).collect()
}

/// `g` rebuilt so that its inputs come first in the order `inputs` lists them (every
/// input of `g`, once), then the other nodes in their order; outputs `outputs`.
pub fn reorder_inputs(g: &Graph, inputs: &[NodeId], outputs: &[NodeId]) -> Result<Graph> {
    let mut out = Graph::new(g.name());
    let mut map: Vec<Option<NodeId>> = vec![None; g.len()];
    for &i in inputs {
        let node = g.node(i).ok_or_else(|| Error::internal("reorder_inputs: unknown input"))?;
        map[i.index()] = Some(out.push_leaf(node.op().clone(), node.dtype(), node.dims())?);
    }
    for (id, node) in g.nodes() {
        if map[id.index()].is_some() {
            continue;
        }
        let mapped = if node.op().is_leaf() {
            if matches!(node.op(), crate::Op::Input { .. }) {
                return Err(Error::internal(format!("reorder_inputs: input {} not listed", g.describe(id))));
            }
            out.push_leaf(node.op().clone(), node.dtype(), node.dims())?
        } else {
            let ins: Vec<NodeId> = node.inputs().iter().map(|i| map[i.index()].expect("operands precede")).collect();
            out.push(node.op().clone(), &ins)?
        };
        map[id.index()] = Some(mapped);
    }
    let outs: Vec<NodeId> = outputs.iter().map(|o| map[o.index()].expect("output mapped")).collect();
    out.set_outputs(&outs)?;
    Ok(out)
}
