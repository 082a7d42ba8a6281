//! Convolution, pooling and resizing (NCHW): Conv, ConvTranspose, MaxPool, AveragePool,
//! LpPool, GlobalAveragePool, GlobalMaxPool, Resize, Upsample.
//!
//! 1-D convolutions and pools run through the IR's 2-D ops with a unit height axis.
//! ConvTranspose is the transpose of the convolution it undoes, `conv2d_grad_input`.
//! Pools the IR's kernels cannot express (3-D, dilations, padding as wide as the window)
//! run as their definition: the input padded explicitly, one strided gather per window
//! tap, the taps combined elementwise. Resize is separable: each resized axis is a gather
//! of constant source positions weighted by constant coefficients, both tables computed
//! at import in f64 by the rules of ONNX's reference implementation.

use super::layout::take;
use super::{OpDef, axis, def, one, sizes};
use crate::import::{Importer, Node};
use rlx_ir::ops::conv::{Conv2dParams, PoolParams};
use rlx_ir::{DType, Error, HostTensor, NodeId, ReduceOp, Result, Unary};

pub const OPS: &[OpDef] = &[
    def("Conv", 1, conv),
    def("ConvTranspose", 1, conv_transpose),
    def("MaxPool", 1, |i, n| pool(i, n, Pool::Max)),
    def("AveragePool", 1, avg_pool),
    def("LpPool", 1, lp_pool),
    def("LpPool", 2, lp_pool),
    def("GlobalAveragePool", 1, |i, n| global_pool(i, n, ReduceOp::Mean)),
    def("GlobalMaxPool", 1, |i, n| global_pool(i, n, ReduceOp::Max)),
    def("Upsample", 7, upsample),
    def("Upsample", 9, upsample),
    def("Resize", 10, resize),
    def("Resize", 11, resize),
    def("Resize", 13, resize),
    def("Resize", 18, resize),
    def("Resize", 19, resize),
];

/// Window geometry along the spatial axes of a conv or pool node.
#[derive(Clone)]
struct Window {
    kernel: Vec<usize>,
    stride: Vec<usize>,
    dilation: Vec<usize>,
    /// Padding before and after each axis, auto_pad resolved.
    pads: Vec<[usize; 2]>,
}

impl Window {
    /// Extent of the dilated window along spatial axis `a`.
    fn span(&self, a: usize) -> usize {
        self.dilation[a] * (self.kernel[a] - 1) + 1
    }

    /// The 2-D geometry of a 1-D one: a unit height axis in front.
    fn planar(&self) -> Window {
        if self.kernel.len() != 1 {
            return self.clone();
        }
        let front = |v: &[usize], unit: usize| [&[unit][..], v].concat();
        Window {
            kernel: front(&self.kernel, 1),
            stride: front(&self.stride, 1),
            dilation: front(&self.dilation, 1),
            pads: [&[[0, 0]][..], &self.pads].concat(),
        }
    }

    fn conv_params(&self, groups: usize) -> Conv2dParams {
        let w = self.planar();
        Conv2dParams {
            stride: [w.stride[0], w.stride[1]],
            padding: [w.pads[0][0], w.pads[1][0], w.pads[0][1], w.pads[1][1]],
            dilation: [w.dilation[0], w.dilation[1]],
            groups,
        }
    }

    fn pool_params(&self) -> PoolParams {
        let w = self.planar();
        PoolParams {
            kernel: [w.kernel[0], w.kernel[1]],
            stride: [w.stride[0], w.stride[1]],
            padding: [w.pads[0][0], w.pads[1][0], w.pads[0][1], w.pads[1][1]],
        }
    }
}

/// A per-spatial-axis attribute of values at least `min` (1 for strides, dilations and
/// kernel_shape; 0 for output_padding).
fn spatial_ints(n: &Node, name: &str, sp: usize, min: i64) -> Result<Option<Vec<usize>>> {
    let Some(v) = n.ints(name)? else { return Ok(None) };
    if v.len() != sp || v.iter().any(|&x| x < min) {
        return Err(Error::shape(format!("{name} {v:?} needs {sp} values >= {min}, one per spatial axis")));
    }
    Ok(Some(sizes(&v, name)?))
}

/// The number of spatial axes of `x` ([n, c, spatial...]), which `what` supports up to `max`.
fn spatial_rank(i: &Importer, x: NodeId, max: usize, what: &str) -> Result<usize> {
    let r = i.g.dims(x).len();
    if r < 3 {
        return Err(Error::shape(format!("needs [n, c, spatial...], got {}", i.g.describe(x))));
    }
    if r - 2 > max {
        return Err(Error::unsupported(format!("{}-D {what} (input {})", r - 2, i.g.describe(x))));
    }
    Ok(r - 2)
}

