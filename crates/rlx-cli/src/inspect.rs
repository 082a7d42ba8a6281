//! `rlx inspect`.

use rlx::ir::shape::{fmt_type, numel};
use rlx::prelude::*;
use std::path::Path;

pub fn inspect(path: &Path) -> Result<()> {
    let g = crate::load_graph(path)?;
    println!("graph '{}': {} nodes, {} outputs", g.name(), g.len(), g.outputs().len());
    println!();
    println!("{:>5}  {:<14} {:<22} operands", "node", "op", "type");
    for (id, node) in g.nodes() {
        let operands: Vec<String> = node.inputs().iter().map(|i| i.to_string()).collect();
        let label = match node.leaf_name() {
            Some(name) => format!("'{name}'"),
            None => operands.join(" "),
        };
        println!("{:>5}  {:<14} {:<22} {label}", id.to_string(), node.op().name(), fmt_type(node.dtype(), node.dims()));
    }
    let section = |title: &str, ids: &[NodeId]| {
        // Totals in u128: each tensor's bytes fit a usize (the IR checks), their sum may
        // not (it printed 0 for such a graph).
        let bytes: u128 = ids.iter().map(|&i| numel(g.dims(i)) as u128 * g.dtype(i).size_bytes() as u128).sum();
        println!();
        println!("{title} ({}, {bytes} bytes):", ids.len());
        for &i in ids {
            let name = g.node(i).and_then(|n| n.leaf_name()).map(|n| format!(" '{n}'")).unwrap_or_default();
            println!("  {i}{name} {}", fmt_type(g.dtype(i), g.dims(i)));
        }
    };
    section("inputs", &g.inputs());
    section("params", &g.params());
    section("outputs", g.outputs());
    let elems: u128 = g.params().iter().map(|&p| numel(g.dims(p)) as u128).sum();
    println!();
    println!("{elems} parameter elements");
    Ok(())
}
