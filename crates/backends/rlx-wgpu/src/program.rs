//! Compiles a graph into dispatches over device buffers and runs them.
//!
//! `compile` runs the compiler for `Target::GPU`, creates the arena and one buffer per
//! read param, uploads the constants, and resolves every step into dispatches of
//! generated kernels with their bind groups and metadata fixed, or a host fallback.
//! `run` uploads the inputs, records every dispatch in one command buffer (a host step
//! splits it), and reads the outputs and the error flag back in one copy.

use crate::context::{Gpu, gpu, storage_buffer};
use crate::fallback::HostStep;
use crate::kernels::{self, Call, PRELUDE, Tensor, Threads};
use rlx_compile::{CompileOptions, Compiled, Kernel as StepKernel, Target, ValueKind};
use rlx_ir::shape::fmt_type;
use rlx_ir::{DType, Error, Graph, HostTensor, Op, Result, TensorRef};
use std::borrow::Cow;
use std::fmt::Write;
use std::sync::{Arc, Mutex};

/// The buffer a place lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Buf {
    Arena,
    Param(usize),
    /// The program's scratch buffer: partials a step's passes hand to each other.
    Scratch,
}

/// A value's bytes: in the arena, a param's buffer, or the scratch buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Place {
    buf: Buf,
    offset: u64,
    bytes: u64,
}

/// A named boundary tensor and where it lives (`None`: nothing reads it).
#[derive(Clone, Debug)]
struct Leaf {
    name: String,
    dtype: DType,
    dims: Vec<usize>,
    elem_bytes: usize,
    place: Option<Place>,
}

/// A kernel call: its pipeline, workgroups and bindings (metadata range, operand places,
/// the error flag); the bind group is built from them, again when a param is rebound.
struct Dispatch {
    pipeline: Arc<wgpu::ComputePipeline>,
    groups: [u32; 3],
    meta: (u64, u64),
    operands: Vec<Place>,
    checks: bool,
    bind_group: Option<wgpu::BindGroup>,
    /// The step's kernel name (what `RLX_GPU_PROFILE` totals by).
    kernel: String,
}

enum Action {
    Gpu(Dispatch),
    Host { step: Box<HostStep>, ins: Vec<(Place, Tensor)>, out: (Place, Tensor) },
}

/// What a step that checks its indices says when one is out of range.
struct Checked {
    op: Op,
    /// Each input described (`f32[5,2] input 'x0'`) and its dims.
    ins: Vec<(String, Vec<usize>)>,
}

impl Checked {
    fn message(&self, at: u32, value: i32) -> String {
        match &self.op {
            Op::Gather => {
                format!("index {value} at position {at} is out of range 0..{} for {}", self.ins[0].1[0], self.ins[0].0)
            }
            Op::ScatterAdd { rows } => {
                format!("index {value} at position {at} is out of range 0..{rows} for scatter_add's table")
            }
            Op::CrossEntropy => format!(
                "index {value} at position {at} is out of range 0..{} for cross_entropy labels (classes)",
                self.ins[0].1[1]
            ),
            Op::KvAppend { axis } => format!(
                "kv_append: writing {} rows at position {value} overruns {} (capacity {})",
                self.ins[1].1[*axis], self.ins[0].0, self.ins[0].1[*axis]
            ),
            _ => {
                let (sq, skv) = (self.ins[0].1[2], self.ins[1].1[2]);
                format!("causal length {value} must lie in [sq, skv] = [{sq}, {skv}] (the cache holds {skv} keys)")
            }
        }
    }
}

/// A graph compiled for the GPU.
pub struct GpuProgram {
    gpu: Arc<Gpu>,
    compiled: Compiled,
    arena: wgpu::Buffer,
    /// Scratch regions of multi-pass kernels (every step's laid out from offset 0: steps
    /// run one after another).
    scratch: wgpu::Buffer,
    meta: wgpu::Buffer,
    param_buffers: Vec<Option<Arc<wgpu::Buffer>>>,
    /// Per param, the host buffer it was bound to (kept alive: its identity keys the
    /// shared device copy) and whether that is read-only.
    bound: Vec<Option<(rlx_cpu::ParamBuffer, bool)>>,
    inputs: Vec<Leaf>,
    params: Vec<Leaf>,
    param_written: Vec<bool>,
    outputs: Vec<(Option<Place>, Tensor)>,
    actions: Vec<Action>,
    /// The error flag (failing step + 1, position, value), when a kernel checks indices;
    /// per step, what it computes (for that error's message).
    status: Option<wgpu::Buffer>,
    labels: Vec<String>,
    checked: Vec<Option<Checked>>,
    host_fallbacks: Vec<String>,
    /// Bind groups must be (re)built before the next run.
    unbound: bool,
    /// The mappable buffer outputs (and host steps' operands) are read back through,
    /// grown when a read needs more: a run allocates no device memory.
    staging: Mutex<Option<wgpu::Buffer>>,
    /// With `RLX_GPU_PROFILE=1`: dispatches run one at a time, and per kernel name the
    /// seconds and calls they took, printed when the program is dropped.
    profile: Option<std::collections::HashMap<String, (f64, usize)>>,
}

