//! The op set. One `enum Op`; one file per op family holding the family's attribute
//! types, its shape/dtype rule, its reference semantics (doc comments, implemented by
//! `rlx-cpu`'s kernel of the same family name) and its `Graph` builders.
//!
//! Adding an op: a variant here plus its arms in `name`/`arity`/`infer`, the rule and
//! builder in the family file, the kernel in `rlx-cpu/src/kernels/<family>.rs`, and tests.
//! Exhaustive `match`es make the compiler list every place that must learn about it.

pub mod attention;
pub mod conv;
pub mod diff;
pub mod elementwise;
pub mod gather;
pub mod kv_cache;
pub mod layout;
pub mod loss;
pub mod matmul;
pub mod norm;
pub mod quant_matmul;
pub mod reduce;
pub mod rope;
pub mod scan;
pub mod softmax;

pub use attention::{AttentionMask, MaskKind};
pub use conv::{Conv2dParams, PoolParams};
pub use elementwise::{BinaryOp, CompareOp, Unary};
pub use quant_matmul::ActivationQuant;
pub use reduce::ReduceOp;
pub use rope::RopeStyle;

use crate::shape::fmt_type;
use crate::{DType, Error, Graph, HostTensor, Result};
use serde::{Deserialize, Serialize};
use std::hash::{Hash, Hasher};

/// An f32 attribute (eps, scale, base) that is `Eq + Hash` by bit pattern, so ops can be
/// compared and hashed (CSE). Builders only accept finite values.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct F32Attr(pub f32);

impl PartialEq for F32Attr {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}
impl Eq for F32Attr {}
impl Hash for F32Attr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state)
    }
}

/// One node's operation. Operands are the node's `inputs`, in the order each variant
/// documents. Leaves (Input, Param, Constant) have none.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// A value fed at every run.
    Input { name: String },
    /// A value set once with `set_param` and kept across runs.
    Param { name: String },
    /// A value baked into the graph.
    Constant { value: HostTensor },
    /// `[a, b]`, NumPy broadcasting, same dtype.
    Binary(BinaryOp),
    /// `[a, b]` -> bool, NumPy broadcasting.
    Compare(CompareOp),
    /// `[cond, a, b]`: cond ? a : b, broadcasting all three.
    Where,
    /// `[x]`.
    Unary(Unary),
    /// `[x]` converted to `to`.
    Cast { to: DType },
    /// `[a, b]`: batched matrix product.
    MatMul,
    /// `[x]`.
    Reduce { op: ReduceOp, axes: Vec<usize>, keep_dims: bool },
    /// `[x]` -> i64 index of the first maximum along `axis`.
    ArgMax { axis: usize, keep_dims: bool },
    /// `[x]`.
    Softmax { axis: usize },
    /// `[x]`.
    LogSoftmax { axis: usize },
    /// `[x, gamma?, beta?]` over the last axis.
    LayerNorm { eps: F32Attr, gamma: bool, beta: bool },
    /// `[x, gamma?]` over the last axis.
    RmsNorm { eps: F32Attr, gamma: bool },
    /// `[x]`.
    Reshape { dims: Vec<usize> },
    /// `[x]`: out.dims[i] = x.dims[perm[i]].
    Transpose { perm: Vec<usize> },
    /// `[x]`: `len` entries of `axis` from `start`.
    Narrow { axis: usize, start: usize, len: usize },
    /// `[x0, x1, ...]` joined along `axis`.
    Concat { axis: usize },
    /// `[x]` broadcast to `dims` (NumPy `broadcast_to`).
    Expand { dims: Vec<usize> },
    /// `[table, indices]`: rows of table.
    Gather,
    /// `[logits, labels]` -> mean softmax cross-entropy, a scalar.
    CrossEntropy,
    /// `[x, w, bias?]`, NCHW.
    Conv2d { params: Conv2dParams, bias: bool },
    /// `[x]`, NCHW.
    MaxPool2d { params: PoolParams },
    /// `[x]`, NCHW.
    AvgPool2d { params: PoolParams, count_include_pad: bool },
    /// `[q, k, v, bias?]`: scaled dot-product attention; `scale` None is 1/sqrt(head_dim).
    Attention { mask: MaskKind, scale: Option<F32Attr> },
    /// `[x, positions]`: rotary position embedding over the last axis.
    Rope { style: RopeStyle, base: F32Attr, rotary_dims: usize },
    /// `[cache, new, pos]`: cache with `new` written at `pos` along `axis`.
    KvAppend { axis: usize },
    /// `[x, w]`: `x @ W^T` with `W` block-quantized in `scheme`.
    DequantMatMul {
        scheme: crate::quant::QuantScheme,
        #[serde(alias = "q8_activations")]
        activations: ActivationQuant,
    },
    /// `[w]`: block-quantized rows decoded to f32 `[n, k]`.
    Dequantize { scheme: crate::quant::QuantScheme },
    /// `[indices, updates]`: a `[rows, ...]` table of zeros with each update row added
    /// at its index (the transpose of `gather`).
    ScatterAdd { rows: usize },
    /// `[g, w]`: the gradient of `conv2d` with respect to its input, `input` dims.
    Conv2dGradInput { params: Conv2dParams, input: [usize; 4] },
    /// `[x, g]`: the gradient of `conv2d` with respect to its weight, `weight` dims.
    Conv2dGradWeight { params: Conv2dParams, weight: [usize; 4] },
    /// `[x, g]`: `g` routed to the first maximum of each window of `x` (`x`'s dims).
    MaxPool2dGrad { params: PoolParams },
    /// `[x, t]`: per window, `t` at the first maximum of `x` (pooled dims).
    MaxPool2dSelect { params: PoolParams },
    /// `[g]`: the gradient of `avg_pool2d`, `input` dims.
    AvgPool2dGrad { params: PoolParams, count_include_pad: bool, input: [usize; 4] },
    /// `[inits..., bcast..., xs...]`: `body` looped over the leading axis of `xs`; the
    /// result is final carry `output` (see `scan`).
    Scan { body: Box<Graph>, n_carry: usize, n_bcast: usize, checkpoints: Option<usize>, output: usize },
    /// `[inits..., bcast..., xs..., carry cotangents...]`: the backward loop of a scan.
    ScanGrad {
        body: Box<Graph>,
        grad_body: Box<Graph>,
        n_carry: usize,
        n_bcast: usize,
        checkpoints: Option<usize>,
        output: scan::ScanGradOutput,
    },
}

