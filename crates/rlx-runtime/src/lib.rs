//! RLX's runtime: [`Device`], [`Session`], [`CompiledGraph`], device probing.
//!
//! Architecture invariant: backends never see names or user-typed values. The runtime
//! resolves names, converts and checks every boundary tensor, and hands the backend
//! positionally ordered tensors of exactly the declared types.

pub mod backend;

/// The CPU backend's host report (features, kernel arms), for `rlx info` and benches.
pub mod cpu {
    pub use rlx_cpu::features::{Arm, Features, features};
    pub use rlx_cpu::threads::default_threads;
    pub use rlx_cpu::{bench, kernel_arms};
}
mod session;

pub use rlx_compile::{CompileOptions, PrecisionPolicy};
pub use rlx_cpu::{ParamBuffer, SharedBytes};
pub use session::{Boundary, CompiledGraph, Session};

use std::sync::OnceLock;

/// Where a graph runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
}

impl Device {
    pub const ALL: [Device; 1] = [Device::Cpu];

    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether `device` works here, answered by compiling and running a one-element probe
/// (cached; a panic inside the backend counts as unavailable).
pub fn is_available(device: Device) -> bool {
    static CPU: OnceLock<bool> = OnceLock::new();
    let cell = match device {
        Device::Cpu => &CPU,
    };
    *cell.get_or_init(|| std::panic::catch_unwind(|| probe(device).unwrap_or(false)).unwrap_or(false))
}

fn probe(device: Device) -> rlx_ir::Result<bool> {
    let mut g = rlx_ir::Graph::new("probe");
    let x = g.input("x", rlx_ir::DType::F32, &[1])?;
    let y = g.add(x, x)?;
    g.set_outputs(&[y])?;
    let mut c = Session::new(device)?.compile_with(&g, &CompileOptions::default())?;
    Ok(c.run(&[("x", &[1.5])])? == vec![vec![3.0]])
}

/// The best device that [`is_available`]; the CPU always is.
pub fn fastest_device() -> Device {
    Device::ALL.into_iter().find(|&d| is_available(d)).unwrap_or(Device::Cpu)
}
