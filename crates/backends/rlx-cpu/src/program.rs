//! Compiles a graph into thunks over one arena and runs them.
//!
//! `compile` runs the compiler (`rlx_compile`: passes, fusion, memory plan), then resolves
//! every step into a thunk: its kernel with the plan fixed (strides, batch offsets, conv
//! geometry, region program) and its operands as arena slots. `run` copies the inputs in,
//! walks the thunks and copies the outputs out (`run_with` shows them in place): no graph
//! work, and no allocation but the host tensors it returns (`run_with`: its list of views)
//! (region and attention scratch is per worker thread, grown once).
//!
//! Params live in [`ParamBuffer`]s outside the arena: set from host tensors, bound to
//! borrowed bytes (a mapped GGUF file), or shared with another program (a KV cache).

use crate::arena::{Arena, Args, BufPtr, Out, TSlot, read_host, write_host};
use crate::buffer::Class;
use crate::features::Arm;
use crate::kernels::{
    attention, conv, elementwise, elementwise::Broadcast, fused, gather, kv_cache, layout, loss, matmul, norm,
    quant_matmul, reduce, reduce::AxisSplit, region, rope, scan, softmax,
};
use crate::param::ParamBuffer;
use rayon::ThreadPool;
use rlx_compile::{CompileOptions, Compiled, Kernel as StepKernel, Target, ValueKind};
use rlx_ir::shape::{fmt_type, numel};
use rlx_ir::{BinaryOp, CompareOp, DType, Error, Graph, HostTensor, MaskKind, Op, Result, TensorRef, Unary};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A kernel call with everything shape-dependent worked out at compile time.
#[derive(Clone, Debug)]
enum Kernel {
    Binary(BinaryOp, Broadcast),
    Compare(CompareOp, Broadcast),
    Where(Broadcast),
    Unary(Unary),
    Cast { from: DType, to: DType },
    MatMul(matmul::MatMulPlan),
    Reduce(reduce::ReducePlan),
    ArgMax(AxisSplit),
    Softmax { split: AxisSplit, log: bool },
    Norm(norm::NormPlan),
    Copy,
    Strided(layout::StridedCopy),
    Concat(layout::ConcatPlan),
    Gather(gather::GatherPlan),
    CrossEntropy { n: usize, c: usize },
    Conv2d { geometry: conv::Geometry, groups: usize },
    Pool { geometry: conv::Geometry, avg: Option<bool> },
    Attention(attention::AttentionPlan),
    Rope(rope::RopePlan),
    KvAppend(kv_cache::KvAppendPlan),
    DequantMatMul(quant_matmul::QuantMatMulPlan),
    Dequantize { scheme: rlx_ir::QuantScheme, k: usize },
    ScatterAdd(gather::ScatterPlan),
    Conv2dGradInput { geometry: conv::Geometry, groups: usize },
    Conv2dGradWeight { geometry: conv::Geometry, groups: usize },
    MaxPoolRoute { geometry: conv::Geometry, select: bool },
    AvgPoolGrad { geometry: conv::Geometry, count_include_pad: bool },
    Scan(Arc<scan::ScanPlan>),
    Region(region::RegionPlan),
    RegionReduce(region::RegionReducePlan),
    MatMulBias { plan: matmul::MatMulPlan, act: Option<Unary> },
    SwiGlu,
    SwiGluMatMul(matmul::MatMulPlan),
    SwiGluDequant(Box<[quant_matmul::QuantMatMulPlan; 2]>),
    AddNorm { rms: bool, eps: f32, len: usize, gamma: bool, beta: bool },
    RmsNormMulSilu { eps: f32, len: usize, gamma: bool },
    L2Norm { eps: f32, rsqrt: bool, len: usize },
}

/// Operand size up to which a program runs on the caller's thread, its kernels told there
/// is one worker (`threads::inline`): a 1-element graph ran in 17.5 us per call from
/// Python with the pool hand-off (wake a worker, wait for it) and 1.35 us without
/// (onnxruntime: 5.7 us; AMD EPYC, tools/bench/python.py), and a 64 x 64 x 64 matmul is
/// ~10 us of work on one core.
const INLINE_ELEMS: usize = 4096;

/// One kernel call: the kernel and its operands' places in the arena.
#[derive(Clone, Debug)]
struct Thunk {
    kernel: Kernel,
    ins: Vec<TSlot>,
    /// Outputs, then temps.
    outs: Vec<TSlot>,
    /// dtype of each output (f16/bf16 results are rounded to it on store).
    out_dtypes: Vec<DType>,
    /// Storage class the kernel is instantiated for (its main operand's).
    class: Class,
    /// The output overwrites an input (the planner proved that input dead here).
    in_place: bool,
    /// The ISA arm multiversioned kernels run, resolved at compile.
    arm: Arm,
    /// What this thunk computes, for error messages.
    label: String,
}

/// A named boundary tensor (input or param) and its place in the arena.
#[derive(Clone, Debug)]
pub struct Leaf {
    pub name: String,
    /// None when nothing reads it: it stays part of the interface but takes no bytes.
    pub slot: Option<TSlot>,
    pub dtype: DType,
    pub dims: Vec<usize>,
}

/// A graph compiled for the CPU.
pub struct CpuProgram {
    arena: Arena,
    thunks: Vec<Thunk>,
    /// Per thunk, the end of the run of thunks it starts that may execute side by side
    /// ([`side_by_side`]); `i + 1` where it runs alone.
    run_ends: Vec<usize>,
    inputs: Vec<Leaf>,
    params: Vec<Leaf>,
    param_set: Vec<bool>,
    /// Per param, its buffer (`None` until it is set or bound).
    param_buffers: Vec<Option<ParamBuffer>>,
    /// Per param, whether a step writes its buffer (a kv_append cache updated in place).
    param_written: Vec<bool>,
    /// The params whose owned buffers a run locks, each buffer at its first binding; made
    /// on the first run after a binding changes (an 8-row decode graph binds ~770
    /// buffers: scanning the earlier params for each cost ~0.3 ms a run).
    locked: Option<Vec<usize>>,
    /// Buffer starts the slots index: the arena, then each param's buffer.
    bases: Vec<BufPtr>,
    outputs: Vec<(TSlot, DType, Vec<usize>)>,
    threads: usize,
    pool: Arc<ThreadPool>,
    /// One worker, or every operand of every step has at most [`INLINE_ELEMS`] elements:
    /// the program runs on the caller's thread (no kernel would split such work, and
    /// handing it to the pool and back costs more than the work; with one worker, the
    /// hand-off also cost ~10% of a 1M-element exp -> sum, AMD EPYC).
    inline: bool,
    compiled: Compiled,
    /// The graph's name: the profiler's key ([`crate::profile`]).
    name: String,
}

