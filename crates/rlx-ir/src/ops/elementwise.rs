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

// ---------------------------------------------------------------------------------------
// Derivatives. Binary ops broadcast, so cotangents are summed back to each operand's
// dims. max/min split ties evenly between the operands (JAX's convention); pow's
// derivative in the exponent uses ln(x) with x = 0 replaced by 1, and in the base is 0
// where the exponent is 0 (both as in JAX).

/// `a` op `b` -> (d out / d a, d out / d b), as graphs broadcast like `out`.
fn binary_partials(g: &mut Graph, op: BinaryOp, a: NodeId, b: NodeId, out: NodeId) -> Result<(NodeId, NodeId)> {
    let dt = g.dtype(out);
    let one = g.scalar_f64(dt, 1.0)?;
    Ok(match op {
        BinaryOp::Add => (one, one),
        BinaryOp::Sub => (one, g.scalar_f64(dt, -1.0)?),
        BinaryOp::Mul => (b, a),
        BinaryOp::Div => {
            let inv = g.div(one, b)?;
            let q = g.div(out, b)?;
            (inv, g.unary(Unary::Neg, q)?)
        }
        BinaryOp::Max | BinaryOp::Min => {
            let wins = if op == BinaryOp::Max { g.gt(a, b)? } else { g.lt(a, b)? };
            let ties = g.eq(a, b)?;
            let (w, t) = (g.mask(wins, dt)?, g.mask(ties, dt)?);
            let half = g.scalar_f64(dt, 0.5)?;
            let ht = g.mul(t, half)?;
            let da = g.add(w, ht)?;
            let db = g.sub(one, da)?;
            (da, db)
        }
        BinaryOp::Pow => {
            let zero = g.scalar_f64(dt, 0.0)?;
            let bm1 = g.sub(b, one)?;
            let p = g.pow(a, bm1)?;
            let bp = g.mul(b, p)?;
            let b_zero = g.eq(b, zero)?;
            let zeros = g.full_like(bp, 0.0)?;
            let da = g.where_(b_zero, zeros, bp)?;
            let a_zero = g.eq(a, zero)?;
            let ones = g.full_like(a, 1.0)?;
            let safe = g.where_(a_zero, ones, a)?;
            let ln = g.unary(Unary::Log, safe)?;
            (da, g.mul(ln, out)?)
        }
    })
}

pub(crate) fn vjp_binary(
    g: &mut Graph,
    op: BinaryOp,
    ins: &[NodeId],
    out: NodeId,
    ct: NodeId,
) -> Result<Vec<Option<NodeId>>> {
    let (a, b) = (ins[0], ins[1]);
    if !g.is_differentiable(out) {
        return Ok(vec![None, None]);
    }
    let (da, db) = binary_partials(g, op, a, b, out)?;
    let mut grads = Vec::new();
    for (x, d) in [(a, da), (b, db)] {
        let prod = g.mul(ct, d)?;
        let out_dims = g.dims(out).to_vec();
        let prod = g.broadcast_to(prod, &out_dims)?;
        let dims = g.dims(x).to_vec();
        grads.push(Some(g.sum_to(prod, &dims)?));
    }
    Ok(grads)
}

pub(crate) fn jvp_binary(
    g: &mut Graph,
    op: BinaryOp,
    ins: &[NodeId],
    out: NodeId,
    t: &[Option<NodeId>],
) -> Result<Option<NodeId>> {
    let (da, db) = binary_partials(g, op, ins[0], ins[1], out)?;
    let mut total = None;
    for (tx, d) in [(t[0], da), (t[1], db)] {
        if let Some(tx) = tx {
            let term = g.mul(tx, d)?;
            total = g.add_opt(total, Some(term))?;
        }
    }
    let dims = g.dims(out).to_vec();
    total.map(|t| g.broadcast_to(t, &dims)).transpose()
}

