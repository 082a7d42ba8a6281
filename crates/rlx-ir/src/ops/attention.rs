//! Scaled dot-product attention with grouped K/V heads.
//!
//! Shape rule: `q [b, hq, sq, d]`, `k [b, hkv, skv, d]`, `v [b, hkv, skv, dv]`, `hkv`
//! dividing `hq` (GQA; query head `h` reads K/V head `h / (hq / hkv)`), optional additive
//! `bias` broadcastable to `[b, hq, sq, skv]`; out `[b, hq, sq, dv]`. Float, one dtype.
//!
//! Reference semantics: `out = softmax(scale * q k^T + mask) v` over the key axis,
//! `scale` defaulting to `1 / sqrt(d)` (computed in the compute type, so an f64
//! graph gets the f64 value). `Causal` aligns the last query with the last key
//! (query `i` sees keys `0 ..= i + skv - sq`), which is what a KV-cached decode step
//! needs; it requires `sq <= skv` so that no row is fully masked. `CausalLen(len)` is the
//! same over only the first `len` keys (an integer scalar operand read at run time: the
//! filled part of a KV cache); `sq <= len <= skv` is checked when it runs.

use super::{F32Attr, Op, Operand, check_finite, check_float, check_same_dtype};
use crate::shape::broadcast_dims;
use crate::{DType, Error, Graph, NodeId, Result};
use serde::{Deserialize, Serialize};

/// The mask argument of [`Graph::attention`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttentionMask {
    None,
    Causal,
    /// An additive bias node (e.g. 0 / -inf), broadcastable to `[b, hq, sq, skv]`.
    Bias(NodeId),
    /// Causal over the first `len` keys, `len` an integer scalar node.
    CausalLen(NodeId),
}

/// The mask kind stored in the op (a bias is the op's fourth operand).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskKind {
    None,
    Causal,
    Bias,
    CausalLen,
}

impl MaskKind {
    /// Whether the mask is the op's fourth operand.
    pub fn has_operand(self) -> bool {
        matches!(self, MaskKind::Bias | MaskKind::CausalLen)
    }
}

pub(crate) fn infer(mask: MaskKind, scale: Option<F32Attr>, ins: &[Operand]) -> Result<(DType, Vec<usize>)> {
    let (q, k, v) = (ins[0], ins[1], ins[2]);
    check_float("q", q)?;
    let dtype = check_same_dtype(&ins[..3 + (mask == MaskKind::Bias) as usize])?;
    if let Some(s) = scale {
        check_finite("scale", s.0)?;
    }
    if q.dims.len() != 4 || k.dims.len() != 4 || v.dims.len() != 4 {
        return Err(Error::shape(format!(
            "expects q [b, hq, sq, d], k [b, hkv, skv, d], v [b, hkv, skv, dv], got {}, {}, {}",
            q.ty(),
            k.ty(),
            v.ty()
        )));
    }
    let (b, hq, sq, d) = (q.dims[0], q.dims[1], q.dims[2], q.dims[3]);
    let (hkv, skv, dv) = (k.dims[1], k.dims[2], v.dims[3]);
    if k.dims[0] != b || v.dims[0] != b || k.dims[3] != d || v.dims[1] != hkv || v.dims[2] != skv {
        return Err(Error::shape(format!("q {}, k {}, v {} do not agree", q.ty(), k.ty(), v.ty())));
    }
    if hkv == 0 || hq % hkv != 0 {
        return Err(Error::shape(format!("{hkv} K/V heads must divide {hq} query heads")));
    }
    if mask == MaskKind::Causal && sq > skv {
        return Err(Error::shape(format!("causal attention needs sq <= skv, got sq {sq} > skv {skv}")));
    }
    if mask == MaskKind::CausalLen {
        let len = ins[3];
        if !len.dtype.is_int() || crate::shape::numel(len.dims) != 1 || len.dims.len() > 1 {
            return Err(Error::shape(format!("causal length must be an integer scalar ([] or [1]), got {}", len.ty())));
        }
    }
    if mask == MaskKind::Bias {
        let bias = ins[3];
        let full = [b, hq, sq, skv];
        if broadcast_dims(bias.dims, &full).as_deref() != Some(&full[..]) {
            return Err(Error::shape(format!("bias {} does not broadcast to [{b},{hq},{sq},{skv}]", bias.ty())));
        }
    }
    Ok((dtype, vec![b, hq, sq, dv]))
}

impl Graph {
    /// `softmax(scale * q k^T + mask) v`; `scale` defaults to `1 / sqrt(head_dim)`.
    pub fn attention(
        &mut self,
        q: NodeId,
        k: NodeId,
        v: NodeId,
        mask: AttentionMask,
        scale: Option<f32>,
    ) -> Result<NodeId> {
        let scale = scale.map(F32Attr);
        let (kind, inputs) = match mask {
            AttentionMask::None => (MaskKind::None, vec![q, k, v]),
            AttentionMask::Causal => (MaskKind::Causal, vec![q, k, v]),
            AttentionMask::Bias(b) => (MaskKind::Bias, vec![q, k, v, b]),
            AttentionMask::CausalLen(len) => (MaskKind::CausalLen, vec![q, k, v, len]),
        };
        self.push(Op::Attention { mask: kind, scale }, &inputs)
    }
}
