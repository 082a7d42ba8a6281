//! Conv2d (groups, stride, dilation, asymmetric padding), max / average pooling, and
//! their gradients, NCHW: one thread per output element, f32 accumulation. A gradient
//! with respect to an input position gathers from the output positions whose windows
//! cover it (no float atomics), so each element is one thread's sum.

use super::{Call, Tensor, Word, nested_trips, store_round, u32s, within_loop_limit};
use rlx_ir::{Conv2dParams, PoolParams};

/// meta: n c h w (the input) | o oh ow (the output) | kh kw | stride y x | dilation y x |
/// pad top left.
fn geometry(
    x: &[usize],
    out: &[usize],
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    pad: [usize; 4],
) -> Vec<u32> {
    let [kh, kw] = kernel;
    u32s([
        x[0],
        x[1],
        x[2],
        x[3],
        out[1],
        out[2],
        out[3],
        kh,
        kw,
        stride[0],
        stride[1],
        dilation[0],
        dilation[1],
        pad[0],
        pad[1],
    ])
}

fn all_f32(ts: &[&Tensor]) -> Option<()> {
    ts.iter().all(|t| t.compute_word(false) == Some(Word::F32)).then_some(())
}

/// The geometry's sizes as named values (every kernel body here starts with them).
const SIZES: &str = "    let n = mt[K];
    let c = mt[K + 1u];
    let h = mt[K + 2u];
    let w = mt[K + 3u];
    let o = mt[K + 4u];
    let oh = mt[K + 5u];
    let ow = mt[K + 6u];
    let kh = mt[K + 7u];
    let kw = mt[K + 8u];
";

/// Element `i` of an input-shaped tensor as `(b, ch, iy, ix)`.
const INPUT_INDEX: &str = "    let ix = i32(i % w);
    let iy = i32((i / w) % h);
    let ch = (i / (w * h)) % c;
    let b = i / (w * h * c);
";

/// Element `i` of an output-shaped tensor as `(b, f, y, x)`.
const OUTPUT_INDEX: &str = "    let x = i % ow;
    let y = (i / ow) % oh;
    let f = (i / (ow * oh)) % o;
    let b = i / (ow * oh * o);
";

/// The output position along one axis whose tap `k` reads input position `at`, if any:
/// `y * stride - pad + k * dilation = at`.
const SOURCE: &str = "fn out_pos(at: i32, k: u32, stride: u32, dil: u32, pad: u32, n: u32) -> i32 {
    let num = at + i32(pad) - i32(k * dil);
    if (num < 0 || num % i32(stride) != 0) { return -1; }
    let y = num / i32(stride);
    return select(-1, y, y < i32(n));
}
";

pub fn conv2d(p: &Conv2dParams, bias: bool, ins: &[Tensor], out: &Tensor) -> Option<Call> {
    all_f32(&ins.iter().chain([out]).collect::<Vec<_>>())?;
    let (kh, kw) = (ins[1].dims[2], ins[1].dims[3]);
    // Each output loops over its group's channels and, inside, the window rows and columns.
    within_loop_limit(nested_trips(&[ins[0].dims[1] / p.groups.max(1), kh, kw]))?;
    let mut meta = geometry(&ins[0].dims, &out.dims, [kh, kw], p.stride, p.dilation, p.padding);
    meta.push(p.groups as u32);
    let init = if bias { "t2[o2(f)]" } else { "0.0" };
    let ob = ins.len();
    let store = store_round(out.dtype, "acc");
    let body = format!(
        r#"fn item(i: u32) {{
{SIZES}{OUTPUT_INDEX}    let cg = c / mt[K + 15u];
    let g = f / (o / mt[K + 15u]);
    var acc = 0.0;
    for (var ci = 0u; ci < cg; ci++) {{
        for (var ky = 0u; ky < kh; ky++) {{
            let iy = i32(y * mt[K + 9u] + ky * mt[K + 11u]) - i32(mt[K + 13u]);
            if (iy < 0 || iy >= i32(h)) {{ continue; }}
            for (var kx = 0u; kx < kw; kx++) {{
                let ix = i32(x * mt[K + 10u] + kx * mt[K + 12u]) - i32(mt[K + 14u]);
                if (ix < 0 || ix >= i32(w)) {{ continue; }}
                let xv = t0[o0(((b * c + g * cg + ci) * h + u32(iy)) * w + u32(ix))];
                acc += xv * t1[o1(((f * cg + ci) * kh + ky) * kw + kx)];
            }}
        }}
    }}
    acc += {init};
    t{ob}[o{ob}(i)] = {store};
}}
"#
    );
    let operands = (0..=ins.len()).map(|k| (k, Word::F32)).collect();
    Some(Call::items(operands, body, meta, out.numel()))
}

