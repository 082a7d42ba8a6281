//! RLX's GPU backend on wgpu: Vulkan on Linux, Metal on Apple, DX12 on Windows.
//!
//! `GpuProgram::compile` runs the compiler for `Target::GPU` (32-bit words for every
//! sub-word type, quantized weights packed, elementwise regions, no pattern fusions) and
//! turns each step into a dispatch of a generated WGSL kernel (`kernels/`, one module per
//! op family) with its bind group built once: the arena and each param live in device
//! buffers, so a run uploads the inputs, submits every dispatch in one command buffer and
//! reads the outputs back. A step with no WGSL kernel runs on the host through rlx-cpu
//! (`fallback.rs`): explicit, and listed by `GpuProgram::host_fallbacks`.
//!
//! `context.rs` picks the adapter (a hardware GPU over a software rasterizer), creates the
//! device with the adapter's own limits and caches compiled pipelines by source.

mod context;
mod fallback;
mod kernels;
mod program;

pub use context::{AdapterKind, GpuInfo, gpu_info};
pub use program::GpuProgram;