impl CpuProgram {
    /// Compiles `graph` with `options` for `threads` workers.
    pub fn compile(graph: &Graph, options: &CompileOptions, threads: usize) -> Result<CpuProgram> {
        let compiled = rlx_compile::compile(graph, &Target::CPU, options)?;
        let threads = threads.max(1);
        let (schedule, plan) = (&compiled.schedule, &compiled.plan);
        let slot = |v: usize| -> Result<TSlot> {
            let value = &schedule.values[v];
            let s =
                plan.slots[v].ok_or_else(|| Error::internal(format!("{} has no arena slot", schedule.describe(v))))?;
            Ok(TSlot {
                base: s.param.map_or(0, |p| p + 1),
                offset: s.offset,
                len: value.numel(),
                class: Class::for_storage(value.dtype, s.elem_bytes)?,
            })
        };
        let mut arena = Arena::new(plan.arena_bytes)?;
        let (mut inputs, mut params) = (Vec::new(), Vec::new());
        for (v, value) in schedule.values.iter().enumerate() {
            if plan.slots[v].is_none() {
                continue;
            }
            let leaf = |name: &str| -> Result<Leaf> {
                Ok(Leaf { name: name.to_string(), slot: Some(slot(v)?), dtype: value.dtype, dims: value.dims.clone() })
            };
            match &value.kind {
                ValueKind::Input { .. } => inputs.push(leaf(leaf_name(&value.label))?),
                ValueKind::Param { .. } => params.push(leaf(leaf_name(&value.label))?),
                ValueKind::Constant(t) => {
                    let at = slot(v)?;
                    write_host(arena.slot_bytes_mut(at)?, at.class, t.view())?
                }
                ValueKind::Intermediate => {}
            }
        }
        // Inputs and params appear in graph order in the schedule; an unread one has no slot
        // but stays part of the interface.
        let inputs = interface(schedule, &schedule.inputs, inputs);
        let params = interface(schedule, &schedule.params, params);
        let mut thunks = Vec::new();
        for (i, step) in schedule.steps.iter().enumerate() {
            if plan.views[i] {
                continue;
            }
            let ins: Vec<TSlot> = step.inputs.iter().map(|&v| slot(v)).collect::<Result<_>>()?;
            let outs: Vec<TSlot> = step.outputs.iter().chain(&step.temps).map(|&v| slot(v)).collect::<Result<_>>()?;
            let in_dims: Vec<(DType, &[usize])> =
                step.inputs.iter().map(|&v| (schedule.values[v].dtype, schedule.values[v].dims.as_slice())).collect();
            let out_value = &schedule.values[step.outputs[0]];
            let kernel = resolve(&step.kernel, &in_dims, &out_value.dims, (options, threads), || {
                schedule.describe(step.inputs[0])
            })?;
            // The operand whose storage class instantiates the kernel (not a condition or
            // an index list).
            let main = if matches!(step.kernel, StepKernel::Op(Op::Where | Op::ScatterAdd { .. })) { 1 } else { 0 };
            thunks.push(Thunk {
                kernel,
                class: ins.get(main).map_or(outs[0].class, |s| s.class),
                ins,
                outs,
                out_dtypes: step.outputs.iter().map(|&v| schedule.values[v].dtype).collect(),
                in_place: plan.in_place.iter().any(|&(s, _)| s == i),
                arm: Arm::best(),
                label: format!("{} -> {}", step.kernel.name(), schedule.describe(step.outputs[0])),
            });
        }
        let outputs = schedule
            .outputs
            .iter()
            .map(|&v| Ok((slot(v)?, schedule.values[v].dtype, schedule.values[v].dims.clone())))
            .collect::<Result<_>>()?;
        // Buffers come with set_param or bind_param: allocating them here would cost a
        // model's worth of memory for weights that get bound to a mapped file anyway.
        let param_buffers: Vec<Option<ParamBuffer>> = vec![None; params.len()];
        let param_written = schedule.params.iter().map(|p| plan.in_place.iter().any(|&(_, v)| v == *p)).collect();
        let mut bases = vec![arena.base()];
        bases.extend(param_buffers.iter().map(|b| b.as_ref().map_or(BufPtr(std::ptr::null_mut()), |b| b.start())));
        Ok(CpuProgram {
            arena,
            inline: threads == 1 || thunks.iter().all(|t| t.ins.iter().chain(&t.outs).all(|s| s.len <= INLINE_ELEMS)),
            run_ends: side_by_side(&thunks),
            thunks,
            param_set: vec![false; params.len()],
            param_buffers,
            param_written,
            locked: None,
            bases,
            inputs,
            params,
            outputs,
            threads,
            pool: crate::threads::pool(threads)?,
            compiled,
            name: graph.name().to_string(),
        })
    }

    /// Inputs in graph order.
    pub fn inputs(&self) -> &[Leaf] {
        &self.inputs
    }

    /// Params in graph order.
    pub fn params(&self) -> &[Leaf] {
        &self.params
    }

