//! WGSL kernel generators, one module per op family (named like the IR's family files).
//!
//! A generator gets the step's operand types and returns the dispatches that compute it
//! ([`Call`]s), or `None` when no kernel covers the step (it then runs on the host). Each
//! call names the operands it binds (by position: the step's inputs, then outputs, then
//! temps) and the word type each is read as, a kernel body, its metadata words and its
//! thread count. `program.rs` adds the bindings, the operand offsets and the shared
//! prelude ([`PRELUDE`]), so equal bodies over equal word types share one pipeline.

pub mod attention;
pub mod conv;
pub mod elementwise;
pub mod gather;
pub mod kv_cache;
pub mod layout;
pub mod loss;
pub mod matmul;
pub mod norm;
pub mod quant;
pub mod reduce;
pub mod rope;
pub mod softmax;

use rlx_ir::DType;

/// How a binding's elements are declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Word {
    F32,
    I32,
    U32,
    /// An 8-byte element moved as two words (i64 / f64 copies and indices).
    U32x2,
    I64,
}

impl Word {
    /// The type a kernel computes `dtype` in (f16/bf16 in f32, the small integers and
    /// bool in i32), or `None` when WGSL has none here (f64; i64 without `SHADER_INT64`).
    pub fn compute(dtype: DType, int64: bool) -> Option<Word> {
        match dtype {
            DType::F32 | DType::F16 | DType::BF16 => Some(Word::F32),
            DType::I8 | DType::U8 | DType::I32 | DType::Bool => Some(Word::I32),
            DType::I64 if int64 => Some(Word::I64),
            _ => None,
        }
    }

    pub fn wgsl(self) -> &'static str {
        match self {
            Word::F32 => "f32",
            Word::I32 => "i32",
            Word::U32 => "u32",
            Word::U32x2 => "vec2<u32>",
            Word::I64 => "i64",
        }
    }
    pub fn bytes(self) -> usize {
        match self {
            Word::U32x2 | Word::I64 => 8,
            _ => 4,
        }
    }
}

/// A step operand as stored: its declared type and the width policy's element bytes.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub dtype: DType,
    pub dims: Vec<usize>,
    pub elem_bytes: usize,
}

impl Tensor {
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }
    /// The word a kernel computing in this tensor's type declares it as, or `None` when
    /// no WGSL type holds it here (f64; i64 without `SHADER_INT64`; packed bytes).
    pub fn compute_word(&self, int64: bool) -> Option<Word> {
        Word::compute(self.dtype, int64).filter(|w| w.bytes() == self.elem_bytes)
    }
    /// The word a kernel moving this tensor's elements untouched declares it as.
    pub fn copy_word(&self) -> Option<Word> {
        match self.elem_bytes {
            4 => Some(Word::U32),
            8 => Some(Word::U32x2),
            _ => None,
        }
    }
    /// The word an index operand (integer, any width) is read as.
    pub fn index_word(&self) -> Option<Word> {
        match (self.dtype.is_float(), self.elem_bytes) {
            (false, 4) => Some(Word::I32),
            (false, 8) => Some(Word::U32x2),
            _ => None,
        }
    }
}

/// Row-major strides of `dims`.
pub fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// A signed integer index read from binding `b` at element `e`, as i32; an 8-byte index
/// that does not fit reads as i32::MIN (out of every range).
pub fn index_expr(word: Word, b: usize, e: &str) -> String {
    match word {
        Word::U32x2 => format!("idx64(t{b}[o{b}({e})])"),
        _ => format!("t{b}[o{b}({e})]"),
    }
}

pub const IDX64: &str = "fn idx64(v: vec2<u32>) -> i32 {
    let lo = bitcast<i32>(v.x);
    if ((v.y == 0u && lo >= 0) || (v.y == 0xffffffffu && lo < 0)) { return lo; }
    return -2147483647 - 1;
}
";

/// What the threads of a call are.
#[derive(Clone, Copy, Debug)]
pub enum Threads {
    /// `n` independent items: the body defines `fn item(i: u32)`; 64 per workgroup.
    Items(usize),
    /// Explicit workgroups: the body defines `main` itself.
    Groups([u32; 3]),
}

