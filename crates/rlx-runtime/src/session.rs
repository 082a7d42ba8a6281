//! [`Session`] and [`CompiledGraph`]: the user-facing compile-once, run-many surface.

use crate::backend::{Backend, Executable, cpu::CpuBackend};
use crate::{CompileOptions, Device, ParamBuffer};
use rlx_ir::shape::{fmt_type, numel};
use rlx_ir::{DType, Error, Graph, HostTensor, Result, TensorRef};
use std::collections::HashMap;

/// A device to compile for.
pub struct Session {
    backend: Box<dyn Backend>,
}

impl Session {
    /// Err if the device is not usable here.
    pub fn new(device: Device) -> Result<Session> {
        match device {
            Device::Cpu => Ok(Session { backend: Box::new(CpuBackend) }),
            #[cfg(feature = "gpu")]
            Device::Gpu => {
                rlx_wgpu::gpu_info()?;
                Ok(Session { backend: Box::new(crate::backend::gpu::GpuBackend) })
            }
            #[cfg(not(feature = "gpu"))]
            Device::Gpu => Err(Error::unsupported("Device::Gpu: this build of rlx has no `gpu` feature")),
        }
    }

    pub fn device(&self) -> Device {
        self.backend.device()
    }

    /// Compiles with [`CompileOptions::from_env`].
    pub fn compile(&self, graph: &Graph) -> Result<CompiledGraph> {
        self.compile_with(graph, &CompileOptions::from_env()?)
    }

    pub fn compile_with(&self, graph: &Graph, options: &CompileOptions) -> Result<CompiledGraph> {
        graph.verify().map_err(|e| e.context(format!("compiling graph '{}'", graph.name())))?;
        let leaves = |ids: Vec<rlx_ir::NodeId>| -> Vec<Boundary> {
            ids.into_iter()
                .map(|id| Boundary {
                    name: graph.node(id).and_then(|n| n.leaf_name()).unwrap_or_default().to_string(),
                    dtype: graph.dtype(id),
                    dims: graph.dims(id).to_vec(),
                })
                .collect()
        };
        let inputs = leaves(graph.inputs());
        let params = leaves(graph.params());
        let index = |b: &[Boundary]| b.iter().enumerate().map(|(i, b)| (b.name.clone(), i)).collect();
        Ok(CompiledGraph {
            device: self.device(),
            input_index: index(&inputs),
            param_index: index(&params),
            inputs,
            params,
            outputs: graph.outputs().iter().map(|&o| (graph.dtype(o), graph.dims(o).to_vec())).collect(),
            executable: self.backend.compile(graph, options)?,
            param_set: vec![false; graph.params().len()],
        })
    }
}

/// A named boundary tensor's declared type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boundary {
    pub name: String,
    pub dtype: DType,
    pub dims: Vec<usize>,
}

impl Boundary {
    fn ty(&self) -> String {
        fmt_type(self.dtype, &self.dims)
    }
}

/// A graph compiled for one device. `run` only executes: names were resolved and the
/// kernels planned at compile time.
pub struct CompiledGraph {
    device: Device,
    inputs: Vec<Boundary>,
    params: Vec<Boundary>,
    input_index: HashMap<String, usize>,
    param_index: HashMap<String, usize>,
    outputs: Vec<(DType, Vec<usize>)>,
    executable: Box<dyn Executable>,
    /// Per param, whether it was set or bound (a run needs every one).
    param_set: Vec<bool>,
}

impl CompiledGraph {
    pub fn device(&self) -> Device {
        self.device
    }
    pub fn inputs(&self) -> &[Boundary] {
        &self.inputs
    }
    pub fn params(&self) -> &[Boundary] {
        &self.params
    }
    /// (dtype, dims) of each output.
    pub fn outputs(&self) -> &[(DType, Vec<usize>)] {
        &self.outputs
    }

    /// Bytes of the arena the backend allocated for this graph's tensors.
    pub fn arena_bytes(&self) -> usize {
        self.executable.arena_bytes()
    }

    /// Bytes the params occupy on the device (f16/bf16 params packed or widened as the
    /// backend's width policy decides).
    pub fn param_bytes(&self) -> usize {
        self.executable.param_bytes()
    }

    /// f32 values converted to the param's declared dtype.
    pub fn set_param(&mut self, name: &str, values: &[f32]) -> Result<()> {
        let i = self.param_slot(name)?;
        let p = &self.params[i];
        let t = from_f32_values("param", p, values)?;
        self.executable.set_param(i, &t)?;
        self.param_set[i] = true;
        Ok(())
    }

    /// A typed param: the same dtype passes through; another float dtype is converted
    /// by value (round to nearest even), exactly as `run_typed` does for inputs.
    pub fn set_param_typed(&mut self, name: &str, value: &HostTensor) -> Result<()> {
        let i = self.param_slot(name)?;
        let t = coerce("param", &self.params[i], value.view())?;
        self.executable.set_param(i, t.as_ref().unwrap_or(value))?;
        self.param_set[i] = true;
        Ok(())
    }