/// Max pooling (`avg` None: padding is -inf, NaN propagates) or average pooling
/// (`Some(count_include_pad)`).
pub fn pool(p: &PoolParams, avg: Option<bool>, x: &Tensor, out: &Tensor) -> Option<Call> {
    all_f32(&[x, out])?;
    within_loop_limit(nested_trips(&p.kernel))?;
    let meta = geometry(&x.dims, &out.dims, p.kernel, p.stride, [1, 1], p.padding);
    let (init, step, result) = match avg {
        None => ("-bitcast<f32>(0x7f800000u)", "acc = fmax(acc, v);", "acc".to_string()),
        Some(true) => ("0.0", "acc += v;", "acc / f32(kh * kw)".to_string()),
        Some(false) => ("0.0", "acc += v;", "acc / f32(count)".to_string()),
    };
    let store = store_round(out.dtype, &result);
    let body = format!(
        r#"fn item(i: u32) {{
{SIZES}{OUTPUT_INDEX}    var acc = {init};
    var count = 0u;
    for (var ky = 0u; ky < kh; ky++) {{
        let iy = i32(y * mt[K + 9u] + ky) - i32(mt[K + 13u]);
        if (iy < 0 || iy >= i32(h)) {{ continue; }}
        for (var kx = 0u; kx < kw; kx++) {{
            let ix = i32(x * mt[K + 10u] + kx) - i32(mt[K + 14u]);
            if (ix < 0 || ix >= i32(w)) {{ continue; }}
            let v = t0[o0(((b * c + f) * h + u32(iy)) * w + u32(ix))];
            {step}
            count += 1u;
        }}
    }}
    t1[o1(i)] = {store};
}}
"#
    );
    Some(Call::items(vec![(0, Word::F32), (1, Word::F32)], body, meta, out.numel()))
}

/// `[g, w]` -> dx: every output position and tap that reads input `(iy, ix)`.
pub fn conv2d_grad_input(p: &Conv2dParams, g: &Tensor, w: &Tensor, dx: &Tensor) -> Option<Call> {
    all_f32(&[g, w, dx])?;
    // Each input position loops over its group's output channels and, inside, the window.
    within_loop_limit(nested_trips(&[g.dims[1] / p.groups.max(1), w.dims[2], w.dims[3]]))?;
    let mut meta = geometry(&dx.dims, &g.dims, [w.dims[2], w.dims[3]], p.stride, p.dilation, p.padding);
    meta.push(p.groups as u32);
    let store = store_round(dx.dtype, "acc");
    let body = format!(
        r#"{SOURCE}fn item(i: u32) {{
{SIZES}{INPUT_INDEX}    let groups = mt[K + 15u];
    let cg = c / groups;
    let og = o / groups;
    let grp = ch / cg;
    let ci = ch % cg;
    var acc = 0.0;
    for (var fo = 0u; fo < og; fo++) {{
        let f = grp * og + fo;
        for (var ky = 0u; ky < kh; ky++) {{
            let y = out_pos(iy, ky, mt[K + 9u], mt[K + 11u], mt[K + 13u], oh);
            if (y < 0) {{ continue; }}
            for (var kx = 0u; kx < kw; kx++) {{
                let x = out_pos(ix, kx, mt[K + 10u], mt[K + 12u], mt[K + 14u], ow);
                if (x < 0) {{ continue; }}
                acc += t0[o0(((b * o + f) * oh + u32(y)) * ow + u32(x))] * t1[o1(((f * cg + ci) * kh + ky) * kw + kx)];
            }}
        }}
    }}
    t2[o2(i)] = {store};
}}
"#
    );
    let operands = vec![(0, Word::F32), (1, Word::F32), (2, Word::F32)];
    Some(Call::items(operands, body, meta, dx.numel()))
}

