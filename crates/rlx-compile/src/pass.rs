//! Graph-to-graph passes and the pass manager that runs them as named pipelines.

use crate::passes;
use rlx_ir::{Graph, Node, NodeId, Result};

/// What passes report besides the rewritten graph.
#[derive(Clone, Debug, Default)]
pub struct PassLog {
    /// One line per decision worth telling a user (`RLX_FUSION_LOG=1`, `rlx check`).
    pub notes: Vec<String>,
    /// Numerics hazards found while compiling, e.g. a folded constant that is NaN or inf.
    pub hazards: Vec<String>,
    /// Casts the mixed-precision pass inserted (of non-constant values).
    pub inserted_casts: usize,
}

/// A graph-to-graph rewrite that keeps the graph's inputs, params and outputs (names,
/// types and order) and its values.
pub trait Pass {
    /// Short name, used in pipelines and logs.
    fn name(&self) -> &'static str;
    fn run(&self, graph: &Graph, log: &mut PassLog) -> Result<Graph>;
}

/// An ordered list of passes.
pub struct Pipeline {
    pub name: &'static str,
    pub passes: Vec<Box<dyn Pass>>,
}

impl Pipeline {
    /// `default`: dce, cse, fold, simplify, dce. `none`: no pass.
    pub fn named(name: &str) -> Option<Pipeline> {
        let passes: Vec<Box<dyn Pass>> = match name {
            "default" => vec![
                Box::new(passes::Dce),
                Box::new(passes::Cse),
                Box::new(passes::ConstFold),
                Box::new(passes::Simplify),
                Box::new(passes::Dce),
            ],
            "none" => Vec::new(),
            _ => return None,
        };
        Some(Pipeline { name: if name == "default" { "default" } else { "none" }, passes })
    }

    /// Mixed precision onto `half`, then the clean-up its casts allow (casts of
    /// constants folded, round trips through an exact widening removed).
    pub fn mixed(half: rlx_ir::DType) -> Pipeline {
        Pipeline {
            name: "mixed",
            passes: vec![
                Box::new(passes::MixedPrecision { half }),
                Box::new(passes::ConstFold),
                Box::new(passes::Simplify),
                Box::new(passes::Cse),
                Box::new(passes::Dce),
            ],
        }
    }

    /// Runs every pass in order. Debug builds verify the graph after each one, so a pass
    /// that breaks an invariant is caught where it happens.
    pub fn run(&self, graph: &Graph, log: &mut PassLog) -> Result<Graph> {
        let mut g = graph.clone();
        for pass in &self.passes {
            g = pass.run(&g, log).map_err(|e| e.context(format!("pass {}", pass.name())))?;
            if cfg!(debug_assertions) {
                g.verify().map_err(|e| e.context(format!("verifier after pass {}", pass.name())))?;
            }
        }
        Ok(g)
    }
}

/// Rebuilds a graph node by node: `f` returns each old node's replacement in the new
/// graph (copying it with `copy` or building something else). Outputs are remapped.
pub fn rebuild(
    graph: &Graph,
    mut f: impl FnMut(&mut Graph, &[NodeId], NodeId, &Node) -> Result<NodeId>,
) -> Result<Graph> {
    let mut new = Graph::new(graph.name());
    let mut map: Vec<NodeId> = Vec::with_capacity(graph.len());
    for (id, node) in graph.nodes() {
        let replacement = f(&mut new, &map, id, node)?;
        map.push(replacement);
    }
    let outputs: Vec<NodeId> = graph.outputs().iter().map(|o| map[o.index()]).collect();
    new.set_outputs(&outputs)?;
    Ok(new)
}

/// Appends a copy of `node` whose operands are already remapped through `map`.
pub fn copy(new: &mut Graph, map: &[NodeId], node: &Node) -> Result<NodeId> {
    if node.op().is_leaf() {
        new.push_leaf(node.op().clone(), node.dtype(), node.dims())
    } else {
        let inputs: Vec<NodeId> = node.inputs().iter().map(|i| map[i.index()]).collect();
        new.push(node.op().clone(), &inputs)
    }
}
