//! Compiles a graph into a flat list of steps, each a kernel call with its plan resolved
//! (broadcast strides, matmul batches, conv geometry, ...), and runs it. `run` does no
//! graph work and allocates nothing but the host tensors it returns.

use crate::buffer::{Args, Buffer, Class};
use crate::kernels::{
    attention, conv, elementwise, elementwise::Broadcast, gather, kv_cache, layout, loss, matmul, norm, reduce,
    reduce::AxisSplit, rope, softmax,
};
use rayon::ThreadPool;
use rlx_ir::shape::{fmt_type, numel};
use rlx_ir::{BinaryOp, CompareOp, DType, Error, Graph, HostTensor, MaskKind, Op, Result, Unary};
use std::sync::Arc;

/// A kernel call with everything shape-dependent worked out at compile time.
#[derive(Clone, Debug)]
enum Kernel {
    Binary(BinaryOp, Broadcast),
    Compare(CompareOp, Broadcast),
    Where(Broadcast),
    Unary(Unary),
    Cast { from: DType },
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
}

#[derive(Clone, Debug)]
struct Step {
    node: usize,
    operands: Vec<usize>,
    kernel: Kernel,
    /// Storage class the kernel is instantiated for (its main operand's).
    class: Class,
    /// The node's dtype: f16/bf16 results are rounded to it on store.
    dtype: DType,
}

/// A named boundary tensor (input or param) and its node.
#[derive(Clone, Debug)]
pub struct Leaf {
    pub name: String,
    pub node: usize,
    pub dtype: DType,
    pub dims: Vec<usize>,
}

/// A graph compiled for the CPU.
#[derive(Clone)]
pub struct CpuProgram {
    types: Vec<(DType, Vec<usize>)>,
    buffers: Vec<Buffer>,
    steps: Vec<Step>,
    inputs: Vec<Leaf>,
    params: Vec<Leaf>,
    param_set: Vec<bool>,
    outputs: Vec<usize>,
    threads: usize,
    pool: Arc<ThreadPool>,
}

impl CpuProgram {
    /// Verifies `graph` and resolves every node to a kernel call with its own buffer,
    /// planned for `threads` workers.
    pub fn compile(graph: &Graph, threads: usize) -> Result<CpuProgram> {
        graph.verify()?;
        let threads = threads.max(1);
        let mut program = CpuProgram {
            types: Vec::with_capacity(graph.len()),
            buffers: Vec::with_capacity(graph.len()),
            steps: Vec::new(),
            inputs: Vec::new(),
            params: Vec::new(),
            param_set: Vec::new(),
            outputs: graph.outputs().iter().map(|o| o.index()).collect(),
            threads,
            pool: crate::threads::pool(threads)?,
        };
        for (id, node) in graph.nodes() {
            let (dtype, dims) = (node.dtype(), node.dims().to_vec());
            let mut buffer = Buffer::zeros(dtype, numel(&dims));
            let leaf = |name: &str| Leaf { name: name.to_string(), node: id.index(), dtype, dims: dims.clone() };
            match node.op() {
                Op::Input { name } => program.inputs.push(leaf(name)),
                Op::Param { name } => {
                    program.params.push(leaf(name));
                    program.param_set.push(false);
                }
                Op::Constant { value } => buffer.load(value)?,
                op => {
                    let ins: Vec<(DType, &[usize])> =
                        node.inputs().iter().map(|&i| (graph.dtype(i), graph.dims(i))).collect();
                    let kernel = plan(op, &ins, &dims, threads, || graph.describe(node.inputs()[0]))?;
                    // Kernels are instantiated for their main operand's storage
                    // (`where`'s first operand is the bool condition).
                    let class = Class::of(if matches!(op, Op::Where) { ins[1].0 } else { ins[0].0 });
                    program.steps.push(Step {
                        node: id.index(),
                        operands: node.inputs().iter().map(|i| i.index()).collect(),
                        kernel,
                        class,
                        dtype,
                    });
                }
            }
            program.types.push((dtype, dims));
            program.buffers.push(buffer);
        }
        Ok(program)
    }

    /// Inputs in graph order.
    pub fn inputs(&self) -> &[Leaf] {
        &self.inputs
    }

    /// Params in graph order.
    pub fn params(&self) -> &[Leaf] {
        &self.params
    }

    /// Sets param `index` (in [`CpuProgram::params`] order); the tensor has its declared type.
    pub fn set_param(&mut self, index: usize, value: &HostTensor) -> Result<()> {
        let leaf = self.params.get(index).ok_or_else(|| Error::internal(format!("param index {index}")))?;
        check_type(leaf, value)?;
        self.buffers[leaf.node].load(value)?;
        self.param_set[index] = true;
        Ok(())
    }

    /// Runs with one tensor per input, in [`CpuProgram::inputs`] order, each of its declared type.
    pub fn run(&mut self, inputs: &[&HostTensor]) -> Result<Vec<HostTensor>> {
        if inputs.len() != self.inputs.len() {
            return Err(Error::internal(format!("{} inputs for {} slots", inputs.len(), self.inputs.len())));
        }
        if let Some(unset) = self.param_set.iter().position(|s| !s) {
            let p = &self.params[unset];
            return Err(Error::input(format!(
                "param '{}' ({}) was never set: call set_param before run",
                p.name,
                fmt_type(p.dtype, &p.dims)
            )));
        }
        for (leaf, value) in self.inputs.iter().zip(inputs) {
            check_type(leaf, value)?;
            self.buffers[leaf.node].load(value)?;
        }
        let pool = self.pool.clone();
        pool.install(|| self.execute_steps())?;
        self.outputs
            .iter()
            .map(|&o| {
                let (dtype, dims) = &self.types[o];
                self.buffers[o].to_host(*dtype, dims)
            })
            .collect()
    }
}