    /// The buffer param `name` lives in (`None` when nothing reads it, or before it is
    /// set or bound). Binding it into
    /// another compiled graph shares it: a KV cache both a prefill and a decode graph
    /// append to, or weights loaded once.
    pub fn param_buffer(&self, name: &str) -> Result<Option<ParamBuffer>> {
        let i = self.param_slot(name)?;
        self.executable.param_buffer(i)
    }

    /// Makes param `name` use `buffer` without copying: a [`ParamBuffer`] from another
    /// compiled graph, or borrowed bytes ([`ParamBuffer::from_bytes`], e.g. a memory-mapped
    /// GGUF tensor). The buffer must hold the param's exact dtype and dims.
    pub fn bind_param(&mut self, name: &str, buffer: &ParamBuffer) -> Result<()> {
        let i = self.param_slot(name)?;
        self.executable.bind_param(i, buffer.clone())?;
        self.param_set[i] = true;
        Ok(())
    }

    /// Whether each run writes param `name`'s buffer in place: a `kv_append` whose cache is
    /// the param and its only reader, so the buffer carries the cache from run to run.
    pub fn updates_in_place(&self, name: &str) -> Result<bool> {
        Ok(self.executable.updates_in_place(self.param_slot(name)?))
    }

    /// Makes the backend's derived copies of the params (the CPU's weights packed for its
    /// kernels, shared by every graph bound to the same buffers) now instead of in the
    /// first run, so that a load step pays for them and the first run's time is its own.
    /// Params not set or bound yet are skipped; a run makes whatever is missing.
    pub fn pack_params(&mut self) -> Result<()> {
        self.executable.pack_params()
    }

    /// f32 values converted (never reinterpreted) to each input's declared dtype;
    /// one Vec<f32> per graph output, converted from the output's dtype.
    pub fn run(&mut self, inputs: &[(&str, &[f32])]) -> Result<Vec<Vec<f32>>> {
        let order = self.match_inputs(inputs.iter().map(|(n, _)| *n))?;
        let tensors: Vec<HostTensor> = order
            .iter()
            .enumerate()
            .map(|(slot, &k)| from_f32_values("input", &self.inputs[slot], inputs[k].1))
            .collect::<Result<_>>()?;
        let views: Vec<TensorRef> = tensors.iter().map(HostTensor::view).collect();
        self.check_params()?;
        Ok(self.executable.run(&views)?.iter().map(HostTensor::to_f32_vec).collect())
    }

    /// Typed inputs: each input's own dtype passes through byte for byte; another float
    /// dtype is converted by value. Outputs come back in their declared dtypes.
    pub fn run_typed(&mut self, inputs: &[(&str, &HostTensor)]) -> Result<Vec<HostTensor>> {
        let views: Vec<(&str, TensorRef)> = inputs.iter().map(|(n, t)| (*n, t.view())).collect();
        self.run_views(&views)
    }

    /// Runs several graphs, each on its typed inputs as [`CompiledGraph::run_typed`]
    /// would, with the results of running them one after another: CPU graphs compiled
    /// for the same threads run at once, one worker of their pool each
    /// ([`rlx_cpu::CpuProgram::run_side_by_side`]); the others one after another. A graph
    /// that writes a param buffer another of them uses (a shared KV cache) gets an `Err`.
    pub fn run_side_by_side(jobs: &mut [(&mut CompiledGraph, &[(&str, &HostTensor)])]) -> Vec<Result<Vec<HostTensor>>> {
        let views: Vec<Vec<(&str, TensorRef)>> =
            jobs.iter().map(|(_, inputs)| inputs.iter().map(|(n, t)| (*n, t.view())).collect()).collect();
        let prepared: Vec<Result<_>> = jobs.iter().zip(&views).map(|((g, _), v)| g.prepare_run(v)).collect();
        let mut results: Vec<Option<Result<Vec<HostTensor>>>> = Vec::with_capacity(jobs.len());
        let mut cpu = Vec::new();
        for (((g, _), views), prepared) in jobs.iter_mut().zip(&views).zip(&prepared) {
            match prepared {
                Err(e) => results.push(Some(Err(e.clone()))),
                Ok((order, converted)) => {
                    let inputs = in_order(views, order, converted);
                    if g.device == Device::Cpu {
                        let program = g.executable.as_cpu().expect("a CPU graph runs a CPU program");
                        cpu.push((results.len(), program, inputs));
                        results.push(None);
                    } else {
                        results.push(Some(g.executable.run(&inputs)));
                    }
                }
            }
        }
        let (at, mut programs): (Vec<usize>, Vec<_>) =
            cpu.iter_mut().map(|(at, program, inputs)| (*at, (&mut **program, inputs.as_slice()))).unzip();
        for (at, ran) in at.into_iter().zip(rlx_cpu::CpuProgram::run_side_by_side(&mut programs)) {
            results[at] = Some(ran);
        }
        results.into_iter().map(|r| r.expect("every job ran")).collect()
    }