/// Strides, dilations and pads of `n` over `input` spatial dims with window `kernel`:
/// auto_pad SAME_* pads so that `out = ceil(in / stride)`, the odd unit after (UPPER) or
/// before (LOWER); VALID pads nothing; NOTSET reads `pads`.
fn window(n: &Node, input: &[usize], kernel: Vec<usize>) -> Result<Window> {
    let sp = input.len();
    let stride = spatial_ints(n, "strides", sp, 1)?.unwrap_or_else(|| vec![1; sp]);
    let dilation = spatial_ints(n, "dilations", sp, 1)?.unwrap_or_else(|| vec![1; sp]);
    let mut w = Window { kernel, stride, dilation, pads: vec![[0, 0]; sp] };
    match n.string("auto_pad", "NOTSET")?.as_str() {
        "NOTSET" => {
            if let Some(p) = n.ints("pads")? {
                if p.len() != 2 * sp {
                    return Err(Error::shape(format!("pads {p:?} need 2 values per spatial axis ({sp})")));
                }
                let p = sizes(&p, "pads")?;
                w.pads = (0..sp).map(|a| [p[a], p[a + sp]]).collect();
            }
        }
        "VALID" => {}
        mode @ ("SAME_UPPER" | "SAME_LOWER") => {
            for (a, &len) in input.iter().enumerate() {
                let out = len.div_ceil(w.stride[a]);
                let total = ((out.max(1) - 1) * w.stride[a] + w.span(a)).saturating_sub(len);
                let (small, big) = (total / 2, total - total / 2);
                w.pads[a] = if mode == "SAME_UPPER" { [small, big] } else { [big, small] };
            }
        }
        other => return Err(Error::unsupported(format!("auto_pad '{other}'"))),
    }
    Ok(w)
}

/// `kernel_shape`, when given, must match the weight's spatial dims.
fn check_kernel_shape(n: &Node, kernel: &[usize]) -> Result<()> {
    if kernel.contains(&0) {
        return Err(Error::shape(format!("the weight's spatial dims {kernel:?} hold a 0")));
    }
    match spatial_ints(n, "kernel_shape", kernel.len(), 1)? {
        Some(k) if k != kernel => {
            Err(Error::shape(format!("kernel_shape {k:?} differs from the weight's spatial dims {kernel:?}")))
        }
        _ => Ok(()),
    }
}

fn group(n: &Node) -> Result<usize> {
    let g = n.int("group", 1)?;
    usize::try_from(g).ok().filter(|&g| g >= 1).ok_or_else(|| Error::shape(format!("group {g} must be >= 1")))
}

/// `x` with a unit axis inserted at 2 (1-D to 2-D), or `x` when it is already 4-d.
fn planar(i: &mut Importer, x: NodeId) -> Result<NodeId> {
    let d = i.g.dims(x).to_vec();
    if d.len() != 3 {
        return Ok(x);
    }
    i.g.reshape(x, &[d[0], d[1], 1, d[2]])
}

/// The inverse of `planar` for a result whose input had `sp` spatial axes.
fn unplanar(i: &mut Importer, y: NodeId, sp: usize) -> Result<NodeId> {
    if sp != 1 {
        return Ok(y);
    }
    let d = i.g.dims(y).to_vec();
    i.g.reshape(y, &[d[0], d[1], d[3]])
}

/// `x`'s unpadded source and its padding per spatial axis when `x` is a zero padding of
/// another value on spatial axes only (a Pad before a Conv, seen through transposes).
fn spatial_zero_pad(i: &Importer, x: NodeId, sp: usize) -> Option<(NodeId, Vec<[usize; 2]>)> {
    let (src, pads) = i.zero_padded.get(&x)?;
    let mut out = vec![[0, 0]; sp];
    for &[a, lo, hi] in pads {
        let slot = out.get_mut(a.checked_sub(2)?)?;
        *slot = [lo, hi];
    }
    Some((*src, out))
}

fn conv(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (mut x, w, b) = (i.input(n, 0)?, i.input(n, 1)?, i.opt_input(n, 2)?);
    let sp = spatial_rank(i, x, 2, "convolution")?;
    let (xd, wd) = (i.g.dims(x).to_vec(), i.g.dims(w).to_vec());
    if wd.len() != xd.len() {
        return Err(Error::shape(format!("weight {} must have the rank of x {}", i.g.describe(w), i.g.describe(x))));
    }
    let kernel = wd[2..].to_vec();
    check_kernel_shape(n, &kernel)?;
    let mut win = window(n, &xd[2..], kernel)?;
    // A zero Pad before the conv becomes the conv's own padding (the same zeros, no
    // padded copy); auto_pad's padding depends on the padded extent, so only NOTSET.
    if n.string("auto_pad", "NOTSET")? == "NOTSET"
        && let Some((src, extra)) = spatial_zero_pad(i, x, sp)
    {
        for (p, e) in win.pads.iter_mut().zip(&extra) {
            *p = [p[0] + e[0], p[1] + e[1]];
        }
        x = src;
    }
    let params = win.conv_params(group(n)?);
    let (x4, w4) = (planar(i, x)?, planar(i, w)?);
    let y = i.g.conv2d(x4, w4, b, params)?;
    one(unplanar(i, y, sp)?)
}

