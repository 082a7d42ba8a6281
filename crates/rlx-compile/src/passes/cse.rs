//! Common-subexpression elimination: one node per distinct (op, operands); equal
//! constants merge too. Inputs and params never merge (each is its own name).

use crate::pass::{Pass, PassLog, copy, rebuild};
use rlx_ir::{Graph, NodeId, Op, Result};
use std::collections::HashMap;

pub struct Cse;

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&self, graph: &Graph, log: &mut PassLog) -> Result<Graph> {
        let mut seen: HashMap<(Op, Vec<NodeId>), NodeId> = HashMap::new();
        let mut merged = 0;
        let g = rebuild(graph, |new, map, _, node| {
            if matches!(node.op(), Op::Input { .. } | Op::Param { .. }) {
                return copy(new, map, node);
            }
            let key = (node.op().clone(), node.inputs().iter().map(|i| map[i.index()]).collect::<Vec<_>>());
            if let Some(&existing) = seen.get(&key) {
                merged += 1;
                return Ok(existing);
            }
            let id = copy(new, map, node)?;
            seen.insert(key, id);
            Ok(id)
        })?;
        if merged > 0 {
            log.notes.push(format!("cse: merged {merged} duplicate nodes"));
        }
        Ok(g)
    }
}
