//! Attention: causal, causal over a length read at run time (with or without a sliding
//! window), additive bias, GQA.
//!
//! One workgroup of 64 threads per query row `(b, h, i)`: the visible keys are taken
//! `CHUNK` at a time, the threads computing a chunk's scores into shared memory, the
//! chunk's maximum and sum combined across the workgroup in a fixed order (online
//! softmax: earlier chunks rescaled by `exp(old max - new max)`), and each thread
//! accumulating up to `OUTS_PER_THREAD` output columns. Each score is computed once.

/// Keys whose scores a pass holds in shared memory.
const CHUNK: usize = 256;
/// Output columns per thread: `dv` up to 256.
const OUTS_PER_THREAD: usize = 4;

use super::{Call, IDX64, Tensor, Word, index_expr, store_round, strides, u32s, within_loop_limit};
use rlx_ir::MaskKind;

pub fn attention(mask: MaskKind, scale: Option<f32>, ins: &[Tensor], out: &Tensor) -> Option<Call> {
    let (q, k, v) = (&ins[0], &ins[1], &ins[2]);
    for t in [q, k, v, out] {
        if t.compute_word(false)? != Word::F32 {
            return None;
        }
    }
    let [b, hq, sq, d] = <[usize; 4]>::try_from(q.dims.as_slice()).ok()?;
    let (hkv, skv, dv) = (k.dims[1], k.dims[2], v.dims[3]);
    let scale = scale.unwrap_or(1.0 / (d as f32).sqrt());
    let mut meta = u32s([b, hq, sq, d, hkv, skv, dv]);
    meta.push(scale.to_bits());
    let mut operands = vec![(0, Word::F32), (1, Word::F32), (2, Word::F32)];
    // The visible keys of query row `qi`, and what a bias adds to a score.
    let (limit, bias, checks) = match mask {
        MaskKind::None => ("skv".to_string(), "", false),
        MaskKind::Causal => ("qi + skv - sq + 1u".to_string(), "", false),
        MaskKind::CausalLen | MaskKind::SlidingLen { .. } => {
            let word = ins[3].index_word()?;
            operands.push((3, word));
            (format!("causal_len({}, qi, sq, skv)", index_expr(word, 3, "0u")), "", true)
        }
        MaskKind::Bias => {
            operands.push((3, Word::F32));
            let bd = &ins[3].dims;
            let own = strides(bd);
            let pad = 4 - bd.len();
            meta.extend((0..4).map(|x| if x < pad || bd[x - pad] == 1 { 0 } else { own[x - pad] as u32 }));
            (
                "skv".to_string(),
                " + t3[o3(bb * mt[K + 8u] + h * mt[K + 9u] + qi * mt[K + 10u] + key * mt[K + 11u])]",
                false,
            )
        }
    };
    let ob = operands.len();
    operands.push((ins.len(), Word::F32));
    if dv > 64 * OUTS_PER_THREAD || b > 65535 || hq > 65535 || sq > 65535 {
        return None;
    }
    // Per pass of CHUNK keys a thread loops: its CHUNK / 64 scores of d products, two
    // 6-level combines, its exponentials, and for each of its dv / 64 output columns the
    // chunk's keys. Measured on lavapipe (dv = 64): d = 64 right at 28,000 keys (110
    // passes) and wrong at 32,768 (128), d = 16 right at 32,768 and wrong at 65,536: about
    // 4 d + 256 + 20 per pass, which this count (548 at d = 64, dv = 64) bounds.
    let per_pass = (CHUNK / 64) * (1 + d) + 12 + CHUNK / 64 + dv.div_ceil(64) * (1 + CHUNK);
    within_loop_limit(skv.div_ceil(CHUNK).saturating_mul(per_pass) + OUTS_PER_THREAD)?;
    let store = store_round(out.dtype, "acc[t] / total");
    let start = match mask.window() {
        Some(w) => format!("n - min(n, {}u)", u32::try_from(w).ok()?),
        None => "0u".to_string(),
    };
    let body = format!(
        r#"{IDX64}fn causal_len(len: i32, qi: u32, sq: u32, skv: u32) -> u32 {{
    if (len < i32(sq) || len > i32(skv)) {{ fail(0u, len); return 0u; }}
    return qi + u32(len) - sq + 1u;
}}
var<workgroup> p: array<f32, {CHUNK}>;
var<workgroup> red: array<f32, 64>;
// The workgroup's maximum (max) or sum (!max) of one value per thread, in a fixed order.
fn combine(li: u32, v: f32, max: bool) -> f32 {{
    red[li] = v;
    workgroupBarrier();
    for (var half = 32u; half > 0u; half = half >> 1u) {{
        if (li < half) {{
            if (max) {{ red[li] = fmax(red[li], red[li + half]); }} else {{ red[li] = red[li] + red[li + half]; }}
        }}
        workgroupBarrier();
    }}
    let r = red[0];
    workgroupBarrier();
    return r;
}}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {{
    let hq = mt[K + 1u];
    let sq = mt[K + 2u];
    let d = mt[K + 3u];
    let hkv = mt[K + 4u];
    let skv = mt[K + 5u];
    let dv = mt[K + 6u];
    let scale = bitcast<f32>(mt[K + 7u]);
    let qi = wg.x;
    let h = wg.y;
    let bb = wg.z;
    let kh = h / (hq / hkv);
    let qo = ((bb * hq + h) * sq + qi) * d;
    let ko = (bb * hkv + kh) * skv * d;
    let vo = (bb * hkv + kh) * skv * dv;
    let n = {limit};
    // A sliding window starts the keys later.
    let n0 = {start};
    var run_max = -bitcast<f32>(0x7f800000u);
    var total = 0.0;
    var acc: array<f32, {OUTS_PER_THREAD}>;
    for (var c0 = n0; c0 < n; c0 += {CHUNK}u) {{
        let cn = min({CHUNK}u, n - c0);
        var local_max = -bitcast<f32>(0x7f800000u);
        for (var kk = li; kk < cn; kk += 64u) {{
            let key = c0 + kk;
            var s = 0.0;
            for (var c = 0u; c < d; c++) {{ s += t0[o0(qo + c)] * t1[o1(ko + key * d + c)]; }}
            s = s * scale{bias};
            p[kk] = s;
            local_max = fmax(local_max, s);
        }}
        let new_max = fmax(run_max, combine(li, local_max, true));
        let alpha = exp_(run_max - new_max);
        var local_sum = 0.0;
        for (var kk = li; kk < cn; kk += 64u) {{
            let e = exp_(p[kk] - new_max);
            p[kk] = e;
            local_sum += e;
        }}
        total = total * alpha + combine(li, local_sum, false);
        for (var t = 0u; t < {OUTS_PER_THREAD}u; t++) {{
            let j = li + 64u * t;
            if (j < dv) {{
                var a = acc[t] * alpha;
                for (var kk = 0u; kk < cn; kk++) {{ a += p[kk] * t2[o2(vo + (c0 + kk) * dv + j)]; }}
                acc[t] = a;
            }}
        }}
        run_max = new_max;
        workgroupBarrier();
    }}
    for (var t = 0u; t < {OUTS_PER_THREAD}u; t++) {{
        let j = li + 64u * t;
        if (j < dv) {{ t{ob}[o{ob}(((bb * hq + h) * sq + qi) * dv + j)] = {store}; }}
    }}
}}
"#
    );
    let call = Call::groups(operands, body, meta, [sq as u32, hq as u32, b as u32]);
    Some(if checks { call.checking() } else { call })
}
