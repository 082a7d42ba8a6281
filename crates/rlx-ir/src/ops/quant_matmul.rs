//! Matmul against block-quantized weights.
//!
//! `dequant_matmul(x [.., k] f32, w [n, row_bytes] u8)` -> `[.., n]` f32, where `w` holds
//! `n` rows of `k` values encoded in `scheme` (`row_bytes = scheme.row_bytes(k)`, see
//! `rlx_ir::quant`).
//!
//! Reference semantics: `out[.., j] = sum_p x[.., p] * W[j, p]` with `W` decoded from its
//! blocks. With [`ActivationQuant::Q8`], each row of `x` is first quantized to 8 bits per
//! block of 32 values (scale `max|x|/127`, round half away from zero), as llama.cpp does
//! for its integer dot products; with [`ActivationQuant::Q16`] to 16 bits the same way
//! (scale `max|x|/32767`); the result is then the exact product of that quantized row with
//! `W`, accumulated in f32. With [`ActivationQuant::F32`], `x` is used as is.
//!
//! `dequantize(w)` decodes the rows to f32 `[n, k]` exactly as `rlx_ir::quant` does.
//!
//! Derivatives: linear in `x` (`W` is data, with none): `dx = ct @ W`. A quantization of
//! the activations is treated as the identity (straight-through), its derivative being
//! zero almost everywhere.

use super::{Op, Operand};
use crate::quant::QuantScheme;
use crate::{DType, Error, Graph, NodeId, Result};
use serde::{Deserialize, Deserializer, Serialize};

/// What `dequant_matmul` does to its activations before the product. In graph JSON:
/// `"f32"`, `"q8"` or `"q16"` (`true` / `false` as written by the former `q8_activations`
/// flag read as `"q8"` / `"f32"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivationQuant {
    /// Used as they are.
    F32,
    /// 8 bits per value, a scale per block of 32 (llama.cpp's Q8_0 rows).
    Q8,
    /// 16 bits per value, a scale per block of 32: integer dot products at about the
    /// precision of f32 inputs (a value's error is at most `max|x| / 65534` of its block).
    Q16,
}

impl<'de> Deserialize<'de> for ActivationQuant {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Flag(bool),
            Name(String),
        }
        Ok(match Repr::deserialize(d)? {
            Repr::Flag(q8) => [ActivationQuant::F32, ActivationQuant::Q8][q8 as usize],
            Repr::Name(name) => match name.as_str() {
                "f32" => ActivationQuant::F32,
                "q8" => ActivationQuant::Q8,
                "q16" => ActivationQuant::Q16,
                _ => {
                    return Err(serde::de::Error::custom(format!(
                        "unknown activations {name:?}: expected \"f32\", \"q8\" or \"q16\""
                    )));
                }
            },
        })
    }
}

impl ActivationQuant {
    /// The largest quantized magnitude, or None for f32.
    pub fn levels(self) -> Option<f32> {
        match self {
            ActivationQuant::F32 => None,
            ActivationQuant::Q8 => Some(127.0),
            ActivationQuant::Q16 => Some(32767.0),
        }
    }
}

pub(crate) fn infer(
    scheme: QuantScheme,
    activations: ActivationQuant,
    x: Operand,
    w: Operand,
) -> Result<(DType, Vec<usize>)> {
    if x.dtype != DType::F32 {
        return Err(Error::dtype(format!("x must be f32, got {}", x.ty())));
    }
    let Some(&k) = x.dims.last() else {
        return Err(Error::shape(format!("x needs rank >= 1, got {}", x.ty())));
    };
    let row = scheme.row_bytes(k)?;
    if activations != ActivationQuant::F32 && !k.is_multiple_of(32) {
        return Err(Error::shape(format!(
            "{activations:?} activations quantize blocks of 32 values; k = {k} is not a multiple"
        )));
    }
    if w.dtype != DType::U8 || w.dims.len() != 2 || w.dims[1] != row {
        return Err(Error::shape(format!(
            "weights must be u8 [n, {row}] ({} rows of {k} values), got {}",
            scheme.name(),
            w.ty()
        )));
    }
    let mut dims = x.dims.to_vec();
    *dims.last_mut().expect("rank >= 1") = w.dims[0];
    Ok((DType::F32, dims))
}

pub(crate) fn infer_dequantize(scheme: QuantScheme, w: Operand) -> Result<(DType, Vec<usize>)> {
    let (bs, bb) = (scheme.block_size(), scheme.block_bytes());
    if w.dtype != DType::U8 || w.dims.len() != 2 || !w.dims[1].is_multiple_of(bb) {
        return Err(Error::shape(format!(
            "weights must be u8 [n, whole {} blocks of {bb} bytes], got {}",
            scheme.name(),
            w.ty()
        )));
    }
    Ok((DType::F32, vec![w.dims[0], w.dims[1] / bb * bs]))
}

impl Graph {
    /// Block-quantized rows `w [n, row_bytes]` decoded to f32 `[n, k]`.
    pub fn dequantize(&mut self, w: NodeId, scheme: QuantScheme) -> Result<NodeId> {
        self.push(Op::Dequantize { scheme }, &[w])
    }

    /// `x @ W^T` for weights `w` holding `n` rows of `k` values in `scheme`.
    pub fn dequant_matmul(
        &mut self,
        x: NodeId,
        w: NodeId,
        scheme: QuantScheme,
        activations: ActivationQuant,
    ) -> Result<NodeId> {
        self.push(Op::DequantMatMul { scheme, activations }, &[x, w])
    }
}

pub(crate) fn vjp(g: &mut Graph, scheme: QuantScheme, ins: &[NodeId], ct: NodeId) -> Result<Vec<Option<NodeId>>> {
    let w = g.dequantize(ins[1], scheme)?;
    let x_dims = g.dims(ins[0]).to_vec();
    // matmul needs rank >= 2: a vector x goes through as one row.
    let ct = if x_dims.len() == 1 { g.reshape(ct, &[1, g.dims(ct)[0]])? } else { ct };
    let dx = g.matmul(ct, w)?;
    let dx = if x_dims.len() == 1 { g.reshape(dx, &x_dims)? } else { dx };
    Ok(vec![Some(dx), None])
}
