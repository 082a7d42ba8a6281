//! Matmul against GGML blocks (Q4_0, Q4_1, Q8_0) and dequantize, through one block
//! decoder per scheme. The weight bytes stay packed in u32 words. The matmul stages activation rows in shared memory, decodes each
//! weight block once for all the rows it serves, and with 8- or 16-bit activations
//! quantizes each staged 32-value block once, as the reference does (scale `max|x| / 127`
//! or `/ 32767`, round half away from zero), taking integer dots scaled per block.

use super::{Call, Tensor, Word, u32s, within_loop_limit};
use rlx_ir::{ActivationQuant, QuantScheme};

/// Activation rows per workgroup, and k values staged in shared memory per pass: each
/// decoded weight block serves `ROWS` rows, and a pass's 8 x 8 (row, block) statistics
/// (sums, activation scales) are one per thread of the 64.
const ROWS: usize = 8;
const CHUNK: usize = 256;

/// Over the weights in binding `tB`: `wword` reads the u32 at any byte offset (two
/// aligned loads when unaligned: Q4_0 and Q8_0 blocks are 18 and 34 bytes); `decode`
/// fills the block's 32 quantized values and returns (scale, min).
fn block_decoder(scheme: QuantScheme, binding: usize) -> Option<String> {
    let (header, quants) = match scheme {
        QuantScheme::Q4_0 => (
            "let d = half_at(o);\n    let mn = 0.0;",
            (2, "i32((w >> (8u * i)) & 15u) - 8", "i32((w >> (8u * i + 4u)) & 15u) - 8"),
        ),
        QuantScheme::Q4_1 => (
            "let d = half_at(o);\n    let mn = half_at(o + 2u);",
            (4, "i32((w >> (8u * i)) & 15u)", "i32((w >> (8u * i + 4u)) & 15u)"),
        ),
        QuantScheme::Q8_0 => ("let d = half_at(o);\n    let mn = 0.0;", (2, "", "")),
        _ => return None,
    };
    let (start, lo, hi) = quants;
    let fill = if scheme == QuantScheme::Q8_0 {
        format!(
            "for (var t = 0u; t < 8u; t++) {{
        let w = wword(o + {start}u + 4u * t);
        for (var i = 0u; i < 4u; i++) {{ (*q)[4u * t + i] = bitcast<i32>(w << (24u - 8u * i)) >> 24u; }}
    }}"
        )
    } else {
        format!(
            "for (var t = 0u; t < 4u; t++) {{
        let w = wword(o + {start}u + 4u * t);
        for (var i = 0u; i < 4u; i++) {{
            (*q)[4u * t + i] = {lo};
            (*q)[4u * t + i + 16u] = {hi};
        }}
    }}"
        )
    };
    Some(format!(
        "fn wword(o: u32) -> u32 {{
    let a = o >> 2u;
    let s = (o & 3u) * 8u;
    let lo = t{binding}[o{binding}(a)];
    if (s == 0u) {{ return lo; }}
    return (lo >> s) | (t{binding}[o{binding}(a + 1u)] << (32u - s));
}}
fn half_at(o: u32) -> f32 {{ return unpack2x16float(wword(o) & 0xffffu).x; }}
fn decode(o: u32, q: ptr<function, array<i32, 32>>) -> vec2<f32> {{
    {header}
    {fill}
    return vec2<f32>(d, mn);
}}
"
    ))
}

