//! Elementwise steps: fused regions, and single binary / compare / where / unary / cast
//! ops as one-instruction regions. Each region becomes one generated shader: a thread per
//! output element, one register per instruction, every result rounded to its dtype as
//! the reference semantics (`rlx_ir::ops::elementwise`) and the CPU's region evaluator do.

use super::{Call, Tensor, Word, store_round, strides, u32s};
use rlx_compile::{Region, RegionOp};
use rlx_ir::{BinaryOp, CompareOp, DType, Op, Unary};
use std::fmt::Write;

/// The kernel of a single elementwise op, or `None` for any other op.
pub fn single(op: &Op, ins: &[Tensor], out: &Tensor, int64: bool) -> Option<Call> {
    let loads = ins.iter().enumerate().map(|(k, t)| (RegionOp::Load(k), t.dtype));
    let last = ins.len();
    let body = match op {
        Op::Binary(b) => (RegionOp::Binary(*b, 0, 1), out.dtype),
        Op::Compare(c) => (RegionOp::Compare(*c, 0, 1), DType::Bool),
        Op::Where => (RegionOp::Where(0, 1, 2), out.dtype),
        Op::Unary(u) => (RegionOp::Unary(*u, 0), out.dtype),
        Op::Cast { to } => (RegionOp::Cast(0), *to),
        _ => return None,
    };
    region(&Region { ops: loads.chain([body]).collect(), result: last }, ins, out, int64)
}

/// The compute type of a register of `dtype`.
fn reg_type(dtype: DType, int64: bool) -> Option<&'static str> {
    Word::compute(dtype, int64).map(Word::wgsl)
}

/// The kernel of a fused region over `ins` (its loads) writing `out`.
pub fn region(region: &Region, ins: &[Tensor], out: &Tensor, int64: bool) -> Option<Call> {
    let out_word = out.compute_word(int64)?;
    let mut operands = Vec::new();
    for t in ins {
        operands.push((operands.len(), t.compute_word(int64)?));
    }
    operands.push((ins.len(), out_word));
    // meta: rank, out dims, then the strides of each broadcast input.
    let rank = out.dims.len();
    let mut meta = vec![rank as u32];
    meta.extend(u32s(out.dims.iter().copied()));
    let mut index = Vec::new();
    for t in ins {
        index.push(if t.dims == out.dims {
            "i".to_string()
        } else if t.numel() == 1 {
            "0u".to_string()
        } else {
            let slot = (meta.len() - 1 - rank) / rank.max(1);
            let own = strides(&t.dims);
            let pad = rank - t.dims.len();
            meta.extend((0..rank).map(|d| if d < pad || t.dims[d - pad] == 1 { 0 } else { own[d - pad] as u32 }));
            format!("bidx(i, {slot}u)")
        });
    }
    let mut body = String::from(
        "fn bidx(i: u32, slot: u32) -> u32 {\n    let r = mt[K];\n    var rem = i;\n    var off = 0u;\n    \
         for (var d = 0u; d < r; d++) {\n        let ax = r - 1u - d;\n        let n = mt[K + 1u + ax];\n        \
         off += (rem % n) * mt[K + 1u + r * (slot + 1u) + ax];\n        rem = rem / n;\n    }\n    return off;\n}\n\
         fn item(i: u32) {\n",
    );
    let dtypes: Vec<DType> = region.ops.iter().map(|(_, d)| *d).collect();
    for (r, (op, dtype)) in region.ops.iter().enumerate() {
        let ty = reg_type(*dtype, int64)?;
        let expr = match op {
            RegionOp::Load(k) => {
                let t = ins.get(*k)?;
                let raw = format!("t{k}[o{k}({})]", index[*k]);
                // A load converts the stored word to the register's type (a region may
                // read an input of another dtype than the instruction says only via casts).
                if reg_type(t.dtype, int64)? == ty { raw } else { format!("{ty}({raw})") }
            }
            RegionOp::Unary(u, a) => unary(*u, &format!("r{a}"), ty)?,
            RegionOp::Binary(b, a, c) => binary(*b, &format!("r{a}"), &format!("r{c}"), ty)?,
            // `!(a == b)`: a driver may lower `!=` to an ordered compare, false for NaN.
            RegionOp::Compare(CompareOp::Ne, a, b) => format!("select({ty}(1), {ty}(0), r{a} == r{b})"),
            RegionOp::Compare(c, a, b) => format!("select({ty}(0), {ty}(1), r{a} {} r{b})", compare(*c)),
            RegionOp::Where(c, a, b) => {
                let cty = reg_type(dtypes[*c], int64)?;
                format!("select(r{b}, r{a}, r{c} != {cty}(0))")
            }
            RegionOp::Cast(a) => cast(&format!("r{a}"), dtypes[*a], *dtype, int64)?,
        };
        let rounded = if matches!(op, RegionOp::Load(_)) { expr } else { store_round(*dtype, &expr) };
        let _ = writeln!(body, "    let r{r}: {ty} = {rounded};");
    }
    let result = region.result;
    let value = if reg_type(dtypes[result], int64)? == out_word.wgsl() {
        format!("r{result}")
    } else {
        format!("{}(r{result})", out_word.wgsl())
    };
    let _ = writeln!(body, "    t{n}[o{n}(i)] = {value};\n}}", n = ins.len());
    Some(Call::items(operands, body, meta, out.numel()))
}