/// An operand's type, as seen by a shape rule.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    pub dtype: DType,
    pub dims: &'a [usize],
}

impl Operand<'_> {
    /// `f32[2,3]`.
    pub fn ty(&self) -> String {
        fmt_type(self.dtype, self.dims)
    }
}

impl Op {
    /// Short lowercase name used in messages, logs and `rlx inspect`.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Param { .. } => "param",
            Op::Constant { .. } => "constant",
            Op::Binary(b) => b.name(),
            Op::Compare(c) => c.name(),
            Op::Where => "where",
            Op::Unary(u) => u.name(),
            Op::Cast { .. } => "cast",
            Op::MatMul => "matmul",
            Op::Reduce { op, .. } => op.name(),
            Op::ArgMax { .. } => "argmax",
            Op::Softmax { .. } => "softmax",
            Op::LogSoftmax { .. } => "log_softmax",
            Op::LayerNorm { .. } => "layer_norm",
            Op::RmsNorm { .. } => "rms_norm",
            Op::Reshape { .. } => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Narrow { .. } => "narrow",
            Op::Concat { .. } => "concat",
            Op::Expand { .. } => "expand",
            Op::Gather => "gather",
            Op::CrossEntropy => "cross_entropy",
            Op::Conv2d { .. } => "conv2d",
            Op::MaxPool2d { .. } => "max_pool2d",
            Op::AvgPool2d { .. } => "avg_pool2d",
            Op::Attention { .. } => "attention",
            Op::Rope { .. } => "rope",
            Op::KvAppend { .. } => "kv_append",
            Op::DequantMatMul { .. } => "dequant_matmul",
            Op::Dequantize { .. } => "dequantize",
            Op::ScatterAdd { .. } => "scatter_add",
            Op::Conv2dGradInput { .. } => "conv2d_grad_input",
            Op::Conv2dGradWeight { .. } => "conv2d_grad_weight",
            Op::MaxPool2dGrad { .. } => "max_pool2d_grad",
            Op::MaxPool2dSelect { .. } => "max_pool2d_select",
            Op::AvgPool2dGrad { .. } => "avg_pool2d_grad",
            Op::Scan { .. } => "scan",
            Op::ScanGrad { .. } => "scan_grad",
        }
    }

    pub fn is_leaf(&self) -> bool {
        matches!(self, Op::Input { .. } | Op::Param { .. } | Op::Constant { .. })
    }

    /// Number of operands this op takes.
    pub fn arity(&self) -> Arity {
        match self {
            Op::Input { .. } | Op::Param { .. } | Op::Constant { .. } => Arity::Exactly(0),
            Op::Unary(_)
            | Op::Cast { .. }
            | Op::Reduce { .. }
            | Op::ArgMax { .. }
            | Op::Softmax { .. }
            | Op::LogSoftmax { .. }
            | Op::Reshape { .. }
            | Op::Transpose { .. }
            | Op::Narrow { .. }
            | Op::Expand { .. }
            | Op::MaxPool2d { .. }
            | Op::AvgPool2d { .. }
            | Op::Dequantize { .. }
            | Op::AvgPool2dGrad { .. } => Arity::Exactly(1),
            Op::Binary(_)
            | Op::Compare(_)
            | Op::MatMul
            | Op::Gather
            | Op::CrossEntropy
            | Op::Rope { .. }
            | Op::DequantMatMul { .. }
            | Op::ScatterAdd { .. }
            | Op::Conv2dGradInput { .. }
            | Op::Conv2dGradWeight { .. }
            | Op::MaxPool2dGrad { .. }
            | Op::MaxPool2dSelect { .. } => Arity::Exactly(2),
            Op::Where | Op::KvAppend { .. } => Arity::Exactly(3),
            Op::LayerNorm { gamma, beta, .. } => Arity::Exactly(1 + *gamma as usize + *beta as usize),
            Op::RmsNorm { gamma, .. } => Arity::Exactly(1 + *gamma as usize),
            Op::Conv2d { bias, .. } => Arity::Exactly(2 + *bias as usize),
            Op::Attention { mask, .. } => Arity::Exactly(3 + mask.has_operand() as usize),
            Op::Concat { .. } => Arity::AtLeast(1),
            // Counts from a document: saturating, so 2^64 - 1 cannot wrap to a small arity.
            Op::Scan { n_carry, n_bcast, .. } => Arity::AtLeast(n_carry.saturating_add(*n_bcast).saturating_add(1)),
            Op::ScanGrad { n_carry, n_bcast, .. } => {
                Arity::AtLeast(n_carry.saturating_mul(2).saturating_add(*n_bcast).saturating_add(1))
            }
        }
    }

    /// The op's shape and dtype rule: the output type from the operand types, or an error
    /// naming the op and the offending operand types. Leaves are typed by the graph.
    pub fn infer(&self, ins: &[Operand]) -> Result<(DType, Vec<usize>)> {
        let arity_ok = match self.arity() {
            Arity::Exactly(n) => ins.len() == n,
            Arity::AtLeast(n) => ins.len() >= n,
        };
        if !arity_ok {
            return Err(Error::graph(format!("{} takes {} operands, got {}", self.name(), self.arity(), ins.len())));
        }
        let r = match self {
            Op::Input { .. } | Op::Param { .. } | Op::Constant { .. } => {
                Err(Error::internal(format!("{} is a leaf and has no shape rule", self.name())))
            }
            Op::Binary(op) => elementwise::infer_binary(*op, ins[0], ins[1]),
            Op::Compare(_) => elementwise::infer_compare(ins[0], ins[1]),
            Op::Where => elementwise::infer_where(ins[0], ins[1], ins[2]),
            Op::Unary(u) => elementwise::infer_unary(*u, ins[0]),
            Op::Cast { to } => Ok((*to, ins[0].dims.to_vec())),
            Op::MatMul => matmul::infer(ins[0], ins[1]),
            Op::Reduce { op, axes, keep_dims } => reduce::infer_reduce(*op, ins[0], axes, *keep_dims),
            Op::ArgMax { axis, keep_dims } => reduce::infer_argmax(ins[0], *axis, *keep_dims),
            Op::Softmax { axis } | Op::LogSoftmax { axis } => softmax::infer(ins[0], *axis),
            Op::LayerNorm { eps, .. } | Op::RmsNorm { eps, .. } => norm::infer(eps.0, ins[0], &ins[1..]),
            Op::Reshape { dims } => layout::infer_reshape(ins[0], dims),
            Op::Transpose { perm } => layout::infer_transpose(ins[0], perm),
            Op::Narrow { axis, start, len } => layout::infer_narrow(ins[0], *axis, *start, *len),
            Op::Concat { axis } => layout::infer_concat(ins, *axis),
            Op::Expand { dims } => layout::infer_expand(ins[0], dims),
            Op::Gather => gather::infer(ins[0], ins[1]),
            Op::CrossEntropy => loss::infer_cross_entropy(ins[0], ins[1]),
            Op::Conv2d { params, .. } => conv::infer_conv2d(params, ins[0], ins[1], ins.get(2).copied()),
            Op::MaxPool2d { params } | Op::AvgPool2d { params, .. } => conv::infer_pool(params, ins[0]),
            Op::Attention { mask, scale } => attention::infer(*mask, *scale, ins),
            Op::Rope { rotary_dims, base, .. } => rope::infer(ins[0], ins[1], *rotary_dims, *base),
            Op::KvAppend { axis } => kv_cache::infer(ins[0], ins[1], ins[2], *axis),
            Op::DequantMatMul { scheme, activations } => quant_matmul::infer(*scheme, *activations, ins[0], ins[1]),
            Op::Dequantize { scheme } => quant_matmul::infer_dequantize(*scheme, ins[0]),
            Op::ScatterAdd { rows } => gather::infer_scatter_add(*rows, ins[0], ins[1]),
            Op::Conv2dGradInput { params, input } => conv::infer_grad_input(params, input, ins[0], ins[1]),
            Op::Conv2dGradWeight { params, weight } => conv::infer_grad_weight(params, weight, ins[0], ins[1]),
            Op::MaxPool2dGrad { params } => conv::infer_max_pool_grad(params, ins[0], ins[1]),
            Op::MaxPool2dSelect { params } => conv::infer_max_pool_select(params, ins[0], ins[1]),
            Op::AvgPool2dGrad { params, input, .. } => conv::infer_avg_pool_grad(params, input, ins[0]),
            Op::Scan { body, n_carry, n_bcast, checkpoints, output } => {
                scan::infer_scan(body, *n_carry, *n_bcast, *checkpoints, *output, ins)
            }
            Op::ScanGrad { body, grad_body, n_carry, n_bcast, checkpoints, output } => {
                scan::infer_scan_grad(body, grad_body, *n_carry, *n_bcast, *checkpoints, *output, ins)
            }
        };
        r.map_err(|e| e.context(self.name()))
    }
}

