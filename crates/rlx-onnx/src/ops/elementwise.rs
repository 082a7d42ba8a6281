//! Elementwise ops: arithmetic (NumPy broadcasting, as in the IR), comparisons and logic,
//! unary functions, activations built from IR ops, Where, Cast, Clip.

use super::{OpDef, def, one};
use crate::import::{Importer, Node};
use crate::tensor::dtype_of;
use rlx_ir::{BinaryOp, CompareOp, DType, Error, NodeId, Result, Unary};

pub const OPS: &[OpDef] = &[
    def("Add", 7, |i, n| binary(i, n, BinaryOp::Add)),
    def("Sub", 7, |i, n| binary(i, n, BinaryOp::Sub)),
    def("Mul", 7, |i, n| binary(i, n, BinaryOp::Mul)),
    def("Div", 7, |i, n| binary(i, n, BinaryOp::Div)),
    def("Pow", 7, pow),
    def("Max", 8, |i, n| variadic(i, n, BinaryOp::Max)),
    def("Min", 8, |i, n| variadic(i, n, BinaryOp::Min)),
    def("Sum", 8, |i, n| variadic(i, n, BinaryOp::Add)),
    def("Mean", 8, mean),
    def("Equal", 7, |i, n| compare(i, n, CompareOp::Eq)),
    def("Less", 7, |i, n| compare(i, n, CompareOp::Lt)),
    def("LessOrEqual", 12, |i, n| compare(i, n, CompareOp::Le)),
    def("Greater", 7, |i, n| compare(i, n, CompareOp::Gt)),
    def("GreaterOrEqual", 12, |i, n| compare(i, n, CompareOp::Ge)),
    def("Not", 1, not),
    def("And", 7, |i, n| logic(i, n, Logic::And)),
    def("Or", 7, |i, n| logic(i, n, Logic::Or)),
    def("Xor", 7, |i, n| logic(i, n, Logic::Xor)),
    def("Where", 9, where_),
    def("Neg", 6, |i, n| unary(i, n, Unary::Neg)),
    def("Abs", 6, |i, n| unary(i, n, Unary::Abs)),
    def("Exp", 6, |i, n| unary(i, n, Unary::Exp)),
    def("Log", 6, |i, n| unary(i, n, Unary::Log)),
    def("Sqrt", 6, |i, n| unary(i, n, Unary::Sqrt)),
    def("Reciprocal", 6, |i, n| unary(i, n, Unary::Recip)),
    def("Relu", 6, |i, n| unary(i, n, Unary::Relu)),
    def("Sigmoid", 6, |i, n| unary(i, n, Unary::Sigmoid)),
    def("Tanh", 6, |i, n| unary(i, n, Unary::Tanh)),
    def("Erf", 9, |i, n| unary(i, n, Unary::Erf)),
    def("Sin", 7, |i, n| unary(i, n, Unary::Sin)),
    def("Cos", 7, |i, n| unary(i, n, Unary::Cos)),
    def("Tan", 7, |i, n| unary(i, n, Unary::Tan)),
    def("Atan", 7, |i, n| unary(i, n, Unary::Atan)),
    def("Softplus", 1, |i, n| unary(i, n, Unary::Softplus)),
    def("Mish", 18, |i, n| unary(i, n, Unary::Mish)),
    def("Gelu", 20, gelu),
    def("Identity", 1, identity),
    def("Cast", 6, cast),
    def("CastLike", 15, cast_like),
    def("Clip", 6, clip_attrs),
    def("Clip", 11, clip_inputs),
    def("LeakyRelu", 6, leaky_relu),
    def("Elu", 6, elu),
    def("Selu", 6, selu),
    def("Celu", 12, celu),
    def("ThresholdedRelu", 10, thresholded_relu),
    def("HardSigmoid", 6, hard_sigmoid),
    def("HardSwish", 14, hard_swish),
    def("PRelu", 7, prelu),
    def("Sign", 9, sign),
    def("IsNaN", 9, is_nan),
    def("IsInf", 10, is_inf),
    def("Softsign", 1, softsign),
    def("Floor", 6, |i, n| rounding(i, n, Rounding::Floor)),
    def("Ceil", 6, |i, n| rounding(i, n, Rounding::Ceil)),
    def("Round", 11, |i, n| rounding(i, n, Rounding::HalfEven)),
    def("Mod", 10, modulo),
];