impl Drop for GpuProgram {
    fn drop(&mut self) {
        let Some(profile) = &self.profile else { return };
        let mut rows: Vec<_> = profile.iter().collect();
        rows.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
        let total: f64 = rows.iter().map(|r| r.1.0).sum();
        eprintln!("RLX_GPU_PROFILE '{}': {:.1} ms in {} kernels", self.compiled.schedule.name, total * 1e3, rows.len());
        for (kernel, (secs, calls)) in rows {
            eprintln!("  {:>9.2} ms {:>5.1}% {calls:>6} calls  {kernel}", secs * 1e3, 100.0 * secs / total.max(1e-12));
        }
    }
}

/// A host tensor of its declared type as the words the device stores it in: its own
/// bytes when the device stores it as is (no copy on the run path), else converted.
fn to_words(t: TensorRef<'_>, elem_bytes: usize) -> Cow<'_, [u8]> {
    if elem_bytes == t.dtype().size_bytes() && t.bytes().len().is_multiple_of(4) {
        return Cow::Borrowed(t.bytes());
    }
    let mut bytes = if elem_bytes == t.dtype().size_bytes() {
        t.bytes().to_vec()
    } else if t.dtype().is_float() {
        t.to_f32_vec().iter().flat_map(|v| v.to_le_bytes()).collect()
    } else {
        t.to_i64_vec().iter().flat_map(|&v| (v as i32).to_le_bytes()).collect()
    };
    bytes.resize(bytes.len().next_multiple_of(4), 0);
    Cow::Owned(bytes)
}

/// Device words back to a host tensor of `t`'s declared type (values a widened slot
/// holds are representable in it, so the conversion is exact).
fn from_words(bytes: &[u8], t: &Tensor) -> Result<HostTensor> {
    let n = t.numel();
    if t.elem_bytes == t.dtype.size_bytes() {
        return HostTensor::from_bytes(t.dtype, &t.dims, bytes[..n * t.elem_bytes].to_vec());
    }
    let words = bytes.chunks_exact(4).take(n).map(|c| [c[0], c[1], c[2], c[3]]);
    if t.dtype.is_float() {
        HostTensor::from_f32_as(t.dtype, &t.dims, &words.map(f32::from_le_bytes).collect::<Vec<_>>())
    } else {
        HostTensor::from_f64_as(t.dtype, &t.dims, &words.map(|w| i32::from_le_bytes(w) as f64).collect::<Vec<_>>())
    }
}

impl GpuProgram {
    pub fn compile(graph: &Graph, options: &CompileOptions) -> Result<GpuProgram> {
        let gpu = gpu()?;
        let compiled = rlx_compile::compile(graph, &Target::GPU, options)?;
        let (schedule, plan) = (&compiled.schedule, &compiled.plan);
        let max = gpu.info.max_binding_bytes;
        if plan.arena_bytes as u64 > max {
            return Err(Error::unsupported(format!(
                "gpu: the graph needs a {} byte arena; '{}' binds at most {max} bytes",
                plan.arena_bytes, gpu.info.name
            )));
        }
        let arena = storage_buffer(&gpu, "rlx arena", plan.arena_bytes as u64);
        let place = |v: usize| -> Option<Place> {
            plan.slots[v].map(|s| Place {
                buf: s.param.map_or(Buf::Arena, Buf::Param),
                offset: s.offset as u64,
                bytes: s.bytes as u64,
            })
        };
        let tensor = |v: usize| -> Tensor {
            let value = &schedule.values[v];
            let elem_bytes = plan.slots[v].map_or(value.dtype.size_bytes(), |s| s.elem_bytes);
            Tensor { dtype: value.dtype, dims: value.dims.clone(), elem_bytes }
        };
        let leaf = |v: usize| -> Leaf {
            let value = &schedule.values[v];
            let name = value.label.split('\'').nth(1).unwrap_or(&value.label).to_string();
            Leaf {
                name,
                dtype: value.dtype,
                dims: value.dims.clone(),
                elem_bytes: tensor(v).elem_bytes,
                place: place(v),
            }
        };
        let inputs: Vec<Leaf> = schedule.inputs.iter().map(|&v| leaf(v)).collect();
        let params: Vec<Leaf> = schedule.params.iter().map(|&v| leaf(v)).collect();
        let mut param_buffers = Vec::new();
        for (p, l) in params.iter().enumerate() {
            if (plan.param_bytes.get(p).copied().unwrap_or(0) as u64) > max {
                return Err(Error::unsupported(format!(
                    "gpu: param '{}' ({}) is larger than the {max} bytes '{}' binds",
                    l.name,
                    fmt_type(l.dtype, &l.dims),
                    gpu.info.name
                )));
            }
            param_buffers.push(l.place.map(|_| Arc::new(storage_buffer(&gpu, &l.name, plan.param_bytes[p] as u64))));
        }
        for (v, value) in schedule.values.iter().enumerate() {
            if let (ValueKind::Constant(t), Some(at)) = (&value.kind, place(v)) {
                gpu.queue.write_buffer(&arena, at.offset, &to_words(t.view(), tensor(v).elem_bytes));
            }
        }
        // Resolve every step into calls (or a host step), then lay out their metadata.
        let int64 = gpu.info.int64;
        let mut pending: Vec<(usize, Call, Vec<Place>)> = Vec::new();
        let mut host: Vec<(usize, Action)> = Vec::new();
        let mut host_fallbacks = Vec::new();
        let mut scratch_bytes = 0u64;
        let mut labels = Vec::new();
        let mut checked = Vec::new();
        for (i, step) in schedule.steps.iter().enumerate() {
            checked.push(match &step.kernel {
                StepKernel::Op(
                    op @ (Op::Gather
                    | Op::KvAppend { .. }
                    | Op::Attention { .. }
                    | Op::ScatterAdd { .. }
                    | Op::CrossEntropy),
                ) => Some(Checked {
                    op: op.clone(),
                    ins: step.inputs.iter().map(|&v| (schedule.describe(v), schedule.values[v].dims.clone())).collect(),
                }),
                _ => None,
            });
            let label = format!("{} -> {}", step.kernel.name(), schedule.describe(step.outputs[0]));
            labels.push(label.clone());
            if plan.views[i] {
                continue;
            }
            let operands: Vec<usize> = step.inputs.iter().chain(&step.outputs).chain(&step.temps).copied().collect();
            let places: Vec<Place> = operands
                .iter()
                .map(|&v| place(v).ok_or_else(|| Error::internal(format!("{} has no slot", schedule.describe(v)))))
                .collect::<Result<_>>()?;
            let ins: Vec<Tensor> = step.inputs.iter().map(|&v| tensor(v)).collect();
            let outs: Vec<Tensor> = step.outputs.iter().map(|&v| tensor(v)).collect();
            let in_place = places[0] == places[ins.len()];
            match calls(&step.kernel, &ins, &outs[0], in_place, int64) {
                Some(cs) => {
                    // The step's scratch regions, each as large as its largest use.
                    let mut regions: Vec<u64> = Vec::new();
                    for c in &cs {
                        regions.resize(regions.len().max(c.scratch.len()), 0);
                        for (r, &b) in regions.iter_mut().zip(&c.scratch) {
                            *r = (*r).max(b);
                        }
                    }
                    let mut step_places = places.clone();
                    let mut at = 0u64;
                    for bytes in regions {
                        step_places.push(Place { buf: Buf::Scratch, offset: at, bytes });
                        at += bytes.next_multiple_of(8);
                    }
                    scratch_bytes = scratch_bytes.max(at);
                    for mut c in cs {
                        for (k, _) in &mut c.operands {
                            if *k >= kernels::SCRATCH {
                                *k = *k - kernels::SCRATCH + places.len();
                            }
                        }
                        pending.push((i, c, step_places.clone()));
                    }
                }
                None => {
                    let StepKernel::Op(op) = &step.kernel else {
                        return Err(Error::unsupported(format!("gpu: no kernel for step {i}: {label}")));
                    };
                    host_fallbacks.push(format!("step {i}: {label}"));
                    let step_ins = ins.iter().cloned().zip(&places).map(|(t, &p)| (p, t)).collect();
                    let out = (places[ins.len()], outs[0].clone());
                    host.push((i, Action::Host { step: Box::new(HostStep::new(op, &ins)?), ins: step_ins, out }));
                }
            }
        }
        if scratch_bytes > max {
            return Err(Error::unsupported(format!(
                "gpu: the graph needs {scratch_bytes} scratch bytes; '{}' binds at most {max} bytes",
                gpu.info.name
            )));
        }
        let scratch = storage_buffer(&gpu, "rlx scratch", scratch_bytes);
        let align = u64::from(gpu.limits.min_storage_buffer_offset_alignment).max(4);
        let mut meta_bytes: Vec<u8> = Vec::new();
        let mut chunks = Vec::new();
        for (i, call, places) in &pending {
            let words = metadata(call, places, *i).map_err(|e| e.context(&labels[*i]))?;
            let start = meta_bytes.len() as u64;
            meta_bytes.extend(words.iter().flat_map(|w| w.to_le_bytes()));
            chunks.push((start, meta_bytes.len() as u64 - start));
            meta_bytes.resize((meta_bytes.len() as u64).next_multiple_of(align) as usize, 0);
        }
        let meta = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("rlx kernel metadata"),
            size: (meta_bytes.len() as u64).max(16),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        gpu.queue.write_buffer(&meta, 0, &meta_bytes);
        let checks = pending.iter().any(|(_, c, _)| c.checks);
        let status = checks.then(|| storage_buffer(&gpu, "rlx error flag", 16));
        let max_groups = gpu.limits.max_compute_workgroups_per_dimension;
        let mut gpu_actions: Vec<(usize, Action)> = Vec::new();
        for ((i, call, places), (start, size)) in pending.iter().zip(chunks) {
            let groups = workgroups(call.threads, max_groups);
            if groups.contains(&0) {
                continue;
            }
            if groups.iter().any(|&g| g > max_groups) {
                return Err(Error::unsupported(format!(
                    "gpu: {} needs {groups:?} workgroups, over the device's {max_groups}",
                    labels[*i]
                )));
            }
            let source = shader(call);
            let pipeline = gpu.pipeline(&source).map_err(|e| e.context(&labels[*i]))?;
            let operands = call.operands.iter().map(|&(k, _)| places[k]).collect();
            let dispatch = Dispatch {
                pipeline,
                groups,
                meta: (start, size),
                operands,
                checks: call.checks,
                bind_group: None,
                kernel: schedule.steps[*i].kernel.name(),
            };
            gpu_actions.push((*i, Action::Gpu(dispatch)));
        }
        gpu.take_errors()?;
        // Steps in schedule order (a step's dispatches keep their order).
        let mut actions: Vec<(usize, Action)> = gpu_actions.into_iter().chain(host).collect();
        actions.sort_by_key(|(i, _)| *i);
        let outputs = schedule.outputs.iter().map(|&v| (place(v), tensor(v))).collect();
        let param_written = schedule.params.iter().map(|p| plan.in_place.iter().any(|&(_, v)| v == *p)).collect();
        Ok(GpuProgram {
            bound: vec![None; params.len()],
            meta,
            param_written,
            gpu,
            compiled,
            arena,
            scratch,
            param_buffers,
            inputs,
            params,
            outputs,
            actions: actions.into_iter().map(|(_, a)| a).collect(),
            status,
            labels,
            checked,
            host_fallbacks,
            staging: Mutex::new(None),
            unbound: true,
            profile: std::env::var("RLX_GPU_PROFILE").is_ok_and(|v| v == "1").then(Default::default),
        })
    }

    /// (Re)builds every dispatch's bind group over the current buffers: at the first run,
    /// and at the next run after a param got another buffer (a model binds hundreds of
    /// params before running once).
    fn bind_all(&mut self) {
        let mut actions = std::mem::take(&mut self.actions);
        for action in &mut actions {
            let Action::Gpu(d) = action else { continue };
            let mut entries = vec![wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &self.meta,
                    offset: d.meta.0,
                    size: std::num::NonZeroU64::new(d.meta.1),
                }),
            }];
            for (b, &p) in d.operands.iter().enumerate() {
                entries
                    .push(wgpu::BindGroupEntry { binding: b as u32 + 1, resource: self.buffer(p).as_entire_binding() });
            }
            if d.checks {
                let s = self.status.as_ref().expect("a checking program has a flag");
                entries.push(wgpu::BindGroupEntry {
                    binding: d.operands.len() as u32 + 1,
                    resource: s.as_entire_binding(),
                });
            }
            d.bind_group = Some(self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &d.pipeline.get_bind_group_layout(0),
                entries: &entries,
            }));
        }
        self.actions = actions;
    }

    /// The compiler's output this program was built from.
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    /// Steps that run on the host (no WGSL kernel covers them), described.
    pub fn host_fallbacks(&self) -> &[String] {
        &self.host_fallbacks
    }

    /// Kernel dispatches per run.
    pub fn dispatches(&self) -> usize {
        self.actions.iter().filter(|a| matches!(a, Action::Gpu(_))).count()
    }

    pub fn arena_bytes(&self) -> usize {
        self.compiled.plan.arena_bytes
    }

    /// Whether a run writes param `index` in place (a KV cache kept across runs).
    pub fn updates_in_place(&self, index: usize) -> bool {
        self.param_written.get(index).copied().unwrap_or(false)
    }

    fn buffer(&self, p: Place) -> &wgpu::Buffer {
        match p.buf {
            Buf::Arena => &self.arena,
            Buf::Scratch => &self.scratch,
            Buf::Param(i) => self.param_buffers[i].as_ref().expect("a placed param has a buffer"),
        }
    }

    /// Uploads param `index` (a tensor of its declared type); only that param's bytes
    /// move. A param bound to read-only host bytes gets a device buffer of its own again;
    /// one bound to a writable shared buffer is written for every program holding it.
    pub fn set_param(&mut self, index: usize, value: &HostTensor) -> Result<()> {
        let leaf = self.params.get(index).ok_or_else(|| Error::internal(format!("param index {index}")))?.clone();
        check_type(&leaf, value.view())?;
        if let Some(p) = leaf.place {
            if let Some((_, true)) = self.bound[index] {
                let bytes = self.compiled.plan.param_bytes[index] as u64;
                self.param_buffers[index] = Some(Arc::new(storage_buffer(&self.gpu, &leaf.name, bytes)));
                self.bound[index] = None;
                self.unbound = true;
            }
            self.gpu.queue.write_buffer(self.buffer(p), p.offset, &to_words(value.view(), leaf.elem_bytes));
        }
        Ok(())
    }

    /// Makes param `index` use the device copy of `buffer` (same dtype and dims): one
    /// copy per host buffer, shared by every program binding it, so a model's weights
    /// upload once and a KV cache written in place by one graph is what the next reads.
    /// The device copy, not the host buffer, then holds a cache's state.
    pub fn bind_param(&mut self, index: usize, buffer: &rlx_cpu::ParamBuffer) -> Result<()> {
        let leaf = self.params.get(index).ok_or_else(|| Error::internal(format!("param index {index}")))?;
        buffer.check_binds(&leaf.name, leaf.dtype, &leaf.dims, self.param_written[index])?;
        if leaf.place.is_some() {
            let elem_bytes = leaf.elem_bytes;
            let shared = self.gpu.shared_buffer((buffer.id(), elem_bytes), &leaf.name, || {
                Ok(to_words(buffer.read()?.view(), elem_bytes).into_owned())
            })?;
            self.param_buffers[index] = Some(shared);
            self.bound[index] = Some((buffer.clone(), buffer.is_borrowed()));
            self.unbound = true;
        }
        Ok(())
    }

    /// Runs with one tensor per input, in graph order, each of its declared type.
    pub fn run(&mut self, inputs: &[TensorRef<'_>]) -> Result<Vec<HostTensor>> {
        if inputs.len() != self.inputs.len() {
            return Err(Error::internal(format!("{} inputs for {} slots", inputs.len(), self.inputs.len())));
        }
        let gpu = self.gpu.clone();
        if self.unbound {
            self.bind_all();
            gpu.take_errors()?;
            self.unbound = false;
        }
        for (leaf, value) in self.inputs.iter().zip(inputs) {
            check_type(leaf, *value)?;
            if let Some(p) = leaf.place {
                gpu.queue.write_buffer(self.buffer(p), p.offset, &to_words(*value, leaf.elem_bytes));
            }
        }
        if let Some(s) = &self.status {
            gpu.queue.write_buffer(s, 0, &[0; 16]);
        }
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        let mut pass = encoder.begin_compute_pass(&Default::default()).forget_lifetime();
        for action in &self.actions {
            match action {
                Action::Gpu(d) => {
                    pass.set_pipeline(&d.pipeline);
                    pass.set_bind_group(0, d.bind_group.as_ref(), &[]);
                    pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
                    if let Some(profile) = &mut self.profile {
                        drop(pass);
                        let start = std::time::Instant::now();
                        gpu.queue.submit([encoder.finish()]);
                        gpu.wait()?;
                        let entry = profile.entry(d.kernel.clone()).or_default();
                        *entry = (entry.0 + start.elapsed().as_secs_f64(), entry.1 + 1);
                        encoder = gpu.device.create_command_encoder(&Default::default());
                        pass = encoder.begin_compute_pass(&Default::default()).forget_lifetime();
                    }
                }
                Action::Host { step, ins, out } => {
                    drop(pass);
                    gpu.queue.submit([encoder.finish()]);
                    let regions: Vec<_> = ins.iter().map(|(p, _)| self.region(*p)).collect();
                    let bytes = read_back(&gpu, &self.staging, &regions)?;
                    let values =
                        bytes.iter().zip(ins).map(|(b, (_, t))| from_words(b, t)).collect::<Result<Vec<_>>>()?;
                    let refs: Vec<&HostTensor> = values.iter().collect();
                    let result = step.run(&refs)?;
                    gpu.queue.write_buffer(
                        self.buffer(out.0),
                        out.0.offset,
                        &to_words(result[0].view(), out.1.elem_bytes),
                    );
                    encoder = gpu.device.create_command_encoder(&Default::default());
                    pass = encoder.begin_compute_pass(&Default::default()).forget_lifetime();
                }
            }
        }
        drop(pass);
        gpu.queue.submit([encoder.finish()]);
        let mut regions: Vec<_> = self.outputs.iter().filter_map(|(p, _)| p.map(|p| self.region(p))).collect();
        regions.extend(self.status.as_ref().map(|s| (s, 0, 12)));
        let mut bytes = read_back(&gpu, &self.staging, &regions)?;
        if self.status.is_some() {
            let flag = bytes.pop().expect("the flag was read");
            let word = |k: usize| u32::from_le_bytes([flag[4 * k], flag[4 * k + 1], flag[4 * k + 2], flag[4 * k + 3]]);
            if word(0) > 0 {
                let step = word(0) as usize - 1;
                let message =
                    self.checked[step].as_ref().map_or_else(String::new, |c| c.message(word(1), word(2) as i32));
                return Err(Error::runtime(message).context(&self.labels[step]));
            }
        }
        let mut bytes = bytes.into_iter();
        self.outputs
            .iter()
            .map(|(p, t)| match p {
                Some(_) => from_words(&bytes.next().expect("one read per placed output"), t),
                None => HostTensor::zeros(t.dtype, &t.dims),
            })
            .collect()
    }

    /// The buffer, byte offset and length of a place.
    fn region(&self, p: Place) -> (&wgpu::Buffer, u64, u64) {
        (self.buffer(p), p.offset, p.bytes)
    }
}