/// ConvTranspose: the transpose of the convolution that maps its output back to its
/// input (same weight, strides, dilations, pads and groups). The output extent is
/// `stride * (in - 1) + output_padding + span - pads`, or `output_shape` with the pads it
/// implies (negative ones are zero rows outside the transposed convolution's reach).
fn conv_transpose(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let (x, w, b) = (i.input(n, 0)?, i.input(n, 1)?, i.opt_input(n, 2)?);
    let sp = spatial_rank(i, x, 2, "transposed convolution")?;
    let (xd, wd) = (i.g.dims(x).to_vec(), i.g.dims(w).to_vec());
    let groups = group(n)?;
    if xd[2..].contains(&0) {
        return Err(Error::shape(format!("x {} has an empty spatial axis", i.g.describe(x))));
    }
    if wd.len() != xd.len() || wd[0] != xd[1] {
        return Err(Error::shape(format!(
            "weight {} must be [c_in, c_out / group, k...] for x {}",
            i.g.describe(w),
            i.g.describe(x)
        )));
    }
    let c_out = wd[1] * groups;
    let kernel = wd[2..].to_vec();
    check_kernel_shape(n, &kernel)?;
    let mut win = window(n, &xd[2..], kernel)?;
    let out_pad = spatial_ints(n, "output_padding", sp, 0)?.unwrap_or_else(|| vec![0; sp]);
    let auto = n.string("auto_pad", "NOTSET")?;
    let output_shape = n.ints("output_shape")?;
    if let Some(s) = &output_shape
        && s.len() != sp
        && s.len() != sp + 2
    {
        return Err(Error::shape(format!("output_shape {s:?} needs {sp} spatial values")));
    }
    // Signed pads: output_shape may ask for more than the transposed convolution covers.
    let mut pads = vec![[0i64; 2]; sp];
    let mut out = vec![0usize; sp];
    for a in 0..sp {
        // Padding past a stride would add input rows the transposed convolution has not
        // got (onnxruntime allows it below the dilation; that case is not supported).
        if out_pad[a] >= win.stride[a] {
            return Err(Error::unsupported(format!(
                "output_padding {out_pad:?} not smaller than the strides {:?}",
                win.stride
            )));
        }
        let full = (win.stride[a] * (xd[2 + a] - 1) + out_pad[a] + win.span(a)) as i64;
        let target = match &output_shape {
            Some(s) => Some(s[s.len() - sp + a]),
            None if auto == "SAME_UPPER" || auto == "SAME_LOWER" => Some((xd[2 + a] * win.stride[a]) as i64),
            None => None,
        };
        match target {
            Some(t) => {
                let total = full - t;
                let (small, big) = (total.div_euclid(2), total - total.div_euclid(2));
                pads[a] = if auto == "SAME_UPPER" { [small, big] } else { [big, small] };
                out[a] = usize::try_from(t).map_err(|_| Error::shape(format!("output_shape {t} is negative")))?;
            }
            None => {
                pads[a] = [win.pads[a][0] as i64, win.pads[a][1] as i64];
                out[a] = usize::try_from(full - pads[a][0] - pads[a][1])
                    .ok()
                    .filter(|&o| o > 0)
                    .ok_or_else(|| Error::shape(format!("pads {:?} leave no output on axis {a}", win.pads)))?;
            }
        }
    }
    // The transposed convolution over the non-negative pads, then zeros for negative ones.
    win.pads = pads.iter().map(|p| [p[0].max(0) as usize, p[1].max(0) as usize]).collect();
    let mut core = [1, 1];
    for a in 0..sp {
        let len = out[a] as i64 + pads[a][0].min(0) + pads[a][1].min(0);
        core[2 - sp + a] = usize::try_from(len)
            .ok()
            .filter(|&l| l > 0)
            .ok_or_else(|| Error::shape(format!("output_shape {output_shape:?} leaves no output on axis {a}")))?;
    }
    let params = win.conv_params(groups);
    let (x4, w4) = (planar(i, x)?, planar(i, w)?);
    let y = i.g.conv2d_grad_input(x4, w4, params, [xd[0], c_out, core[0], core[1]])?;
    let mut y = unplanar(i, y, sp)?;
    for (a, [lo, hi]) in pads.into_iter().enumerate() {
        y = pad_axis(i, y, 2 + a, (-lo).max(0) as usize, (-hi).max(0) as usize, 0.0)?;
    }
    if let Some(b) = b {
        let mut shape = vec![1; xd.len()];
        shape[1] = c_out;
        let b = i.g.reshape(b, &shape)?;
        y = i.g.add(y, b)?;
    }
    one(y)
}

/// `x` padded with `lo` and `hi` entries of `value` along `axis`.
fn pad_axis(i: &mut Importer, x: NodeId, axis: usize, lo: usize, hi: usize, value: f64) -> Result<NodeId> {
    if lo + hi == 0 {
        return Ok(x);
    }
    let dtype = i.g.dtype(x);
    let mut parts = Vec::with_capacity(3);
    for (count, is_x) in [(lo, false), (0, true), (hi, false)] {
        if is_x {
            parts.push(x);
        } else if count > 0 {
            let mut dims = i.g.dims(x).to_vec();
            dims[axis] = count;
            parts.push(i.g.full(dtype, &dims, value)?);
        }
    }
    i.g.concat(&parts, axis)
}

#[derive(Clone, Copy, PartialEq)]
enum Pool {
    Max,
    Avg {
        include_pad: bool,
    },
    /// Sum of `|x|^p`, then its p-th root.
    Lp {
        p: i64,
    },
}

fn avg_pool(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let include_pad = n.int("count_include_pad", 0)? != 0;
    pool(i, n, Pool::Avg { include_pad })
}

fn lp_pool(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    // LpPool-1 has a float `p`; later versions an int.
    let p = if n.since < 2 {
        let p = n.float("p", 2.0)?;
        if p.fract() != 0.0 {
            return Err(Error::unsupported(format!("LpPool p = {p} (not an integer)")));
        }
        p as i64
    } else {
        n.int("p", 2)?
    };
    if p < 1 {
        return Err(Error::shape(format!("p = {p} must be >= 1")));
    }
    pool(i, n, Pool::Lp { p })
}

