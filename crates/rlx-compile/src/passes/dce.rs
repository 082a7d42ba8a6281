//! Dead-code elimination: drops every node no output depends on. Inputs and params stay
//! (they are the graph's interface), even when nothing reads them.

use crate::pass::{Pass, PassLog, copy, rebuild};
use rlx_ir::{Graph, Op, Result};

pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn run(&self, graph: &Graph, log: &mut PassLog) -> Result<Graph> {
        let mut live = vec![false; graph.len()];
        for o in graph.outputs() {
            live[o.index()] = true;
        }
        for (id, node) in graph.nodes().collect::<Vec<_>>().into_iter().rev() {
            let interface = matches!(node.op(), Op::Input { .. } | Op::Param { .. });
            if interface {
                live[id.index()] = true;
            }
            if live[id.index()] {
                for i in node.inputs() {
                    live[i.index()] = true;
                }
            }
        }
        let dead = live.iter().filter(|l| !**l).count();
        if dead > 0 {
            log.notes.push(format!("dce: removed {dead} dead nodes"));
        }
        // Dead nodes map to a placeholder no live node reads.
        let mut placeholder = None;
        rebuild(graph, |new, map, id, node| {
            if live[id.index()] {
                copy(new, map, node)
            } else {
                Ok(*placeholder.get_or_insert(rlx_ir::NodeId::from_index(usize::MAX)))
            }
        })
    }
}