/// The bytes of each (buffer, offset, length) region, in one copy through `staging`
/// and one wait.
fn read_back(
    gpu: &Gpu,
    staging: &Mutex<Option<wgpu::Buffer>>,
    regions: &[(&wgpu::Buffer, u64, u64)],
) -> Result<Vec<Vec<u8>>> {
    let total: u64 = regions.iter().map(|r| r.2.next_multiple_of(4)).sum();
    if total == 0 {
        gpu.wait()?;
        return Ok(regions.iter().map(|_| Vec::new()).collect());
    }
    let mut staging = staging.lock().map_err(|_| Error::internal("gpu: the readback buffer was poisoned"))?;
    if staging.as_ref().is_none_or(|b| b.size() < total) {
        *staging = Some(gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("rlx readback"),
            size: total,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        }));
    }
    let staging = staging.as_ref().expect("created above");
    let mut encoder = gpu.device.create_command_encoder(&Default::default());
    let mut at = 0;
    for &(buffer, offset, bytes) in regions {
        let n = bytes.next_multiple_of(4);
        if n > 0 {
            encoder.copy_buffer_to_buffer(buffer, offset, staging, at, n);
        }
        at += n;
    }
    gpu.queue.submit([encoder.finish()]);
    let slice = staging.slice(..total);
    slice.map_async(wgpu::MapMode::Read, |_| {});
    gpu.wait()?;
    let mapped = slice.get_mapped_range().map_err(|e| Error::runtime(format!("gpu: mapping the readback: {e}")))?;
    let mut out = Vec::new();
    let mut at = 0usize;
    for &(_, _, bytes) in regions {
        out.push(mapped[at..at + bytes as usize].to_vec());
        at += bytes.next_multiple_of(4) as usize;
    }
    drop(mapped);
    staging.unmap();
    Ok(out)
}

