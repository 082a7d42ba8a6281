//! The JSON graph format (documented in docs/graph-format.md).
//!
//! A document is re-typed on load: every node goes back through its builder's shape rule
//! and must agree with the dims and dtype it declares, so a hand-edited or corrupted
//! document is an `Err`, never a graph the backends would misread.

use crate::graph::{Graph, NodeId};
use crate::ops::Op;
use crate::shape::{checked_byte_len, fmt_type};
use crate::{DType, Error, HostTensor, Result};
use serde::{Deserialize, Serialize};

/// The `format` field of every document.
pub const FORMAT_NAME: &str = "rlx-graph";
/// The version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphDoc {
    format: String,
    version: u32,
    name: String,
    nodes: Vec<NodeDoc>,
    outputs: Vec<u32>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeDoc {
    op: Op,
    inputs: Vec<u32>,
    dtype: DType,
    dims: Vec<usize>,
}

/// A tensor inside a document: dtype, dims and base64 of the little-endian bytes.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TensorDoc {
    dtype: DType,
    dims: Vec<usize>,
    data: String,
}

impl Serialize for HostTensor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        TensorDoc { dtype: self.dtype(), dims: self.dims().to_vec(), data: base64_encode(self.bytes()) }.serialize(s)
    }
}

impl<'de> Deserialize<'de> for HostTensor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let doc = TensorDoc::deserialize(d)?;
        let bytes = base64_decode(&doc.data).map_err(serde::de::Error::custom)?;
        HostTensor::from_bytes(doc.dtype, &doc.dims, bytes).map_err(serde::de::Error::custom)
    }
}

impl Graph {
    fn doc(&self) -> GraphDoc {
        GraphDoc {
            format: FORMAT_NAME.to_string(),
            version: FORMAT_VERSION,
            name: self.name.clone(),
            nodes: self
                .nodes
                .iter()
                .map(|n| NodeDoc {
                    op: n.op.clone(),
                    inputs: n.inputs.iter().map(|i| i.index() as u32).collect(),
                    dtype: n.dtype,
                    dims: n.dims.clone(),
                })
                .collect(),
            outputs: self.outputs.iter().map(|o| o.index() as u32).collect(),
        }
    }

    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(&self.doc()).map_err(|e| Error::internal(format!("to_json: {e}")))
    }

    pub fn from_json(text: &str) -> Result<Graph> {
        let doc: GraphDoc = serde_json::from_str(text).map_err(|e| Error::parse(format!("graph JSON: {e}")))?;
        Graph::from_doc(doc)
    }

    /// Rebuilds a document node by node through the shape rules.
    fn from_doc(doc: GraphDoc) -> Result<Graph> {
        if doc.format != FORMAT_NAME {
            return Err(Error::parse(format!("graph JSON: format is '{}', expected '{FORMAT_NAME}'", doc.format)));
        }
        if doc.version != FORMAT_VERSION {
            return Err(Error::parse(format!(
                "graph JSON: unknown format version {} (this build reads version {FORMAT_VERSION})",
                doc.version
            )));
        }
        let mut g = Graph::new(&doc.name);
        for (i, node) in doc.nodes.into_iter().enumerate() {
            let at = |e: Error| e.context(format!("graph JSON node {i}"));
            checked_byte_len("node", node.dtype, &node.dims).map_err(at)?;
            let id = if node.op.is_leaf() {
                if !node.inputs.is_empty() {
                    return Err(at(Error::parse("a leaf has no inputs")));
                }
                g.push_leaf(node.op, node.dtype, &node.dims).map_err(at)?
            } else {
                if let Some(bad) = node.inputs.iter().find(|&&j| j as usize >= i) {
                    return Err(at(Error::parse(format!("input {bad} does not precede node {i}"))));
                }
                let inputs: Vec<NodeId> = node.inputs.iter().map(|&j| NodeId::from_index(j as usize)).collect();
                g.push(node.op, &inputs).map_err(at)?
            };
            let (dtype, dims) = (g.dtype(id), g.dims(id));
            if dtype != node.dtype || dims != node.dims.as_slice() {
                return Err(at(Error::parse(format!(
                    "declares {} but its op infers {}",
                    fmt_type(node.dtype, &node.dims),
                    fmt_type(dtype, dims)
                ))));
            }
        }
        let outputs: Vec<NodeId> = doc.outputs.iter().map(|&o| NodeId::from_index(o as usize)).collect();
        g.set_outputs(&outputs).map_err(|e| e.context("graph JSON outputs"))?;
        Ok(g)
    }
}

/// A graph inside a document (a scan's body) is a nested document, re-typed on load.
impl Serialize for Graph {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.doc().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Graph {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Graph::from_doc(GraphDoc::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard padded base64; the error names the offending character offset.
pub fn base64_decode(text: &str) -> std::result::Result<Vec<u8>, String> {
    let s = text.as_bytes();
    if !s.len().is_multiple_of(4) {
        return Err(format!("base64 length {} is not a multiple of 4", s.len()));
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for (q, quad) in s.chunks(4).enumerate() {
        let last = q + 1 == s.len() / 4;
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return Err(format!("misplaced base64 padding at offset {}", q * 4));
        }
        let mut n = 0u32;
        for (k, &c) in quad.iter().enumerate() {
            let v = if k >= 4 - pad {
                0
            } else {
                B64.iter()
                    .position(|&x| x == c)
                    .ok_or_else(|| format!("bad base64 character at offset {}", q * 4 + k))? as u32
            };
            n = n << 6 | v;
        }
        out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8][..3 - pad]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trip() {
        for len in 0..20 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(base64_decode(&base64_encode(&bytes)).unwrap(), bytes);
        }
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert!(base64_decode("Zm8").is_err());
        assert!(base64_decode("Z=8=").is_err());
        assert!(base64_decode("Zm!=").is_err());
    }
}