fn binary(i: &mut Importer, n: &Node, op: BinaryOp) -> Result<Vec<NodeId>> {
    let (a, b) = (i.input(n, 0)?, i.input(n, 1)?);
    one(i.g.binary(op, a, b)?)
}

/// Pow allows an exponent of another type (opset 12+); it is cast to the base's type.
fn pow(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (a, mut b) = (i.input(n, 0)?, i.input(n, 1)?);
    if i.g.dtype(b) != i.g.dtype(a) {
        b = i.g.cast(b, i.g.dtype(a))?;
    }
    one(i.g.pow(a, b)?)
}

fn variadic(i: &mut Importer, n: &Node, op: BinaryOp) -> Result<Vec<NodeId>> {
    let xs = i.inputs(n)?;
    let (&first, rest) = xs.split_first().ok_or_else(|| Error::graph("needs at least one input"))?;
    let mut acc = first;
    for &x in rest {
        acc = i.g.binary(op, acc, x)?;
    }
    if rest.is_empty() {
        acc = identity_of(i, acc)?;
    }
    one(acc)
}

fn mean(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let count = i.inputs(n)?.len();
    let sum = variadic(i, n, BinaryOp::Add)?[0];
    let k = i.g.scalar_like(sum, count as f64)?;
    one(i.g.div(sum, k)?)
}

fn compare(i: &mut Importer, n: &Node, op: CompareOp) -> Result<Vec<NodeId>> {
    let (a, b) = (i.input(n, 0)?, i.input(n, 1)?);
    one(i.g.compare(op, a, b)?)
}

fn bool_input(i: &mut Importer, n: &Node, k: usize) -> Result<NodeId> {
    let x = i.input(n, k)?;
    if i.g.dtype(x) != DType::Bool {
        return Err(Error::dtype(format!("input {k} must be bool, got {}", i.g.describe(x))));
    }
    Ok(x)
}

fn not(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = bool_input(i, n, 0)?;
    let f = i.g.scalar(DType::Bool, 0.0)?;
    one(i.g.compare(CompareOp::Eq, x, f)?)
}

enum Logic {
    And,
    Or,
    Xor,
}

fn logic(i: &mut Importer, n: &Node, op: Logic) -> Result<Vec<NodeId>> {
    let (a, b) = (bool_input(i, n, 0)?, bool_input(i, n, 1)?);
    one(match op {
        Logic::And => {
            let f = i.g.scalar(DType::Bool, 0.0)?;
            i.g.where_(a, b, f)?
        }
        Logic::Or => {
            let t = i.g.scalar(DType::Bool, 1.0)?;
            i.g.where_(a, t, b)?
        }
        Logic::Xor => i.g.compare(CompareOp::Ne, a, b)?,
    })
}

fn where_(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (c, a, b) = (bool_input(i, n, 0)?, i.input(n, 1)?, i.input(n, 2)?);
    one(i.g.where_(c, a, b)?)
}

fn unary(i: &mut Importer, n: &Node, op: Unary) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    one(i.g.unary(op, x)?)
}

fn gelu(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let op = match n.string("approximate", "none")?.as_str() {
        "none" => Unary::Gelu,
        "tanh" => Unary::GeluTanh,
        other => return Err(Error::unsupported(format!("approximate '{other}'"))),
    };
    one(i.g.unary(op, x)?)
}

/// A distinct node holding `x`'s value (a graph output may not alias an input).
pub fn identity_of(i: &mut Importer, x: NodeId) -> Result<NodeId> {
    let dims = i.g.dims(x).to_vec();
    let y = i.g.reshape(x, &dims)?;
    if let Some(padded) = i.zero_padded.get(&x).cloned() {
        i.zero_padded.insert(y, padded);
    }
    Ok(y)
}

fn identity(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    one(identity_of(i, x)?)
}

fn cast(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let to = n.int_opt("to")?.ok_or_else(|| Error::parse("attribute 'to' is missing"))?;
    let to = dtype_of(i32::try_from(to).map_err(|_| Error::parse(format!("'to' {to}")))?)?;
    one(cast_to(i, x, to)?)
}