/// One dispatch of a generated kernel.
#[derive(Clone, Debug)]
pub struct Call {
    /// (operand position, word) per binding `t0, t1, ...`.
    pub operands: Vec<(usize, Word)>,
    /// WGSL after the generated bindings: reads `mt[K + j]` for its metadata word `j`
    /// and `tN[oN(i)]` for element `i` of binding `N`.
    pub body: String,
    pub meta: Vec<u32>,
    pub threads: Threads,
    /// The kernel may call `fail(position, value)`: an index or length out of range,
    /// reported by the run as an error (the first failing thread's position and value).
    pub checks: bool,
    /// Bytes of each program-owned scratch region `j` the call binds as operand
    /// [`scratch(j)`] (a multi-pass reduction's partials). The regions of one step are
    /// laid out once for all its calls, so what one pass writes the next reads.
    pub scratch: Vec<u64>,
}

impl Call {
    /// `n` independent items (the body defines `fn item(i: u32)`).
    pub fn items(operands: Vec<(usize, Word)>, body: String, meta: Vec<u32>, n: usize) -> Call {
        Call { operands, body, meta, threads: Threads::Items(n), checks: false, scratch: Vec::new() }
    }

    /// Explicit workgroups (the body defines `main`).
    pub fn groups(operands: Vec<(usize, Word)>, body: String, meta: Vec<u32>, groups: [u32; 3]) -> Call {
        Call { operands, body, meta, threads: Threads::Groups(groups), checks: false, scratch: Vec::new() }
    }

    /// This call with the error flag bound (its body calls `fail`).
    pub fn checking(self) -> Call {
        Call { checks: true, ..self }
    }

    /// This call with the step's scratch regions of these byte sizes.
    pub fn with_scratch(self, scratch: Vec<u64>) -> Call {
        Call { scratch, ..self }
    }
}

/// Operand positions from here on name scratch regions, not the step's operands.
pub const SCRATCH: usize = 1 << 20;

/// The operand position of scratch region `j`.
pub fn scratch(j: usize) -> usize {
    SCRATCH + j
}

/// The most loop iterations a kernel may run in one invocation, all its loops counted
/// together (nested loops count every inner iteration). Mesa's llvmpipe / lavapipe (the
/// software Vulkan driver CI runs on) ends every loop of an invocation once one counter
/// shared by all of them reaches LP_MAX_TGSI_LOOP_ITERATIONS = 65535 (gallivm,
/// lp_bld_limits.h), silently: a serial sum over 2e7 elements with 3 index-decoding
/// iterations per element stopped at 65535 / 3 = 21845 elements. Generators whose trip
/// count grows with the operands' sizes bound it by this constant (5,535 below the
/// cut-off for the loops a bound does not count: index decoding over the rank, `fail`'s
/// compare-exchange, `ipow`) and return `None` (a host fallback) past it, or split the
/// work over workgroups and passes.
pub const MAX_LOOP_TRIPS: usize = 60_000;

/// `Some` when a kernel whose invocations loop `trips` times in all (counted by the
/// generator from the operands' sizes, every loop counted unless noted) stays within
/// [`MAX_LOOP_TRIPS`]; `None` (the step falls back to the host) past it.
pub fn within_loop_limit(trips: usize) -> Option<()> {
    (trips <= MAX_LOOP_TRIPS).then_some(())
}

/// Trips of loops nested as `counts` (outermost first), each loop's failing exit test
/// counted as one more trip: n (1 + inner) + 1 per level. A 1x1 conv over 20,000 channels
/// was wrong on lavapipe although channels x taps x 3 was 60,000: exits count.
pub fn nested_trips(counts: &[usize]) -> usize {
    counts.iter().rev().fold(0usize, |inner, &n| n.saturating_mul(inner.saturating_add(1)).saturating_add(1))
}

/// Threads of a workgroup kernel ([`tree`] reductions over shared memory).
pub const WG: usize = 256;