/// `|x|^p`.
fn abs_pow(i: &mut Importer, x: NodeId, p: i64) -> Result<NodeId> {
    match p {
        1 => i.g.unary(Unary::Abs, x),
        2 => i.g.mul(x, x),
        _ => {
            let a = i.g.unary(Unary::Abs, x)?;
            let e = i.g.scalar_like(a, p as f64)?;
            i.g.pow(a, e)
        }
    }
}

/// `s^(1/p)`.
fn root(i: &mut Importer, s: NodeId, p: i64) -> Result<NodeId> {
    match p {
        1 => Ok(s),
        2 => i.g.unary(Unary::Sqrt, s),
        _ => {
            let e = i.g.scalar_like(s, 1.0 / p as f64)?;
            i.g.pow(s, e)
        }
    }
}

/// MaxPool / AveragePool / LpPool over 1 to 3 spatial axes. Output extent per axis:
/// `(in + pads - span) / stride + 1`, rounded up under ceil_mode but never starting a
/// window past the input and its leading padding; the windows ceil_mode adds reach
/// past the trailing pad, and that reach (`extra`) is padding no average counts.
fn pool(i: &mut Importer, n: &Node, kind: Pool) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let sp = spatial_rank(i, x, 3, "pooling")?;
    let xd = i.g.dims(x).to_vec();
    let kernel =
        spatial_ints(n, "kernel_shape", sp, 1)?.ok_or_else(|| Error::parse("attribute 'kernel_shape' is missing"))?;
    let win = window(n, &xd[2..], kernel)?;
    let ceil = n.int("ceil_mode", 0)? != 0;
    let mut out = vec![0; sp];
    let mut extra = vec![0; sp];
    for a in 0..sp {
        let (len, [lo, hi], s) = (xd[2 + a], win.pads[a], win.stride[a]);
        let padded = len + lo + hi;
        let span = win.span(a);
        if padded < span {
            return Err(Error::shape(format!(
                "window {:?} (dilations {:?}) does not fit axis {} of {} padded by {:?}",
                win.kernel,
                win.dilation,
                a + 2,
                i.g.describe(x),
                win.pads
            )));
        }
        out[a] = (padded - span) / s + 1;
        if ceil && (padded - span) % s != 0 && out[a] * s < len + lo {
            out[a] += 1;
        }
        extra[a] = ((out[a] - 1) * s + span).saturating_sub(padded);
    }
    let dtype = i.g.dtype(x);
    // Integer max pools (int8 / uint8) run in f32, which holds them exactly.
    let narrow_int = matches!(dtype, DType::I8 | DType::U8);
    if !(dtype.is_float() || kind == Pool::Max && narrow_int) {
        return Err(Error::dtype(format!("pooling {} needs a float input", i.g.describe(x))));
    }
    let xf = if dtype.is_float() { x } else { i.g.cast(x, DType::F32)? };
    let direct = sp <= 2
        && win.dilation.iter().all(|&d| d == 1)
        && (0..sp).all(|a| win.pads[a][0] < win.kernel[a] && win.pads[a][1] + extra[a] < win.kernel[a]);
    let y = if direct { pool_direct(i, xf, &win, &extra, kind)? } else { pool_taps(i, xf, &win, &out, &extra, kind)? };
    one(if dtype.is_float() { y } else { i.g.cast(y, dtype)? })
}

/// A pool through the IR's 2-D pooling kernels.
fn pool_direct(i: &mut Importer, x: NodeId, win: &Window, extra: &[usize], kind: Pool) -> Result<NodeId> {
    let sp = win.kernel.len();
    let mut wide = win.clone();
    for (a, e) in extra.iter().enumerate() {
        wide.pads[a][1] += e;
    }
    let x4 = planar(i, x)?;
    let y = match kind {
        Pool::Max => i.g.max_pool2d(x4, wide.pool_params())?,
        Pool::Avg { include_pad: false } => i.g.avg_pool2d(x4, wide.pool_params(), false)?,
        Pool::Avg { include_pad: true } if extra.iter().all(|&e| e == 0) => {
            i.g.avg_pool2d(x4, win.pool_params(), true)?
        }
        Pool::Avg { include_pad: true } => {
            // The pads count, ceil_mode's reach does not: pad with zeros explicitly, then
            // average over what is in range.
            let pads = win.planar().pads;
            let mut xp = x4;
            for (a, [lo, hi]) in pads.into_iter().enumerate() {
                xp = pad_axis(i, xp, 2 + a, lo, hi, 0.0)?;
            }
            let mut reach = win.clone();
            reach.pads = extra.iter().map(|&e| [0, e]).collect();
            i.g.avg_pool2d(xp, reach.pool_params(), false)?
        }
        Pool::Lp { p } => {
            let px = abs_pow(i, x4, p)?;
            let mean = i.g.avg_pool2d(px, wide.pool_params(), true)?;
            let k = i.g.scalar_like(mean, win.kernel.iter().product::<usize>() as f64)?;
            let sum = i.g.mul(mean, k)?;
            root(i, sum, p)?
        }
    };
    unplanar(i, y, sp)
}