fn cast_to(i: &mut Importer, x: NodeId, to: DType) -> Result<NodeId> {
    if i.g.dtype(x) == to { identity_of(i, x) } else { i.g.cast(x, to) }
}

fn cast_like(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (x, like) = (i.input(n, 0)?, i.input(n, 1)?);
    let to = i.g.dtype(like);
    one(cast_to(i, x, to)?)
}

fn clip_to(i: &mut Importer, x: NodeId, lo: Option<NodeId>, hi: Option<NodeId>) -> Result<Vec<NodeId>> {
    let mut y = x;
    if let Some(lo) = lo {
        y = i.g.maximum(y, lo)?;
    }
    if let Some(hi) = hi {
        y = i.g.minimum(y, hi)?;
    }
    if y == x {
        y = identity_of(i, x)?;
    }
    one(y)
}

/// Clip before opset 11: `min` / `max` attributes.
fn clip_attrs(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let lo = if n.has("min") { Some(i.g.scalar_like(x, n.float("min", 0.0)? as f64)?) } else { None };
    let hi = if n.has("max") { Some(i.g.scalar_like(x, n.float("max", 0.0)? as f64)?) } else { None };
    clip_to(i, x, lo, hi)
}

/// Clip from opset 11: optional `min` / `max` inputs (scalars of x's type).
fn clip_inputs(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let (lo, hi) = (i.opt_input(n, 1)?, i.opt_input(n, 2)?);
    clip_to(i, x, lo, hi)
}

fn leaky_relu(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let alpha = n.float("alpha", 0.01)? as f64;
    let zero = i.g.scalar_like(x, 0.0)?;
    let a = i.g.scalar_like(x, alpha)?;
    let neg = i.g.mul(x, a)?;
    let c = i.g.lt(x, zero)?;
    one(i.g.where_(c, neg, x)?)
}

/// `alpha (e^x - 1)` below zero, `x` above, scaled by `gamma` (Selu) or not.
fn elu_like(i: &mut Importer, x: NodeId, alpha: f64, gamma: f64) -> Result<NodeId> {
    let zero = i.g.scalar_like(x, 0.0)?;
    let e = i.g.unary(Unary::Exp, x)?;
    let one_ = i.g.scalar_like(x, 1.0)?;
    let em1 = i.g.sub(e, one_)?;
    let a = i.g.scalar_like(x, alpha)?;
    let neg = i.g.mul(em1, a)?;
    let c = i.g.lt(x, zero)?;
    let y = i.g.where_(c, neg, x)?;
    if gamma == 1.0 {
        return Ok(y);
    }
    let g = i.g.scalar_like(x, gamma)?;
    i.g.mul(y, g)
}

fn elu(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    one(elu_like(i, x, n.float("alpha", 1.0)? as f64, 1.0)?)
}

fn selu(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let alpha = n.float("alpha", 1.673_263_2)? as f64;
    let gamma = n.float("gamma", 1.050_701)? as f64;
    one(elu_like(i, x, alpha, gamma)?)
}

/// `max(0, x) + min(0, alpha (e^(x / alpha) - 1))`.
fn celu(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let alpha = n.float("alpha", 1.0)? as f64;
    let a = i.g.scalar_like(x, alpha)?;
    let scaled = i.g.div(x, a)?;
    let y = elu_like(i, scaled, alpha, 1.0)?;
    let zero = i.g.scalar_like(x, 0.0)?;
    let c = i.g.lt(x, zero)?;
    one(i.g.where_(c, y, x)?)
}

fn thresholded_relu(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let alpha = i.g.scalar_like(x, n.float("alpha", 1.0)? as f64)?;
    let zero = i.g.scalar_like(x, 0.0)?;
    let c = i.g.gt(x, alpha)?;
    one(i.g.where_(c, x, zero)?)
}