/// `total` workgroups as a grid within the 65535 per dimension WebGPU guarantees; the
/// kernel's flat group index is `wg.y * nwg.x + wg.x` (see [`GROUP_INDEX`]) and groups
/// past `total` return at once.
pub fn fold_groups(total: usize) -> [u32; 3] {
    let x = total.clamp(1, 65535);
    [x as u32, total.div_ceil(x) as u32, 1]
}

/// The parameters of a workgroup kernel's `main` over a folded grid.
pub const GROUP_PARAMS: &str = "@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, \
    @builtin(local_invocation_index) li: u32";

/// The flat workgroup index of a folded grid.
pub const GROUP_INDEX: &str = "(wg.y * nwg.x + wg.x)";

/// A workgroup-wide reduction `fn {name}(li: u32, v: {ty}) -> {ty}` over the [`WG`]
/// threads through shared array `red_{ty}` (declared by [`tree_shared`]): a fixed
/// binary tree, the same order on every run, log2(256) = 8 levels. Every thread must call
/// it (it holds barriers), and every thread gets the result.
pub fn tree(name: &str, ty: &str, combine: &str) -> String {
    format!(
        "fn {name}(li: u32, v: {ty}) -> {ty} {{
    red_{ty}[li] = v;
    workgroupBarrier();
    for (var half = {half}u; half > 0u; half = half >> 1u) {{
        if (li < half) {{
            let a = red_{ty}[li];
            let b = red_{ty}[li + half];
            red_{ty}[li] = {combine};
        }}
        workgroupBarrier();
    }}
    let r = red_{ty}[0];
    workgroupBarrier();
    return r;
}}
",
        half = WG / 2
    )
}

/// The shared array [`tree`] reductions over `ty` use.
pub fn tree_shared(ty: &str) -> String {
    format!("var<workgroup> red_{ty}: array<{ty}, {WG}>;\n")
}

pub fn u32s(values: impl IntoIterator<Item = usize>) -> Vec<u32> {
    values.into_iter().map(|v| v as u32).collect()
}

/// The WGSL value a computed result is rounded to on store, for an output of `dtype`
/// holding `v` (f32 for floats, i32 for the small integers and bool).
pub fn store_round(dtype: DType, v: &str) -> String {
    match dtype {
        DType::F16 => format!("rne_f16({v})"),
        DType::BF16 => format!("rne_bf16({v})"),
        DType::I8 => format!("wrap_i8({v})"),
        DType::U8 => format!("({v} & 255)"),
        DType::Bool => format!("select(0, 1, {v} != 0)"),
        _ => v.to_string(),
    }
}

/// Shared helpers every kernel may call: f16/bf16 rounding (round to nearest even, in
/// integer arithmetic: WGSL leaves `pack2x16float`'s rounding to the implementation),
/// integer wrapping, NaN-propagating min/max, and the transcendentals WGSL lacks or
/// leaves loose (erf ported from rlx-cpu's vmath, ln1p, pow with IEEE special cases).
pub const PRELUDE: &str = r#"
fn rne_bf16(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) { return bitcast<f32>((b | 0x00400000u) & 0xffff0000u); }
    return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}