/// `x [.., k] @ W^T`, W `[n, row_bytes]` in `scheme`: a workgroup takes 64 output
/// columns of `ROWS` activation rows and walks k in passes of `CHUNK` staged values.
pub fn dequant_matmul(scheme: QuantScheme, activations: ActivationQuant, x: &Tensor, w: &Tensor) -> Option<Call> {
    let decoder = block_decoder(scheme, 1)?;
    if w.elem_bytes != 1 || x.compute_word(false)? != Word::F32 {
        return None;
    }
    let k = *x.dims.last()?;
    let n = w.dims[0];
    let m = x.numel().checked_div(k).unwrap_or(0);
    // Per pass of CHUNK values a thread loops: staging (ROWS * CHUNK / 64 copies, or a
    // 32-value block quantized in two loops of 32), its block's 32-value sum, and per
    // block (CHUNK / 32) its ROWS rows. The 32-value dots and the decoder's fixed loops
    // are unrolled: on lavapipe a Q8_0 matmul of 2 rows came out right at k = 131,072
    // (512 passes) and wrong at 262,144, at most 128 counted per pass where counting
    // the dots would make it 600. So 201 here: k up to 76,288 runs on the GPU.
    let per_pass = ROWS * CHUNK / 64 + 2 * 32 + 32 + (CHUNK / 32) * (1 + ROWS) + 1;
    within_loop_limit(k.div_ceil(CHUNK).saturating_mul(per_pass))?;
    let meta = u32s([k, n, w.dims[1], m, scheme.block_bytes()]);
    let staged = ROWS * CHUNK;
    // Each pass, thread `li` summarizes (row li / 8, block li % 8). Float: the pass's x
    // staged in shared memory, and each block's sum (for Q4_1's min). Quantized: the block
    // quantized straight from memory (shared memory holds only the integer values as i32,
    // scales and sums: 8.5 KiB, inside WebGPU's 16 KiB floor).
    let (shared, stage, dot) = if activations != ActivationQuant::F32 {
        (
            format!("var<workgroup> qs: array<i32, {staged}>;\nvar<workgroup> scale: array<f32, 64>;\n"),
            "let valid = li / 8u < rows && li % 8u < nb;
            let src = (r0 + li / 8u) * k + k0 + (li % 8u) * 32u;
            var amax = 0.0;
            for (var j = 0u; j < 32u; j++) {
                var v = 0.0;
                if (valid) { v = t0[o0(src + j)]; }
                if (abs(v) > amax || is_nan(v)) { amax = abs(v); }
            }
            let dx = amax / LEVELS;
            let inv = select(0.0, 1.0 / dx, dx != 0.0);
            var qsum = 0;
            for (var j = 0u; j < 32u; j++) {
                var v = 0.0;
                if (valid) { v = t0[o0(src + j)] * inv; }
                var rounded = trunc(v);
                if (abs(v - rounded) >= 0.5) { rounded += sign(v); }
                qs[base + j] = i32(rounded);
                qsum += i32(rounded);
            }
            scale[li] = dx;
            sums[li] = dx * f32(qsum);",
            "var dot = 0;
                    for (var j = 0u; j < 32u; j++) { dot += qs[at + j] * q[j]; }
                    acc[r] += scale[r * 8u + b] * dm.x * f32(dot) + dm.y * sums[r * 8u + b];",
        )
    } else {
        (
            format!("var<workgroup> xs: array<f32, {staged}>;\n"),
            "for (var e = li; e < STAGEDu; e += 64u) {
                let r = e / CHUNKu;
                let c = e % CHUNKu;
                var v = 0.0;
                if (r < rows && k0 + c < k) { v = t0[o0((r0 + r) * k + k0 + c)]; }
                xs[e] = v;
            }
            workgroupBarrier();
            var s = 0.0;
            for (var j = 0u; j < 32u; j++) { s += xs[base + j]; }
            sums[li] = s;",
            "var dot = 0.0;
                    for (var j = 0u; j < 32u; j++) { dot += xs[at + j] * f32(q[j]); }
                    acc[r] += dm.x * dot + dm.y * sums[r * 8u + b];",
        )
    };
    let levels = format!("{:.1}", activations.levels().unwrap_or(1.0));
    let stage = stage
        .replace("STAGEDu", &format!("{staged}u"))
        .replace("CHUNKu", &format!("{CHUNK}u"))
        .replace("LEVELS", &levels);
    let body = format!(
        r#"{decoder}{shared}var<workgroup> sums: array<f32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {{
    let k = mt[K];
    let n = mt[K + 1u];
    let row_bytes = mt[K + 2u];
    let m = mt[K + 3u];
    let bb = mt[K + 4u];
    let col = wg.x * 64u + li;
    let r0 = wg.y * {ROWS}u;
    let rows = min({ROWS}u, m - r0);
    var acc: array<f32, {ROWS}>;
    var q: array<i32, 32>;
    for (var k0 = 0u; k0 < k; k0 += {CHUNK}u) {{
        let nb = min({CHUNK}u, k - k0) / 32u;
        let base = (li / 8u) * {CHUNK}u + (li % 8u) * 32u;
        {stage}
        workgroupBarrier();
        if (col < n) {{
            for (var b = 0u; b < nb; b++) {{
                let dm = decode(col * row_bytes + (k0 / 32u + b) * bb, &q);
                for (var r = 0u; r < rows; r++) {{
                    let at = r * {CHUNK}u + b * 32u;
                    {dot}
                }}
            }}
        }}
        workgroupBarrier();
    }}
    if (col < n) {{
        for (var r = 0u; r < rows; r++) {{ t2[o2((r0 + r) * n + col)] = acc[r]; }}
    }}
}}
"#
    );
    Some(Call::groups(
        vec![(0, Word::F32), (1, Word::U32), (2, Word::F32)],
        body,
        meta,
        [n.div_ceil(64) as u32, m.div_ceil(ROWS) as u32, 1],
    ))
}

/// Rows of `w` decoded to f32 `[n, k]`: a thread per block writes its 32 values.
pub fn dequantize(scheme: QuantScheme, w: &Tensor, out: &Tensor) -> Option<Call> {
    let decoder = block_decoder(scheme, 0)?;
    if w.elem_bytes != 1 {
        return None;
    }
    let blocks_per_row = out.dims[1] / 32;
    let meta = u32s([blocks_per_row, w.dims[1], scheme.block_bytes()]);
    let body = format!(
        r#"{decoder}fn item(i: u32) {{
    var q: array<i32, 32>;
    let dm = decode((i / mt[K]) * mt[K + 1u] + (i % mt[K]) * mt[K + 2u], &q);
    for (var j = 0u; j < 32u; j++) {{ t1[o1(i * 32u + j)] = dm.x * f32(q[j]) + dm.y; }}
}}
"#
    );
    Some(Call::items(vec![(0, Word::U32), (1, Word::F32)], body, meta, out.numel() / 32))
}
