//! Matmul against block-quantized weights.
//!
//! `dequant_matmul(x [.., k] f32, w [n, row_bytes] u8)` -> `[.., n]` f32, where `w` holds
//! `n` rows of `k` values encoded in `scheme` (`row_bytes = scheme.row_bytes(k)`, see
//! `rlx_ir::quant`).
//!
//! Reference semantics: `out[.., j] = sum_p x[.., p] * W[j, p]` with `W` decoded from its
//! blocks. With `q8_activations`, each row of `x` is first quantized to 8 bits per block
//! of 32 values (scale `max|x|/127`, round half away from zero), as llama.cpp does for its
//! integer dot products; the result is then the exact product of that quantized row with
//! `W`, accumulated in f32. Without it, `x` is used as is.

use super::{Op, Operand};
use crate::quant::QuantScheme;
use crate::{DType, Error, Graph, NodeId, Result};

pub(crate) fn infer(scheme: QuantScheme, q8_activations: bool, x: Operand, w: Operand) -> Result<(DType, Vec<usize>)> {
    if x.dtype != DType::F32 {
        return Err(Error::dtype(format!("x must be f32, got {}", x.ty())));
    }
    let Some(&k) = x.dims.last() else {
        return Err(Error::shape(format!("x needs rank >= 1, got {}", x.ty())));
    };
    let row = scheme.row_bytes(k)?;
    if q8_activations && !k.is_multiple_of(32) {
        return Err(Error::shape(format!("q8 activations quantize blocks of 32 values; k = {k} is not a multiple")));
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

impl Graph {
    /// `x @ W^T` for weights `w` holding `n` rows of `k` values in `scheme`.
    pub fn dequant_matmul(
        &mut self,
        x: NodeId,
        w: NodeId,
        scheme: QuantScheme,
        q8_activations: bool,
    ) -> Result<NodeId> {
        self.push(Op::DequantMatMul { scheme, q8_activations }, &[x, w])
    }
}
