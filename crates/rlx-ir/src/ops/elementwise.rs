//! Elementwise ops: binary arithmetic, comparisons, `where`, unary functions, casts.
//!
//! Shape rule: NumPy broadcasting of all operands. Dtype rule: operands share one dtype
//! (no implicit promotion; insert a `cast`).
//!
//! Reference semantics (implemented by `rlx-cpu/src/kernels/elementwise.rs`):
//! - floats follow IEEE 754 in the node's dtype (f16/bf16 computed in f32, rounded on
//!   store); `max`/`min` propagate NaN like `numpy.maximum`; `pow` is `powf`.
//! - integers wrap (two's complement) on add/sub/mul/pow; div truncates toward zero and
//!   `x / 0 = 0` (no trap); `pow` with a negative exponent is the truncated real result
//!   (1 for base 1, ±1 for base -1, else 0).
//! - unary functions return NaN for NaN and their limit at +-inf (gelu, silu, mish of
//!   -inf are 0, not -inf * 0 = NaN); no flush of denormals.
//! - comparisons are false when either side is NaN, except `ne`, which is true.
//! - casts: float -> narrower float rounds to nearest even in one step; float -> int
//!   truncates toward zero and saturates, NaN -> 0; int -> int wraps; anything -> bool
//!   is `x != 0` (NaN -> true); bool -> number is 0 or 1.

use super::{Op, Operand, check_same_dtype};
use crate::shape::broadcast_dims;
use crate::{DType, Error, Graph, NodeId, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    Pow,
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 7] =
        [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max, BinaryOp::Min, BinaryOp::Pow];

    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Max => "maximum",
            BinaryOp::Min => "minimum",
            BinaryOp::Pow => "pow",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareOp {
    pub const ALL: [CompareOp; 6] =
        [CompareOp::Eq, CompareOp::Ne, CompareOp::Lt, CompareOp::Le, CompareOp::Gt, CompareOp::Ge];

    pub fn name(self) -> &'static str {
        match self {
            CompareOp::Eq => "eq",
            CompareOp::Ne => "ne",
            CompareOp::Lt => "lt",
            CompareOp::Le => "le",
            CompareOp::Gt => "gt",
            CompareOp::Ge => "ge",
        }
    }
}

/// Elementwise functions of one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unary {
    Neg,
    Abs,
    Exp,
    /// Natural logarithm.
    Log,
    Sqrt,
    /// 1 / sqrt(x).
    Rsqrt,
    /// 1 / x.
    Recip,
    /// max(x, 0); NaN stays NaN.
    Relu,
    /// x/2 (1 + erf(x / sqrt 2)).
    Gelu,
    /// x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
    GeluTanh,
    /// x sigmoid(x).
    Silu,
    /// 1 / (1 + e^-x).
    Sigmoid,
    Tanh,
    /// ln(1 + e^x), without overflow.
    Softplus,
    Sin,
    Cos,
    Tan,
    Atan,
    Erf,
    /// ln(1 + x).
    Ln1p,
    /// x tanh(softplus(x)).
    Mish,
    /// ln(sigmoid(x)) = -softplus(-x).
    LogSigmoid,
}

impl Unary {
    pub const ALL: [Unary; 22] = [
        Unary::Neg,
        Unary::Abs,
        Unary::Exp,
        Unary::Log,
        Unary::Sqrt,
        Unary::Rsqrt,
        Unary::Recip,
        Unary::Relu,
        Unary::Gelu,
        Unary::GeluTanh,
        Unary::Silu,
        Unary::Sigmoid,
        Unary::Tanh,
        Unary::Softplus,
        Unary::Sin,
        Unary::Cos,
        Unary::Tan,
        Unary::Atan,
        Unary::Erf,
        Unary::Ln1p,
        Unary::Mish,
        Unary::LogSigmoid,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Unary::Neg => "neg",
            Unary::Abs => "abs",
            Unary::Exp => "exp",
            Unary::Log => "log",
            Unary::Sqrt => "sqrt",
            Unary::Rsqrt => "rsqrt",
            Unary::Recip => "recip",
            Unary::Relu => "relu",
            Unary::Gelu => "gelu",
            Unary::GeluTanh => "gelu_tanh",
            Unary::Silu => "silu",
            Unary::Sigmoid => "sigmoid",
            Unary::Tanh => "tanh",
            Unary::Softplus => "softplus",
            Unary::Sin => "sin",
            Unary::Cos => "cos",
            Unary::Tan => "tan",
            Unary::Atan => "atan",
            Unary::Erf => "erf",
            Unary::Ln1p => "ln1p",
            Unary::Mish => "mish",
            Unary::LogSigmoid => "log_sigmoid",
        }
    }

    /// Neg, Abs and Relu also take signed integers (wrapping: -i8::MIN = i8::MIN);
    /// everything else takes floats only.
    pub fn accepts(self, dtype: DType) -> bool {
        dtype.is_float() || (matches!(self, Unary::Neg | Unary::Abs | Unary::Relu) && dtype.is_signed_int())
    }
}

