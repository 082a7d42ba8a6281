//! Constant folding: a node whose operands are all constants becomes a constant.
//!
//! The evaluator here is separate from every backend's kernels. It follows the IR's
//! semantics exactly where they are exact — NumPy broadcasting, layout ops, comparisons,
//! casts, integer wrapping, and float add/sub/mul/div/max/min (computed in f64 and rounded
//! once to the node's dtype, which equals the format's own correctly rounded result) —
//! and evaluates transcendentals in f64 before rounding (at least as accurate as any
//! kernel). Matmuls, reductions and the other heavy ops are left to the backend. A folded
//! constant that holds NaN or an infinity its operands did not is reported as a hazard.

use crate::pass::{Pass, PassLog, copy, rebuild};
use rlx_ir::shape::{broadcast_strides, fmt_type, numel, strides};
use rlx_ir::{
    BinaryOp, CompareOp, DType, Graph, HostTensor, NodeId, Op, Result, Unary, i64_to_float_bits, round_to_float_dtype,
};

pub struct ConstFold;

/// Largest result folded, in elements: bigger constants cost more in the graph than the
/// one kernel call they save.
const FOLD_LIMIT: usize = 1 << 16;

impl Pass for ConstFold {
    fn name(&self) -> &'static str {
        "const_fold"
    }

    fn run(&self, graph: &Graph, log: &mut PassLog) -> Result<Graph> {
        let mut folded = 0;
        let g = rebuild(graph, |new, map, id, node| {
            let ins: Vec<NodeId> = node.inputs().iter().map(|i| map[i.index()]).collect();
            let values: Option<Vec<&HostTensor>> = ins
                .iter()
                .map(|&i| match new.node(i).map(|n| n.op()) {
                    Some(Op::Constant { value }) => Some(value),
                    _ => None,
                })
                .collect();
            let foldable = !node.op().is_leaf() && numel(node.dims()) <= FOLD_LIMIT;
            let result = match (values, foldable) {
                (Some(values), true) => evaluate(node.op(), &values, node.dtype(), node.dims()),
                _ => None,
            };
            let Some(value) = result else { return copy(new, map, node) };
            let had_special = ins.iter().any(|&i| match new.node(i).map(|n| n.op()) {
                Some(Op::Constant { value }) => value.to_f64_vec().iter().any(|v| !v.is_finite()),
                _ => false,
            });
            if !had_special && let Some(pos) = value.to_f64_vec().iter().position(|v| !v.is_finite()) {
                let v = value.to_f64_vec()[pos];
                log.hazards.push(format!(
                    "constant folding of {id} ({}, {}) produced {v} at element {pos} from finite operands",
                    node.op().name(),
                    fmt_type(node.dtype(), node.dims())
                ));
            }
            folded += 1;
            new.constant_tensor(value)
        })?;
        if folded > 0 {
            log.notes.push(format!("const_fold: folded {folded} nodes"));
        }
        Ok(g)
    }
}

/// Element values: floats exactly as f64, integers and bools as i64.
enum Vals {
    F(Vec<f64>),
    I(Vec<i64>),
}

fn decode(t: &HostTensor) -> Vals {
    if t.dtype().is_float() { Vals::F(t.to_f64_vec()) } else { Vals::I(t.to_i64_vec()) }
}

fn encode(dtype: DType, dims: &[usize], v: Vals) -> Option<HostTensor> {
    match v {
        Vals::F(f) => HostTensor::from_f64_as(dtype, dims, &f).ok(),
        Vals::I(i) => {
            let bytes: Vec<u8> = match dtype {
                DType::I8 | DType::U8 | DType::Bool => i.iter().map(|&x| x as u8).collect(),
                DType::I32 => i.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect(),
                DType::I64 => i.iter().flat_map(|&x| x.to_le_bytes()).collect(),
                _ => return None,
            };
            HostTensor::from_bytes(dtype, dims, bytes).ok()
        }
    }
}

/// Two's-complement wrap of an exact integer into `dtype`.
fn wrap(v: i128, dtype: DType) -> i64 {
    match dtype {
        DType::I8 => v as i8 as i64,
        DType::I32 => v as i32 as i64,
        DType::U8 => v as u8 as i64,
        DType::Bool => (v != 0) as i64,
        _ => v as i64,
    }
}

/// For each output element, the flat index it reads in an operand of `dims`.
fn gather_index(out: &[usize], dims: &[usize]) -> Vec<usize> {
    let s = broadcast_strides(dims, out);
    (0..numel(out))
        .map(|flat| {
            let mut rest = flat;
            let mut at = 0;
            for axis in (0..out.len()).rev() {
                at += (rest % out[axis]) * s[axis];
                rest /= out[axis];
            }
            at
        })
        .collect()
}

