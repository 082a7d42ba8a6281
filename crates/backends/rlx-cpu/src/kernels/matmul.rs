//! Batched matmul (semantics in `rlx_ir::ops::matmul`). Plain loops; the fast GEMM
//! replaces `matmul_typed` behind the same plan.

use crate::buffer::{Args, Buffer, Class, Num, out_mut};
use crate::with_class;
use rlx_ir::Result;
use rlx_ir::shape::{broadcast_strides, numel};

#[derive(Clone, Debug)]
pub struct MatMulPlan {
    m: usize,
    k: usize,
    n: usize,
    /// Per output batch entry, the element offsets of its `a` and `b` matrices.
    batches: Vec<(usize, usize)>,
}

impl MatMulPlan {
    pub fn new(a: &[usize], b: &[usize], out: &[usize]) -> MatMulPlan {
        let (ra, rb, ro) = (a.len(), b.len(), out.len());
        let (m, k, n) = (a[ra - 2], a[ra - 1], b[rb - 1]);
        let batch_dims = &out[..ro - 2];
        // Strides in units of whole matrices, 0 along broadcast batch axes.
        let sa = broadcast_strides(&a[..ra - 2], batch_dims);
        let sb = broadcast_strides(&b[..rb - 2], batch_dims);
        let mut batches = Vec::with_capacity(numel(batch_dims));
        let mut index = vec![0usize; batch_dims.len()];
        for _ in 0..numel(batch_dims) {
            let ma: usize = index.iter().zip(&sa).map(|(i, s)| i * s).sum();
            let mb: usize = index.iter().zip(&sb).map(|(i, s)| i * s).sum();
            batches.push((ma * m * k, mb * k * n));
            for axis in (0..index.len()).rev() {
                index[axis] += 1;
                if index[axis] < batch_dims[axis] {
                    break;
                }
                index[axis] = 0;
            }
        }
        MatMulPlan { m, k, n, batches }
    }
}

pub fn matmul(plan: &MatMulPlan, class: Class, ins: &Args, out: &mut Buffer) -> Result<()> {
    with_class!(class, T => {
        matmul_typed::<T>(plan, ins.get(0)?, ins.get(1)?, out_mut(out)?);
        Ok(())
    })
}

/// out[i, j] = sum over p in increasing order of a[i, p] * b[p, j].
fn matmul_typed<T: Num>(plan: &MatMulPlan, a: &[T], b: &[T], out: &mut [T]) {
    let MatMulPlan { m, k, n, .. } = *plan;
    for (bi, &(oa, ob)) in plan.batches.iter().enumerate() {
        let c = &mut out[bi * m * n..(bi + 1) * m * n];
        c.fill(T::ZERO);
        for i in 0..m {
            let row = &mut c[i * n..(i + 1) * n];
            for p in 0..k {
                let aip = a[oa + i * k + p];
                let brow = &b[ob + p * n..ob + (p + 1) * n];
                for (o, &bpj) in row.iter_mut().zip(brow) {
                    *o = o.add(aip.mul(bpj));
                }
            }
        }
    }
}