pub(crate) fn vjp_where(g: &mut Graph, ins: &[NodeId], ct: NodeId) -> Result<Vec<Option<NodeId>>> {
    let (cond, a, b) = (ins[0], ins[1], ins[2]);
    if !g.is_differentiable(a) {
        return Ok(vec![None; 3]);
    }
    let zeros = g.full_like(ct, 0.0)?;
    let ga = g.where_(cond, ct, zeros)?;
    let gb = g.where_(cond, zeros, ct)?;
    let (da, db) = (g.dims(a).to_vec(), g.dims(b).to_vec());
    Ok(vec![None, Some(g.sum_to(ga, &da)?), Some(g.sum_to(gb, &db)?)])
}

pub(crate) fn jvp_where(g: &mut Graph, ins: &[NodeId], out: NodeId, t: &[Option<NodeId>]) -> Result<Option<NodeId>> {
    let ta = g.or_zeros(t[1], ins[1])?;
    let tb = g.or_zeros(t[2], ins[2])?;
    let r = g.where_(ins[0], ta, tb)?;
    let dims = g.dims(out).to_vec();
    Ok(Some(g.broadcast_to(r, &dims)?))
}

/// f'(x) for `out = f(x)`, as a graph of x's type.
fn unary_derivative(g: &mut Graph, u: Unary, x: NodeId, out: NodeId) -> Result<NodeId> {
    let dt = g.dtype(x);
    let c = |g: &mut Graph, v: f64| g.scalar_f64(dt, v);
    let sigmoid = |g: &mut Graph| g.unary(Unary::Sigmoid, x);
    Ok(match u {
        Unary::Neg => c(g, -1.0)?,
        Unary::Abs => {
            // sign(x), 0 at 0.
            let zero = c(g, 0.0)?;
            let (pos, neg) = (g.gt(x, zero)?, g.lt(x, zero)?);
            let (p, n) = (g.mask(pos, dt)?, g.mask(neg, dt)?);
            g.sub(p, n)?
        }
        Unary::Exp => out,
        Unary::Log => {
            let one = c(g, 1.0)?;
            g.div(one, x)?
        }
        Unary::Sqrt => {
            let half = c(g, 0.5)?;
            g.div(half, out)?
        }
        Unary::Rsqrt => {
            let h = c(g, -0.5)?;
            let q = g.div(out, x)?;
            g.mul(h, q)?
        }
        Unary::Recip => {
            let sq = g.mul(out, out)?;
            g.unary(Unary::Neg, sq)?
        }
        Unary::Relu => {
            let zero = c(g, 0.0)?;
            let pos = g.gt(x, zero)?;
            g.mask(pos, dt)?
        }
        Unary::Gelu => {
            // Phi(x) + x phi(x), phi the standard normal density.
            let r2 = c(g, std::f64::consts::FRAC_1_SQRT_2)?;
            let xs = g.mul(x, r2)?;
            let erf = g.unary(Unary::Erf, xs)?;
            let one = c(g, 1.0)?;
            let half = c(g, 0.5)?;
            let cdf = g.add(erf, one)?;
            let cdf = g.mul(cdf, half)?;
            let x2 = g.mul(x, x)?;
            let mh = c(g, -0.5)?;
            let e = g.mul(x2, mh)?;
            let e = g.unary(Unary::Exp, e)?;
            let k = c(g, 1.0 / (2.0 * std::f64::consts::PI).sqrt())?;
            let pdf = g.mul(e, k)?;
            let xp = g.mul(x, pdf)?;
            g.add(cdf, xp)?
        }
        Unary::GeluTanh => {
            // 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) s (1 + 3 a x^2), u = s (x + a x^3).
            let (s, a) = ((2.0 / std::f64::consts::PI).sqrt(), 0.044715);
            let x2 = g.mul(x, x)?;
            let x3 = g.mul(x2, x)?;
            let ac = c(g, a)?;
            let ax3 = g.mul(x3, ac)?;
            let inner = g.add(x, ax3)?;
            let sc = c(g, s)?;
            let uu = g.mul(inner, sc)?;
            let th = g.unary(Unary::Tanh, uu)?;
            let one = c(g, 1.0)?;
            let half = c(g, 0.5)?;
            let left = g.add(one, th)?;
            let left = g.mul(left, half)?;
            let th2 = g.mul(th, th)?;
            let sech2 = g.sub(one, th2)?;
            let a3 = c(g, 3.0 * a)?;
            let q = g.mul(x2, a3)?;
            let q = g.add(one, q)?;
            let du = g.mul(q, sc)?;
            let right = g.mul(sech2, du)?;
            let right = g.mul(right, x)?;
            let right = g.mul(right, half)?;
            g.add(left, right)?
        }
        Unary::Silu => {
            // s (1 + x (1 - s)).
            let s = sigmoid(g)?;
            let one = c(g, 1.0)?;
            let oms = g.sub(one, s)?;
            let t = g.mul(x, oms)?;
            let t = g.add(one, t)?;
            g.mul(s, t)?
        }
        Unary::Sigmoid => {
            let one = c(g, 1.0)?;
            let oms = g.sub(one, out)?;
            g.mul(out, oms)?
        }
        Unary::Tanh => {
            let one = c(g, 1.0)?;
            let sq = g.mul(out, out)?;
            g.sub(one, sq)?
        }
        Unary::Softplus => sigmoid(g)?,
        Unary::Sin => g.unary(Unary::Cos, x)?,
        Unary::Cos => {
            let s = g.unary(Unary::Sin, x)?;
            g.unary(Unary::Neg, s)?
        }
        Unary::Tan => {
            let one = c(g, 1.0)?;
            let sq = g.mul(out, out)?;
            g.add(one, sq)?
        }
        Unary::Atan => {
            let one = c(g, 1.0)?;
            let sq = g.mul(x, x)?;
            let d = g.add(one, sq)?;
            g.div(one, d)?
        }
        Unary::Erf => {
            let k = c(g, 2.0 / std::f64::consts::PI.sqrt())?;
            let sq = g.mul(x, x)?;
            let n = g.unary(Unary::Neg, sq)?;
            let e = g.unary(Unary::Exp, n)?;
            g.mul(k, e)?
        }
        Unary::Ln1p => {
            let one = c(g, 1.0)?;
            let d = g.add(one, x)?;
            g.div(one, d)?
        }
        Unary::Mish => {
            // t + x s (1 - t^2), t = tanh(softplus x), s = sigmoid x.
            let sp = g.unary(Unary::Softplus, x)?;
            let t = g.unary(Unary::Tanh, sp)?;
            let s = sigmoid(g)?;
            let one = c(g, 1.0)?;
            let t2 = g.mul(t, t)?;
            let sech2 = g.sub(one, t2)?;
            let r = g.mul(x, s)?;
            let r = g.mul(r, sech2)?;
            g.add(t, r)?
        }
        Unary::LogSigmoid => {
            let n = g.unary(Unary::Neg, x)?;
            g.unary(Unary::Sigmoid, n)?
        }
    })
}

pub(crate) fn vjp_unary(g: &mut Graph, u: Unary, x: NodeId, out: NodeId, ct: NodeId) -> Result<Vec<Option<NodeId>>> {
    if !g.is_differentiable(x) {
        return Ok(vec![None]);
    }
    let d = unary_derivative(g, u, x, out)?;
    Ok(vec![Some(g.mul(ct, d)?)])
}

pub(crate) fn jvp_unary(g: &mut Graph, u: Unary, x: NodeId, out: NodeId, t: Option<NodeId>) -> Result<Option<NodeId>> {
    let Some(t) = t else { return Ok(None) };
    let d = unary_derivative(g, u, x, out)?;
    let r = g.mul(t, d)?;
    let dims = g.dims(out).to_vec();
    Ok(Some(g.broadcast_to(r, &dims)?))
}

pub(crate) fn vjp_cast(g: &mut Graph, x: NodeId, ct: NodeId) -> Result<Vec<Option<NodeId>>> {
    if !g.is_differentiable(x) || !g.is_differentiable(ct) {
        return Ok(vec![None]);
    }
    let to = g.dtype(x);
    Ok(vec![Some(g.cast(ct, to)?)])
}