fn check_type(leaf: &Leaf, value: TensorRef<'_>) -> Result<()> {
    if value.dtype() != leaf.dtype || value.dims() != leaf.dims.as_slice() {
        return Err(Error::internal(format!(
            "'{}' expects {}, got {}",
            leaf.name,
            fmt_type(leaf.dtype, &leaf.dims),
            fmt_type(value.dtype(), value.dims())
        )));
    }
    Ok(())
}

/// The dispatches of a step, or `None` when no kernel covers it (or its types).
fn calls(kernel: &StepKernel, ins: &[Tensor], out: &Tensor, in_place: bool, int64: bool) -> Option<Vec<Call>> {
    use kernels::{
        attention, conv, elementwise, gather, kv_cache, layout, loss, matmul, norm, quant, reduce, rope, softmax,
    };
    let one = |c: Option<Call>| c.map(|c| vec![c]);
    let op = match kernel {
        StepKernel::Region(r) => return one(elementwise::region(r, ins, out, int64)),
        StepKernel::Op(op) => op,
        _ => return None,
    };
    match op {
        Op::Binary(_) | Op::Compare(_) | Op::Where | Op::Unary(_) | Op::Cast { .. } => {
            one(elementwise::single(op, ins, out, int64))
        }
        Op::MatMul => one(matmul::matmul(&ins[0], &ins[1], out, int64)),
        Op::Reduce { op, axes, .. } => reduce::reduce(*op, axes, &ins[0], out, int64),
        Op::ArgMax { axis, .. } => reduce::argmax(*axis, &ins[0], out, int64),
        Op::Softmax { axis } => softmax::softmax(*axis, false, &ins[0], out),
        Op::LogSoftmax { axis } => softmax::softmax(*axis, true, &ins[0], out),
        Op::LayerNorm { eps, gamma, beta } => norm::norm(false, eps.0, *gamma, *beta, &ins[0], out),
        Op::RmsNorm { eps, gamma } => norm::norm(true, eps.0, *gamma, false, &ins[0], out),
        Op::Reshape { .. } => one(Some(layout::copy_flat((0, 1), ins[0].copy_word()?, out.numel()))),
        Op::Transpose { perm } => one(layout::transpose(perm, &ins[0], out)),
        Op::Narrow { axis, start, .. } => one(layout::narrow(*axis, *start, &ins[0], out)),
        Op::Expand { .. } => one(layout::expand(&ins[0], out)),
        Op::Concat { axis } => layout::concat(*axis, ins, out),
        Op::Gather => one(gather::gather(&ins[0], &ins[1], out)),
        Op::ScatterAdd { .. } => one(gather::scatter_add(&ins[0], &ins[1], out)),
        Op::CrossEntropy => loss::cross_entropy(&ins[0], &ins[1], out),
        Op::KvAppend { axis } => {
            let append = kv_cache::kv_append(*axis, &ins[0], &ins[1], &ins[2])?;
            if in_place {
                return Some(vec![append]);
            }
            // Not in place: the output (operand 3) starts as a copy of the cache.
            Some(vec![layout::copy_flat((0, 3), ins[0].copy_word()?, ins[0].numel()), append])
        }
        Op::Attention { mask, scale } => one(attention::attention(*mask, scale.map(|s| s.0), ins, out)),
        Op::Rope { style, base, rotary_dims } => one(rope::rope(*style, base.0, *rotary_dims, &ins[0], &ins[1], out)),
        Op::Conv2d { params, bias } => one(conv::conv2d(params, *bias, ins, out)),
        Op::MaxPool2d { params } => one(conv::pool(params, None, &ins[0], out)),
        Op::AvgPool2d { params, count_include_pad } => one(conv::pool(params, Some(*count_include_pad), &ins[0], out)),
        Op::DequantMatMul { scheme, activations } => {
            one(quant::dequant_matmul(*scheme, *activations, &ins[0], &ins[1]))
        }
        Op::Dequantize { scheme } => one(quant::dequantize(*scheme, &ins[0], out)),
        Op::Conv2dGradInput { params, .. } => one(conv::conv2d_grad_input(params, &ins[0], &ins[1], out)),
        Op::Conv2dGradWeight { params, .. } => one(conv::conv2d_grad_weight(params, &ins[0], &ins[1], out)),
        Op::MaxPool2dGrad { params } => one(conv::max_pool_route(params, false, &ins[0], &ins[1], out)),
        Op::MaxPool2dSelect { params } => one(conv::max_pool_route(params, true, &ins[0], &ins[1], out)),
        Op::AvgPool2dGrad { params, count_include_pad, .. } => {
            one(conv::avg_pool_grad(params, *count_include_pad, &ins[0], out))
        }
        // Loops over nested graphs: host fallbacks.
        Op::Scan { .. } | Op::ScanGrad { .. } => None,
        Op::Input { .. } | Op::Param { .. } | Op::Constant { .. } => None,
    }
}

