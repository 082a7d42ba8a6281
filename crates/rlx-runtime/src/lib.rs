//! RLX's runtime: [`Device`], [`Session`], [`CompiledGraph`], device probing.
//!
//! Architecture invariant: backends never see names or user-typed values. The runtime
//! resolves names, converts and checks every boundary tensor, and hands the backend
//! positionally ordered tensors of exactly the declared types.

pub mod backend;

/// The CPU backend's host report (features, kernel arms), for `rlx info` and benches.
pub mod cpu {
    pub use rlx_cpu::features::{Arm, Features, features};
    pub use rlx_cpu::kernels::attention::ROW_BLOCK as ATTENTION_ROW_BLOCK;
    pub use rlx_cpu::threads::default_threads;
    pub use rlx_cpu::{bench, kernel_arms, profile};
}
pub mod memory;
mod session;

pub use rlx_compile::{CompileOptions, PrecisionPolicy};
pub use rlx_cpu::{ParamBuffer, SharedBytes};
pub use session::{Boundary, CompiledGraph, Session};

use std::sync::OnceLock;

/// Where a graph runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    /// A GPU through wgpu (Vulkan, Metal, DX12); needs the `gpu` feature.
    Gpu,
}

impl Device {
    pub const ALL: [Device; 2] = [Device::Cpu, Device::Gpu];

    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
        }
    }

    /// `cpu` or `gpu`.
    pub fn from_name(name: &str) -> rlx_ir::Result<Device> {
        Device::ALL
            .into_iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| rlx_ir::Error::input(format!("unknown device '{name}' (cpu or gpu)")))
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
    availability(device).is_ok()
}

/// [`is_available`] with the reason when the answer is no (what `rlx info` prints).
pub fn availability(device: Device) -> Result<(), String> {
    static CPU: OnceLock<Result<(), String>> = OnceLock::new();
    static GPU: OnceLock<Result<(), String>> = OnceLock::new();
    let cell = match device {
        Device::Cpu => &CPU,
        Device::Gpu => &GPU,
    };
    cell.get_or_init(|| match std::panic::catch_unwind(|| probe(device)) {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err(format!("the {device} probe computed a wrong sum")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("the {device} probe panicked")),
    })
    .clone()
}

fn probe(device: Device) -> rlx_ir::Result<bool> {
    let mut g = rlx_ir::Graph::new("probe");
    let x = g.input("x", rlx_ir::DType::F32, &[1])?;
    let y = g.add(x, x)?;
    g.set_outputs(&[y])?;
    let mut c = Session::new(device)?.compile_with(&g, &CompileOptions::default())?;
    Ok(c.run(&[("x", &[1.5])])? == vec![vec![3.0]])
}

/// The best device that [`is_available`]: a hardware GPU, else the CPU (which always
/// is). A software rasterizer (lavapipe, WARP) is never chosen for speed; it stays
/// usable as `Device::Gpu` explicitly.
pub fn fastest_device() -> Device {
    if is_available(Device::Gpu) && gpu::is_hardware() { Device::Gpu } else { Device::Cpu }
}

/// The GPU backend's adapter report, for `rlx info` and the benches.
pub mod gpu {
    /// The adapter's name, API and driver, or why there is none.
    pub fn describe() -> Result<String, String> {
        #[cfg(feature = "gpu")]
        {
            let i = rlx_wgpu::gpu_info().map_err(|e| e.message().to_string())?;
            let kind = if i.kind == rlx_wgpu::AdapterKind::Software { "software" } else { "hardware" };
            Ok(format!("{} ({}, {kind}, {}; i64 kernels: {})", i.name, i.backend, i.driver, i.int64))
        }
        #[cfg(not(feature = "gpu"))]
        Err("built without the `gpu` feature".into())
    }

    /// The steps of `graph` compiled for the GPU that run on the host (no WGSL kernel
    /// covers them), described; what `rlx check --backend gpu` lists.
    pub fn host_fallbacks(graph: &rlx_ir::Graph, options: &crate::CompileOptions) -> rlx_ir::Result<Vec<String>> {
        #[cfg(feature = "gpu")]
        {
            Ok(rlx_wgpu::GpuProgram::compile(graph, options)?.host_fallbacks().to_vec())
        }
        #[cfg(not(feature = "gpu"))]
        {
            let _ = (graph, options);
            Err(rlx_ir::Error::unsupported("built without the `gpu` feature"))
        }
    }

    /// Whether the adapter is a GPU rather than a software rasterizer.
    pub fn is_hardware() -> bool {
        #[cfg(feature = "gpu")]
        {
            rlx_wgpu::gpu_info().is_ok_and(|i| i.kind == rlx_wgpu::AdapterKind::Hardware)
        }
        #[cfg(not(feature = "gpu"))]
        false
    }
}
