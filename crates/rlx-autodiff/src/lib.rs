//! Derivatives as graph-to-graph transforms: [`grad_with_loss`], [`grad`], [`jvp`] and
//! [`hvp`] (signatures and conventions in ../shared/spec/api.md). Each returns an
//! ordinary [`Graph`], so they compose: grad of grad, jvp of grad, third order.
//!
//! A transform copies the forward graph (same inputs and params, same names, shapes and
//! dtypes, in the same order), then appends the derivative nodes that each op's rule
//! builds (`Graph::vjp` / `Graph::jvp`, the rules living beside each op family's shape
//! rule in rlx-ir, applied by the passes in `rlx_ir::derivative`). Only nodes on a path
//! from a `wrt` leaf to the loss are visited.
//! A `wrt` leaf the loss does not depend on gets zeros of its own dims and dtype.
//!
//! Seeds and tangents are new inputs: `d_output`, `tangent_<name>`. When the forward
//! already has an input of that name (the graph is itself a derivative), the new one is
//! `d_output_2`, `tangent_<name>_2`, ... (the first free suffix).
//!
//! Architecture invariant: depends on rlx-ir only; never on the compiler or a backend.

use rlx_ir::derivative::{backprop, copy_graph, forward_tangents, free_name};
use rlx_ir::{Error, Graph, NodeId, Result};

/// Backward graph of a forward graph whose first output is a scalar loss: it keeps the
/// forward's inputs and params and adds an input `d_output` shaped like the loss (the
/// seed, normally 1). Outputs: `[loss, d loss/d wrt[0], ...]`, each shaped like its leaf.
pub fn grad_with_loss(forward: &Graph, wrt: &[&str]) -> Result<Graph> {
    build_grad(forward, wrt, Seed::Input, true)
}

/// [`grad_with_loss`] without the loss output: `[d loss/d wrt[0], ...]`.
pub fn grad(forward: &Graph, wrt: &[&str]) -> Result<Graph> {
    build_grad(forward, wrt, Seed::Input, false)
}

/// Forward mode: adds one input `tangent_<name>` per `wrt` name (that leaf's shape and
/// dtype). Outputs: `[primal outputs..., tangent outputs...]`.
pub fn jvp(forward: &Graph, wrt: &[&str]) -> Result<Graph> {
    let (mut g, leaves) = copy(forward, wrt, "jvp")?;
    let outputs = forward.outputs().to_vec();
    let tangents = forward_mode(&mut g, &leaves, &outputs, wrt)?;
    let mut all = outputs;
    all.extend(tangents);
    g.set_outputs(&all)?;
    Ok(g)
}

/// Hessian-vector product of the scalar first output: adds inputs `tangent_<name>` (the
/// vector v, one part per `wrt` leaf) and no `d_output` (the seed is 1). Outputs:
/// `[loss, grads..., H v for each wrt...]`. Forward-over-reverse: the JVP of the gradient.
pub fn hvp(forward: &Graph, wrt: &[&str]) -> Result<Graph> {
    let gr = build_grad(forward, wrt, Seed::One, true)?;
    let (mut g, leaves) = copy(&gr, wrt, "hvp")?;
    let outputs = gr.outputs().to_vec();
    let tangents = forward_mode(&mut g, &leaves, &outputs, wrt)?;
    let mut all = outputs;
    all.extend_from_slice(&tangents[1..]);
    g.set_outputs(&all)?;
    Ok(g)
}

/// Where the loss's cotangent comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seed {
    /// A new input, `d_output`.
    Input,
    /// The constant 1.
    One,
}

fn build_grad(forward: &Graph, wrt: &[&str], seed: Seed, with_loss: bool) -> Result<Graph> {
    let (mut g, leaves) = copy(forward, wrt, "grad")?;
    let loss = *forward.outputs().first().ok_or_else(|| {
        Error::graph(format!("grad: graph '{}' has no outputs (the first must be the loss)", forward.name()))
    })?;
    let (dt, dims) = (g.dtype(loss), g.dims(loss).to_vec());
    if !dt.is_float() || dims.iter().product::<usize>() != 1 {
        return Err(Error::graph(format!(
            "grad: the first output must be a float scalar loss, got {}",
            g.describe(loss)
        )));
    }
    let seed = match seed {
        Seed::Input => {
            let name = free_name(&g, "d_output");
            g.input(&name, dt, &dims)?
        }
        Seed::One => g.full(dt, &dims, 1.0)?,
    };
    let grads = backprop(&mut g, forward.len(), &[(loss, seed)], &leaves)?;
    let mut outputs = if with_loss { vec![loss] } else { Vec::new() };
    outputs.extend(grads);
    g.set_outputs(&outputs)?;
    Ok(g)
}

/// The forward graph copied node for node (ids are preserved), and the `wrt` leaves.
fn copy(forward: &Graph, wrt: &[&str], what: &str) -> Result<(Graph, Vec<NodeId>)> {
    let g = copy_graph(forward, &format!("{}_{what}", forward.name()))?;
    let mut leaves = Vec::new();
    for (i, name) in wrt.iter().enumerate() {
        let id = forward.find_leaf(name).ok_or_else(|| {
            let names: Vec<String> = forward
                .inputs()
                .iter()
                .chain(&forward.params())
                .filter_map(|&l| forward.node(l).and_then(|n| n.leaf_name()).map(|n| format!("'{n}'")))
                .collect();
            Error::input(format!(
                "{what}: '{name}' is not an input or param of '{}' (it has {})",
                forward.name(),
                names.join(", ")
            ))
        })?;
        if wrt[..i].contains(name) {
            return Err(Error::input(format!("{what}: '{name}' is listed twice in wrt")));
        }
        leaves.push(id);
    }
    Ok((g, leaves))
}

/// Forward mode over `g`: adds a `tangent_<name>` input per leaf and returns the tangent
/// of each of `outputs` (zeros where nothing flows).
fn forward_mode(g: &mut Graph, leaves: &[NodeId], outputs: &[NodeId], wrt: &[&str]) -> Result<Vec<NodeId>> {
    let mut tangents = Vec::new();
    for (&leaf, name) in leaves.iter().zip(wrt) {
        if !g.is_differentiable(leaf) {
            return Err(Error::input(format!(
                "jvp: '{name}' is {} and has no tangent (only float leaves do)",
                g.describe(leaf)
            )));
        }
        let input = free_name(g, &format!("tangent_{name}"));
        let (dt, dims) = (g.dtype(leaf), g.dims(leaf).to_vec());
        tangents.push((leaf, g.input(&input, dt, &dims)?));
    }
    forward_tangents(g, &tangents, outputs)
}