fn pick(v: &Vals, idx: &[usize]) -> Vals {
    match v {
        Vals::F(f) => Vals::F(idx.iter().map(|&i| f[i]).collect()),
        Vals::I(x) => Vals::I(idx.iter().map(|&i| x[i]).collect()),
    }
}

/// The value of one node of `op` over constant operands, with result type `dtype[dims]`
/// (the node's, from its shape rule); `None` for ops this evaluator leaves to kernels.
/// Importers fold shape computations with it (ONNX's Shape -> Gather -> Concat chains).
pub fn evaluate(op: &Op, ins: &[&HostTensor], dtype: DType, dims: &[usize]) -> Option<HostTensor> {
    let bc = |k: usize| pick(&decode(ins[k]), &gather_index(dims, ins[k].dims()));
    let result = match op {
        Op::Binary(b) => match (bc(0), bc(1)) {
            (Vals::F(a), Vals::F(c)) => {
                Vals::F(a.iter().zip(&c).map(|(&x, &y)| round_to_float_dtype(float_binary(*b, x, y), dtype)).collect())
            }
            (Vals::I(a), Vals::I(c)) => Vals::I(a.iter().zip(&c).map(|(&x, &y)| int_binary(*b, x, y, dtype)).collect()),
            _ => return None,
        },
        Op::Compare(c) => {
            let out: Vec<i64> = match (bc(0), bc(1)) {
                (Vals::F(a), Vals::F(b)) => a.iter().zip(&b).map(|(x, y)| compare(*c, x, y) as i64).collect(),
                (Vals::I(a), Vals::I(b)) => a.iter().zip(&b).map(|(x, y)| compare(*c, x, y) as i64).collect(),
                _ => return None,
            };
            Vals::I(out)
        }
        Op::Where => {
            let Vals::I(cond) = bc(0) else { return None };
            match (bc(1), bc(2)) {
                (Vals::F(a), Vals::F(b)) => {
                    Vals::F((0..cond.len()).map(|i| if cond[i] != 0 { a[i] } else { b[i] }).collect())
                }
                (Vals::I(a), Vals::I(b)) => {
                    Vals::I((0..cond.len()).map(|i| if cond[i] != 0 { a[i] } else { b[i] }).collect())
                }
                _ => return None,
            }
        }
        Op::Unary(u) => match decode(ins[0]) {
            Vals::F(x) => Vals::F(x.iter().map(|&v| round_to_float_dtype(float_unary(*u, v), dtype)).collect()),
            Vals::I(x) => Vals::I(
                x.iter()
                    .map(|&v| match u {
                        Unary::Neg => wrap(-(v as i128), dtype),
                        Unary::Abs => wrap((v as i128).abs(), dtype),
                        _ => v.max(0),
                    })
                    .collect(),
            ),
        },
        Op::Cast { to } => cast(decode(ins[0]), *to),
        Op::Reshape { .. } => decode(ins[0]),
        Op::Expand { .. } => bc(0),
        Op::Transpose { perm } => {
            let src = ins[0].dims();
            let s = strides(src);
            let idx: Vec<usize> = (0..numel(dims))
                .map(|flat| {
                    let (mut rest, mut at) = (flat, 0);
                    for axis in (0..dims.len()).rev() {
                        at += (rest % dims[axis]) * s[perm[axis]];
                        rest /= dims[axis];
                    }
                    at
                })
                .collect();
            pick(&decode(ins[0]), &idx)
        }
        Op::Narrow { axis, start, .. } => {
            let src = ins[0].dims();
            let s = strides(src);
            let idx: Vec<usize> = (0..numel(dims))
                .map(|flat| {
                    let (mut rest, mut at) = (flat, start * s[*axis]);
                    for a in (0..dims.len()).rev() {
                        at += (rest % dims[a]) * s[a];
                        rest /= dims[a];
                    }
                    at
                })
                .collect();
            pick(&decode(ins[0]), &idx)
        }
        Op::Concat { axis } => {
            let outer = numel(&dims[..*axis]);
            let parts: Vec<Vals> = ins.iter().map(|t| decode(t)).collect();
            let chunk = |t: &HostTensor| numel(&t.dims()[*axis..]);
            match &parts[0] {
                Vals::F(_) => {
                    let mut out = Vec::with_capacity(numel(dims));
                    for o in 0..outer {
                        for (t, p) in ins.iter().zip(&parts) {
                            let (Vals::F(v), c) = (p, chunk(t)) else { return None };
                            out.extend_from_slice(&v[o * c..(o + 1) * c]);
                        }
                    }
                    Vals::F(out)
                }
                Vals::I(_) => {
                    let mut out = Vec::with_capacity(numel(dims));
                    for o in 0..outer {
                        for (t, p) in ins.iter().zip(&parts) {
                            let (Vals::I(v), c) = (p, chunk(t)) else { return None };
                            out.extend_from_slice(&v[o * c..(o + 1) * c]);
                        }
                    }
                    Vals::I(out)
                }
            }
        }
        Op::Gather => {
            let Vals::I(idx) = decode(ins[1]) else { return None };
            let rows = *ins[0].dims().first()?;
            let row = numel(&ins[0].dims()[1..]);
            let mut at = Vec::with_capacity(idx.len() * row);
            for &i in &idx {
                // An index out of range is the kernel's run-time error to report.
                let i = usize::try_from(i).ok().filter(|&i| i < rows)?;
                at.extend(i * row..(i + 1) * row);
            }
            pick(&decode(ins[0]), &at)
        }
        _ => return None,
    };
    encode(dtype, dims, result)
}