/// `[x, g]` -> dw `[o, c / groups, kh, kw]`: the sum over batch and output positions.
pub fn conv2d_grad_weight(p: &Conv2dParams, x: &Tensor, g: &Tensor, dw: &Tensor) -> Option<Call> {
    all_f32(&[x, g, dw])?;
    // Each weight loops over the batch and, inside, every output row and position.
    within_loop_limit(nested_trips(&[g.dims[0], g.dims[2], g.dims[3]]))?;
    let mut meta = geometry(&x.dims, &g.dims, [dw.dims[2], dw.dims[3]], p.stride, p.dilation, p.padding);
    meta.push(p.groups as u32);
    let store = store_round(dw.dtype, "acc");
    let body = format!(
        r#"fn item(i: u32) {{
{SIZES}    let cg = c / mt[K + 15u];
    let kx = i % kw;
    let ky = (i / kw) % kh;
    let ci = (i / (kw * kh)) % cg;
    let f = i / (kw * kh * cg);
    let ch = (f / (o / mt[K + 15u])) * cg + ci;
    var acc = 0.0;
    for (var b = 0u; b < n; b++) {{
        for (var y = 0u; y < oh; y++) {{
            let iy = i32(y * mt[K + 9u] + ky * mt[K + 11u]) - i32(mt[K + 13u]);
            if (iy < 0 || iy >= i32(h)) {{ continue; }}
            for (var x = 0u; x < ow; x++) {{
                let ix = i32(x * mt[K + 10u] + kx * mt[K + 12u]) - i32(mt[K + 14u]);
                if (ix < 0 || ix >= i32(w)) {{ continue; }}
                acc += t1[o1(((b * o + f) * oh + y) * ow + x)] * t0[o0(((b * c + ch) * h + u32(iy)) * w + u32(ix))];
            }}
        }}
    }}
    t2[o2(i)] = {store};
}}
"#
    );
    let operands = vec![(0, Word::F32), (1, Word::F32), (2, Word::F32)];
    Some(Call::items(operands, body, meta, dw.numel()))
}

/// The first maximum of window `(b, ch, y, x)` of binding 0 (NaN counts as the maximum),
/// as the flat input index; -1 for a window with no in-range position.
const WINDOW_ARGMAX: &str = "fn window_argmax(b: u32, ch: u32, y: u32, x: u32) -> i32 {
    let c = mt[K + 1u];
    let h = mt[K + 2u];
    let w = mt[K + 3u];
    var best = 0.0;
    var at = -1;
    for (var ky = 0u; ky < mt[K + 7u]; ky++) {
        let iy = i32(y * mt[K + 9u] + ky) - i32(mt[K + 13u]);
        if (iy < 0 || iy >= i32(h)) { continue; }
        for (var kx = 0u; kx < mt[K + 8u]; kx++) {
            let ix = i32(x * mt[K + 10u] + kx) - i32(mt[K + 14u]);
            if (ix < 0 || ix >= i32(w)) { continue; }
            let idx = i32(((b * c + ch) * h + u32(iy)) * w + u32(ix));
            let v = t0[o0(u32(idx))];
            if (at < 0 || (is_nan(v) && !is_nan(best)) || (!is_nan(best) && v > best)) { best = v; at = idx; }
        }
    }
    return at;
}
";