fn compare(c: CompareOp) -> &'static str {
    match c {
        CompareOp::Eq => "==",
        CompareOp::Ne => "!=",
        CompareOp::Lt => "<",
        CompareOp::Le => "<=",
        CompareOp::Gt => ">",
        CompareOp::Ge => ">=",
    }
}

fn binary(b: BinaryOp, x: &str, y: &str, ty: &str) -> Option<String> {
    Some(match (b, ty) {
        (BinaryOp::Add, _) => format!("{x} + {y}"),
        (BinaryOp::Sub, _) => format!("{x} - {y}"),
        (BinaryOp::Mul, _) => format!("{x} * {y}"),
        (BinaryOp::Div, "f32") => format!("{x} / {y}"),
        (BinaryOp::Div, "i32") => format!("idiv({x}, {y})"),
        (BinaryOp::Div, _) => format!("select({x} / {y}, {ty}(0), {y} == {ty}(0))"),
        (BinaryOp::Max, "f32") => format!("fmax({x}, {y})"),
        (BinaryOp::Min, "f32") => format!("fmin({x}, {y})"),
        (BinaryOp::Max, _) => format!("max({x}, {y})"),
        (BinaryOp::Min, _) => format!("min({x}, {y})"),
        (BinaryOp::Pow, "f32") => format!("powf_({x}, {y})"),
        (BinaryOp::Pow, "i32") => format!("ipow({x}, {y})"),
        (BinaryOp::Pow, _) => return None,
    })
}

fn unary(u: Unary, x: &str, ty: &str) -> Option<String> {
    if ty != "f32" {
        return match u {
            Unary::Neg => Some(format!("-{x}")),
            Unary::Abs => Some(format!("abs({x})")),
            Unary::Relu => Some(format!("max({x}, {ty}(0))")),
            _ => None,
        };
    }
    Some(match u {
        Unary::Neg => format!("-{x}"),
        Unary::Abs => format!("abs({x})"),
        Unary::Exp => format!("exp_({x})"),
        Unary::Log => format!("log_({x})"),
        Unary::Sqrt => format!("select(sqrt({x}), {x}, is_nan({x}))"),
        Unary::Rsqrt => format!("select(1.0 / sqrt({x}), {x}, is_nan({x}))"),
        Unary::Recip => format!("1.0 / {x}"),
        Unary::Relu => format!("select(0.0, {x}, {x} > 0.0 || is_nan({x}))"),
        Unary::Gelu => format!("gated({x}, phi({x}))"),
        Unary::GeluTanh => {
            format!("gated({x}, 0.5 * (1.0 + tanh_(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x}))))")
        }
        Unary::Silu => format!("gated({x}, sigmoid_({x}))"),
        Unary::Sigmoid => format!("sigmoid_({x})"),
        Unary::Tanh => format!("tanh_({x})"),
        Unary::Softplus => format!("softplus_({x})"),
        // Builtins may map NaN to a number (lavapipe's atan(NaN) is 0).
        Unary::Sin => format!("select(sin({x}), {x}, is_nan({x}))"),
        Unary::Cos => format!("select(cos({x}), {x}, is_nan({x}))"),
        Unary::Tan => format!("select(tan({x}), {x}, is_nan({x}))"),
        Unary::Atan => format!("atan_({x})"),
        Unary::Erf => format!("erf_({x})"),
        Unary::Ln1p => format!("ln1p_({x})"),
        Unary::Mish => format!("gated({x}, tanh_(softplus_({x})))"),
        Unary::LogSigmoid => format!("-softplus_(-{x})"),
    })
}

/// `x` (a register of `from`) converted to `to`'s register type by the cast semantics;
/// rounding to `to` itself is the store's.
fn cast(x: &str, from: DType, to: DType, int64: bool) -> Option<String> {
    let (src, dst) = (reg_type(from, int64)?, reg_type(to, int64)?);
    Some(match (src, dst) {
        // Bits, not `!=`: NaN is true, and a flushed subnormal is still nonzero.
        ("f32", _) if to == DType::Bool => format!("select(0, 1, (bitcast<u32>({x}) & 0x7fffffffu) != 0u)"),
        (_, _) if to == DType::Bool => format!("select(0, 1, {x} != {src}(0))"),
        ("f32", "f32") => x.to_string(),
        ("f32", "i32") => match to {
            DType::I8 => format!("select(i32(trunc(clamp({x}, -128.0, 127.0))), 0, is_nan({x}))"),
            DType::U8 => format!("select(i32(trunc(clamp({x}, 0.0, 255.0))), 0, is_nan({x}))"),
            _ => format!("f2i32({x})"),
        },
        ("i32", "f32") => format!("i2f({x}, {})", to.is_half()),
        // f32 <-> i64 and i64 -> narrower floats round in ways WGSL leaves open: host.
        ("f32", _) | ("i64", "f32") => return None,
        (_, _) => format!("{dst}({x})"),
    })
}
