//! Rotary position embedding.
//!
//! Shape rule: `x [..., s, d]` (float, rank >= 2) and integer `positions [s]`; output type
//! equals `x`'s. `rotary_dims` is even, `<= d`; dims past it pass through unchanged.
//!
//! Reference semantics: for pair `i` in `0..rotary_dims/2`, angle
//! `a = pos * base^(-2i / rotary_dims)`, and the pair `(x0, x1)` becomes
//! `(x0 cos a - x1 sin a, x0 sin a + x1 cos a)`. `NeoX` pairs element `i` with
//! `i + rotary_dims/2` (llama.cpp's NEOX mode, HF Llama); `GptJ` pairs `2i` with `2i + 1`
//! (llama.cpp's NORM mode, the original GGUF Llama layout).

use super::{F32Attr, Op, Operand, check_finite, check_float};
use crate::{DType, Error, Graph, NodeId, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeStyle {
    /// Rotate halves: (i, i + r/2).
    NeoX,
    /// Rotate adjacent pairs: (2i, 2i + 1).
    GptJ,
}

pub(crate) fn infer(x: Operand, positions: Operand, rotary_dims: usize, base: F32Attr) -> Result<(DType, Vec<usize>)> {
    check_float("x", x)?;
    check_finite("base", base.0)?;
    if base.0 <= 0.0 {
        return Err(Error::graph(format!("base must be > 0, got {}", base.0)));
    }
    let rank = x.dims.len();
    if rank < 2 {
        return Err(Error::shape(format!("x needs [..., seq, head_dim], got {}", x.ty())));
    }
    let (s, d) = (x.dims[rank - 2], x.dims[rank - 1]);
    if !positions.dtype.is_int() || positions.dims != [s] {
        return Err(Error::shape(format!("positions must be integers [{s}] for x {}, got {}", x.ty(), positions.ty())));
    }
    if !rotary_dims.is_multiple_of(2) || rotary_dims > d || rotary_dims == 0 {
        return Err(Error::shape(format!("rotary_dims {rotary_dims} must be even, >= 2 and <= head_dim {d}")));
    }
    Ok((x.dtype, x.dims.to_vec()))
}

impl Graph {
    /// Rotates `x [..., seq, head_dim]` by `positions [seq]`; `rotary_dims` defaults to head_dim.
    pub fn rope(
        &mut self,
        x: NodeId,
        positions: NodeId,
        style: RopeStyle,
        base: f32,
        rotary_dims: Option<usize>,
    ) -> Result<NodeId> {
        let rotary_dims = rotary_dims.unwrap_or_else(|| self.dims(x).last().copied().unwrap_or(0));
        self.push(Op::Rope { style, base: F32Attr(base), rotary_dims }, &[x, positions])
    }
}

// Derivatives: a rotation by `pos * theta` is linear and orthogonal in `x`, so its
// transpose is the rotation by the negated positions; positions have none.

pub(crate) fn vjp(
    g: &mut Graph,
    style: RopeStyle,
    base: f32,
    rotary_dims: usize,
    ins: &[NodeId],
    ct: NodeId,
) -> Result<Vec<Option<NodeId>>> {
    let positions = g.cast(ins[1], DType::I64)?;
    let back = g.unary(super::Unary::Neg, positions)?;
    Ok(vec![Some(g.rope(ct, back, style, base, Some(rotary_dims))?), None])
}
