//! The CPU backend behind the [`Backend`] trait.

use super::{Backend, Executable};
use crate::{CompileOptions, Device};
use rlx_cpu::{CpuProgram, ParamBuffer};
use rlx_ir::{Graph, HostTensor, Result, TensorRef};

pub struct CpuBackend;

impl Backend for CpuBackend {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn compile(&self, graph: &Graph, options: &CompileOptions) -> Result<Box<dyn Executable>> {
        let threads = options.threads.unwrap_or_else(rlx_cpu::threads::default_threads);
        let mut options = options.clone();
        options.memory_limit = options.memory_limit.or_else(crate::memory::available_bytes);
        Ok(Box::new(CpuProgram::compile(graph, &options, threads)?))
    }
}

impl Executable for CpuProgram {
    fn set_param(&mut self, index: usize, value: &HostTensor) -> Result<()> {
        CpuProgram::set_param(self, index, value)
    }

    fn param_buffer(&self, index: usize) -> Result<Option<ParamBuffer>> {
        Ok(CpuProgram::param_buffer(self, index))
    }

    fn bind_param(&mut self, index: usize, buffer: ParamBuffer) -> Result<()> {
        CpuProgram::bind_param(self, index, buffer)
    }

    fn updates_in_place(&self, index: usize) -> bool {
        CpuProgram::updates_in_place(self, index)
    }

    fn pack_params(&mut self) -> Result<()> {
        CpuProgram::pack_params(self)
    }

    fn run(&mut self, inputs: &[TensorRef<'_>]) -> Result<Vec<HostTensor>> {
        CpuProgram::run(self, inputs)
    }

    fn run_with(&mut self, inputs: &[TensorRef<'_>], visit: &mut dyn FnMut(&[TensorRef<'_>])) -> Result<()> {
        CpuProgram::run_with(self, inputs, visit)
    }

    fn as_cpu(&mut self) -> Option<&mut CpuProgram> {
        Some(self)
    }

    fn arena_bytes(&self) -> usize {
        CpuProgram::arena_bytes(self)
    }

    fn param_bytes(&self) -> usize {
        self.compiled().budget().param_bytes
    }
}