/// How many operands an op takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    Exactly(usize),
    AtLeast(usize),
}

impl std::fmt::Display for Arity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arity::Exactly(n) => write!(f, "{n}"),
            Arity::AtLeast(n) => write!(f, "at least {n}"),
        }
    }
}

/// `axis < rank`, or an error naming the operand.
pub(crate) fn check_axis(what: &str, x: Operand, axis: usize) -> Result<()> {
    if axis >= x.dims.len() {
        return Err(Error::shape(format!("{what} {axis} is out of range for {}", x.ty())));
    }
    Ok(())
}

/// Same dtype for every operand, or an error listing them.
pub(crate) fn check_same_dtype(ins: &[Operand]) -> Result<DType> {
    let d = ins[0].dtype;
    if ins.iter().any(|o| o.dtype != d) {
        let tys: Vec<String> = ins.iter().map(|o| o.ty()).collect();
        return Err(Error::dtype(format!("operands must share one dtype, got {}", tys.join(", "))));
    }
    Ok(d)
}

pub(crate) fn check_float(what: &str, x: Operand) -> Result<()> {
    if !x.dtype.is_float() {
        return Err(Error::dtype(format!("{what} must be a float type (f32, f64, f16, bf16), got {}", x.ty())));
    }
    Ok(())
}

pub(crate) fn check_finite(what: &str, v: f32) -> Result<()> {
    if !v.is_finite() {
        return Err(Error::graph(format!("{what} must be finite, got {v}")));
    }
    Ok(())
}
