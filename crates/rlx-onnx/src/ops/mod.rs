//! The ONNX op importers of the default domain, one file per op family, each listing its
//! `(op_type, since_version, importer)` entries in an `OPS` table; `table()` joins them.
//!
//! A node is imported by the entry with the newest `since` not after the model's opset,
//! so semantics that changed between versions (Softmax's 2-D flattening before 13, Slice's
//! attributes before 10) are separate entries. Adding an op: an importer function in its
//! family file and a row in that file's `OPS`.

pub mod attention;
pub mod control;
pub mod einsum;
pub mod elementwise;
pub mod generator;
pub mod indexing;
pub mod layout;
pub mod loss;
pub mod matmul;
pub mod misc;
pub mod nn;
pub mod norm;
pub mod quant;
pub mod reduce;
pub mod rnn;

use crate::import::{Importer, Node};
use rlx_ir::{Error, NodeId, Result};
use std::sync::OnceLock;

/// Imports one node: its outputs' nodes, in the node's output order.
pub type ImportFn = fn(&mut Importer, &Node) -> Result<Vec<NodeId>>;

pub struct OpDef {
    pub op_type: &'static str,
    /// The opset version this definition follows (ONNX's `since_version`).
    pub since: i64,
    pub import: ImportFn,
}

/// Shorthand for table rows.
pub const fn def(op_type: &'static str, since: i64, import: ImportFn) -> OpDef {
    OpDef { op_type, since, import }
}

const FAMILIES: &[&[OpDef]] = &[
    elementwise::OPS,
    generator::OPS,
    layout::OPS,
    matmul::OPS,
    nn::OPS,
    norm::OPS,
    reduce::OPS,
    reduce::REDUCES,
    control::OPS,
    rnn::OPS,
    loss::OPS,
    attention::OPS,
    indexing::OPS,
    misc::OPS,
    quant::OPS,
    einsum::OPS,
];

/// Every op definition.
pub fn table() -> &'static [&'static OpDef] {
    static TABLE: OnceLock<Vec<&'static OpDef>> = OnceLock::new();
    TABLE.get_or_init(|| FAMILIES.iter().flat_map(|f| f.iter()).collect())
}

/// An axis attribute in `-rank..rank`, as an index.
pub fn axis(value: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if value < -r || value >= r {
        return Err(Error::shape(format!("axis {value} is out of range for rank {rank}")));
    }
    Ok(if value < 0 { (value + r) as usize } else { value as usize })
}

/// Axes in `-rank..rank`, as sorted distinct indices.
pub fn axes(values: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out = values.iter().map(|&a| axis(a, rank)).collect::<Result<Vec<_>>>()?;
    out.sort_unstable();
    if out.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::shape(format!("axes {values:?} repeat an axis")));
    }
    Ok(out)
}

/// Converts attribute integers to sizes, naming the attribute on a negative value.
pub fn sizes(values: &[i64], what: &str) -> Result<Vec<usize>> {
    values
        .iter()
        .map(|&v| usize::try_from(v).map_err(|_| Error::shape(format!("{what} {values:?} holds a negative value"))))
        .collect()
}

/// One output.
pub fn one(id: NodeId) -> Result<Vec<NodeId>> {
    Ok(vec![id])
}