    /// [`CompiledGraph::run_typed`] on borrowed tensors (a caller's buffers: NumPy
    /// arrays, mapped files): an input of its declared type is read straight from them.
    pub fn run_views(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> Result<Vec<HostTensor>> {
        let (order, converted) = self.prepare_run(inputs)?;
        self.executable.run(&in_order(inputs, &order, &converted))
    }

    /// [`CompiledGraph::run_typed`] that shows `visit` the outputs in the program's own
    /// memory (on the CPU) instead of returning copies: for a caller that keeps them in
    /// buffers of its own, run after run (an LLM's logits).
    pub fn run_typed_with(
        &mut self,
        inputs: &[(&str, &HostTensor)],
        visit: &mut dyn FnMut(&[TensorRef<'_>]),
    ) -> Result<()> {
        let inputs: Vec<(&str, TensorRef)> = inputs.iter().map(|(n, t)| (*n, t.view())).collect();
        let (order, converted) = self.prepare_run(&inputs)?;
        self.executable.run_with(&in_order(&inputs, &order, &converted), visit)
    }

    /// Checks that every param has a value; returns, for each declared input, the
    /// position of the caller's entry for it and, where its type differs, its value
    /// converted.
    fn prepare_run(&self, inputs: &[(&str, TensorRef<'_>)]) -> Result<(Vec<usize>, Vec<Option<HostTensor>>)> {
        let order = self.match_inputs(inputs.iter().map(|(n, _)| *n))?;
        let converted = order
            .iter()
            .enumerate()
            .map(|(slot, &k)| coerce("input", &self.inputs[slot], inputs[k].1))
            .collect::<Result<_>>()?;
        self.check_params()?;
        Ok((order, converted))
    }

    fn check_params(&self) -> Result<()> {
        match self.param_set.iter().position(|s| !s) {
            Some(unset) => {
                let p = &self.params[unset];
                Err(Error::input(format!("param '{}' ({}) was never set: call set_param before run", p.name, p.ty())))
            }
            None => Ok(()),
        }
    }

    fn param_slot(&self, name: &str) -> Result<usize> {
        self.param_index.get(name).copied().ok_or_else(|| {
            Error::input(format!("unknown param '{name}'; the graph's params are {}", list(&self.params)))
        })
    }

    /// For each declared input, the position of the caller's entry for it.
    fn match_inputs<'a>(&self, names: impl Iterator<Item = &'a str>) -> Result<Vec<usize>> {
        let mut order = vec![usize::MAX; self.inputs.len()];
        for (k, name) in names.enumerate() {
            let Some(&slot) = self.input_index.get(name) else {
                return Err(Error::input(format!(
                    "unknown input '{name}'; the graph's inputs are {}",
                    list(&self.inputs)
                )));
            };
            if order[slot] != usize::MAX {
                return Err(Error::input(format!("input '{name}' is given twice")));
            }
            order[slot] = k;
        }
        if let Some(slot) = order.iter().position(|&k| k == usize::MAX) {
            let b = &self.inputs[slot];
            return Err(Error::input(format!("missing input '{}' ({})", b.name, b.ty())));
        }
        Ok(order)
    }
}

/// The inputs `prepare_run` ordered and converted, as the executable takes them.
fn in_order<'a>(
    inputs: &[(&str, TensorRef<'a>)],
    order: &[usize],
    converted: &'a [Option<HostTensor>],
) -> Vec<TensorRef<'a>> {
    order.iter().zip(converted).map(|(&k, c)| c.as_ref().map_or(inputs[k].1, HostTensor::view)).collect()
}

fn list(b: &[Boundary]) -> String {
    if b.is_empty() {
        return "(none)".to_string();
    }
    b.iter().map(|b| format!("'{}' {}", b.name, b.ty())).collect::<Vec<_>>().join(", ")
}

fn from_f32_values(role: &str, b: &Boundary, values: &[f32]) -> Result<HostTensor> {
    let want = numel(&b.dims);
    if values.len() != want {
        return Err(Error::input(format!(
            "{role} '{}' expects {} ({want} values), got {} values",
            b.name,
            b.ty(),
            values.len()
        )));
    }
    HostTensor::from_f32_as(b.dtype, &b.dims, values)
        .map_err(|e| e.context(format!("{role} '{}' ({})", b.name, b.ty())))
}

/// `None` when `t` already has the declared type; a converted copy when only the float
/// format differs; an error naming the tensor otherwise.
fn coerce(role: &str, b: &Boundary, t: TensorRef<'_>) -> Result<Option<HostTensor>> {
    if t.dims() != b.dims.as_slice() {
        return Err(Error::input(format!(
            "{role} '{}' expects {}, got {}",
            b.name,
            b.ty(),
            fmt_type(t.dtype(), t.dims())
        )));
    }
    if t.dtype() == b.dtype {
        return Ok(None);
    }
    if t.dtype().is_float() && b.dtype.is_float() {
        return HostTensor::from_f64_as(b.dtype, &b.dims, &t.to_f64_vec()).map(Some);
    }
    Err(Error::dtype(format!(
        "{role} '{}' expects {}, got {} (only float formats are converted)",
        b.name,
        b.ty(),
        fmt_type(t.dtype(), t.dims())
    )))
}
