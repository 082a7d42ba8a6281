//! Small ops with no family of their own: Dropout (inference: the identity, its mask all
//! true).

use super::{OpDef, def};
use crate::import::{Importer, Node};
use crate::ops::elementwise::identity_of;
use rlx_ir::{DType, Error, NodeId, Result};

pub const OPS: &[OpDef] = &[
    def("Dropout", 7, dropout),
    def("Dropout", 10, dropout),
    def("Dropout", 12, dropout),
    def("Dropout", 13, dropout),
    def("Dropout", 22, dropout),
];

/// Dropout outside training passes `x` through and keeps every element (mask all true;
/// before opset 10 the mask has x's type). From opset 12 `training_mode` is an input:
/// when it is true (known at compile time) only ratio 0 is supported, which is again the
/// identity; a random mask would not match any other runtime's draws.
fn dropout(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    if n.since >= 12
        && let Some(t) = i.opt_input(n, 2)?
    {
        let training = i.const_input(n, 2, t)?.to_f64_vec().first().is_some_and(|&v| v != 0.0);
        let ratio = i.const_floats(n, 1)?.and_then(|r| r.first().copied()).unwrap_or(0.5);
        if training && ratio != 0.0 {
            return Err(Error::unsupported(format!("training_mode with ratio {ratio} (a random mask)")));
        }
    }
    let y = identity_of(i, x)?;
    let dims = i.g.dims(x).to_vec();
    let mask_type = if n.since >= 10 { DType::Bool } else { i.g.dtype(x) };
    let mask = i.g.full(mask_type, &dims, 1.0)?;
    Ok(vec![y, mask])
}