/// A call's metadata words: each operand's offset in elements of its binding's word, the
/// item count, the step (for the error flag), a 1.0 no compiler can fold (`opaque`),
/// then the kernel's own words (read from `K` on).
fn metadata(call: &Call, places: &[Place], step: usize) -> Result<Vec<u32>> {
    let mut words = Vec::new();
    for &(k, word) in &call.operands {
        let at = places[k].offset;
        if !at.is_multiple_of(word.bytes() as u64) {
            return Err(Error::internal(format!("gpu: operand {k} at byte {at} is not {word:?}-aligned")));
        }
        words.push((at / word.bytes() as u64) as u32);
    }
    let items = match call.threads {
        Threads::Items(n) => n as u32,
        Threads::Groups(_) => 0,
    };
    words.extend([items, step as u32 + 1, 1f32.to_bits()]);
    words.extend(&call.meta);
    Ok(words)
}

/// Workgroups of a call: `Items` in groups of 64, spread over y past the per-dimension
/// limit (the wrapper in `shader` folds the grid back into one index).
fn workgroups(threads: Threads, max: u32) -> [u32; 3] {
    match threads {
        Threads::Items(n) => {
            let groups = n.div_ceil(64) as u64;
            let x = groups.min(u64::from(max)).max(1);
            [x as u32, groups.div_ceil(x) as u32, 1]
        }
        Threads::Groups(g) => g,
    }
}