/// `max(0, min(1, alpha x + beta))`.
fn hard_sigmoid_of(i: &mut Importer, x: NodeId, alpha: f64, beta: f64) -> Result<NodeId> {
    let a = i.g.scalar_like(x, alpha)?;
    let b = i.g.scalar_like(x, beta)?;
    let ax = i.g.mul(x, a)?;
    let y = i.g.add(ax, b)?;
    let zero = i.g.scalar_like(x, 0.0)?;
    let one_ = i.g.scalar_like(x, 1.0)?;
    let y = i.g.minimum(y, one_)?;
    i.g.maximum(y, zero)
}

fn hard_sigmoid(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let (alpha, beta) = (n.float("alpha", 0.2)? as f64, n.float("beta", 0.5)? as f64);
    one(hard_sigmoid_of(i, x, alpha, beta)?)
}

fn hard_swish(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let s = hard_sigmoid_of(i, x, 1.0 / 6.0, 0.5)?;
    one(i.g.mul(x, s)?)
}

fn prelu(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (x, slope) = (i.input(n, 0)?, i.input(n, 1)?);
    let zero = i.g.scalar_like(x, 0.0)?;
    let neg = i.g.mul(x, slope)?;
    let c = i.g.lt(x, zero)?;
    let y = i.g.where_(c, neg, x)?;
    // The slope may broadcast the result past x's dims; ONNX requires x's.
    if i.g.dims(y) != i.g.dims(x) {
        return Err(Error::shape(format!("slope {} does not broadcast to {}", i.g.describe(slope), i.g.describe(x))));
    }
    one(y)
}

fn sign(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let zero = i.g.scalar_like(x, 0.0)?;
    let one_ = i.g.scalar_like(x, 1.0)?;
    let m1 = i.g.scalar_like(x, -1.0)?;
    let pos = i.g.gt(x, zero)?;
    let neg = i.g.lt(x, zero)?;
    let y = i.g.where_(neg, m1, zero)?;
    let y = i.g.where_(pos, one_, y)?;
    // NaN stays NaN for floats (x * 0 + y keeps the sign and passes NaN through).
    if i.g.dtype(x).is_float() {
        let z = i.g.mul(x, zero)?;
        return one(i.g.add(z, y)?);
    }
    one(y)
}

fn is_nan(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    one(i.g.compare(CompareOp::Ne, x, x)?)
}

fn is_inf(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let (pos, neg) = (n.int("detect_positive", 1)? != 0, n.int("detect_negative", 1)? != 0);
    let inf = i.g.scalar_like(x, f64::INFINITY)?;
    let ninf = i.g.scalar_like(x, f64::NEG_INFINITY)?;
    let p = i.g.compare(CompareOp::Eq, x, inf)?;
    let m = i.g.compare(CompareOp::Eq, x, ninf)?;
    one(match (pos, neg) {
        (true, true) => {
            let t = i.g.scalar(DType::Bool, 1.0)?;
            i.g.where_(p, t, m)?
        }
        (true, false) => p,
        (false, true) => m,
        (false, false) => {
            let f = i.g.scalar(DType::Bool, 0.0)?;
            let dims = i.g.dims(x).to_vec();
            i.g.expand(f, &dims)?
        }
    })
}

fn softsign(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let a = i.g.unary(Unary::Abs, x)?;
    let one_ = i.g.scalar_like(x, 1.0)?;
    let d = i.g.add(a, one_)?;
    one(i.g.div(x, d)?)
}

#[derive(Clone, Copy)]
enum Rounding {
    Floor,
    Ceil,
    HalfEven,
}

/// Magnitude from which every value of `dtype` is an integer (2^23 covers f32, f16 and
/// bf16; 2^52 f64), below which the round trip through i64 truncates exactly.
fn integral_from(dtype: DType) -> f64 {
    if dtype == DType::F64 { 4503599627370496.0 } else { 8388608.0 }
}

/// `trunc(x)` exactly: x through i64 and back where |x| is below `integral_from` (NaN,
/// infinities and larger values are already integral and pass through).
fn trunc(i: &mut Importer, x: NodeId) -> Result<NodeId> {
    let dtype = i.g.dtype(x);
    let a = i.g.unary(Unary::Abs, x)?;
    let limit = i.g.scalar_like(x, integral_from(dtype))?;
    let small = i.g.lt(a, limit)?;
    let as_int = i.g.cast(x, DType::I64)?;
    let back = i.g.cast(as_int, dtype)?;
    i.g.where_(small, back, x)
}