impl CpuProgram {
    /// Workers this program was planned for.
    pub fn threads(&self) -> usize {
        self.threads
    }

    fn execute_steps(&mut self) -> Result<()> {
        for step in &self.steps {
            let mut out = std::mem::take(&mut self.buffers[step.node]);
            let args = Args { bufs: &self.buffers, ids: &step.operands };
            let result = execute(step, &args, &mut out);
            elementwise::round_in_place(step.dtype, &mut out);
            self.buffers[step.node] = out;
            result.map_err(|e| e.context(format!("node %{} ({})", step.node, kernel_name(&step.kernel))))?;
        }
        Ok(())
    }
}

fn check_type(leaf: &Leaf, value: &HostTensor) -> Result<()> {
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

fn kernel_name(k: &Kernel) -> &'static str {
    match k {
        Kernel::Binary(op, _) => op.name(),
        Kernel::Compare(op, _) => op.name(),
        Kernel::Where(_) => "where",
        Kernel::Unary(u) => u.name(),
        Kernel::Cast { .. } => "cast",
        Kernel::MatMul(_) => "matmul",
        Kernel::Reduce(_) => "reduce",
        Kernel::ArgMax(_) => "argmax",
        Kernel::Softmax { .. } => "softmax",
        Kernel::Norm(_) => "norm",
        Kernel::Copy => "reshape",
        Kernel::Strided(_) => "strided copy",
        Kernel::Concat(_) => "concat",
        Kernel::Gather(_) => "gather",
        Kernel::CrossEntropy { .. } => "cross_entropy",
        Kernel::Conv2d { .. } => "conv2d",
        Kernel::Pool { .. } => "pool",
        Kernel::Attention(_) => "attention",
        Kernel::Rope(_) => "rope",
        Kernel::KvAppend(_) => "kv_append",
    }
}

/// Resolves one non-leaf node to its kernel and plan. `first_operand` describes operand 0
/// for run-time error messages (the table of a gather, the cache of a kv_append).
fn plan(
    op: &Op,
    ins: &[(DType, &[usize])],
    out: &[usize],
    threads: usize,
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
        Op::Cast { .. } => Kernel::Cast { from: ins[0].0 },
        Op::MatMul => Kernel::MatMul(matmul::MatMulPlan::new(dims(0), dims(1), out, threads)),
        Op::Reduce { op, axes, .. } => Kernel::Reduce(reduce::ReducePlan::new(*op, dims(0), axes)),
        Op::ArgMax { axis, .. } => Kernel::ArgMax(AxisSplit::new(dims(0), *axis)),
        Op::Softmax { axis } => Kernel::Softmax { split: AxisSplit::new(dims(0), *axis), log: false },
        Op::LogSoftmax { axis } => Kernel::Softmax { split: AxisSplit::new(dims(0), *axis), log: true },
        Op::LayerNorm { eps, gamma, beta } => Kernel::Norm(norm::NormPlan {
            rms: false,
            row_len: *out.last().unwrap_or(&0),
            eps: eps.0,
            gamma: *gamma,
            beta: *beta,
        }),
        Op::RmsNorm { eps, gamma } => Kernel::Norm(norm::NormPlan {
            rms: true,
            row_len: *out.last().unwrap_or(&0),
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
            *mask == MaskKind::Causal,
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
    })
}

fn execute(step: &Step, ins: &Args, out: &mut Buffer) -> Result<()> {
    let class = step.class;
    match &step.kernel {
        Kernel::Binary(op, bc) => elementwise::binary(*op, class, bc, ins, out),
        Kernel::Compare(op, bc) => elementwise::compare(*op, class, bc, ins, out),
        Kernel::Where(bc) => elementwise::where_(class, bc, ins, out),
        Kernel::Unary(u) => elementwise::unary(*u, class, ins, out),
        Kernel::Cast { from } => elementwise::cast(*from, step.dtype, ins.buf(0)?, out),
        Kernel::MatMul(p) => matmul::matmul(p, class, ins, out),
        Kernel::Reduce(p) => reduce::reduce(p, class, ins, out),
        Kernel::ArgMax(s) => reduce::argmax(s, class, ins, out),
        Kernel::Softmax { split, log } => softmax::softmax(split, *log, class, ins, out),
        Kernel::Norm(p) => norm::norm(p, class, ins, out),
        Kernel::Copy => layout::copy(class, ins, out),
        Kernel::Strided(p) => layout::strided_copy(p, class, ins, out),
        Kernel::Concat(p) => layout::concat(p, class, ins, out),
        Kernel::Gather(p) => gather::gather(p, class, ins, out),
        Kernel::CrossEntropy { n, c } => loss::cross_entropy(*n, *c, class, ins, out),
        Kernel::Conv2d { geometry, groups } => conv::conv2d(geometry, *groups, class, ins, out),
        Kernel::Pool { geometry, avg } => conv::pool(geometry, *avg, class, ins, out),
        Kernel::Attention(p) => attention::attention(p, class, ins, out),
        Kernel::Rope(p) => rope::rope(p, class, ins, out),
        Kernel::KvAppend(p) => kv_cache::kv_append(p, class, ins, out),
    }
}
