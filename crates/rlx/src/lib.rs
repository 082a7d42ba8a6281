//! RLX: build a typed tensor graph, compile it for a device, run it.
//!
//! ```
//! use rlx::prelude::*;
//!
//! # fn main() -> rlx::Result<()> {
//! let mut g = Graph::new("affine");
//! let x = g.input("x", DType::F32, &[2, 3])?;
//! let w = g.param("w", DType::F32, &[3, 2])?;
//! let y = g.matmul(x, w)?;
//! let y = g.unary(Unary::Relu, y)?;
//! g.set_outputs(&[y])?;
//!
//! let session = Session::new(Device::Cpu)?;
//! let mut compiled = session.compile(&g)?;
//! compiled.set_param("w", &[1.0, 0.0, 0.0, 1.0, 1.0, -1.0])?;
//! let out = compiled.run(&[("x", &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])])?;
//! assert_eq!(out[0], vec![4.0, 0.0, 10.0, 0.0]);
//! # Ok(())
//! # }
//! ```

pub use rlx_io as io;
pub use rlx_ir as ir;
pub use rlx_ir::{Error, ErrorKind, Result};
pub use rlx_runtime as runtime;

/// Everything the API contract promises, in one import.
pub mod prelude {
    pub use rlx_ir::{
        AttentionMask, BinaryOp, CompareOp, Conv2dParams, DType, Error, Graph, HostTensor, NodeId, Op, PoolParams,
        ReduceOp, Result, RopeStyle, Unary,
    };
    pub use rlx_runtime::{
        CompileOptions, CompiledGraph, Device, PrecisionPolicy, Session, fastest_device, is_available,
    };
}
