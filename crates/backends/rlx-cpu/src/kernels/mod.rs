//! One module per op family, mirroring `rlx_ir::ops`: each holds the family's
//! compile-time plan types and its kernels. These are the reference loops; faster
//! kernels replace a family's functions behind the same plans.

pub mod attention;
pub mod conv;
pub mod elementwise;
pub mod fused;
pub mod gather;
pub mod half_gemm;
pub mod kv_cache;
pub mod layout;
pub mod loss;
pub mod matmul;
pub mod norm;
pub mod packed_gemm;
mod pool_tiles;
pub mod q8_packed;
pub mod quant_gemm;
pub mod quant_matmul;
pub mod reduce;
pub mod region;
pub mod rope;
pub mod rows;
pub mod scan;
pub mod softmax;

/// An output written by several workers at once, each in parts no other touches (its
/// own columns, panels or blocks): the raw pointer they share.
#[derive(Clone, Copy)]
pub(crate) struct SharedOut(*mut f32);

// SAFETY: the workers holding it write disjoint elements (each user says which).
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    pub(crate) fn new(out: &mut [f32]) -> SharedOut {
        SharedOut(out.as_mut_ptr())
    }

    /// # Safety
    /// `offset` is inside the output.
    pub(crate) unsafe fn at(self, offset: usize) -> *mut f32 {
        // SAFETY: the caller's.
        unsafe { self.0.add(offset) }
    }
}
