//! The seam between the runtime and the backends. A backend compiles a verified graph
//! into an [`Executable`]; the runtime owns everything user-facing around it (names,
//! boundary conversion, error messages), so each backend implements only these calls.

pub mod cpu;
#[cfg(feature = "gpu")]
pub mod gpu;

use crate::ParamBuffer;
use crate::{CompileOptions, Device};
use rlx_ir::{Graph, HostTensor, Result, TensorRef};

pub trait Backend: Send + Sync {
    fn device(&self) -> Device;
    /// Compiles `graph` (already verified). Unsupported ops or options are an `Err`
    /// naming them, never a silent fallback.
    fn compile(&self, graph: &Graph, options: &CompileOptions) -> Result<Box<dyn Executable>>;
}

/// A compiled graph on one backend. Inputs and params are addressed by their position
/// in `Graph::inputs()` / `Graph::params()` order, and always arrive with exactly their
/// declared dtype and dims (the runtime converts and checks before calling).
pub trait Executable: Send {
    fn set_param(&mut self, index: usize, value: &HostTensor) -> Result<()>;
    /// The host-side buffer param `index` lives in, shareable with other executables.
    fn param_buffer(&self, index: usize) -> Result<Option<ParamBuffer>>;
    /// Uses `buffer` for param `index` (dtype and dims already equal the param's).
    fn bind_param(&mut self, index: usize, buffer: ParamBuffer) -> Result<()>;
    /// Whether a run writes param `index`'s buffer in place (a KV cache: state).
    fn updates_in_place(&self, index: usize) -> bool;
    /// Makes whatever a backend derives from the params for its kernels (the CPU's packed
    /// weights) now rather than in the first run, for the params set or bound so far.
    fn pack_params(&mut self) -> Result<()> {
        Ok(())
    }
    /// Called only once every param was set or bound (the runtime checks).
    fn run(&mut self, inputs: &[TensorRef<'_>]) -> Result<Vec<HostTensor>>;
    /// [`Executable::run`] that shows `visit` the outputs instead of returning them (a
    /// backend whose outputs live in host memory shows them in place, with no copy).
    fn run_with(&mut self, inputs: &[TensorRef<'_>], visit: &mut dyn FnMut(&[TensorRef<'_>])) -> Result<()> {
        let outputs = self.run(inputs)?;
        visit(&outputs.iter().map(HostTensor::view).collect::<Vec<_>>());
        Ok(())
    }
    /// The CPU program behind this executable, if it is one (programs of one worker pool
    /// can run side by side: [`crate::CompiledGraph::run_side_by_side`]).
    fn as_cpu(&mut self) -> Option<&mut rlx_cpu::CpuProgram> {
        None
    }
    /// Bytes of device memory the compiled graph holds for its tensors.
    fn arena_bytes(&self) -> usize;
    /// Bytes the params occupy as the width policy stores them.
    fn param_bytes(&self) -> usize;
}