/// A pool by its definition: the input padded explicitly (-inf for max, 0 otherwise),
/// one strided gather per window tap, the taps combined; averages divide by a constant
/// table of each window's count.
fn pool_taps(i: &mut Importer, x: NodeId, win: &Window, out: &[usize], extra: &[usize], kind: Pool) -> Result<NodeId> {
    let sp = win.kernel.len();
    let src = match kind {
        Pool::Lp { p } => abs_pow(i, x, p)?,
        _ => x,
    };
    let fill = if kind == Pool::Max { f64::NEG_INFINITY } else { 0.0 };
    let mut xp = src;
    for (a, (&[lo, hi], e)) in win.pads.iter().zip(extra).enumerate() {
        xp = pad_axis(i, xp, 2 + a, lo, hi + e, fill)?;
    }
    // Each tap's value at every output position, one axis at a time.
    let mut views = vec![xp];
    for (a, &extent) in out.iter().enumerate() {
        let mut next = Vec::with_capacity(views.len() * win.kernel[a]);
        for &v in &views {
            for k in 0..win.kernel[a] {
                let idx: Vec<usize> = (0..extent).map(|o| o * win.stride[a] + k * win.dilation[a]).collect();
                next.push(take(i, v, 2 + a, &idx)?);
            }
        }
        views = next;
    }
    let mut acc = views[0];
    for &v in &views[1..] {
        acc = if kind == Pool::Max { i.g.maximum(acc, v)? } else { i.g.add(acc, v)? };
    }
    match kind {
        Pool::Max => Ok(acc),
        Pool::Lp { p } => root(i, acc, p),
        Pool::Avg { include_pad } => {
            // Taps per window, a product of per-axis counts: inside the input, or inside the
            // input and its pads.
            let d = i.g.dims(x).to_vec();
            let per_axis: Vec<Vec<f64>> = (0..sp)
                .map(|a| {
                    let [lo, hi] = win.pads[a];
                    let (from, to) = if include_pad { (0, lo + d[2 + a] + hi) } else { (lo, lo + d[2 + a]) };
                    (0..out[a])
                        .map(|o| {
                            (0..win.kernel[a])
                                .map(|k| o * win.stride[a] + k * win.dilation[a])
                                .filter(|&p| p >= from && p < to)
                                .count() as f64
                        })
                        .collect()
                })
                .collect();
            let mut counts = vec![1.0f64];
            for axis_counts in &per_axis {
                counts = counts.iter().flat_map(|&c| axis_counts.iter().map(move |&k| c * k)).collect();
            }
            let shape = [&[1, 1][..], out].concat();
            let table = HostTensor::from_f64_as(i.g.dtype(acc), &shape, &counts)?;
            let table = i.g.constant_tensor(table)?;
            i.g.div(acc, table)
        }
    }
}

fn global_pool(i: &mut Importer, n: &Node, op: ReduceOp) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let r = i.g.dims(x).len();
    if r < 3 {
        return Err(Error::shape(format!("needs [n, c, spatial...], got {}", i.g.describe(x))));
    }
    one(i.g.reduce(op, x, &(2..r).collect::<Vec<_>>(), true)?)
}

#[derive(Clone, Copy, PartialEq)]
enum Interp {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, PartialEq)]
enum Coord {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    TfCropAndResize,
}

#[derive(Clone, Copy, PartialEq)]
enum Nearest {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
    /// Resize-10 and Upsample (onnxruntime's rule): floor when enlarging, ceil when
    /// shrinking.
    Legacy,
}

/// How Resize maps output positions to weighted input positions.
struct Resample {
    interp: Interp,
    coord: Coord,
    nearest: Nearest,
    cubic_a: f64,
    exclude_outside: bool,
    antialias: bool,
    extrapolation: f64,
}

/// One output position of a resized axis: `(input position, weight)` pairs, or None
/// where tf_crop_and_resize extrapolates.
type Row = Option<Vec<(usize, f64)>>;

impl Resample {
    /// The interpolation coefficients at fractional offset `ratio` (in `(0, 1]`).
    fn coeffs(&self, ratio: f64, scale: f64) -> Vec<f64> {
        match self.interp {
            Interp::Nearest => {
                let up = match self.nearest {
                    _ if ratio == 1.0 => true,
                    Nearest::RoundPreferFloor => ratio > 0.5,
                    Nearest::RoundPreferCeil => ratio >= 0.5,
                    Nearest::Floor => false,
                    Nearest::Ceil | Nearest::Legacy => true,
                };
                if up { vec![0.0, 1.0] } else { vec![1.0, 0.0] }
            }
            Interp::Linear if self.antialias => {
                let s = scale.min(1.0);
                let start = (-1.0 / s).floor() as i64 + 1;
                let taps: Vec<f64> =
                    (start..2 - start).map(|t| (1.0 - ((t as f64 - ratio) * s).abs()).clamp(0.0, 1.0)).collect();
                normalized(taps)
            }
            Interp::Linear => vec![1.0 - ratio, ratio],
            Interp::Cubic => {
                let a = self.cubic_a;
                let w = |x: f64| {
                    let x = x.abs();
                    if x <= 1.0 {
                        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
                    } else if x < 2.0 {
                        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
                    } else {
                        0.0
                    }
                };
                if self.antialias {
                    let s = scale.min(1.0);
                    let start = (-2.0 / s).floor() as i64 + 1;
                    normalized((start..2 - start).map(|t| w(s * (t as f64 - ratio))).collect())
                } else {
                    vec![w(ratio + 1.0), w(ratio), w(1.0 - ratio), w(2.0 - ratio)]
                }
            }
        }
    }

