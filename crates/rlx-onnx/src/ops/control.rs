//! Control flow: If (a condition known at compile time imports one branch; a runtime
//! condition imports both and selects elementwise where their outputs agree in shape).

use super::{OpDef, def};
use crate::import::{Importer, Node};
use rlx_ir::{Error, NodeId, Result};

pub const OPS: &[OpDef] = &[def("If", 1, if_)];

fn branch(i: &mut Importer, n: &Node, name: &str) -> Result<Vec<NodeId>> {
    let g = n.graph(name)?;
    i.scoped(|i| {
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