/// Floor, Ceil and Round (half to even) from an exact trunc; `x - trunc(x)` is exact
/// (Sterbenz), so the ties and the adjustments are decided without rounding error.
fn rounding(i: &mut Importer, n: &Node, mode: Rounding) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    if !i.g.dtype(x).is_float() {
        return Err(Error::dtype(format!("{} takes a float operand, got {}", n.op_type(), i.g.describe(x))));
    }
    let t = trunc(i, x)?;
    let one_ = i.g.scalar_like(x, 1.0)?;
    let y = match mode {
        Rounding::Floor => {
            let above = i.g.gt(t, x)?;
            let down = i.g.sub(t, one_)?;
            i.g.where_(above, down, t)?
        }
        Rounding::Ceil => {
            let below = i.g.lt(t, x)?;
            let up = i.g.add(t, one_)?;
            i.g.where_(below, up, t)?
        }
        Rounding::HalfEven => round_half_even_of(i, x, t)?,
    };
    one(y)
}

/// Rounds `x` to the nearest integer, ties to even (`t` is `trunc(x)`).
fn round_half_even_of(i: &mut Importer, x: NodeId, t: NodeId) -> Result<NodeId> {
    let one_ = i.g.scalar_like(x, 1.0)?;
    let zero = i.g.scalar_like(x, 0.0)?;
    let frac = i.g.sub(x, t)?;
    let a = i.g.unary(Unary::Abs, frac)?;
    let half = i.g.scalar_like(x, 0.5)?;
    // t is odd when t - 2 trunc(t / 2) is not 0 (exact: t / 2 only shifts).
    let two = i.g.scalar_like(x, 2.0)?;
    let halved = i.g.div(t, two)?;
    let th = trunc(i, halved)?;
    let even = i.g.mul(th, two)?;
    let rem = i.g.sub(t, even)?;
    let odd = i.g.compare(CompareOp::Ne, rem, zero)?;
    let beyond = i.g.gt(a, half)?;
    let tie = i.g.compare(CompareOp::Eq, a, half)?;
    let tie_odd = i.g.where_(tie, odd, tie)?;
    let away = i.g.where_(beyond, beyond, tie_odd)?;
    let neg = i.g.lt(x, zero)?;
    let m1 = i.g.scalar_like(x, -1.0)?;
    let step = i.g.where_(neg, m1, one_)?;
    let moved = i.g.add(t, step)?;
    i.g.where_(away, moved, t)
}

/// `x` (float) rounded to the nearest integer, ties to even (ONNX Round, QuantizeLinear).
pub fn round_half_even(i: &mut Importer, x: NodeId) -> Result<NodeId> {
    let t = trunc(i, x)?;
    round_half_even_of(i, x, t)
}

/// Mod: `fmod = 1` is C's fmod (the sign of the dividend, `a - trunc(a / b) b`); the
/// default is Python's integer mod (the sign of the divisor).
fn modulo(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (a, b) = (i.input(n, 0)?, i.input(n, 1)?);
    let fmod = n.int("fmod", 0)? != 0;
    let dtype = i.g.dtype(a);
    if dtype.is_float() && !fmod {
        return Err(Error::input("Mod of floats needs fmod = 1"));
    }
    let q = i.g.div(a, b)?;
    let q = if dtype.is_float() { trunc(i, q)? } else { q };
    let qb = i.g.mul(q, b)?;
    let r = i.g.sub(a, qb)?;
    if fmod {
        return one(r);
    }
    // Python: a nonzero remainder takes the divisor's sign.
    let zero = i.g.scalar_like(a, 0.0)?;
    let nonzero = i.g.compare(CompareOp::Ne, r, zero)?;
    let r_neg = i.g.lt(r, zero)?;
    let b_neg = i.g.lt(b, zero)?;
    let differ = i.g.compare(CompareOp::Ne, r_neg, b_neg)?;
    let fix = i.g.where_(nonzero, differ, nonzero)?;
    let shifted = i.g.add(r, b)?;
    one(i.g.where_(fix, shifted, r)?)
}
