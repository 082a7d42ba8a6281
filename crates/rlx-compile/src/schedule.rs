//! The schedule: the graph lowered to a list of steps over values, in execution order.
//! Unlike the IR, a step may read and write several values, and its kernel may be a fused
//! one (see `fusion`). Backends execute schedules; the memory planner places their values.

use rlx_ir::quant::QuantScheme;
use rlx_ir::shape::{fmt_type, numel};
use rlx_ir::{
    ActivationQuant, BinaryOp, CompareOp, DType, Error, F32Attr, Graph, HostTensor, NodeId, Op, ReduceOp, Result, Unary,
};

/// Index of a value in `Schedule::values`.
pub type ValueId = usize;

/// Where a value comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueKind {
    /// Fed at every run; `index` is its position among the graph's inputs.
    Input { index: usize },
    /// Set with `set_param`, kept across runs.
    Param { index: usize },
    /// Baked in.
    Constant(HostTensor),
    /// Written by a step.
    Intermediate,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub dtype: DType,
    pub dims: Vec<usize>,
    pub kind: ValueKind,
    /// Input/param name, or the IR node this value came from (for messages).
    pub label: String,
}

impl Value {
    pub fn numel(&self) -> usize {
        numel(&self.dims)
    }
    pub fn is_leaf(&self) -> bool {
        !matches!(self.kind, ValueKind::Intermediate)
    }
}

/// One instruction of a fused elementwise region. Registers are the results of earlier
/// instructions, numbered from 0; every instruction rounds its result to its `dtype`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RegionOp {
    /// Region input `k`, broadcast to the region's shape.
    Load(usize),
    Unary(Unary, usize),
    Binary(BinaryOp, usize, usize),
    /// 1.0 for true, 0.0 for false.
    Compare(CompareOp, usize, usize),
    /// cond != 0 ? a : b.
    Where(usize, usize, usize),
    /// Convert to this instruction's dtype (rounding; bool is x != 0).
    Cast(usize),
}

/// A straight-line elementwise program over f32-family values (f32, f16, bf16 computed in
/// f32 and rounded per instruction; bool as 0/1), evaluated in one pass over memory.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Region {
    /// Instructions with the dtype each result rounds to.
    pub ops: Vec<(RegionOp, DType)>,
    /// The register holding the region's result (the last instruction).
    pub result: usize,
}

/// The kernel a step runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Kernel {
    /// An IR op as is: inputs are its operands, one output.
    Op(Op),
    /// A fused elementwise region: inputs are its loads, one output.
    Region(Region),
    /// A fused elementwise region of result shape `dims`, reduced as it is computed (its
    /// result is never written): each output folds one contiguous run of `numel(dims) /
    /// numel(output)` elements, the reduced axes being the trailing ones. Inputs are the
    /// region's loads; one output.
    RegionReduce { region: Region, dims: Vec<usize>, op: ReduceOp },
    /// A matmul whose operands are stored transposed (last two axes swapped) when `ta` /
    /// `tb`: inputs the stored operands; one output.
    MatMulT { ta: bool, tb: bool },
    /// `act(a @ b + bias)`: inputs a, b, bias (broadcast along rows); one output.
    MatMulBias { act: Option<Unary> },
    /// `up * silu(gate)`: inputs gate, up; one output.
    SwiGlu,
    /// `(x @ wu) * silu(x @ wg)`: inputs x, wg, wu; one output; one temp (x @ wg).
    SwiGluMatMul,
    /// [`Kernel::SwiGluMatMul`] with block-quantized weights (`DequantMatMul`'s `x @ W^T`):
    /// inputs x, wg, wu; one output; one temp (the gate product).
    SwiGluDequant { gate: QuantScheme, up: QuantScheme, activations: ActivationQuant },
    /// Norm of `a + b` over the last axis: inputs a, b, then gamma, beta as flagged;
    /// outputs the norm and, with `emit_sum`, the sum.
    AddNorm { rms: bool, eps: F32Attr, gamma: bool, beta: bool, emit_sum: bool },
    /// `rms_norm(x) * gamma * silu(z)`: inputs x, gamma?, z; outputs the result and, with
    /// `emit_silu`, silu(z).
    RmsNormMulSilu { eps: F32Attr, gamma: bool, emit_silu: bool },
    /// `x / sqrt(sum(x^2, last axis) + eps)`: input x; outputs y and, with `emit_denom`,
    /// the per-row denominator (dims `[.., 1]`).
    L2Norm { eps: F32Attr, rsqrt: bool, emit_denom: bool },
}