    /// The number of coefficients per output position at `scale`, as `coeffs` computes it.
    fn taps(&self, scale: f64) -> f64 {
        let reach = if self.interp == Interp::Cubic { 2.0 } else { 1.0 };
        if !self.antialias {
            return 2.0 * reach;
        }
        2.0 - 2.0 * ((-reach / scale.min(1.0)).floor() + 1.0)
    }

    /// The input coordinate of output position `y` (before any clamping).
    fn source(&self, y: f64, scale: f64, input: usize, output: usize, roi: [f64; 2]) -> f64 {
        let (len, out_f) = (input as f64, scale * input as f64);
        match self.coord {
            Coord::HalfPixel => (y + 0.5) / scale - 0.5,
            Coord::HalfPixelSymmetric => {
                let offset = len / 2.0 * (1.0 - output as f64 / out_f);
                offset + (y + 0.5) / scale - 0.5
            }
            Coord::PytorchHalfPixel if out_f == 1.0 => -0.5,
            Coord::PytorchHalfPixel => (y + 0.5) / scale - 0.5,
            Coord::AlignCorners if out_f == 1.0 => 0.0,
            Coord::AlignCorners => y * (len - 1.0) / (out_f - 1.0),
            Coord::Asymmetric => y / scale,
            Coord::TfHalfPixelForNn => (y + 0.5) / scale,
            Coord::TfCropAndResize => {
                let at = if out_f == 1.0 {
                    (roi[1] - roi[0]) * (len - 1.0) / 2.0
                } else {
                    y * (roi[1] - roi[0]) * (len - 1.0) / (out_f - 1.0)
                };
                at + roi[0] * (len - 1.0)
            }
        }
    }

    /// The rows of one axis resized from `input` to `output` entries at `scale`, by the
    /// reference's rule: the `n` coefficients' input positions are the `n` nearest to the
    /// source coordinate (ties to the lower), clamped into the axis (edge padding).
    fn rows(&self, input: usize, output: usize, scale: f64, roi: [f64; 2]) -> Vec<Row> {
        let last = input as i64 - 1;
        (0..output)
            .map(|y| {
                let x = self.source(y as f64, scale, input, output, roi);
                if self.coord == Coord::TfCropAndResize && (x < 0.0 || x > last as f64) {
                    return None;
                }
                if self.interp == Interp::Nearest && self.nearest == Nearest::Legacy {
                    let p = if scale < 1.0 { x.ceil() } else { x.floor() };
                    return Some(vec![((p as i64).clamp(0, last) as usize, 1.0)]);
                }
                let ratio = if x == x.floor() { 1.0 } else { x - x.floor() };
                let mut c = self.coeffs(ratio, scale);
                let taps = c.len() as i64;
                let pad = (taps + 1) / 2;
                let xp = x + pad as f64;
                let (p, frac) = (xp.floor(), xp - xp.floor());
                let offset = if taps % 2 == 0 {
                    if frac == 0.0 { -(taps / 2) } else { -(taps / 2) + 1 }
                } else {
                    -((taps - 1) / 2) + i64::from(frac > 0.5)
                };
                let start = p as i64 + offset - pad;
                if self.exclude_outside {
                    for (t, w) in c.iter_mut().enumerate() {
                        let at = start + t as i64;
                        if at < 0 || at > last {
                            *w = 0.0;
                        }
                    }
                    let sum: f64 = c.iter().sum();
                    if sum != 0.0 {
                        c.iter_mut().for_each(|w| *w /= sum);
                    }
                }
                // Clamped positions repeat: merge their weights, drop zero weights.
                let mut row: Vec<(usize, f64)> = Vec::new();
                for (t, &w) in c.iter().enumerate() {
                    let at = (start + t as i64).clamp(0, last) as usize;
                    match row.iter_mut().find(|(q, _)| *q == at) {
                        Some(e) => e.1 += w,
                        None => row.push((at, w)),
                    }
                }
                row.retain(|&(_, w)| w != 0.0);
                Some(row)
            })
            .collect()
    }
}

fn normalized(taps: Vec<f64>) -> Vec<f64> {
    let sum: f64 = taps.iter().sum();
    taps.into_iter().map(|t| t / sum).collect()
}

