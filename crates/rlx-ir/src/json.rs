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

/// A document: nodes are `NodeDoc`s, or JSON values when a failed parse is located (see
/// `locate`).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphDoc<N> {
    format: String,
    version: u32,
    name: String,
    nodes: Vec<N>,
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
    fn doc(&self) -> GraphDoc<NodeDoc> {
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
        let doc: GraphDoc<NodeDoc> = serde_json::from_str(text).map_err(|e| match locate(text) {
            Some(i) => Error::parse(format!("graph JSON node {i}: {e}")),
            None => Error::parse(format!("graph JSON: {e}")),
        })?;
        Graph::from_doc(doc)
    }

    /// Rebuilds a document node by node through the shape rules.
    fn from_doc(doc: GraphDoc<NodeDoc>) -> Result<Graph> {
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
            check_f32_attrs(&node.op).map_err(at)?;
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

/// serde reads an f32 field by rounding the JSON number, so `1e72` becomes inf: the
/// graph would run with it and write it back as `null`, a document no reader accepts.
fn check_f32_attrs(op: &Op) -> Result<()> {
    let attrs: &[(&str, Option<crate::ops::F32Attr>)] = match op {
        Op::LayerNorm { eps, .. } | Op::RmsNorm { eps, .. } => &[("eps", Some(*eps))],
        Op::Attention { scale, .. } => &[("scale", *scale)],
        Op::Rope { base, .. } => &[("base", Some(*base))],
        _ => &[],
    };
    for (field, v) in attrs {
        if let Some(v) = v.filter(|v| !v.0.is_finite()) {
            return Err(Error::parse(format!("{field} is {}: not a finite f32 (out of f32 range?)", v.0)));
        }
    }
    Ok(())
}

/// The node a document that failed to parse fails in, when the document is otherwise
/// well formed: serde's error names the field at fault (an unknown field of an op, a
/// bad attribute) and a line and column, not the node. The strict parse stays the one
/// that decides (a JSON value would silently merge duplicate keys); this one only names.
fn locate(text: &str) -> Option<usize> {
    let doc: GraphDoc<serde_json::Value> = serde_json::from_str(text).ok()?;
    doc.nodes.into_iter().position(|n| serde_json::from_value::<NodeDoc>(n).is_err())
}

/// A graph inside a document (a scan's body) is a nested document, re-typed on load.
impl Serialize for Graph {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.doc().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Graph {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Graph::from_doc(GraphDoc::<NodeDoc>::deserialize(d)?).map_err(serde::de::Error::custom)
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

    /// docs/graph-format.md: unknown fields are errors, inside op objects too (they were
    /// silently dropped), and the error names the node and the field.
    #[test]
    fn unknown_op_fields_are_errors_naming_node_and_field() {
        let mut g = Graph::new("g");
        let x = g.input("x", DType::F32, &[1, 1, 4, 4]).unwrap();
        let p = g.max_pool2d(x, crate::PoolParams::square(2)).unwrap();
        let r = g.reduce(crate::ReduceOp::Sum, p, &[1], false).unwrap();
        g.set_outputs(&[r]).unwrap();
        let text = g.to_json().unwrap();
        assert!(Graph::from_json(&text).is_ok());
        let cases = [
            ("\"keep_dims\": false", "\"keep_dims\": false, \"keepdims\": true", "graph JSON node 2", "keepdims"),
            ("\"kernel\"", "\"dilation\": [1, 1], \"kernel\"", "graph JSON node 1", "dilation"),
            ("\"name\": \"x\"", "\"name\": \"x\", \"shape\": [4]", "graph JSON node 0", "shape"),
        ];
        for (from, to, node, field) in cases {
            assert!(text.contains(from), "{from} in {text}");
            let bad = text.replacen(from, to, 1);
            let e = Graph::from_json(&bad).err().unwrap_or_else(|| panic!("accepted an unknown `{field}`")).to_string();
            assert!(e.contains(node) && e.contains(&format!("unknown field `{field}`")), "{e}");
        }
        // A duplicate field is still refused (the locating pass must not decide).
        let dup = text.replacen("\"keep_dims\": false", "\"keep_dims\": false, \"keep_dims\": true", 1);
        assert!(Graph::from_json(&dup).unwrap_err().to_string().contains("duplicate field"));
    }

    /// A number beyond f32's range was read as inf, then written back as `null`.
    #[test]
    fn f32_attributes_out_of_range_are_errors() {
        let mut g = Graph::new("g");
        let x = g.input("x", DType::F32, &[2, 4]).unwrap();
        let n = g.rms_norm(x, None, 1e-5).unwrap();
        g.set_outputs(&[n]).unwrap();
        let text = g.to_json().unwrap();
        let eps = serde_json::to_string(&1e-5f32).unwrap();
        let bad = text.replacen(&format!("\"eps\": {eps}"), "\"eps\": 1.5e72", 1);
        assert_ne!(bad, text);
        let e = Graph::from_json(&bad).unwrap_err().to_string();
        assert!(e.contains("graph JSON node 1") && e.contains("eps is inf"), "{e}");
    }

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