fn broadcast(ins: &[Operand]) -> Result<Vec<usize>> {
    let mut out: Vec<usize> = Vec::new();
    for o in ins {
        out = broadcast_dims(&out, o.dims).ok_or_else(|| {
            let tys: Vec<String> = ins.iter().map(|o| o.ty()).collect();
            Error::shape(format!("cannot broadcast {} together", tys.join(" and ")))
        })?;
    }
    Ok(out)
}

pub(crate) fn infer_binary(op: BinaryOp, a: Operand, b: Operand) -> Result<(DType, Vec<usize>)> {
    let dtype = check_same_dtype(&[a, b])?;
    if dtype == DType::Bool {
        return Err(Error::dtype(format!("{} does not take bool operands ({}, {})", op.name(), a.ty(), b.ty())));
    }
    Ok((dtype, broadcast(&[a, b])?))
}

pub(crate) fn infer_compare(a: Operand, b: Operand) -> Result<(DType, Vec<usize>)> {
    check_same_dtype(&[a, b])?;
    Ok((DType::Bool, broadcast(&[a, b])?))
}

pub(crate) fn infer_where(cond: Operand, a: Operand, b: Operand) -> Result<(DType, Vec<usize>)> {
    if cond.dtype != DType::Bool {
        return Err(Error::dtype(format!("condition must be bool, got {}", cond.ty())));
    }
    let dtype = check_same_dtype(&[a, b])?;
    Ok((dtype, broadcast(&[cond, a, b])?))
}

pub(crate) fn infer_unary(u: Unary, x: Operand) -> Result<(DType, Vec<usize>)> {
    if !u.accepts(x.dtype) {
        let takes =
            if matches!(u, Unary::Neg | Unary::Abs | Unary::Relu) { "float or signed integer" } else { "float" };
        return Err(Error::dtype(format!("{} takes a {takes} operand, got {}", u.name(), x.ty())));
    }
    Ok((x.dtype, x.dims.to_vec()))
}

impl Graph {
    pub fn binary(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.push(Op::Binary(op), &[a, b])
    }
    pub fn add(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.binary(BinaryOp::Add, a, b)
    }
    pub fn sub(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.binary(BinaryOp::Sub, a, b)
    }
    pub fn mul(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.binary(BinaryOp::Mul, a, b)
    }
    pub fn div(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.binary(BinaryOp::Div, a, b)
    }
    pub fn maximum(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.binary(BinaryOp::Max, a, b)
    }
    pub fn minimum(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.binary(BinaryOp::Min, a, b)
    }
    pub fn pow(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.binary(BinaryOp::Pow, a, b)
    }

    pub fn compare(&mut self, op: CompareOp, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.push(Op::Compare(op), &[a, b])
    }
    pub fn eq(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.compare(CompareOp::Eq, a, b)
    }
    pub fn ne(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.compare(CompareOp::Ne, a, b)
    }
    pub fn lt(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.compare(CompareOp::Lt, a, b)
    }
    pub fn le(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.compare(CompareOp::Le, a, b)
    }
    pub fn gt(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.compare(CompareOp::Gt, a, b)
    }
    pub fn ge(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.compare(CompareOp::Ge, a, b)
    }

    /// `cond ? a : b` elementwise; `cond` is bool.
    pub fn where_(&mut self, cond: NodeId, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.push(Op::Where, &[cond, a, b])
    }

    pub fn unary(&mut self, op: Unary, x: NodeId) -> Result<NodeId> {
        self.push(Op::Unary(op), &[x])
    }

    pub fn cast(&mut self, x: NodeId, to: DType) -> Result<NodeId> {
        self.push(Op::Cast { to }, &[x])
    }
}
