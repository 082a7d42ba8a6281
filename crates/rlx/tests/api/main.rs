//! The public API's contract: boundary conversions, error messages, JSON, devices.

mod boundary;
mod docs;
mod errors;
mod json;
mod limits;
mod params;
mod session;
mod threads;

use rlx::prelude::*;

/// Compiles `g` for the CPU with default options.
pub fn compile(g: &Graph) -> CompiledGraph {
    Session::new(Device::Cpu).unwrap().compile_with(g, &CompileOptions::default()).unwrap()
}
