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