fn rne_f16(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    let sign = b & 0x80000000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) { return bitcast<f32>(sign | 0x7f800000u | ((a | 0x00400000u) & 0x007fe000u)); }
    if (a >= 0x477ff000u) { return bitcast<f32>(sign | 0x7f800000u); }
    if (a >= 0x38800000u) { return bitcast<f32>(sign | ((a + 0xfffu + ((a >> 13u) & 1u)) & 0xffffe000u)); }
    let q = round(bitcast<f32>(a) * 16777216.0) * 5.9604644775390625e-8;
    return bitcast<f32>(sign | bitcast<u32>(q));
}
fn wrap_i8(v: i32) -> i32 { return (v << 24u) >> 24u; }
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn fmax(a: f32, b: f32) -> f32 { if (is_nan(a) || is_nan(b)) { return a + b; } return max(a, b); }
fn fmin(a: f32, b: f32) -> f32 { if (is_nan(a) || is_nan(b)) { return a + b; } return min(a, b); }
fn horner7(x: f32, c0: f32, c1: f32, c2: f32, c3: f32, c4: f32, c5: f32, c6: f32) -> f32 {
    return c0 + x * (c1 + x * (c2 + x * (c3 + x * (c4 + x * (c5 + x * c6)))));
}
fn erfc_tail(a: f32) -> f32 {
    let t = 1.0 / (1.0 + a);
    var p = bitcast<f32>(0xc02c3df8u);
    p = p * t + bitcast<f32>(0x4112c172u);
    p = p * t + bitcast<f32>(0xc14cff85u);
    p = p * t + bitcast<f32>(0x410af93du);
    p = p * t + bitcast<f32>(0xc00765d4u);
    p = p * t + bitcast<f32>(0xbeb4d4b5u);
    p = p * t + bitcast<f32>(0xbea51b32u);
    p = p * t + bitcast<f32>(0x3e91e6e0u);
    p = p * t + bitcast<f32>(0x3f10673du);
    p = p * t + bitcast<f32>(0x3f106edbu);
    let hi = bitcast<f32>(bitcast<u32>(a) & 0xfffff000u);
    let lo = a - hi;
    return exp_hl(-(hi * hi), -(lo * (a + hi))) * (t * p);
}
fn erf_small(a: f32) -> f32 {
    return a + a * horner7(a * a, bitcast<f32>(0x3e0375d4u), bitcast<f32>(0xbec0939fu), bitcast<f32>(0x3de71678u),
        bitcast<f32>(0xbcdbfc2cu), bitcast<f32>(0x3ba9ffc9u), bitcast<f32>(0xba51e4aeu), bitcast<f32>(0x38a476f7u));
}
fn erf_(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let a = min(abs(x), 10.5);
    var r: f32;
    if (a < 1.0) { r = erf_small(a); } else { r = 1.0 - erfc_tail(a); }
    return select(r, -r, x < 0.0);
}
// Phi(x) = erfc(-x / sqrt 2) / 2 without cancellation for negative x.
fn phi(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let a = min(abs(x) * 0.70710678118654752, 10.5);
    var tail: f32;
    if (a < 0.75) { tail = 0.5 - 0.5 * erf_small(a); } else { tail = 0.5 * erfc_tail(a); }
    return select(1.0 - tail, tail, x < 0.0);
}
fn gated(x: f32, g: f32) -> f32 { if (x == -bitcast<f32>(0x7f800000u)) { return 0.0; } return x * g; }
fn ln1p_(x: f32) -> f32 {
    if (x == bitcast<f32>(0x7f800000u)) { return x; }
    let u = 1.0 + x;
    if (u == 1.0) { return x; }
    return log_(u) * (x / (u - 1.0));
}
// e / (1 + e) below zero: keeps the tail (silu(-100) = -3.7e-42, not -0).
fn sigmoid_(x: f32) -> f32 {
    if (x < 0.0) { let e = exp_(x); return e / (1.0 + e); }
    return 1.0 / (1.0 + exp_(-x));
}
// atan to ~1e-7 absolute (rlx-cpu's vmath atan: three argument ranges, degree-4 odd
// polynomial); the builtin is 12 ulp off on lavapipe.
fn atan_(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let a = abs(x);
    let big = a > bitcast<f32>(0x401a827au);
    let mid = a > bitcast<f32>(0x3ed413cdu);
    let num = select(select(a, a - 1.0, mid), -1.0, big);
    let den = select(select(1.0, a + 1.0, mid), a, big);
    let t = num / den;
    let oh = select(select(0.0, bitcast<f32>(0x3f490fdbu), mid), bitcast<f32>(0x3fc90fdbu), big);
    let ol = select(select(0.0, bitcast<f32>(0xb2bbbd2eu), mid), bitcast<f32>(0xb33bbd2eu), big);
    let z = t * t;
    let p = bitcast<f32>(0xbeaaaaa4u) + z * (bitcast<f32>(0x3e4cc892u) + z * (bitcast<f32>(0xbe11d6f7u)
        + z * (bitcast<f32>(0x3dd8c6e5u) + z * bitcast<f32>(0xbd781e28u))));
    let r = oh + (t + (t * (z * p) + ol));
    return select(r, -r, x < 0.0);
}
fn softplus_(x: f32) -> f32 { if (is_nan(x)) { return x; } return max(x, 0.0) + ln1p_(exp_(-abs(x))); }
fn tanh_(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let a = abs(x);
    var t: f32;
    if (a < 0.3) {
        let z = x * x;
        t = a * (1.0 + z * (-0.333333333 + z * (0.133333333 + z * (-0.0539682540 + z * (0.0218694885 + z * (-0.00886323553))))));
    } else {
        let e = exp_(-2.0 * min(a, 20.0));
        t = (1.0 - e) / (1.0 + e);
    }
    return select(t, -t, x < 0.0);
}
// e^x to ~1 ulp (rlx-cpu's vmath exp: Cody-Waite reduction, degree-5 polynomial, the
// 2^k scale applied in two normal steps); builtin exp is 17 ulp off on lavapipe at x = 46.
fn scale2(p: f32, k: i32) -> f32 {
    let k1 = k >> 1u;
    let k2 = k - k1;
    return (p * bitcast<f32>((k1 + 127) << 23u)) * bitcast<f32>((k2 + 127) << 23u);
}
fn exp_poly(r: f32) -> f32 {
    var p = bitcast<f32>(0x3ab428b4u);
    p = p * r + bitcast<f32>(0x3c091dedu);
    p = p * r + bitcast<f32>(0x3d2aadccu);
    p = p * r + bitcast<f32>(0x3e2aaa47u);
    p = p * r + bitcast<f32>(0x3efffffcu);
    p = p * r + 1.0;
    return p * r + 1.0;
}
// e^(hi + lo), |lo| small against hi.
fn exp_hl(hi0: f32, lo: f32) -> f32 {
    if (is_nan(hi0) || is_nan(lo)) { return hi0 + lo; }
    let hi = clamp(hi0, -104.0, 89.0);
    let kf = round((hi + lo) * bitcast<f32>(0x3fb8aa3bu));
    let k = i32(kf);
    let r = (hi - kf * bitcast<f32>(0x3f318000u)) + (lo - kf * bitcast<f32>(0xb95e8083u));
    return scale2(exp_poly(r), k);
}
fn exp_(x: f32) -> f32 { return exp_hl(x, 0.0); }
// Error-free sum and product. Mesa's shader compiler (and others) simplify `(a + b) - a`
// to `b` unless a value hides the identity: `opaque` multiplies by a 1.0 the kernel reads
// from its metadata, which no compiler can fold.
fn opaque(x: f32) -> f32 { return x * bitcast<f32>(mt[K - 1u]); }
fn two_sum(a: f32, b: f32) -> vec2<f32> {
    let s = opaque(a + b);
    let bb = opaque(s - a);
    return vec2<f32>(s, (a - opaque(s - bb)) + (b - bb));
}
fn split_(a: f32) -> vec2<f32> {
    let hi = bitcast<f32>(bitcast<u32>(a) & 0xfffff000u);
    return vec2<f32>(hi, a - hi);
}
fn two_prod(a: f32, b: f32) -> vec2<f32> {
    let p = opaque(a * b);
    let x = split_(a);
    let y = split_(b);
    let e1 = opaque(x.x * y.x - p);
    let e2 = opaque(e1 + x.x * y.y);
    let e3 = opaque(e2 + x.y * y.x);
    return vec2<f32>(p, e3 + x.y * y.y);
}
// ln x of a positive normal or subnormal x as hi + lo (about 0.05 ulp): rlx-cpu's log
// reduction with the last sums kept exact, so pow can multiply it without losing bits.
fn log_hl(x: f32) -> vec2<f32> {
    let sub = x < 1.17549435e-38;
    let xs = select(x, x * 8388608.0, sub);
    let ix = bitcast<i32>(xs) + 0x004afb0d;
    let e = (ix >> 23u) - 127 + select(0, -23, sub);
    let m = bitcast<f32>((ix & 0x007fffff) + 0x3f3504f3);
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let r = z * (bitcast<f32>(0x3f2aaabdu) + z * (bitcast<f32>(0x3eccaf6cu) + z * bitcast<f32>(0x3e98f029u)));
    let h = two_prod(0.5 * f, f);
    let t = s * (h.x + r);
    let d = two_sum(f, -h.x);
    let ef = f32(e);
    let body = two_sum(d.x, (d.y - h.y) + t);
    let whole = two_sum(ef * bitcast<f32>(0x3f318000u), body.x);
    return vec2<f32>(whole.x, whole.y + body.y + ef * bitcast<f32>(0xb95e8083u));
}
fn log_(x: f32) -> f32 {
    if (is_nan(x) || x < 0.0) { return bitcast<f32>(0x7fc00000u); }
    if (x == 0.0) { return -bitcast<f32>(0x7f800000u); }
    if (x == bitcast<f32>(0x7f800000u)) { return x; }
    let l = log_hl(x);
    return l.x + l.y;
}
fn powf_(a: f32, b: f32) -> f32 {
    if (b == 0.0 || a == 1.0) { return 1.0; }
    if (is_nan(a) || is_nan(b)) { return a + b; }
    let inf = bitcast<f32>(0x7f800000u);
    let bint = floor(b) == b;
    let odd = bint && abs(b) < 16777216.0 && (i32(abs(b)) & 1) == 1;
    if (a == 0.0) {
        let m = select(inf, 0.0, b > 0.0);
        return select(m, select(m, -m, bitcast<u32>(a) != 0u), odd);
    }
    if (a < 0.0 && !bint) { return bitcast<f32>(0x7fc00000u); }
    let aa = abs(a);
    if (abs(b) == inf || aa == inf) {
        if (aa == 1.0) { return 1.0; }
        let m = select(0.0, inf, (aa > 1.0) == (b > 0.0));
        return select(m, -m, a < 0.0 && odd);
    }
    let l = log_hl(aa);
    let p = two_prod(b, l.x);
    var m: f32;
    if (abs(p.x) > 110.0) { m = select(0.0, inf, p.x > 0.0); } else { m = exp_hl(p.x, p.y + b * l.y); }
    return select(m, -m, a < 0.0 && odd);
}
fn ipow(a: i32, b: i32) -> i32 {
    if (b < 0) {
        if (a == 1) { return 1; }
        if (a == -1) { return select(1, -1, (b & 1) == 1); }
        return 0;
    }
    var r = 1;
    var base = a;
    var e = b;
    loop {
        if (e == 0) { break; }
        if ((e & 1) == 1) { r = r * base; }
        base = base * base;
        e = e >> 1u;
    }
    return r;
}
fn idiv(a: i32, b: i32) -> i32 { return select(a / b, 0, b == 0); }
// i32 -> f32 rounded to nearest even in integer arithmetic (WGSL leaves the rounding of
// an inexact conversion to the implementation); `odd` rounds to odd instead, so that a
// second rounding to f16 / bf16 is the one correct rounding of the integer.
fn i2f(v: i32, odd: bool) -> f32 {
    let a = select(u32(v), 0u - u32(v), v < 0);
    let bits = 32u - countLeadingZeros(a);
    if (bits <= 24u) { return f32(v); }
    let sh = bits - 24u;
    var q = a >> sh;
    let rest = a - (q << sh);
    let half = 1u << (sh - 1u);
    if (odd) {
        if (rest != 0u) { q = q | 1u; }
    } else if (rest > half || (rest == half && (q & 1u) == 1u)) {
        q += 1u;
    }
    let f = f32(q) * bitcast<f32>((127u + sh) << 23u);
    return select(f, -f, v < 0);
}
fn f2i32(x: f32) -> i32 {
    if (is_nan(x)) { return 0; }
    if (x >= 2147483648.0) { return 2147483647; }
    if (x <= -2147483648.0) { return -2147483647 - 1; }
    return i32(trunc(x));
}
"#;
