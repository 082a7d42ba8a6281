//! Where a protobuf decode failed: prost names the field but not the byte, so on an error
//! the bytes are walked again over the wire format (tags, varints, lengths) with just
//! enough of the schema to descend into the messages that matter, and the first byte at
//! which the structure breaks is reported with the field path that leads to it.

use rlx_ir::Error;

/// A message kind of the schema subset the walker knows.
#[derive(Clone, Copy)]
enum Kind {
    Model,
    Graph,
    Node,
    Attribute,
    Tensor,
    ValueInfo,
    Type,
    TensorType,
    Shape,
    Other,
}

/// The message kind of field `field` of `kind` when it is a known sub-message.
fn child(kind: Kind, field: u64) -> Option<(Kind, &'static str)> {
    Some(match (kind, field) {
        (Kind::Model, 7) => (Kind::Graph, "graph"),
        (Kind::Model, 8) => (Kind::Other, "opset_import"),
        (Kind::Graph, 1) => (Kind::Node, "node"),
        (Kind::Graph, 5) => (Kind::Tensor, "initializer"),
        (Kind::Graph, 11) => (Kind::ValueInfo, "input"),
        (Kind::Graph, 12) => (Kind::ValueInfo, "output"),
        (Kind::Graph, 13) => (Kind::ValueInfo, "value_info"),
        (Kind::Node, 5) => (Kind::Attribute, "attribute"),
        (Kind::Attribute, 5) => (Kind::Tensor, "t"),
        (Kind::Attribute, 6) => (Kind::Graph, "g"),
        (Kind::Attribute, 10) => (Kind::Tensor, "tensors"),
        (Kind::Attribute, 11) => (Kind::Graph, "graphs"),
        (Kind::Tensor, 13) => (Kind::Other, "external_data"),
        (Kind::ValueInfo, 2) => (Kind::Type, "type"),
        (Kind::Type, 1) => (Kind::TensorType, "tensor_type"),
        (Kind::TensorType, 2) => (Kind::Shape, "shape"),
        (Kind::Shape, 1) => (Kind::Other, "dim"),
        _ => return None,
    })
}

fn varint(bytes: &[u8], at: &mut usize) -> Result<u64, &'static str> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let &b = bytes.get(*at).ok_or("truncated varint")?;
        *at += 1;
        if shift == 63 && b > 1 {
            return Err("varint overflows 64 bits");
        }
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint longer than 10 bytes")
}

/// The first structural fault in `bytes[start..end]` read as `kind`: (offset, path, what).
fn walk(
    bytes: &[u8],
    start: usize,
    end: usize,
    kind: Kind,
    path: &str,
    depth: usize,
) -> Option<(usize, String, String)> {
    if depth > 64 {
        return Some((start, path.to_string(), "messages nested more than 64 deep".to_string()));
    }
    let mut at = start;
    let mut counts: Vec<(u64, usize)> = Vec::new();
    while at < end {
        let field_at = at;
        let fault = |what: &str| Some((field_at, path.to_string(), what.to_string()));
        let tag = match varint(&bytes[..end], &mut at) {
            Ok(t) => t,
            Err(e) => return fault(e),
        };
        let (field, wire) = (tag >> 3, tag & 7);
        if field == 0 {
            return fault("field number 0");
        }
        match wire {
            0 => {
                if let Err(e) = varint(&bytes[..end], &mut at) {
                    return fault(e);
                }
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                if end - at < n {
                    return fault("truncated fixed-width field");
                }
                at += n;
            }
            2 => {
                let len = match varint(&bytes[..end], &mut at) {
                    Ok(l) => l,
                    Err(e) => return fault(e),
                };
                if len > (end - at) as u64 {
                    return fault(&format!("field {field} claims {len} bytes, {} remain", end - at));
                }
                let body = at;
                at += len as usize;
                if let Some((sub, name)) = child(kind, field) {
                    let k = match counts.iter_mut().find(|(f, _)| *f == field) {
                        Some((_, c)) => {
                            *c += 1;
                            *c - 1
                        }
                        None => {
                            counts.push((field, 1));
                            0
                        }
                    };
                    let sub_path = format!("{path}.{name}[{k}]");
                    if let Some(f) = walk(bytes, body, at, sub, &sub_path, depth + 1) {
                        return Some(f);
                    }
                }
            }
            _ => return fault(&format!("wire type {wire} (groups are not used by ONNX)")),
        }
    }
    None
}

/// The error for a failed decode of a `len`-byte model: the faulting byte offset and field
/// path when the wire format is broken, prost's description otherwise.
pub fn explain(bytes: &[u8], error: prost::DecodeError, len: usize) -> Error {
    match walk(bytes, 0, len, Kind::Model, "ModelProto", 0) {
        Some((offset, path, what)) => {
            Error::parse(format!("malformed ONNX protobuf at byte {offset} (in {path}): {what}"))
        }
        None => Error::parse(format!("malformed ONNX protobuf ({len} bytes): {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_the_offset_of_a_truncated_length() {
        // ModelProto { graph (7): GraphProto { node (1): <claims 5 bytes, has 1> } }
        let bytes = [0x3a, 0x03, 0x0a, 0x05, 0x00];
        let (offset, path, what) = walk(&bytes, 0, bytes.len(), Kind::Model, "ModelProto", 0).unwrap();
        assert_eq!(offset, 2);
        assert_eq!(path, "ModelProto.graph[0]");
        assert!(what.contains("claims 5 bytes"), "{what}");
    }

    #[test]
    fn accepts_well_formed_bytes() {
        let bytes = [0x08, 0x07, 0x3a, 0x02, 0x0a, 0x00];
        assert!(walk(&bytes, 0, bytes.len(), Kind::Model, "ModelProto", 0).is_none());
    }
}