/// Bindings, operand offsets, thread wrapper and prelude around a call's body.
fn shader(call: &Call) -> String {
    let n = call.operands.len();
    let mut s = String::from("@group(0) @binding(0) var<storage, read> mt: array<u32>;\n");
    for (b, (_, word)) in call.operands.iter().enumerate() {
        let _ = writeln!(s, "@group(0) @binding({}) var<storage, read_write> t{b}: array<{}>;", b + 1, word.wgsl());
        let _ = writeln!(s, "fn o{b}(i: u32) -> u32 {{ return mt[{b}u] + i; }}");
    }
    let _ = writeln!(s, "const K: u32 = {}u;", n + 3);
    if call.checks {
        let _ = writeln!(
            s,
            "@group(0) @binding({}) var<storage, read_write> status: array<atomic<u32>>;\n\
             fn fail(at: u32, value: i32) {{\n    loop {{\n        \
             let r = atomicCompareExchangeWeak(&status[0], 0u, mt[{}u]);\n        \
             if (r.exchanged) {{ atomicStore(&status[1], at); atomicStore(&status[2], bitcast<u32>(value)); break; }}\n        \
             if (r.old_value != 0u) {{ break; }}\n    }}\n}}",
            n + 1,
            n + 1
        );
    } else {
        s.push_str("fn fail(at: u32, value: i32) {}\n");
    }
    if let Threads::Items(_) = call.threads {
        let _ = writeln!(
            s,
            "@compute @workgroup_size(64)\nfn main(@builtin(workgroup_id) wg: vec3<u32>, \
             @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {{\n    \
             let i = (wg.y * nwg.x + wg.x) * 64u + li;\n    if (i < mt[{n}u]) {{ item(i); }}\n}}"
        );
    }
    s.push_str(PRELUDE);
    s.push_str(&call.body);
    s
}