/// `x` resized along `axis` to `rows.len()` entries: a gather when every row copies one
/// input position, else a weighted sum of one gather per tap (plus the extrapolation
/// value where a row has none).
fn resample_axis(i: &mut Importer, x: NodeId, axis: usize, rows: &[Row], extrapolation: f64) -> Result<NodeId> {
    let copies: Option<Vec<usize>> = rows
        .iter()
        .map(|r| match r.as_deref() {
            Some([(at, w)]) if *w == 1.0 => Some(*at),
            _ => None,
        })
        .collect();
    if let Some(idx) = copies {
        return take(i, x, axis, &idx);
    }
    let dtype = i.g.dtype(x);
    if !dtype.is_float() {
        return Err(Error::unsupported(format!("interpolating resize of {} (not float)", i.g.describe(x))));
    }
    let mut shape = vec![1; i.g.dims(x).len()];
    shape[axis] = rows.len();
    let taps = rows.iter().map(|r| r.as_ref().map_or(0, Vec::len)).max().unwrap_or(0);
    let mut acc = None;
    for t in 0..taps {
        let tap = |r: &Row| r.as_ref().and_then(|r| r.get(t)).copied();
        let idx: Vec<usize> = rows.iter().map(|r| tap(r).map_or(0, |p| p.0)).collect();
        let weights: Vec<f64> = rows.iter().map(|r| tap(r).map_or(0.0, |p| p.1)).collect();
        let v = take(i, x, axis, &idx)?;
        let w = HostTensor::from_f64_as(dtype, &shape, &weights)?;
        let w = i.g.constant_tensor(w)?;
        let term = i.g.mul(v, w)?;
        acc = Some(match acc {
            None => term,
            Some(a) => i.g.add(a, term)?,
        });
    }
    let mut out_dims = i.g.dims(x).to_vec();
    out_dims[axis] = rows.len();
    let outside: Vec<f64> = rows.iter().map(|r| if r.is_none() { extrapolation } else { 0.0 }).collect();
    match acc {
        None => i.g.full(dtype, &out_dims, extrapolation),
        Some(a) if rows.iter().all(Option::is_some) => Ok(a),
        Some(a) => {
            let e = HostTensor::from_f64_as(dtype, &shape, &outside)?;
            let e = i.g.constant_tensor(e)?;
            i.g.add(a, e)
        }
    }
}

/// Largest resized extent: the index and weight tables are built per output position.
const MAX_RESIZED: usize = 1 << 26;
/// Most taps per output position (one gather each): antialiasing a shrink by `1 / s`
/// takes `2 / s` (linear) or `4 / s` (cubic).
const MAX_TAPS: f64 = 256.0;

/// One axis to resize: its index, scale, output extent and region of interest.
struct Target {
    axis: usize,
    scale: f64,
    output: usize,
    roi: [f64; 2],
}

fn resample(i: &mut Importer, x: NodeId, spec: &Resample, targets: &[Target]) -> Result<NodeId> {
    let mut y = x;
    for t in targets {
        let input = i.g.dims(y)[t.axis];
        let identity = (t.scale - 1.0).abs() <= 1e-9 * t.scale.abs().max(1.0)
            && t.output == input
            && (spec.coord != Coord::TfCropAndResize || (t.roi[0].abs() <= 1e-9 && (t.roi[1] - 1.0).abs() <= 1e-9));
        if identity {
            continue;
        }
        if input == 0 || t.output == 0 || t.output > MAX_RESIZED {
            return Err(Error::unsupported(format!("resizing axis {} from {input} to {}", t.axis, t.output)));
        }
        let taps = spec.taps(t.scale);
        if taps > MAX_TAPS {
            return Err(Error::unsupported(format!(
                "antialiased resize of axis {} by {}: {taps} taps per output (at most {MAX_TAPS})",
                t.axis, t.scale
            )));
        }
        let rows = spec.rows(input, t.output, t.scale, t.roi);
        y = resample_axis(i, y, t.axis, &rows, spec.extrapolation)?;
    }
    if y == x { super::elementwise::identity_of(i, x) } else { Ok(y) }
}

/// Non-empty `v`, or None (an empty tensor stands for an absent operand).
fn present<T>(v: Option<Vec<T>>) -> Option<Vec<T>> {
    v.filter(|v| !v.is_empty())
}

fn interp_mode(n: &Node) -> Result<Interp> {
    match n.string("mode", "nearest")?.as_str() {
        "nearest" => Ok(Interp::Nearest),
        "linear" | "bilinear" => Ok(Interp::Linear),
        "cubic" => Ok(Interp::Cubic),
        other => Err(Error::unsupported(format!("mode '{other}'"))),
    }
}

