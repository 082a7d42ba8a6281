//! Matrix products: MatMul (NumPy matmul: 1-D operands promoted and their axis dropped)
//! and Gemm (`alpha op(A) op(B) + beta C`).

use super::{OpDef, def, one};
use crate::import::{Importer, Node};
use rlx_ir::{Error, NodeId, Result};

pub const OPS: &[OpDef] = &[def("MatMul", 1, matmul), def("Gemm", 7, gemm)];

fn matmul(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (a, b) = (i.input(n, 0)?, i.input(n, 1)?);
    one(numpy_matmul(i, a, b)?)
}

/// `a @ b` with NumPy's rules for 1-D operands.
pub fn numpy_matmul(i: &mut Importer, a: NodeId, b: NodeId) -> Result<NodeId> {
    let (ad, bd) = (i.g.dims(a).to_vec(), i.g.dims(b).to_vec());
    if ad.is_empty() || bd.is_empty() {
        return Err(Error::shape(format!("matmul of a scalar: {} @ {}", i.g.describe(a), i.g.describe(b))));
    }
    let a2 = if ad.len() == 1 { i.g.reshape(a, &[1, ad[0]])? } else { a };
    let b2 = if bd.len() == 1 { i.g.reshape(b, &[bd[0], 1])? } else { b };
    let y = i.g.matmul(a2, b2)?;
    if ad.len() > 1 && bd.len() > 1 {
        return Ok(y);
    }
    let mut dims = i.g.dims(y).to_vec();
    if bd.len() == 1 {
        dims.pop();
    }
    if ad.len() == 1 {
        let r = dims.len();
        dims.remove(r - 1 - usize::from(bd.len() != 1));
    }
    i.g.reshape(y, &dims)
}

fn gemm(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (mut a, mut b) = (i.input(n, 0)?, i.input(n, 1)?);
    for (x, name) in [(a, "A"), (b, "B")] {
        if i.g.dims(x).len() != 2 {
            return Err(Error::shape(format!("{name} must be a matrix, got {}", i.g.describe(x))));
        }
    }
    if n.int("transA", 0)? != 0 {
        a = i.g.transpose(a, &[1, 0])?;
    }
    if n.int("transB", 0)? != 0 {
        b = i.g.transpose(b, &[1, 0])?;
    }
    let mut y = i.g.matmul(a, b)?;
    let alpha = n.float("alpha", 1.0)? as f64;
    if alpha != 1.0 {
        let s = i.g.scalar_like(y, alpha)?;
        y = i.g.mul(y, s)?;
    }
    if let Some(mut c) = i.opt_input(n, 2)? {
        let beta = n.float("beta", 1.0)? as f64;
        if beta != 1.0 {
            let s = i.g.scalar_like(c, beta)?;
            c = i.g.mul(c, s)?;
        }
        let out = i.g.dims(y).to_vec();
        y = i.g.add(y, c)?;
        if i.g.dims(y) != out {
            return Err(Error::shape(format!("C does not broadcast to the product's {out:?}")));
        }
    }
    one(y)
}
