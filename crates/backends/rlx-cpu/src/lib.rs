//! RLX's CPU backend.
//!
//! [`CpuProgram::compile`] turns a verified [`rlx_ir::Graph`] into steps: one kernel call
//! per node with its plan resolved. [`CpuProgram::run`] walks them.
//!
//! Architecture invariant: this crate depends on `rlx-ir` only. It does not know the
//! runtime's `Session` or any other backend; the runtime adapts it to its backend trait.

pub mod arch;
pub mod buffer;
pub mod features;
pub mod kernels;
mod program;
pub mod threads;
pub mod vmath;

pub use program::{CpuProgram, Leaf};