impl Kernel {
    pub fn name(&self) -> String {
        match self {
            Kernel::Op(op) => op.name().to_string(),
            Kernel::Region(r) => format!("elementwise region ({} ops)", r.ops.len()),
            Kernel::RegionReduce { region, op, .. } => {
                format!("elementwise region ({} ops) + {}", region.ops.len(), op.name())
            }
            Kernel::MatMulT { ta, tb } => {
                format!("matmul ({}{})", if *ta { "a^T" } else { "a" }, if *tb { " b^T" } else { " b" })
            }
            Kernel::MatMulBias { act } => match act {
                Some(u) => format!("matmul+bias+{}", u.name()),
                None => "matmul+bias".into(),
            },
            Kernel::SwiGlu => "swiglu".into(),
            Kernel::SwiGluMatMul => "swiglu (two matmuls)".into(),
            Kernel::SwiGluDequant { .. } => "swiglu (two quantized matmuls)".into(),
            Kernel::AddNorm { rms, .. } => format!("add+{}", if *rms { "rms_norm" } else { "layer_norm" }),
            Kernel::RmsNormMulSilu { .. } => "rms_norm*silu".into(),
            Kernel::L2Norm { .. } => "l2_norm".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub kernel: Kernel,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Scratch values the kernel needs only while it runs.
    pub temps: Vec<ValueId>,
    /// The IR nodes this step implements (for logs and messages).
    pub nodes: Vec<NodeId>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub name: String,
    pub values: Vec<Value>,
    pub steps: Vec<Step>,
    pub inputs: Vec<ValueId>,
    pub params: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
}

impl Schedule {
    /// One value per IR node, one step per non-leaf node.
    pub fn lower(graph: &Graph) -> Result<Schedule> {
        let mut s = Schedule {
            name: graph.name().to_string(),
            values: Vec::with_capacity(graph.len()),
            steps: Vec::new(),
            inputs: Vec::new(),
            params: Vec::new(),
            outputs: graph.outputs().iter().map(|o| o.index()).collect(),
        };
        for (id, node) in graph.nodes() {
            let (kind, label) = match node.op() {
                Op::Input { name } => {
                    s.inputs.push(id.index());
                    (ValueKind::Input { index: s.inputs.len() - 1 }, format!("input '{name}'"))
                }
                Op::Param { name } => {
                    s.params.push(id.index());
                    (ValueKind::Param { index: s.params.len() - 1 }, format!("param '{name}'"))
                }
                Op::Constant { value } => (ValueKind::Constant(value.clone()), format!("{id} constant")),
                op => {
                    s.steps.push(Step {
                        kernel: Kernel::Op(op.clone()),
                        inputs: node.inputs().iter().map(|i| i.index()).collect(),
                        outputs: vec![id.index()],
                        temps: Vec::new(),
                        nodes: vec![id],
                    });
                    (ValueKind::Intermediate, format!("{id} {}", op.name()))
                }
            };
            s.values.push(Value { dtype: node.dtype(), dims: node.dims().to_vec(), kind, label });
        }
        Ok(s)
    }

    /// Adds a value (a fused kernel's scratch or extra output) and returns its id.
    pub fn add_value(&mut self, dtype: DType, dims: &[usize], label: String) -> ValueId {
        self.values.push(Value { dtype, dims: dims.to_vec(), kind: ValueKind::Intermediate, label });
        self.values.len() - 1
    }

    /// For each value, the indices of the steps that read it.
    pub fn readers(&self) -> Vec<Vec<usize>> {
        let mut r = vec![Vec::new(); self.values.len()];
        for (i, step) in self.steps.iter().enumerate() {
            for &v in &step.inputs {
                if !r[v].contains(&i) {
                    r[v].push(i);
                }
            }
        }
        r
    }

    /// For each value, the step that writes it (None for leaves and unused values).
    pub fn producers(&self) -> Vec<Option<usize>> {
        let mut p = vec![None; self.values.len()];
        for (i, step) in self.steps.iter().enumerate() {
            for &v in step.outputs.iter().chain(&step.temps) {
                p[v] = Some(i);
            }
        }
        p
    }

    pub fn is_output(&self, v: ValueId) -> bool {
        self.outputs.contains(&v)
    }

    /// Structural invariants: every value read is a leaf or written by an earlier step,
    /// every intermediate is written at most once, every output exists.
    pub fn verify(&self) -> Result<()> {
        let mut written = vec![false; self.values.len()];
        for (v, value) in self.values.iter().enumerate() {
            written[v] = value.is_leaf();
        }
        for (i, step) in self.steps.iter().enumerate() {
            for &v in &step.inputs {
                if !written.get(v).copied().unwrap_or(false) {
                    return Err(Error::internal(format!(
                        "schedule step {i} ({}) reads value {v} before any step writes it",
                        step.kernel.name()
                    )));
                }
            }
            for &v in step.outputs.iter().chain(&step.temps) {
                if v >= self.values.len() || written[v] {
                    return Err(Error::internal(format!(
                        "schedule step {i} ({}) writes value {v}, which is a leaf or already written",
                        step.kernel.name()
                    )));
                }
                written[v] = true;
            }
        }
        if let Some(&bad) = self.outputs.iter().find(|&&o| !written.get(o).copied().unwrap_or(false)) {
            return Err(Error::internal(format!("schedule output value {bad} is never written")));
        }
        Ok(())
    }

    /// `f32[2,3] input 'x'`.
    pub fn describe(&self, v: ValueId) -> String {
        let value = &self.values[v];
        format!("{} {}", fmt_type(value.dtype, &value.dims), value.label)
    }
}
