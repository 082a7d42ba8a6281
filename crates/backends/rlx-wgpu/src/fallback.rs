//! Host fallbacks: a step with no WGSL kernel runs on the CPU backend, explicitly. The
//! step's op becomes a one-op graph compiled by rlx-cpu; at run time its inputs are read
//! back from the device, converted to their declared types, run, and the outputs written
//! back. Each costs a round trip through host memory, and `rlx check --backend gpu`
//! lists them.

use crate::kernels::Tensor;
use rlx_compile::CompileOptions;
use rlx_cpu::CpuProgram;
use rlx_ir::{Error, Graph, HostTensor, Op, Result};
use std::sync::Mutex;

/// A step run on the host: its one-op program.
pub struct HostStep {
    program: Mutex<CpuProgram>,
}

impl HostStep {
    pub fn new(op: &Op, ins: &[Tensor]) -> Result<HostStep> {
        let mut g = Graph::new(&format!("host {}", op.name()));
        let ids = ins
            .iter()
            .enumerate()
            .map(|(k, t)| g.input(&format!("in{k}"), t.dtype, &t.dims))
            .collect::<Result<Vec<_>>>()?;
        let y = g.push(op.clone(), &ids)?;
        g.set_outputs(&[y])?;
        let options = CompileOptions { fusion: false, ..CompileOptions::default() };
        let program = CpuProgram::compile(&g, &options, rlx_cpu::threads::default_threads())?;
        Ok(HostStep { program: Mutex::new(program) })
    }

    pub fn run(&self, inputs: &[&HostTensor]) -> Result<Vec<HostTensor>> {
        let mut program = self.program.lock().map_err(|_| Error::internal("gpu: a host step was poisoned"))?;
        let views: Vec<_> = inputs.iter().map(|t| t.view()).collect();
        program.run(&views)
    }
}