/// `[x, g]` -> dx (`select` false): each window's `g` at its first maximum; or
/// `[x, t]` -> pooled (`select` true): each window's `t` at that position.
pub fn max_pool_route(p: &PoolParams, select: bool, x: &Tensor, g: &Tensor, out: &Tensor) -> Option<Call> {
    all_f32(&[x, g, out])?;
    // The window's argmax, and for the gradient once per window covering the position.
    let window = nested_trips(&p.kernel);
    within_loop_limit(if select { window } else { window.saturating_mul(1 + window) })?;
    let pooled = if select { &out.dims } else { &g.dims };
    let meta = geometry(&x.dims, pooled, p.kernel, p.stride, [1, 1], p.padding);
    let body = if select {
        let store = store_round(out.dtype, "v");
        format!(
            r#"{WINDOW_ARGMAX}fn item(i: u32) {{
    let c = mt[K + 1u];
    let oh = mt[K + 5u];
    let ow = mt[K + 6u];
    let at = window_argmax(i / (ow * oh * c), (i / (ow * oh)) % c, (i / ow) % oh, i % ow);
    var v = 0.0;
    if (at >= 0) {{ v = t1[o1(u32(at))]; }}
    t2[o2(i)] = {store};
}}
"#
        )
    } else {
        let store = store_round(out.dtype, "acc");
        format!(
            r#"{SOURCE}{WINDOW_ARGMAX}fn item(i: u32) {{
{SIZES}{INPUT_INDEX}    var acc = 0.0;
    for (var ky = 0u; ky < kh; ky++) {{
        let y = out_pos(iy, ky, mt[K + 9u], 1u, mt[K + 13u], oh);
        if (y < 0) {{ continue; }}
        for (var kx = 0u; kx < kw; kx++) {{
            let x = out_pos(ix, kx, mt[K + 10u], 1u, mt[K + 14u], ow);
            if (x < 0) {{ continue; }}
            if (window_argmax(b, ch, u32(y), u32(x)) == i32(i)) {{
                acc += t1[o1(((b * c + ch) * oh + u32(y)) * ow + u32(x))];
            }}
        }}
    }}
    t2[o2(i)] = {store};
}}
"#
        )
    };
    let operands = vec![(0, Word::F32), (1, Word::F32), (2, Word::F32)];
    Some(Call::items(operands, body, meta, out.numel()))
}

/// `[g]` -> dx: each window's `g / divisor` at every in-range position it covers.
pub fn avg_pool_grad(p: &PoolParams, count_include_pad: bool, g: &Tensor, dx: &Tensor) -> Option<Call> {
    all_f32(&[g, dx])?;
    // The windows covering the position, each counting its in-range taps.
    let window = nested_trips(&p.kernel);
    within_loop_limit(window.saturating_mul(1 + p.kernel[0] + p.kernel[1]))?;
    let meta = geometry(&dx.dims, &g.dims, p.kernel, p.stride, [1, 1], p.padding);
    let divisor = if count_include_pad {
        "f32(kh * kw)"
    } else {
        "f32(in_range(u32(y), kh, mt[K + 9u], mt[K + 13u], h) * in_range(u32(x), kw, mt[K + 10u], mt[K + 14u], w))"
    };
    let store = store_round(dx.dtype, "acc");
    let body = format!(
        r#"{SOURCE}// Taps of output position `y` that land inside the input along one axis.
fn in_range(y: u32, k: u32, stride: u32, pad: u32, n: u32) -> u32 {{
    var count = 0u;
    for (var t = 0u; t < k; t++) {{
        let at = i32(y * stride + t) - i32(pad);
        if (at >= 0 && at < i32(n)) {{ count += 1u; }}
    }}
    return count;
}}
fn item(i: u32) {{
{SIZES}{INPUT_INDEX}    var acc = 0.0;
    for (var ky = 0u; ky < kh; ky++) {{
        let y = out_pos(iy, ky, mt[K + 9u], 1u, mt[K + 13u], oh);
        if (y < 0) {{ continue; }}
        for (var kx = 0u; kx < kw; kx++) {{
            let x = out_pos(ix, kx, mt[K + 10u], 1u, mt[K + 14u], ow);
            if (x < 0) {{ continue; }}
            acc += t0[o0(((b * c + ch) * oh + u32(y)) * ow + u32(x))] / {divisor};
        }}
    }}
    t1[o1(i)] = {store};
}}
"#
    );
    Some(Call::items(vec![(0, Word::F32), (1, Word::F32)], body, meta, dx.numel()))
}