    /// Workers this program was planned for.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs several programs, each on its inputs, at once: one worker of their pool each
    /// (a program on one thread), as many at a time as the pool has workers. Each computes
    /// what it computes alone (results do not depend on the thread count), so the results
    /// are those of running them one after another. Programs with different pools, or
    /// run inline, run one after another. A program that writes a param buffer another
    /// one of them uses gets an `Err` (the buffer's lock), as it would running beside it
    /// from another thread.
    ///
    /// Why: a product of a few rows split across 2 threads ran at 1.3-1.5x one thread's
    /// speed (SmolLM2's 11-token prompts, Intel Xeon model 207: the calling thread
    /// quantizes the rows while the other waits, and each product waits for its slower
    /// half). 8 such prompts one after another took 88-95 ms, two at a time 71-77.
    pub fn run_side_by_side(jobs: &mut [(&mut CpuProgram, &[TensorRef<'_>])]) -> Vec<Result<Vec<HostTensor>>> {
        let pool = jobs.first().map(|(p, _)| p.pool.clone());
        let shared = pool.filter(|pool| {
            jobs.len() > 1
                && pool.current_num_threads() > 1
                && jobs.iter().all(|(p, _)| !p.inline && Arc::ptr_eq(&p.pool, pool))
        });
        match shared {
            Some(pool) => {
                use rayon::prelude::*;
                pool.install(|| jobs.par_iter_mut().map(|(p, ins)| crate::threads::inline(|| p.run(ins))).collect())
            }
            None => jobs.iter_mut().map(|(p, ins)| p.run(ins)).collect(),
        }
    }

    /// Bytes of the one arena this program runs in.
    pub fn arena_bytes(&self) -> usize {
        self.arena.len()
    }

    /// Kernel calls per run.
    pub fn dispatches(&self) -> usize {
        self.thunks.len()
    }

    /// The compiler's output this program was built from (schedule, plan, log).
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    /// Sets param `index` (in [`CpuProgram::params`] order); the tensor has its declared type.
    /// A param bound to borrowed bytes gets an owned buffer again; a shared one is written
    /// for every program holding it.
    pub fn set_param(&mut self, index: usize, value: &HostTensor) -> Result<()> {
        let leaf = self.params.get(index).ok_or_else(|| Error::internal(format!("param index {index}")))?;
        check_type(leaf, value.view())?;
        if leaf.slot.is_some() {
            match &self.param_buffers[index] {
                Some(buffer) if !buffer.is_borrowed() => buffer.write(value)?,
                _ => {
                    let owned = ParamBuffer::zeroed_in(slot_class(leaf)?, leaf.dtype, &leaf.dims)?;
                    owned.write(value)?;
                    self.install(index, owned);
                }
            }
        }
        self.param_set[index] = true;
        Ok(())
    }

    /// Param `index`'s buffer (a handle: binding it into another program shares it);
    /// `None` when nothing reads the param or it was never set or bound.
    pub fn param_buffer(&self, index: usize) -> Option<ParamBuffer> {
        self.param_buffers.get(index).cloned().flatten()
    }

    /// Whether a step writes param `index`'s buffer in place (a KV cache kept across runs).
    pub fn updates_in_place(&self, index: usize) -> bool {
        self.param_written.get(index).copied().unwrap_or(false)
    }

    /// Makes param `index` use `buffer` (same dtype and dims), without copying it, when
    /// this program stores the param as the buffer does; a read-only param stored
    /// otherwise (packed f16/bf16 bytes for a param this program widens) gets a converted
    /// copy.
    pub fn bind_param(&mut self, index: usize, buffer: ParamBuffer) -> Result<()> {
        let leaf = self.params.get(index).ok_or_else(|| Error::internal(format!("param index {index}")))?;
        buffer.check_binds(&leaf.name, leaf.dtype, &leaf.dims, self.param_written[index])?;
        let buffer = match leaf.slot {
            Some(slot) if slot.class != buffer.class() => {
                if self.param_written[index] {
                    return Err(Error::input(format!(
                        "param '{}' is a cache this program writes in place as {:?} words; the buffer stores {:?}",
                        leaf.name,
                        slot.class,
                        buffer.class()
                    )));
                }
                let copy = ParamBuffer::zeroed_in(slot.class, leaf.dtype, &leaf.dims)?;
                copy.write(&buffer.read()?)?;
                copy
            }
            _ => buffer,
        };
        if let Some(slot) = leaf.slot
            && slot.bytes() != buffer.byte_len()
        {
            return Err(Error::internal(format!("param '{}': buffer size differs from its slot", leaf.name)));
        }
        // A cache written in place must not alias another param the program reads.
        for (j, other) in self.param_buffers.iter().enumerate() {
            if j != index
                && other.as_ref().is_some_and(|o| o.same_as(&buffer))
                && (self.param_written[index] || self.param_written[j])
            {
                return Err(Error::input(format!(
                    "params '{}' and '{}' cannot share a buffer: the program writes one of them in place",
                    leaf.name, self.params[j].name
                )));
            }
        }
        if leaf.slot.is_some() {
            self.install(index, buffer);
        }
        self.param_set[index] = true;
        Ok(())
    }

    fn install(&mut self, index: usize, buffer: ParamBuffer) {
        self.bases[index + 1] = buffer.start();
        self.param_buffers[index] = Some(buffer);
        self.locked = None;
    }

    /// Makes the packed copies of the param weights this program's products read (see
    /// [`refresh_packed`]) now instead of in the first run: a model's load step, so that
    /// its first prompt's time is the prompt's (SmolLM2's 154 ms of repacking had made a
    /// one-token prompt read 5.6 tok/s). A run finds them made; params not set yet (a
    /// model's caches, bound per run) are skipped, and a param set or written after it is
    /// packed again at the next run.
    pub fn pack_params(&mut self) -> Result<()> {
        let _guards = lock_params(&self.param_buffers, &mut self.locked, &self.params, &self.param_written)?;
        let workers = (!self.inline).then_some(&*self.pool);
        refresh_packed(&mut self.thunks, &self.param_buffers, &self.param_written, workers)
    }

    /// Runs with one tensor per input, in [`CpuProgram::inputs`] order, each of its declared type.
    pub fn run(&mut self, inputs: &[TensorRef<'_>]) -> Result<Vec<HostTensor>> {
        self.run_then(inputs, |program| {
            program
                .outputs
                .iter()
                .map(|&(slot, dtype, ref dims)| read_host(program.output_bytes(slot)?, slot.class, dtype, dims))
                .collect()
        })
    }

    /// [`CpuProgram::run`] that shows `visit` the outputs where they are (the arena, a
    /// param's buffer) instead of copying each into a new tensor: a caller that keeps
    /// what it needs in its own buffer saves a copy and the page faults of a fresh
    /// allocation per run (an 8-row SmolLM2 step's 1.5 MiB of logits: 0.6 ms of 8.1).
    /// An output stored wider than its type (f16 in f32) is shown converted.
    pub fn run_with(&mut self, inputs: &[TensorRef<'_>], visit: &mut dyn FnMut(&[TensorRef<'_>])) -> Result<()> {
        self.run_then(inputs, |program| {
            // A converted copy where an output's storage is wider than its type.
            let mut converted = Vec::with_capacity(program.outputs.len());
            for &(slot, dtype, ref dims) in &program.outputs {
                let src = program.output_bytes(slot)?;
                let as_is = slot.class == Class::for_storage(dtype, dtype.size_bytes())?;
                converted.push(if as_is { None } else { Some(read_host(src, slot.class, dtype, dims)?) });
            }
            let views = program
                .outputs
                .iter()
                .zip(&converted)
                .map(|(&(slot, dtype, ref dims), converted)| match converted {
                    Some(t) => Ok(t.view()),
                    None => TensorRef::new(dtype, dims, program.output_bytes(slot)?),
                })
                .collect::<Result<Vec<_>>>()?;
            visit(&views);
            Ok(())
        })
    }

    /// Output slot `slot`'s bytes, after a run.
    fn output_bytes(&self, slot: TSlot) -> Result<&[u8]> {
        if slot.base == 0 {
            return self.arena.slot_bytes(slot);
        }
        // SAFETY: a param buffer of at least the slot's bytes (the plan checked it), locked
        // by `run_then` if shared.
        Ok(unsafe { std::slice::from_raw_parts(self.bases[slot.base].0.add(slot.offset), slot.bytes()) })
    }

    /// Runs, then `read`s the outputs (their time counts as the run's copies).
    fn run_then<R>(&mut self, inputs: &[TensorRef<'_>], read: impl FnOnce(&Self) -> Result<R>) -> Result<R> {
        let started = crate::profile::enabled().then(Instant::now);
        if inputs.len() != self.inputs.len() {
            return Err(Error::internal(format!("{} inputs for {} slots", inputs.len(), self.inputs.len())));
        }
        // The runtime refuses to run before every param is set (its message names it);
        // here an unset param would be a null buffer, so the program checks again.
        if let Some(unset) = self.param_set.iter().position(|s| !s) {
            return Err(Error::internal(format!("param '{}' has no buffer", self.params[unset].name)));
        }
        for (leaf, value) in self.inputs.iter().zip(inputs) {
            check_type(leaf, *value)?;
            if let Some(slot) = leaf.slot {
                write_host(self.arena.slot_bytes_mut(slot)?, slot.class, *value)?;
            }
        }
        // Owned buffers stay locked for the run (and for reading the outputs).
        let _guards = lock_params(&self.param_buffers, &mut self.locked, &self.params, &self.param_written)?;
        let packing_started = started.map(|_| Instant::now());
        // A repack splits its weight across the program's workers (none when inline).
        let workers = (!self.inline).then_some(&*self.pool);
        refresh_packed(&mut self.thunks, &self.param_buffers, &self.param_written, workers)?;
        let packing = packing_started.map_or(Duration::ZERO, |t| t.elapsed());
        let pool = self.pool.clone();
        let (thunks, run_ends, bases) = (&self.thunks, &self.run_ends, &self.bases);
        let mut timeline = started.map(|_| Timeline::default());
        let entered = started.map(|_| Instant::now());
        let ran = if self.inline {
            crate::threads::inline(|| execute_all(thunks, run_ends, bases, timeline.as_mut()))
        } else {
            pool.install(|| {
                crate::threads::with_workers_awake(|| execute_all(thunks, run_ends, bases, timeline.as_mut()))
            })
        };
        // A param written in place (a cache) has new bytes: packed copies of it are stale.
        for (buffer, _) in self.param_buffers.iter().zip(&self.param_written).filter(|(_, w)| **w) {
            buffer.iter().for_each(ParamBuffer::forget_packed);
        }
        ran?;
        let left = started.map(|_| Instant::now());
        let read = read(self)?;
        if let (Some(started), Some(entered), Some(left), Some(timeline)) = (started, entered, left, timeline) {
            self.record_profile(started, entered, left, packing, timeline);
        }
        Ok(read)
    }

    /// Adds a profiled run to [`crate::profile`]'s table.
    fn record_profile(&self, started: Instant, entered: Instant, left: Instant, packing: Duration, timeline: Timeline) {
        let wall = started.elapsed();
        let inside = match (timeline.first, timeline.last) {
            (Some(first), Some(last)) => last - first,
            _ => Duration::ZERO,
        };
        let kernels: Duration = timeline.nodes.iter().map(|n| n.time).sum();
        let pooled = left - entered;
        let run = crate::profile::RunTime {
            wall,
            copies: wall.saturating_sub(pooled).saturating_sub(packing),
            packing,
            handoff: pooled.saturating_sub(inside),
            gaps: inside.saturating_sub(kernels),
        };
        let labels: Vec<&str> = self.thunks.iter().map(|t| t.label.as_str()).collect();
        crate::profile::record(&self.name, &labels, &timeline.nodes, &run);
    }
}

/// Locks the owned param buffers (`locked`: their indices, found on the first call),
/// exclusively where the program writes them; a buffer bound to several params is locked
/// once (none of them is written: `bind_param` refuses that).
fn lock_params<'a>(
    param_buffers: &'a [Option<ParamBuffer>],
    locked: &mut Option<Vec<usize>>,
    params: &[Leaf],
    written: &[bool],
) -> Result<Vec<crate::param::ParamGuard<'a>>> {
    let locked = locked.get_or_insert_with(|| {
        let mut seen = std::collections::HashSet::new();
        (0..param_buffers.len())
            .filter(|&i| param_buffers[i].as_ref().is_some_and(|b| !b.is_borrowed() && seen.insert(b.id())))
            .collect()
    });
    let mut guards = Vec::with_capacity(locked.len());
    for &i in locked.iter() {
        let buffer = param_buffers[i].as_ref().expect("a locked param has a buffer");
        guards.extend(buffer.lock(&params[i].name, written[i])?);
    }
    Ok(guards)
}

/// Points every product that reads a param weight through `packed_gemm`, `q8_packed`
/// (and the 16-bit GEMM reading the latter) or the half GEMM's tiled arms at the weight's
/// current packing (made on first use after the bytes last changed, shared by every
/// program holding the buffer). A param this program writes in place (a cache) is read
/// where it lies: it changes during the run. Called with the params' locks held.
fn refresh_packed(
    thunks: &mut [Thunk],
    param_buffers: &[Option<ParamBuffer>],
    written: &[bool],
    workers: Option<&ThreadPool>,
) -> Result<()> {
    let buffer_of = |slot: &TSlot| -> Option<&ParamBuffer> {
        if slot.base == 0 || slot.offset != 0 || written[slot.base - 1] {
            return None;
        }
        param_buffers.get(slot.base - 1)?.as_ref()
    };
    // A quantized product reading its weight from `w`.
    let repack = |plan: &mut quant_matmul::QuantMatMulPlan, w: &TSlot| -> Result<()> {
        let repacked = plan.activations != rlx_ir::ActivationQuant::F32
            && crate::kernels::q8_packed::available(plan.scheme, crate::features::Arm::best());
        plan.packed = match buffer_of(w) {
            Some(buffer) if repacked => Some(buffer.q8_packed(plan.scheme, plan.n, plan.k, workers)?),
            _ => None,
        };
        Ok(())
    };
    for t in thunks {
        match &mut t.kernel {
            Kernel::DequantMatMul(plan) => {
                repack(plan, &t.ins[1])?;
                continue;
            }
            Kernel::SwiGluDequant(plans) => {
                let [gate, up] = &mut **plans;
                repack(gate, &t.ins[1])?;
                repack(up, &t.ins[2])?;
                continue;
            }
            _ => {}
        }
        let (plan, weights): (&mut matmul::MatMulPlan, &[usize]) = match &mut t.kernel {
            Kernel::MatMul(p) | Kernel::MatMulBias { plan: p, .. } => (p, &[1]),
            Kernel::SwiGluMatMul(p) => (p, &[1, 2]),
            _ => continue,
        };
        if let Some((dims, strides)) = plan.tiles_packable() {
            for &b in weights {
                if let Some(buffer) = buffer_of(&t.ins[b]) {
                    plan.set_tiles(b, buffer.bf16_tiles(dims, strides)?);
                }
            }
            continue;
        }
        let Some((dims, strides)) = plan.packable() else { continue };
        for &b in weights {
            if t.ins[b].class != Class::F32 {
                continue;
            }
            if let Some(buffer) = buffer_of(&t.ins[b]) {
                plan.set_packed(b, buffer.f32_panels(dims, strides)?);
            }
        }
    }
    Ok(())
}

/// A profiled run's kernel calls, in order.
#[derive(Default)]
struct Timeline {
    nodes: Vec<crate::profile::NodeTime>,
    first: Option<Instant>,
    last: Option<Instant>,
}

/// (FLOPs, bytes) a kernel call must at least do and touch (see [`crate::profile`]).
fn work(t: &Thunk, ins: &Args) -> (f64, f64) {
    let size = |slots: &[TSlot]| slots.iter().map(|s| s.bytes() as f64).sum::<f64>();
    let touched = size(&t.ins) + size(&t.outs);
    match &t.kernel {
        Kernel::MatMul(p) | Kernel::MatMulBias { plan: p, .. } | Kernel::SwiGluMatMul(p) => (p.flops(), touched),
        Kernel::DequantMatMul(p) => (2.0 * (p.m * p.k * p.n) as f64, touched),
        Kernel::SwiGluDequant(p) => (4.0 * (p[0].m * p[0].k * p[0].n) as f64, touched),
        Kernel::Conv2d { geometry: g, groups }
        | Kernel::Conv2dGradInput { geometry: g, groups }
        | Kernel::Conv2dGradWeight { geometry: g, groups } => {
            (2.0 * (g.n * g.o * g.oh * g.ow * (g.c / groups.max(&1)) * g.kh * g.kw) as f64, touched)
        }
        Kernel::Attention(p) => {
            let len = if p.causal_len { ins.index(3, 0).map_or(p.skv, |l| l as usize) } else { p.skv };
            let cache_elem = ins.slot(1).map_or(4, |s| s.class.size_bytes()) as f64;
            let rows = (p.b * p.hkv * len * (p.d + p.dv)) as f64;
            let flops = 2.0 * (p.b * p.hq * p.sq * len * (p.d + p.dv)) as f64;
            (flops, rows * cache_elem + size(&t.ins[..1]) + size(&t.outs[..1]))
        }
        // The new rows read and written into the cache.
        Kernel::KvAppend(_) => (0.0, 2.0 * size(&t.ins[1..2])),
        _ => (0.0, touched),
    }
}

/// The leaves in `ids`'s order; a leaf nothing reads has no slot.
fn interface(s: &rlx_compile::Schedule, ids: &[usize], placed: Vec<Leaf>) -> Vec<Leaf> {
    ids.iter()
        .map(|&v| {
            let value = &s.values[v];
            let name = leaf_name(&value.label);
            placed.iter().find(|l| l.name == name).cloned().unwrap_or_else(|| Leaf {
                name: name.to_string(),
                slot: None,
                dtype: value.dtype,
                dims: value.dims.clone(),
            })
        })
        .collect()
}

/// `input 'x'` -> `x`.
fn leaf_name(label: &str) -> &str {
    label.split('\'').nth(1).unwrap_or(label)
}

/// Runs every kernel call in order, each run of [`side_by_side`] thunks across the pool's
/// workers when it has more than one; with a `timeline` (profiling), times each call (a
/// run's calls share its wall time equally).
fn execute_all(
    thunks: &[Thunk],
    run_ends: &[usize],
    bases: &[BufPtr],
    mut timeline: Option<&mut Timeline>,
) -> Result<()> {
    let mut i = 0;
    while i < thunks.len() {
        let run = &thunks[i..run_ends[i]];
        let start = timeline.is_some().then(Instant::now);
        if run.len() > 1 && crate::threads::current() > 1 {
            use rayon::prelude::*;
            // Each call of a run on one worker, not split again.
            run.par_iter().try_for_each(|t| crate::threads::inline(|| execute_one(t, bases)))?;
        } else {
            run.iter().try_for_each(|t| execute_one(t, bases))?;
        }
        if let (Some(timeline), Some(start)) = (timeline.as_deref_mut(), start) {
            let end = Instant::now();
            for t in run {
                // SAFETY: as in `execute_one` (the operands are only read, for their sizes).
                let (flops, bytes) = work(t, &unsafe { Args::new(bases, &t.ins, &t.outs) });
                timeline.nodes.push(crate::profile::NodeTime { time: (end - start) / run.len() as u32, flops, bytes });
            }
            timeline.first.get_or_insert(start);
            timeline.last = Some(end);
        }
        i += run.len();
    }
    Ok(())
}

/// One kernel call, and the rounding of its widened half outputs.
fn execute_one(t: &Thunk, bases: &[BufPtr]) -> Result<()> {
    // SAFETY: the slots come from a plan `check_plan` verified: inside their buffers
    // (the arena, owned by the program, or param buffers, each live and either
    // read-only, unshared, or locked for this run), and the outputs disjoint from the
    // inputs unless `in_place`, where the kernel uses raw pointers for the aliased pair.
    // A thunk running beside others writes nothing they touch (`side_by_side`).
    let (ins, mut out) = unsafe { (Args::new(bases, &t.ins, &t.outs), Out::new(bases, &t.outs)) };
    execute(t, &ins, &mut out).map_err(|e| e.context(&t.label))?;
    // Widened half outputs are rounded to their type (a packed one, a KV cache
    // appended in place, holds half values already).
    for (k, &dtype) in t.out_dtypes.iter().enumerate() {
        if dtype.is_half() && t.outs[k].class == Class::F32 {
            elementwise::round_in_place_par(dtype, out.get::<f32>(k)?);
        }
    }
    Ok(())
}

/// Per thunk, the end of the run it starts of consecutive calls that write only arena
/// bytes no other call of the run reads or writes, each too small to split across threads
/// well, so the run's calls go to different workers instead, each on one:
/// - single-query attention (a batched decode step's, one per sequence: ~9 us on SmolLM2,
///   below `attention`'s parallel threshold);
/// - quantized products of up to [`quant_matmul::SIDE_BY_SIDE_ROWS`] activation rows (a
///   decode step's Q, K and V projections, for one sequence or a batch of up to 8; its
///   gate and up are one fused kernel, which splits its columns itself).
///
/// Each call computes what it computes alone: the bits do not change.
fn side_by_side(thunks: &[Thunk]) -> Vec<usize> {
    let joins = |t: &Thunk| {
        let small = match &t.kernel {
            Kernel::Attention(p) => p.sq == 1,
            Kernel::DequantMatMul(p) => p.m <= quant_matmul::SIDE_BY_SIDE_ROWS,
            _ => false,
        };
        small && !t.in_place && t.outs.iter().all(|s| s.base == 0)
    };
    let overlap =
        |a: &TSlot, b: &TSlot| a.base == b.base && a.offset < b.offset + b.bytes() && b.offset < a.offset + a.bytes();
    // `b` neither reads nor writes what `a` writes, and the other way round.
    let apart = |a: &Thunk, b: &Thunk| {
        let clear = |w: &Thunk, o: &Thunk| w.outs.iter().all(|x| o.ins.iter().chain(&o.outs).all(|y| !overlap(x, y)));
        clear(a, b) && clear(b, a)
    };
    let mut ends: Vec<usize> = (1..=thunks.len()).collect();
    let mut i = 0;
    while i < thunks.len() {
        let mut end = i + 1;
        if joins(&thunks[i]) {
            while end < thunks.len() && joins(&thunks[end]) && thunks[i..end].iter().all(|t| apart(t, &thunks[end])) {
                end += 1;
            }
        }
        ends[i] = end;
        i = end;
    }
    ends
}

/// The storage class of a param's slot (its declared width when nothing reads it).
fn slot_class(leaf: &Leaf) -> Result<Class> {
    leaf.slot.map_or_else(|| Class::for_storage(leaf.dtype, leaf.dtype.size_bytes()), |s| Ok(s.class))
}

fn check_type(leaf: &Leaf, value: TensorRef<'_>) -> Result<()> {
    if value.dtype() != leaf.dtype || value.dims() != leaf.dims.as_slice() {
        return Err(Error::input(format!(
            "'{}' expects {}, got {}",
            leaf.name,
            fmt_type(leaf.dtype, &leaf.dims),
            fmt_type(value.dtype(), value.dims())
        )));
    }
    Ok(())
}

/// Resolves a step's kernel into a thunk kernel with its plan.
fn resolve(
    kernel: &StepKernel,
    ins: &[(DType, &[usize])],
    out: &[usize],
    (options, threads): (&CompileOptions, usize),
    first_operand: impl Fn() -> String,
) -> Result<Kernel> {
    let dims = |i: usize| ins[i].1;
    let last = |i: usize| *dims(i).last().unwrap_or(&0);
    Ok(match kernel {
        StepKernel::Op(op) => plan(op, ins, out, (options, threads), first_operand)?,
        StepKernel::Region(r) => {
            let input_dims: Vec<&[usize]> = ins.iter().map(|(_, d)| *d).collect();
            Kernel::Region(region::RegionPlan::new(r, out, &input_dims))
        }
        StepKernel::RegionReduce { region, dims, op } => {
            let input_dims: Vec<&[usize]> = ins.iter().map(|(_, d)| *d).collect();
            let region = region::RegionPlan::new(region, dims, &input_dims);
            let run = region.len / numel(out).max(1);
            Kernel::RegionReduce(region::RegionReducePlan::new(region, *op, run))
        }
        StepKernel::MatMulBias { act } => {
            Kernel::MatMulBias { plan: matmul_plan(ins, out, (false, false), threads), act: *act }
        }
        StepKernel::SwiGlu => Kernel::SwiGlu,
        StepKernel::SwiGluMatMul => Kernel::SwiGluMatMul(matmul_plan(ins, out, (false, false), threads)),
        StepKernel::SwiGluDequant { gate, up, activations } => {
            let plan =
                |w: usize, scheme| quant_matmul::QuantMatMulPlan::new(dims(0), dims(w), scheme, *activations, threads);
            Kernel::SwiGluDequant(Box::new([plan(1, *gate), plan(2, *up)]))
        }
        StepKernel::MatMulT { ta, tb } => Kernel::MatMul(matmul_plan(ins, out, (*ta, *tb), threads)),
        StepKernel::AddNorm { rms, eps, gamma, beta, .. } => {
            Kernel::AddNorm { rms: *rms, eps: eps.0, len: last(0), gamma: *gamma, beta: *beta }
        }
        StepKernel::RmsNormMulSilu { eps, gamma, .. } => {
            Kernel::RmsNormMulSilu { eps: eps.0, len: last(0), gamma: *gamma }
        }
        StepKernel::L2Norm { eps, rsqrt, .. } => Kernel::L2Norm { eps: eps.0, rsqrt: *rsqrt, len: last(0) },
    })
}

/// The plan of `ins[0] @ ins[1]` (either stored transposed), for their dtype.
fn matmul_plan(ins: &[(DType, &[usize])], out: &[usize], (ta, tb): (bool, bool), threads: usize) -> matmul::MatMulPlan {
    matmul::MatMulPlan::new(ins[0].1, ins[1].1, out, ta, tb, threads).with_dtype(ins[0].0)
}

/// Resolves one non-leaf node to its kernel and plan. `first_operand` describes operand 0
/// for run-time error messages (the table of a gather, the cache of a kv_append).
fn plan(
    op: &Op,
    ins: &[(DType, &[usize])],
    out: &[usize],
    (options, threads): (&CompileOptions, usize),
    first_operand: impl Fn() -> String,
) -> Result<Kernel> {
    let dims = |i: usize| ins[i].1;
    let all_dims = || ins.iter().map(|(_, d)| *d).collect::<Vec<_>>();
    Ok(match op {
        Op::Input { .. } | Op::Param { .. } | Op::Constant { .. } => {
            return Err(Error::internal("leaves have no kernel"));
        }
        Op::Binary(b) => Kernel::Binary(*b, Broadcast::new(out, &all_dims())),
        Op::Compare(c) => Kernel::Compare(*c, Broadcast::new(out, &all_dims())),
        Op::Where => Kernel::Where(Broadcast::new(out, &all_dims())),
        Op::Unary(u) => Kernel::Unary(*u),
        Op::Cast { to } => Kernel::Cast { from: ins[0].0, to: *to },
        Op::MatMul => Kernel::MatMul(matmul_plan(ins, out, (false, false), threads)),
        Op::Reduce { op, axes, .. } => Kernel::Reduce(reduce::ReducePlan::new(*op, dims(0), axes)),
        Op::ArgMax { axis, .. } => Kernel::ArgMax(AxisSplit::new(dims(0), *axis)),
        Op::Softmax { axis } => Kernel::Softmax { split: AxisSplit::new(dims(0), *axis), log: false },
        Op::LogSoftmax { axis } => Kernel::Softmax { split: AxisSplit::new(dims(0), *axis), log: true },
        Op::LayerNorm { eps, gamma, beta } => Kernel::Norm(norm::NormPlan {
            rms: false,
            row_len: *dims(0).last().unwrap_or(&0),
            eps: eps.0,
            gamma: *gamma,
            beta: *beta,
        }),
        Op::RmsNorm { eps, gamma } => Kernel::Norm(norm::NormPlan {
            rms: true,
            row_len: *dims(0).last().unwrap_or(&0),
            eps: eps.0,
            gamma: *gamma,
            beta: false,
        }),
        Op::Reshape { .. } => Kernel::Copy,
        Op::Transpose { perm } => Kernel::Strided(layout::StridedCopy::transpose(dims(0), perm)),
        Op::Narrow { axis, start, len } => Kernel::Strided(layout::StridedCopy::narrow(dims(0), *axis, *start, *len)),
        Op::Expand { dims: to } => Kernel::Strided(layout::StridedCopy::expand(dims(0), to)),
        Op::Concat { axis } => Kernel::Concat(layout::ConcatPlan::new(&all_dims(), *axis)),
        Op::Gather => Kernel::Gather(gather::GatherPlan {
            rows: dims(0)[0],
            row_len: numel(&dims(0)[1..]),
            table: format!("table {}", first_operand()),
        }),
        Op::CrossEntropy => Kernel::CrossEntropy { n: dims(0)[0], c: dims(0)[1] },
        Op::Conv2d { params, .. } => {
            Kernel::Conv2d { geometry: conv::Geometry::conv(dims(0), dims(1), out, params), groups: params.groups }
        }
        Op::MaxPool2d { params } => Kernel::Pool { geometry: conv::Geometry::pool(dims(0), out, params), avg: None },
        Op::AvgPool2d { params, count_include_pad } => {
            Kernel::Pool { geometry: conv::Geometry::pool(dims(0), out, params), avg: Some(*count_include_pad) }
        }
        Op::Attention { mask, scale } => Kernel::Attention(attention::AttentionPlan::new(
            dims(0),
            dims(1),
            dims(2),
            (*mask == MaskKind::Bias).then(|| dims(3)),
            scale.map(|s| s.0),
            *mask,
        )),
        Op::Rope { style, base, rotary_dims } => {
            Kernel::Rope(rope::RopePlan::new(dims(0), *style, base.0, *rotary_dims))
        }
        Op::KvAppend { axis } => {
            let (cache, new) = (dims(0), dims(1));
            Kernel::KvAppend(kv_cache::KvAppendPlan {
                outer: numel(&cache[..*axis]),
                capacity: cache[*axis],
                rows: new[*axis],
                inner: numel(&cache[axis + 1..]),
                cache: format!("cache {}", first_operand()),
            })
        }
        Op::DequantMatMul { scheme, activations } => {
            Kernel::DequantMatMul(quant_matmul::QuantMatMulPlan::new(dims(0), dims(1), *scheme, *activations, threads))
        }
        Op::Dequantize { scheme } => Kernel::Dequantize { scheme: *scheme, k: out[1] },
        Op::ScatterAdd { rows } => Kernel::ScatterAdd(gather::ScatterPlan { rows: *rows, row_len: numel(&out[1..]) }),
        // The geometry of the forward conv: input, weight, output.
        Op::Conv2dGradInput { params, input } => Kernel::Conv2dGradInput {
            geometry: conv::Geometry::conv(input, dims(1), dims(0), params),
            groups: params.groups,
        },
        Op::Conv2dGradWeight { params, weight } => Kernel::Conv2dGradWeight {
            geometry: conv::Geometry::conv(dims(0), weight, dims(1), params),
            groups: params.groups,
        },
        Op::MaxPool2dGrad { params } => {
            Kernel::MaxPoolRoute { geometry: conv::Geometry::pool(dims(0), dims(1), params), select: false }
        }
        Op::MaxPool2dSelect { params } => {
            Kernel::MaxPoolRoute { geometry: conv::Geometry::pool(dims(0), out, params), select: true }
        }
        Op::AvgPool2dGrad { params, count_include_pad, input } => Kernel::AvgPoolGrad {
            geometry: conv::Geometry::pool(input, dims(0), params),
            count_include_pad: *count_include_pad,
        },
        Op::Scan { body, n_carry, n_bcast, checkpoints, output } => Kernel::Scan(Arc::new(scan::ScanPlan::new(
            body,
            None,
            (*n_carry, *n_bcast),
            *checkpoints,
            scan::Selects::Carry(*output),
            ins,
            (options, threads),
        )?)),
        Op::ScanGrad { body, grad_body, n_carry, n_bcast, checkpoints, output } => {
            Kernel::Scan(Arc::new(scan::ScanPlan::new(
                body,
                Some(grad_body),
                (*n_carry, *n_bcast),
                *checkpoints,
                scan::Selects::Grad(*output),
                ins,
                (options, threads),
            )?))
        }
    })
}

fn execute(t: &Thunk, ins: &Args, out: &mut Out) -> Result<()> {
    let (class, arm) = (t.class, t.arm);
    match &t.kernel {
        Kernel::Binary(op, bc) => elementwise::binary(*op, class, bc, ins, out),
        Kernel::Compare(op, bc) => elementwise::compare(*op, class, bc, ins, out),
        Kernel::Where(bc) => elementwise::where_(class, bc, ins, out),
        Kernel::Unary(u) => elementwise::unary(*u, class, arm, ins, out),
        Kernel::Cast { from, to } => elementwise::cast(*from, *to, ins, out),
        Kernel::MatMul(p) => matmul::matmul(p, class, ins, out),
        Kernel::Reduce(p) => reduce::reduce(p, class, arm, ins, out),
        Kernel::ArgMax(s) => reduce::argmax(s, class, ins, out),
        Kernel::Softmax { split, log } => softmax::softmax(split, *log, class, arm, ins, out),
        Kernel::Norm(p) => norm::norm(p, class, arm, ins, out),
        Kernel::Copy => layout::copy(class, ins, out),
        Kernel::Strided(p) => layout::strided_copy(p, class, ins, out),
        Kernel::Concat(p) => layout::concat(p, class, ins, out),
        Kernel::Gather(p) => gather::gather(p, class, ins, out),
        Kernel::CrossEntropy { n, c } => loss::cross_entropy(*n, *c, class, ins, out),
        Kernel::Conv2d { geometry, groups } => conv::conv2d(geometry, *groups, class, ins, out),
        Kernel::Pool { geometry, avg } => conv::pool(geometry, *avg, class, ins, out),
        Kernel::Attention(p) => attention::attention(p, class, arm, ins, out),
        Kernel::Rope(p) => rope::rope(p, class, ins, out),
        Kernel::KvAppend(p) => kv_cache::kv_append(p, class, t.in_place, ins, out),
        Kernel::DequantMatMul(p) => quant_matmul::dequant_matmul(p, arm, ins, out),
        Kernel::Dequantize { scheme, k } => quant_matmul::dequantize(*scheme, *k, arm, ins, out),
        Kernel::ScatterAdd(p) => gather::scatter_add(p, class, ins, out),
        Kernel::Conv2dGradInput { geometry, groups } => conv::conv2d_grad_input(geometry, *groups, class, ins, out),
        Kernel::Conv2dGradWeight { geometry, groups } => conv::conv2d_grad_weight(geometry, *groups, class, ins, out),
        Kernel::MaxPoolRoute { geometry, select } => conv::max_pool_route(geometry, *select, class, ins, out),
        Kernel::AvgPoolGrad { geometry, count_include_pad } => {
            conv::avg_pool_grad(geometry, *count_include_pad, class, ins, out)
        }
        Kernel::Scan(p) => scan::scan(p, ins, out),
        Kernel::Region(p) => region::region(p, arm, ins, out),
        Kernel::RegionReduce(p) => region::region_reduce(p, arm, ins, out),
        Kernel::MatMulBias { plan, act } => fused::matmul_bias(plan, *act, arm, ins, out),
        Kernel::SwiGlu => fused::swiglu(arm, ins, out),
        Kernel::SwiGluMatMul(p) => fused::swiglu_matmul(p, arm, ins, out),
        Kernel::SwiGluDequant(p) => fused::swiglu_dequant(p, arm, ins, out),
        Kernel::AddNorm { rms, eps, len, gamma, beta } => {
            fused::add_norm(*rms, *eps, *len, *gamma, *beta, arm, ins, out)
        }
        Kernel::RmsNormMulSilu { eps, len, gamma } => fused::rms_norm_mul_silu(*eps, *len, *gamma, arm, ins, out),
        Kernel::L2Norm { eps, rsqrt, len } => fused::l2_norm(*eps, *rsqrt, *len, arm, ins, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thunk of `kernel` reading `ins` and writing `outs` (f32 slots `(base, offset, len)`).
    fn thunk(kernel: Kernel, ins: &[(usize, usize, usize)], outs: &[(usize, usize, usize)]) -> Thunk {
        let slots = |s: &[(usize, usize, usize)]| {
            s.iter().map(|&(base, offset, len)| TSlot { base, offset, len, class: Class::F32 }).collect()
        };
        Thunk {
            kernel,
            ins: slots(ins),
            outs: slots(outs),
            out_dtypes: vec![DType::F32; outs.len()],
            class: Class::F32,
            in_place: false,
            arm: Arm::Portable,
            label: String::new(),
        }
    }

    fn attention(sq: usize) -> Kernel {
        let q = [1, 2, sq, 4];
        Kernel::Attention(attention::AttentionPlan::new(&q, &[1, 1, 8, 4], &[1, 1, 8, 4], None, None, MaskKind::None))
    }

    #[test]
    fn side_by_side_runs_only_independent_single_query_attention() {
        // Caches are params (bases 1, 2); queries and outputs arena bytes (8 f32 each).
        let att = |q: usize, out: usize| thunk(attention(1), &[(0, q, 8), (1, 0, 32), (2, 0, 32)], &[(0, out, 8)]);
        let thunks = vec![
            att(0, 64),   // 0: a run of 3 with 1 and 2
            att(32, 96),  // 1
            att(0, 128),  // 2: reads what 0 reads: fine
            att(64, 160), // 3: reads 0's output: a new run, with 4
            att(200, 232),
            att(300, 236), // 5: writes bytes 4 writes: alone
            thunk(attention(3), &[(0, 400, 24), (1, 0, 32), (2, 0, 32)], &[(0, 500, 24)]), // 6: 3 queries: alone
            att(600, 700), // 7: with 8
            att(632, 732),
            thunk(attention(1), &[(0, 800, 8), (1, 0, 32), (2, 0, 32)], &[(1, 0, 8)]), // 9: writes a param: alone
        ];
        assert_eq!(side_by_side(&thunks), vec![3, 2, 3, 5, 5, 6, 7, 9, 9, 10]);
    }

    #[test]
    fn side_by_side_runs_independent_few_row_quantized_products() {
        use rlx_ir::{ActivationQuant, quant::QuantScheme};
        // x [rows, 64] times a Q8_0 weight [n, 68 bytes] (param base 1 or 2).
        let product = |rows: usize, x: usize, w: usize, out: usize| {
            let plan =
                quant_matmul::QuantMatMulPlan::new(&[rows, 64], &[8, 68], QuantScheme::Q8_0, ActivationQuant::Q8, 2);
            thunk(Kernel::DequantMatMul(plan), &[(0, x, 64 * rows), (w, 0, 544)], &[(0, out, 8 * rows)])
        };
        let thunks = vec![
            product(1, 0, 1, 1000), // 0: Q, K, V of one row: a run of 3
            product(1, 0, 2, 1100),
            product(1, 0, 1, 1200),
            product(1, 1000, 1, 1300), // 3: reads 0's output: a new run, with 4
            product(1, 0, 2, 1400),
            product(9, 0, 1, 1500), // 5: nine rows: alone
            product(1, 0, 1, 1600), // 6: with the independent attention call after it
            thunk(attention(1), &[(0, 2000, 8), (1, 0, 32), (2, 0, 32)], &[(0, 2100, 8)]),
        ];
        assert_eq!(side_by_side(&thunks), vec![3, 2, 3, 5, 5, 6, 8, 8]);
    }

    /// `pack_params` makes the packed weight copies the first run would make (a model's
    /// load step), and a run after it gives the bits of a run without it.
    #[test]
    fn pack_params_makes_the_copies_the_first_run_would() {
        let mut g = rlx_ir::Graph::new("packed");
        let x = g.input("x", DType::F32, &[5, 64]).unwrap();
        let w = g.param("w", DType::F32, &[64, 40]).unwrap();
        let y = g.matmul(x, w).unwrap();
        g.set_outputs(&[y]).unwrap();
        let values: Vec<f32> = (0..64 * 40).map(|i| (i % 37) as f32 * 0.03 - 0.5).collect();
        let weight = HostTensor::from_f32(&[64, 40], &values).unwrap();
        let input = HostTensor::from_f32(&[5, 64], &values[..5 * 64]).unwrap();
        // One packed copy (the f32 panels) where the packed GEMM runs.
        let copies = usize::from(crate::kernels::packed_gemm::available(Arm::best()));
        let program = || {
            let mut p = CpuProgram::compile(&g, &rlx_compile::CompileOptions::default(), 1).unwrap();
            p.set_param(0, &weight).unwrap();
            p
        };
        let (mut packed_first, mut plain) = (program(), program());
        let buffer = packed_first.param_buffer(0).unwrap();
        assert_eq!(buffer.packed_copies(), 0);
        packed_first.pack_params().unwrap();
        assert_eq!(buffer.packed_copies(), copies);
        let bits = |p: &mut CpuProgram| {
            p.run(&[input.view()]).unwrap()[0].to_f32_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        assert_eq!(bits(&mut packed_first), bits(&mut plain));
        assert_eq!(buffer.packed_copies(), copies, "the run packed again");
        assert_eq!(plain.param_buffer(0).unwrap().packed_copies(), copies);
    }
}
