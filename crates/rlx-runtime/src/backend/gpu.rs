//! The wgpu backend behind the [`Backend`] trait.

use super::{Backend, Executable};
use crate::{CompileOptions, Device, ParamBuffer};
use rlx_ir::{Graph, HostTensor, Result, TensorRef};
use rlx_wgpu::GpuProgram;

pub struct GpuBackend;

impl Backend for GpuBackend {
    fn device(&self) -> Device {
        Device::Gpu
    }

    fn compile(&self, graph: &Graph, options: &CompileOptions) -> Result<Box<dyn Executable>> {
        Ok(Box::new(GpuProgram::compile(graph, options)?))
    }
}

impl Executable for GpuProgram {
    fn set_param(&mut self, index: usize, value: &HostTensor) -> Result<()> {
        GpuProgram::set_param(self, index, value)
    }

    /// Device buffers are not host memory: nothing to share.
    fn param_buffer(&self, _: usize) -> Result<Option<ParamBuffer>> {
        Ok(None)
    }

    /// Binds the device copy of `buffer`, one per host buffer and shared by every GPU
    /// program binding it (weights upload once; a KV cache is shared on the device).
    fn bind_param(&mut self, index: usize, buffer: ParamBuffer) -> Result<()> {
        GpuProgram::bind_param(self, index, &buffer)
    }

    fn updates_in_place(&self, index: usize) -> bool {
        GpuProgram::updates_in_place(self, index)
    }

    fn run(&mut self, inputs: &[TensorRef<'_>]) -> Result<Vec<HostTensor>> {
        GpuProgram::run(self, inputs)
    }

    fn arena_bytes(&self) -> usize {
        GpuProgram::arena_bytes(self)
    }

    fn param_bytes(&self) -> usize {
        self.compiled().budget().param_bytes
    }
}