/// Resize: `scales` (output = floor(in * scale)) or `sizes` (scale = out / in, with
/// keep_aspect_ratio_policy from 18) over every axis or `axes` (18). Before 11 the
/// coordinates are asymmetric and nearest follows the legacy rule.
fn resize(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let r = d.len();
    let legacy = n.since < 11;
    let interp = interp_mode(n)?;
    let coord = if legacy {
        Coord::Asymmetric
    } else {
        match n.string("coordinate_transformation_mode", "half_pixel")?.as_str() {
            "half_pixel" => Coord::HalfPixel,
            "half_pixel_symmetric" if n.since >= 19 => Coord::HalfPixelSymmetric,
            "pytorch_half_pixel" => Coord::PytorchHalfPixel,
            "align_corners" => Coord::AlignCorners,
            "asymmetric" => Coord::Asymmetric,
            "tf_half_pixel_for_nn" if n.since < 13 => Coord::TfHalfPixelForNn,
            "tf_crop_and_resize" => Coord::TfCropAndResize,
            other => return Err(Error::unsupported(format!("coordinate_transformation_mode '{other}'"))),
        }
    };
    let nearest = if legacy {
        Nearest::Legacy
    } else {
        match n.string("nearest_mode", "round_prefer_floor")?.as_str() {
            "round_prefer_floor" => Nearest::RoundPreferFloor,
            "round_prefer_ceil" => Nearest::RoundPreferCeil,
            "floor" => Nearest::Floor,
            "ceil" => Nearest::Ceil,
            other => return Err(Error::unsupported(format!("nearest_mode '{other}'"))),
        }
    };
    let antialias = n.since >= 18 && n.int("antialias", 0)? != 0;
    if antialias && interp == Interp::Nearest {
        return Err(Error::unsupported("antialias with mode 'nearest'"));
    }
    let spec = Resample {
        interp,
        coord,
        nearest,
        cubic_a: n.float("cubic_coeff_a", -0.75)? as f64,
        exclude_outside: n.int("exclude_outside", 0)? != 0,
        antialias,
        extrapolation: n.float("extrapolation_value", 0.0)? as f64,
    };
    let axes: Vec<usize> = match n.ints("axes")?.filter(|_| n.since >= 18) {
        Some(a) => {
            let ax = a.iter().map(|&v| axis(v, r)).collect::<Result<Vec<_>>>()?;
            if (1..ax.len()).any(|k| ax[..k].contains(&ax[k])) {
                return Err(Error::shape(format!("axes {a:?} repeat an axis")));
            }
            ax
        }
        None => (0..r).collect(),
    };
    let (scales, sizes_in) = if legacy {
        (present(i.const_floats(n, 1)?), None)
    } else {
        (present(i.const_floats(n, 2)?), present(i.const_ints(n, 3)?))
    };
    let roi = if coord == Coord::TfCropAndResize { present(i.const_floats(n, 1)?) } else { None };
    let k = axes.len();
    let (scale, output): (Vec<f64>, Vec<usize>) = match (scales, sizes_in) {
        (Some(s), None) => {
            if s.len() != k || s.iter().any(|&v| !v.is_finite() || v <= 0.0) {
                return Err(Error::shape(format!("scales {s:?} need {k} positive values")));
            }
            let out = axes.iter().zip(&s).map(|(&a, &sc)| (sc * d[a] as f64).floor() as usize).collect();
            (s, out)
        }
        (None, Some(sz)) => {
            if sz.len() != k || sz.iter().any(|&v| v < 0) {
                return Err(Error::shape(format!("sizes {sz:?} need {k} values >= 0")));
            }
            let mut scale: Vec<f64> = axes.iter().zip(&sz).map(|(&a, &s)| s as f64 / d[a] as f64).collect();
            let mut out: Vec<usize> = sz.iter().map(|&s| s as usize).collect();
            let policy =
                if n.since >= 18 { n.string("keep_aspect_ratio_policy", "stretch")? } else { "stretch".into() };
            let common = match policy.as_str() {
                "stretch" => None,
                "not_larger" => scale.iter().copied().reduce(f64::min),
                "not_smaller" => scale.iter().copied().reduce(f64::max),
                other => return Err(Error::unsupported(format!("keep_aspect_ratio_policy '{other}'"))),
            };
            if let Some(c) = common {
                scale = vec![c; k];
                out = axes.iter().map(|&a| (c * d[a] as f64 + 0.5).floor() as usize).collect();
            }
            (scale, out)
        }
        (Some(_), Some(_)) => return Err(Error::shape("only one of scales and sizes may be given")),
        (None, None) => return Err(Error::shape("one of scales and sizes must be given")),
    };
    let roi_of = |j: usize| -> Result<[f64; 2]> {
        let Some(roi) = &roi else { return Ok([0.0, 1.0]) };
        // roi lists starts then ends, one per resized axis (every axis before 18).
        let (count, at) = if roi.len() == 2 * k { (k, j) } else { (r, axes[j]) };
        if roi.len() != 2 * count {
            return Err(Error::shape(format!("roi {roi:?} needs 2 values per axis")));
        }
        Ok([roi[at], roi[at + count]])
    };
    let targets = (0..k)
        .map(|j| Ok(Target { axis: axes[j], scale: scale[j], output: output[j], roi: roi_of(j)? }))
        .collect::<Result<Vec<_>>>()?;
    one(resample(i, x, &spec, &targets)?)
}

/// Upsample (7: `scales` attribute, 9: input), deprecated in 10: Resize-10's semantics.
fn upsample(i: &mut Importer, n: &Node) -> Result<Vec<NodeId>> {
    let x = i.input(n, 0)?;
    let d = i.g.dims(x).to_vec();
    let scales = if n.since >= 9 {
        i.const_floats(n, 1)?.ok_or_else(|| Error::graph("input 1 (scales) is required"))?
    } else {
        let s = n.floats("scales")?.ok_or_else(|| Error::parse("attribute 'scales' is missing"))?;
        s.into_iter().map(f64::from).collect()
    };
    if scales.len() != d.len() || scales.iter().any(|&s| !s.is_finite() || s < 1.0) {
        return Err(Error::shape(format!("scales {scales:?} need one value >= 1 per axis of {}", i.g.describe(x))));
    }
    let spec = Resample {
        interp: interp_mode(n)?,
        coord: Coord::Asymmetric,
        nearest: Nearest::Legacy,
        cubic_a: -0.75,
        exclude_outside: false,
        antialias: false,
        extrapolation: 0.0,
    };
    let targets: Vec<Target> = scales
        .iter()
        .enumerate()
        .map(|(a, &s)| Target { axis: a, scale: s, output: (s * d[a] as f64).floor() as usize, roi: [0.0, 1.0] })
        .collect();
    one(resample(i, x, &spec, &targets)?)
}