fn float_binary(op: BinaryOp, a: f64, b: f64) -> f64 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Max if a.is_nan() || b.is_nan() => f64::NAN,
        BinaryOp::Max => a.max(b),
        BinaryOp::Min if a.is_nan() || b.is_nan() => f64::NAN,
        BinaryOp::Min => a.min(b),
        BinaryOp::Pow => a.powf(b),
    }
}

fn int_binary(op: BinaryOp, a: i64, b: i64, dtype: DType) -> i64 {
    let (x, y) = (a as i128, b as i128);
    match op {
        BinaryOp::Add => wrap(x + y, dtype),
        BinaryOp::Sub => wrap(x - y, dtype),
        BinaryOp::Mul => wrap(x * y, dtype),
        BinaryOp::Div if y == 0 => 0,
        BinaryOp::Div => wrap(x / y, dtype),
        BinaryOp::Max => a.max(b),
        BinaryOp::Min => a.min(b),
        BinaryOp::Pow if y < 0 => match x {
            1 => 1,
            -1 if y % 2 == 0 => 1,
            -1 => wrap(-1, dtype),
            _ => 0,
        },
        BinaryOp::Pow => {
            let (mut acc, mut base, mut e) = (1i128, x, y as u128);
            while e > 0 {
                if e & 1 == 1 {
                    acc = wrap(acc * base, dtype) as i128;
                }
                base = wrap(base * base, dtype) as i128;
                e >>= 1;
            }
            acc as i64
        }
    }
}

fn compare<T: PartialOrd>(op: CompareOp, a: &T, b: &T) -> bool {
    match op {
        CompareOp::Eq => a == b,
        CompareOp::Ne => a != b,
        CompareOp::Lt => a < b,
        CompareOp::Le => a <= b,
        CompareOp::Gt => a > b,
        CompareOp::Ge => a >= b,
    }
}

fn float_unary(u: Unary, x: f64) -> f64 {
    let softplus = |x: f64| if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() };
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    // x * gate with the limit 0 at x = -inf, as the kernels define it.
    let gated = |x: f64, gate: f64| if x == f64::NEG_INFINITY { 0.0 } else { x * gate };
    match u {
        Unary::Neg => -x,
        Unary::Abs => x.abs(),
        Unary::Exp => x.exp(),
        Unary::Log => x.ln(),
        Unary::Sqrt => x.sqrt(),
        Unary::Rsqrt => 1.0 / x.sqrt(),
        Unary::Recip => 1.0 / x,
        Unary::Relu if x.is_nan() => x,
        Unary::Relu => x.max(0.0),
        Unary::Gelu => gated(x, 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)),
        Unary::GeluTanh => gated(x, sigmoid((8.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x))),
        Unary::Silu => gated(x, sigmoid(x)),
        Unary::Sigmoid => sigmoid(x),
        Unary::Tanh => x.tanh(),
        Unary::Softplus => softplus(x),
        Unary::Sin => x.sin(),
        Unary::Cos => x.cos(),
        Unary::Tan => x.tan(),
        Unary::Atan => x.atan(),
        Unary::Erf => libm::erf(x),
        Unary::Ln1p => x.ln_1p(),
        Unary::Mish => gated(x, softplus(x).tanh()),
        Unary::LogSigmoid => -softplus(-x),
    }
}

fn cast(v: Vals, to: DType) -> Vals {
    match (v, to.is_float()) {
        (Vals::F(f), true) => Vals::F(f.iter().map(|&x| round_to_float_dtype(x, to)).collect()),
        (Vals::I(i), true) => Vals::F(i.iter().map(|&x| i64_to_float_bits(to, x)).collect()),
        (Vals::F(f), false) => Vals::I(
            f.iter()
                .map(|&x| match to {
                    DType::Bool => (x != 0.0) as i64,
                    DType::I8 => x as i8 as i64,
                    DType::I32 => x as i32 as i64,
                    DType::U8 => x as u8 as i64,
                    _ => x as i64,
                })
                .collect(),
        ),
        (Vals::I(i), false) => Vals::I(i.iter().map(|&x| wrap(x as i128, to)).collect()),
    }
}
