//! NCHW convolution and pooling (semantics in `rlx_ir::ops::conv`).
//!
//! The forward conv is one GEMM per (image, group): `out [og, oh*ow] = w [og, cg*kh*kw]
//! @ col [cg*kh*kw, oh*ow]`, `col` the im2col of the input (a 1x1 / stride 1 / unpadded
//! conv's input plane is `col` as it lies), through matmul's `Gemm` (the `gemm` crate).
//! open_nsfw (ResNet-50-style, 1x224x224x3, 1 thread) went from ~4.5 s in the direct
//! 7-deep loop to ~60 ms (docs/performance.md). Padding taps multiply a zero, as in
//! im2col everywhere. Threads split the (image, group) products, or one product by
//! output tiles inside `gemm` (whose depth blocking does not depend on the thread count,
//! as matmul relies on); im2col rows are plain copies: bit-identical for every thread
//! count. Pools run a strided input run per tap, taps in the direct loop's order, split
//! by planes; max pools whose windows tile the input have their own kernels
//! (`pool_tiles`). The gradients are GEMMs over the im2col columns of many images side
//! by side (`dw^T = col @ grad^T`, `dcol = w^T @ grad`, then `dcol` added back onto
//! `dx`): with the direct loops they replace, the digits CNN's training step took 55.7 ms
//! (batch 64, 2 threads, AMD EPYC), then ~3.5. Image batches are summed in order and each image's
//! `dx` is scattered by one worker: bit-identical for every thread count.

use super::matmul::Gemm;
use super::pool_tiles::{self, Fold};
use crate::arena::{Args, Out, out_mut};
use crate::buffer::{Class, Float, Num};
use crate::threads::{MIN_PARALLEL_ELEMS, with_scratch};
use crate::with_float;
use rayon::prelude::*;
use rlx_ir::{Conv2dParams, PoolParams, Result};

/// Input `[n, c, h, w]`, output `[n, o, oh, ow]`, window `[kh, kw]`.
#[derive(Clone, Debug)]
pub struct Geometry {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub oh: usize,
    pub ow: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    /// Top and left padding (bottom/right only shape the output extent).
    pub pad: [usize; 2],
}

impl Geometry {
    pub fn conv(x: &[usize], w: &[usize], out: &[usize], p: &Conv2dParams) -> Geometry {
        Geometry {
            n: x[0],
            c: x[1],
            h: x[2],
            w: x[3],
            o: out[1],
            oh: out[2],
            ow: out[3],
            kh: w[2],
            kw: w[3],
            stride: p.stride,
            dilation: p.dilation,
            pad: [p.padding[0], p.padding[1]],
        }
    }

    pub fn pool(x: &[usize], out: &[usize], p: &PoolParams) -> Geometry {
        Geometry {
            n: x[0],
            c: x[1],
            h: x[2],
            w: x[3],
            o: out[1],
            oh: out[2],
            ow: out[3],
            kh: p.kernel[0],
            kw: p.kernel[1],
            stride: p.stride,
            dilation: [1, 1],
            pad: [p.padding[0], p.padding[1]],
        }
    }

    /// Input row/column read by output position `y` (or `x`) and tap `k` on axis `a`,
    /// or `None` when it falls in the padding.
    #[inline]
    fn source(&self, a: usize, out_pos: usize, k: usize, extent: usize) -> Option<usize> {
        (out_pos * self.stride[a] + k * self.dilation[a]).checked_sub(self.pad[a]).filter(|&i| i < extent)
    }
}

/// Multiply-adds below which one conv product runs on one thread (matmul's threshold).
const MIN_PARALLEL_MACS: usize = 1 << 18;

pub fn conv2d(g: &Geometry, groups: usize, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_float!(class, T => {
        let bias: Option<&[T]> = if ins.len() > 2 { Some(ins.get(2)?) } else { None };
        conv_typed::<T>(g, groups, ins.get(0)?, ins.get(1)?, bias, out_mut(out)?);
        Ok(())
    })
}

fn conv_typed<T: Float + Gemm>(g: &Geometry, groups: usize, x: &[T], w: &[T], bias: Option<&[T]>, out: &mut [T]) {
    let (cg, og) = (g.c / groups, g.o / groups);
    let plane = g.oh * g.ow;
    let depth = cg * g.kh * g.kw;
    if plane == 0 || og == 0 {
        return;
    }
    let items = g.n * groups;
    let threads = crate::threads::current();
    // The same split rule as matmul's `for_each_product`: many small products one thread
    // each, else one product at a time on every thread.
    let macs = og * depth * plane;
    let padded = Padded::new(g);
    let per_item = |item: usize, out: &mut [T], threads: usize| {
        let (b, group) = (item / groups, item % groups);
        let bias = bias.map(|bias| &bias[group * og..(group + 1) * og]);
        let filters = &w[group * og * depth..(group + 1) * og * depth];
        let input = &x[(b * g.c + group * cg) * g.h * g.w..(b * g.c + (group + 1) * cg) * g.h * g.w];
        plane_product(g, padded.as_ref(), (cg, filters), input, bias, out, threads);
    };
    if threads > 1 && items >= threads && macs < MIN_PARALLEL_MACS * 4 && items * og * plane >= MIN_PARALLEL_ELEMS / 8 {
        out.par_chunks_mut(og * plane).enumerate().for_each(|(item, o)| per_item(item, o, 1));
    } else {
        let threads = if macs >= MIN_PARALLEL_MACS { threads } else { 1 };
        out.chunks_mut(og * plane).enumerate().for_each(|(item, o)| per_item(item, o, threads));
    }
}

/// One (image, group) of a conv: `out [og, plane] = filters [og, depth] @ col [depth,
/// plane] (+ bias)`, `col` the im2col of `input [cg, h, w]` (zero where a tap reads
/// padding), built in scratch; a 1x1 / stride 1 / unpadded conv reads `input` as `col`.
fn plane_product<T: Float + Gemm>(
    g: &Geometry,
    padded: Option<&Padded>,
    (cg, filters): (usize, &[T]),
    input: &[T],
    bias: Option<&[T]>,
    out: &mut [T],
    threads: usize,
) {
    let plane = g.oh * g.ow;
    let depth = cg * g.kh * g.kw;
    let og = out.len() / plane;
    if let Some(bias) = bias {
        for (row, &b) in out.chunks_mut(plane).zip(bias) {
            row.fill(b);
        }
    } else if depth == 0 {
        out.fill(T::ZERO);
    }
    if depth == 0 {
        return;
    }
    let gemm = |col: &[T], out: &mut [T]| {
        T::gemm_acc(og, depth, plane, filters, (depth, 1), col, (plane, 1), out, plane, threads, bias.is_some())
    };
    let pointwise = g.kh == 1 && g.kw == 1 && g.stride == [1, 1] && g.pad == [0, 0] && (g.oh, g.ow) == (g.h, g.w);
    if pointwise {
        return gemm(input, out);
    }
    with_scratch::<T, _>(depth * plane + padded_len(padded, 1, cg), |scratch| {
        let (col, planes) = scratch.split_at_mut(depth * plane);
        im2col(g, padded, &[input], planes, col, threads);
        gemm(col, out);
    });
}

/// The floats [`im2col`] pads `images` images of `cg` channels into (none for outputs
/// that take no [`Padded`] planes).
fn padded_len(padded: Option<&Padded>, images: usize, cg: usize) -> usize {
    padded.map_or(0, |p| images * cg * p.len())
}

/// The im2col of `images` (each `[cg, h, w]`) side by side: `col [cg * kh * kw, width]`,
/// `width = images.len() * plane`, image `i`'s columns at `i * plane`. Rows are
/// independent copies (bit-identical for every thread count), split across threads when
/// the matrix is large. Narrow outputs pad every (image, channel) first, into `planes`
/// ([`padded_len`] floats of scratch), and copy each row's values from there through the
/// tap offsets: rows stay whole runs of stores.
fn im2col<T: Float>(
    g: &Geometry,
    padded: Option<&Padded>,
    images: &[&[T]],
    planes: &mut [T],
    col: &mut [T],
    threads: usize,
) {
    let (hw, plane, taps) = (g.h * g.w, g.oh * g.ow, g.kh * g.kw);
    let cg = images.first().map_or(0, |i| i.len() / hw.max(1));
    if let Some(padded) = padded {
        planes.fill(T::ZERO);
        for (input, dst) in images.iter().zip(planes.chunks_exact_mut(cg * padded.len())) {
            for (channel, dst) in input.chunks_exact(hw).zip(dst.chunks_exact_mut(padded.len())) {
                padded.fill(g, channel, dst);
            }
        }
    }
    let planes = &*planes;
    let fill = |r: usize, row: &mut [T]| match padded {
        Some(padded) => {
            let (ci, tap) = (r / taps, &padded.offsets[r % taps * plane..][..plane]);
            for (i, cols) in row.chunks_mut(plane).enumerate() {
                let src = &planes[(i * cg + ci) * padded.len()..][..padded.len()];
                cols.iter_mut().zip(tap).for_each(|(o, &at)| *o = src[at as usize]);
            }
        }
        None => images.iter().zip(row.chunks_mut(plane)).for_each(|(input, cols)| im2col_row(g, input, r, cols)),
    };
    let width = images.len() * plane;
    if threads > 1 && col.len() >= MIN_PARALLEL_ELEMS {
        col.par_chunks_mut(width).enumerate().for_each(|(r, row)| fill(r, row));
    } else {
        col.chunks_mut(width).enumerate().for_each(|(r, row)| fill(r, row));
    }
}

/// Narrow conv outputs (rows under [`NARROW_ROW`] values) read their taps from a copy of
/// each input channel with the padding written out as zeros (`ph x pw`, in the coordinates
/// `(y * stride + k * dilation)` that taps index), through one table of offsets: no
/// padding test per value. The digits CNN's im2col and col2im took ~20% of its training
/// step through a per-value table with a padding branch (batch 64, AMD EPYC); its step
/// went 3.25-3.54 -> 3.18-3.20 ms on 1 thread (alternating binaries).
struct Padded {
    ph: usize,
    pw: usize,
    /// For each tap `(ky, kx)` and output position, the offset in the padded plane it
    /// reads: `[kh * kw, oh * ow]`.
    offsets: Vec<u32>,
}

impl Padded {
    fn new(g: &Geometry) -> Option<Padded> {
        if g.ow >= NARROW_ROW {
            return None;
        }
        let extent = |a: usize, out: usize, k: usize| {
            out.saturating_sub(1) * g.stride[a] + k.saturating_sub(1) * g.dilation[a] + 1
        };
        let (ph, pw) = (extent(0, g.oh, g.kh), extent(1, g.ow, g.kw));
        if ph.checked_mul(pw).is_none_or(|len| len > u32::MAX as usize) {
            return None;
        }
        let mut offsets = Vec::with_capacity(g.kh * g.kw * g.oh * g.ow);
        for ky in 0..g.kh {
            for kx in 0..g.kw {
                for y in 0..g.oh {
                    let line = (y * g.stride[0] + ky * g.dilation[0]) * pw + kx * g.dilation[1];
                    offsets.extend((0..g.ow).map(|xo| (line + xo * g.stride[1]) as u32));
                }
            }
        }
        Some(Padded { ph, pw, offsets })
    }

    fn len(&self) -> usize {
        self.ph * self.pw
    }

    /// The input row `iy` that padded row `py` holds, if any, and how many of its columns
    /// the padded row holds (at padded columns `[pad, pad + cols)`).
    fn inside(&self, g: &Geometry, py: usize) -> Option<(usize, usize)> {
        let iy = py.checked_sub(g.pad[0]).filter(|&iy| iy < g.h)?;
        Some((iy, g.w.min(self.pw.saturating_sub(g.pad[1]))))
    }

    /// Copies `channel [h, w]` into the input positions of `padded` (zero: the padding
    /// stays so).
    fn fill<T: Float>(&self, g: &Geometry, channel: &[T], padded: &mut [T]) {
        for (py, line) in padded.chunks_exact_mut(self.pw).enumerate() {
            if let Some((iy, cols)) = self.inside(g, py) {
                line[g.pad[1]..g.pad[1] + cols].copy_from_slice(&channel[iy * g.w..iy * g.w + cols]);
            }
        }
    }

    /// `channel [h, w]` = the input positions of `padded`.
    fn store<T: Float>(&self, g: &Geometry, padded: &[T], channel: &mut [T]) {
        for (py, line) in padded.chunks_exact(self.pw).enumerate() {
            if let Some((iy, cols)) = self.inside(g, py) {
                channel[iy * g.w..iy * g.w + cols].copy_from_slice(&line[g.pad[1]..g.pad[1] + cols]);
            }
        }
    }
}

/// Output rows narrower than this take their taps from a [`Padded`] plane (convs) or a
/// [`Taps`] table (pools) rather than as strided runs of input rows: copied piece by
/// piece, each 2-4 values cost a memcpy call (the digits CNN's step, 8 x 8 and 4 x 4
/// outputs, batch 64: 4.2 -> 3.5-3.8 ms, AMD EPYC).
const NARROW_ROW: usize = 16;

/// A padding tap in [`Taps`].
const PAD: u32 = u32::MAX;

/// For each tap `(ky, kx)` and output position, the offset `iy * w + ix` in an input
/// channel it reads, or [`PAD`]: the same for every image and channel.
struct Taps(Vec<u32>);

impl Taps {
    /// The table, for outputs narrower than [`NARROW_ROW`].
    fn new(g: &Geometry) -> Option<Taps> {
        if g.ow >= NARROW_ROW || g.h * g.w >= PAD as usize {
            return None;
        }
        let mut offsets = Vec::with_capacity(g.kh * g.kw * g.oh * g.ow);
        for ky in 0..g.kh {
            for kx in 0..g.kw {
                for y in 0..g.oh {
                    for xo in 0..g.ow {
                        let at = g.source(0, y, ky, g.h).zip(g.source(1, xo, kx, g.w));
                        offsets.push(at.map_or(PAD, |(iy, ix)| (iy * g.w + ix) as u32));
                    }
                }
            }
        }
        Some(Taps(offsets))
    }

    /// The offsets output position `pos` reads, tap by tap (ky, then kx).
    fn at<'a>(&'a self, g: &Geometry, pos: usize) -> impl Iterator<Item = u32> + 'a {
        let plane = g.oh * g.ow;
        self.0[pos..].iter().step_by(plane.max(1)).copied()
    }
}

/// Row `r = (ci * kh + ky) * kw + kx` of the im2col matrix of `input [cg, h, w]`: the
/// input value under tap `(ky, kx)` for every output position, zero in the padding.
fn im2col_row<T: Float>(g: &Geometry, input: &[T], r: usize, row: &mut [T]) {
    let (ci, ky, kx) = (r / (g.kh * g.kw), r / g.kw % g.kh, r % g.kw);
    let channel = &input[ci * g.h * g.w..(ci + 1) * g.h * g.w];
    // Output columns [lo, hi) read inside the input row; the rest read padding.
    let (lo, hi) = inside(g.ow, g.stride[1], kx * g.dilation[1], g.pad[1], g.w);
    for (y, out) in row.chunks_mut(g.ow).enumerate() {
        let Some(iy) = g.source(0, y, ky, g.h).filter(|_| lo < hi) else {
            out.fill(T::ZERO);
            continue;
        };
        let src = &channel[iy * g.w..(iy + 1) * g.w];
        out[..lo].fill(T::ZERO);
        out[hi..].fill(T::ZERO);
        let first = lo * g.stride[1] + kx * g.dilation[1] - g.pad[1];
        if g.stride[1] == 1 {
            out[lo..hi].copy_from_slice(&src[first..first + (hi - lo)]);
        } else {
            for (o, &v) in out[lo..hi].iter_mut().zip(src[first..].iter().step_by(g.stride[1])) {
                *o = v;
            }
        }
    }
}

/// The output positions `[lo, hi)` of `0..count` whose source `pos * stride + offset -
/// pad` lies in `0..extent`.
fn inside(count: usize, stride: usize, offset: usize, pad: usize, extent: usize) -> (usize, usize) {
    // pos * stride + offset >= pad, and pos * stride + offset < pad + extent.
    let lo = pad.saturating_sub(offset).div_ceil(stride).min(count);
    let hi = (pad + extent).saturating_sub(offset).div_ceil(stride).min(count);
    (lo, hi.max(lo))
}

/// Max pooling (`avg = None`) or average pooling (`avg = Some(count_include_pad)`).
pub fn pool(g: &Geometry, avg: Option<bool>, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    if class == Class::F32 && avg.is_none() && pool_tiles::max_pool_f32(g, Fold::Max, ins.get(0)?, &[], out_mut(out)?) {
        return Ok(());
    }
    with_float!(class, T => {
        pool_typed::<T>(g, avg, ins.get(0)?, out_mut(out)?);
        Ok(())
    })
}

fn pool_typed<T: Float>(g: &Geometry, avg: Option<bool>, x: &[T], out: &mut [T]) {
    let (plane, pooled) = (g.h * g.w, g.oh * g.ow);
    if pooled == 0 {
        return;
    }
    // Each output row accumulates its window row by row, tap by tap (a strided run of
    // the input row per tap): every output sees its taps in the direct loop's order.
    let tiled = pool_tiles::tiles(g);
    let taps = Taps::new(g);
    let per_plane = |p: usize, out: &mut [T]| {
        let src = &x[p * plane..(p + 1) * plane];
        if tiled {
            return match (g.kh, g.kw) {
                (2, 2) => pool_tiles::pool_plane(g, [2, 2], avg, src, out),
                _ => pool_tiles::pool_plane(g, [g.kh, g.kw], avg, src, out),
            };
        }
        if let Some(taps) = &taps {
            // Narrow rows: each output folds its taps through the table, in the same
            // order (ky, then kx) as the row loop below.
            for (pos, o) in out.iter_mut().enumerate() {
                let mut acc = if avg.is_some() { T::ZERO } else { T::MAX_ID };
                let mut inside = 0;
                for at in taps.at(g, pos).filter(|&at| at != PAD) {
                    let v = src[at as usize];
                    acc = if avg.is_some() { acc + v } else { acc.max_nan(v) };
                    inside += 1;
                }
                *o = match avg {
                    Some(true) => acc / T::from_usize(g.kh * g.kw),
                    Some(false) => acc / T::from_usize(inside),
                    None => acc,
                };
            }
            return;
        }
        for (y, row) in out.chunks_mut(g.ow).enumerate() {
            row.fill(if avg.is_some() { T::ZERO } else { T::MAX_ID });
            let mut rows = 0;
            for ky in 0..g.kh {
                let Some(iy) = g.source(0, y, ky, g.h) else { continue };
                rows += 1;
                let line = &src[iy * g.w..(iy + 1) * g.w];
                for kx in 0..g.kw {
                    let (lo, hi) = inside(g.ow, g.stride[1], kx, g.pad[1], g.w);
                    if lo == hi {
                        continue;
                    }
                    let taps = line[lo * g.stride[1] + kx - g.pad[1]..].iter().step_by(g.stride[1]);
                    let acc = row[lo..hi].iter_mut().zip(taps);
                    match avg {
                        Some(_) => acc.for_each(|(o, &v)| *o += v),
                        None => acc.for_each(|(o, &v)| *o = o.max_nan(v)),
                    }
                }
            }
            let Some(count_include_pad) = avg else { continue };
            for (xo, o) in row.iter_mut().enumerate() {
                let divisor = if count_include_pad {
                    g.kh * g.kw
                } else {
                    rows * (0..g.kw).filter(|&kx| g.source(1, xo, kx, g.w).is_some()).count()
                };
                *o = *o / T::from_usize(divisor);
            }
        }
    };
    if crate::threads::current() > 1 && out.len() >= MIN_PARALLEL_ELEMS {
        out.par_chunks_mut(pooled).enumerate().for_each(|(p, o)| per_plane(p, o));
    } else {
        out.chunks_mut(pooled).enumerate().for_each(|(p, o)| per_plane(p, o));
    }
}

/// `dx` of conv2d (geometry of the forward conv: input `x`, weight `w`, output `g`).
pub fn conv2d_grad_input(g: &Geometry, groups: usize, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_float!(class, T => {
        grad_input_typed::<T>(g, groups, ins.get(0)?, ins.get(1)?, out_mut(out)?);
        Ok(())
    })
}

/// `dw` of conv2d (geometry of the forward conv).
pub fn conv2d_grad_weight(g: &Geometry, groups: usize, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_float!(class, T => {
        grad_weight_typed::<T>(g, groups, ins.get(0)?, ins.get(1)?, out_mut(out)?);
        Ok(())
    })
}

/// Images whose im2col columns sit side by side in one GEMM operand: at most 256 KiB of
/// f32 columns, which stay in L2 between im2col and the product (the digits CNN's step,
/// batch 64: ~3.3 ms with 256 KiB batches, 3.6-4.9 with 16 MiB; AMD EPYC).
fn images_per_batch(g: &Geometry, depth: usize) -> usize {
    const COL_FLOATS: usize = 1 << 16;
    (COL_FLOATS / (depth * g.oh * g.ow).max(1)).clamp(1, g.n.max(1))
}

/// The output gradient of images `[b0, b0 + nb)`, filters of `group`, as one matrix
/// `[og, nb * plane]` (image `i`'s positions at `i * plane`).
fn gather_grad<T: Float>(
    g: &Geometry,
    groups: usize,
    grad: &[T],
    (b0, nb): (usize, usize),
    group: usize,
    dst: &mut [T],
) {
    let og = g.o / groups;
    let plane = g.oh * g.ow;
    for (f, row) in dst.chunks_mut(nb * plane).enumerate() {
        for (i, cols) in row.chunks_mut(plane).enumerate() {
            let at = ((b0 + i) * g.o + group * og + f) * plane;
            cols.copy_from_slice(&grad[at..at + plane]);
        }
    }
}

/// Adds column `cols` (one image's `[depth, plane]` block of a column-gradient matrix whose
/// rows are `width` apart) back onto the image's input gradient `dx [cg, h, w]`, zero
/// before: the transpose of the im2col, rows in order, so each value sums its terms in
/// the same order on either path. Narrow outputs sum into a zero-padded plane per channel
/// (`buf`, at least one plane of scratch; from zero, as `dx`) and store its input
/// positions.
fn col2im_add<T: Float>(
    g: &Geometry,
    (padded, buf): (Option<&Padded>, &mut [T]),
    cg: usize,
    dcol: &[T],
    (offset, width): (usize, usize),
    dx: &mut [T],
) {
    let (hw, plane, taps) = (g.h * g.w, g.oh * g.ow, g.kh * g.kw);
    let row = |r: usize| &dcol[r * width + offset..r * width + offset + plane];
    if let Some(padded) = padded {
        let buf = &mut buf[..padded.len()];
        for (ci, channel) in dx.chunks_exact_mut(hw).take(cg).enumerate() {
            buf.fill(T::ZERO);
            for (t, tap) in padded.offsets.chunks_exact(plane).enumerate() {
                row(ci * taps + t).iter().zip(tap).for_each(|(&v, &at)| buf[at as usize] += v);
            }
            padded.store(g, buf, channel);
        }
        return;
    }
    for r in 0..cg * taps {
        let (ci, ky, kx) = (r / taps, r / g.kw % g.kh, r % g.kw);
        let channel = &mut dx[ci * hw..(ci + 1) * hw];
        let (lo, hi) = inside(g.ow, g.stride[1], kx * g.dilation[1], g.pad[1], g.w);
        for (y, src) in row(r).chunks(g.ow).enumerate() {
            let Some(iy) = g.source(0, y, ky, g.h).filter(|_| lo < hi) else { continue };
            let dst = &mut channel[iy * g.w..(iy + 1) * g.w];
            let first = lo * g.stride[1] + kx * g.dilation[1] - g.pad[1];
            for (j, &v) in src[lo..hi].iter().enumerate() {
                dst[first + j * g.stride[1]] += v;
            }
        }
    }
}

fn grad_input_typed<T: Float + Gemm>(g: &Geometry, groups: usize, grad: &[T], w: &[T], dx: &mut [T]) {
    let (cg, og) = (g.c / groups, g.o / groups);
    let (plane, depth, image) = (g.oh * g.ow, cg * g.kh * g.kw, g.c * g.h * g.w);
    dx.fill(T::ZERO);
    if plane == 0 || depth == 0 || og == 0 || image == 0 {
        return;
    }
    let per = images_per_batch(g, depth);
    let threads = crate::threads::current();
    let padded = Padded::new(g);
    with_scratch::<T, _>((depth + og) * per * plane, |scratch| {
        let (dcol, gm) = scratch.split_at_mut(depth * per * plane);
        for group in 0..groups {
            let filters = &w[group * og * depth..(group + 1) * og * depth];
            for b0 in (0..g.n).step_by(per) {
                let nb = per.min(g.n - b0);
                let width = nb * plane;
                let (dcol, gm) = (&mut dcol[..depth * width], &mut gm[..og * width]);
                gather_grad(g, groups, grad, (b0, nb), group, gm);
                // dcol [depth, width] = filters^T [depth, og] @ grad [og, width].
                let t = if depth * og * width >= MIN_PARALLEL_MACS { threads } else { 1 };
                T::gemm(depth, og, width, filters, (1, depth), gm, (width, 1), dcol, width, t);
                let dcol = &*dcol;
                // One padded plane of scratch per worker.
                let buf = || vec![T::ZERO; padded_len(padded.as_ref(), 1, 1)];
                let scatter = |buf: &mut Vec<T>, (i, dx): (usize, &mut [T])| {
                    let channels = &mut dx[group * cg * g.h * g.w..(group + 1) * cg * g.h * g.w];
                    col2im_add(g, (padded.as_ref(), buf), cg, dcol, (i * plane, width), channels);
                };
                let images = &mut dx[b0 * image..(b0 + nb) * image];
                if threads > 1 && nb > 1 {
                    images.par_chunks_mut(image).enumerate().for_each_init(buf, scatter);
                } else {
                    let mut buf = buf();
                    images.chunks_mut(image).enumerate().for_each(|item| scatter(&mut buf, item));
                }
            }
        }
    });
}

fn grad_weight_typed<T: Float + Gemm>(g: &Geometry, groups: usize, x: &[T], grad: &[T], dw: &mut [T]) {
    let (cg, og) = (g.c / groups, g.o / groups);
    let (plane, depth) = (g.oh * g.ow, cg * g.kh * g.kw);
    dw.fill(T::ZERO);
    if plane == 0 || depth == 0 || og == 0 {
        return;
    }
    let per = images_per_batch(g, depth);
    let threads = crate::threads::current();
    let padded = Padded::new(g);
    let planes_len = padded_len(padded.as_ref(), per, cg);
    with_scratch::<T, _>((depth + og) * per * plane + depth * og + planes_len, |scratch| {
        let (col, rest) = scratch.split_at_mut(depth * per * plane);
        let (gm, rest) = rest.split_at_mut(og * per * plane);
        let (dwt, planes) = rest.split_at_mut(depth * og);
        for group in 0..groups {
            for b0 in (0..g.n).step_by(per) {
                let nb = per.min(g.n - b0);
                let width = nb * plane;
                let (col, gm) = (&mut col[..depth * width], &mut gm[..og * width]);
                let images: Vec<&[T]> = (b0..b0 + nb)
                    .map(|b| &x[(b * g.c + group * cg) * g.h * g.w..(b * g.c + (group + 1) * cg) * g.h * g.w])
                    .collect();
                im2col(g, padded.as_ref(), &images, &mut planes[..padded_len(padded.as_ref(), nb, cg)], col, threads);
                gather_grad(g, groups, grad, (b0, nb), group, gm);
                // dw^T [depth, og] += col [depth, width] @ grad^T [width, og], image batches
                // in order. (As dw = grad @ col^T the GEMM packed the large col read
                // transposed: the digits CNN's conv2 weight gradient took 1.4 ms.)
                let t = if og * width * depth >= MIN_PARALLEL_MACS { threads } else { 1 };
                T::gemm_acc(depth, width, og, col, (width, 1), gm, (1, width), dwt, og, t, b0 > 0);
            }
            let dwg = &mut dw[group * og * depth..(group + 1) * og * depth];
            for (r, row) in dwt.chunks(og).enumerate() {
                for (f, &v) in row.iter().enumerate() {
                    dwg[f * depth + r] = v;
                }
            }
        }
    });
}

/// Position (row-major index in the plane) of the first maximum of window `(y, x)` of
/// `src`; NaN counts as the maximum, as in the forward pool.
fn window_argmax<T: Float>(g: &Geometry, src: &[T], y: usize, xo: usize) -> Option<usize> {
    let rows = (0..g.kh).filter_map(|ky| g.source(0, y, ky, g.h));
    first_max(
        src,
        rows.flat_map(|iy| (0..g.kw).filter_map(move |kx| g.source(1, xo, kx, g.w)).map(move |ix| iy * g.w + ix)),
    )
}

/// The first of `positions` holding the maximum of `src` over them (NaN counts as the
/// maximum).
#[inline(always)]
fn first_max<T: Float>(src: &[T], positions: impl Iterator<Item = usize>) -> Option<usize> {
    let mut best: Option<(usize, T)> = None;
    for at in positions {
        let v = src[at];
        let better = match best {
            None => true,
            Some((_, b)) => !b.is_nan() && (v.is_nan() || v > b),
        };
        if better {
            best = Some((at, v));
        }
    }
    best.map(|(at, _)| at)
}

/// `max_pool2d_grad(x, g)` (`select = false`, out like x) or `max_pool2d_select(x, t)`
/// (`select = true`, out pooled).
pub fn max_pool_route(g: &Geometry, select: bool, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    let fold = if select { Fold::Select } else { Fold::Route };
    if class == Class::F32 && pool_tiles::max_pool_f32(g, fold, ins.get(0)?, ins.get(1)?, out_mut(out)?) {
        return Ok(());
    }
    with_float!(class, T => {
        route_typed::<T>(g, select, ins.get(0)?, ins.get(1)?, out_mut(out)?);
        Ok(())
    })
}

fn route_typed<T: Float>(g: &Geometry, select: bool, x: &[T], v: &[T], out: &mut [T]) {
    let (plane, pooled) = (g.h * g.w, g.oh * g.ow);
    if plane == 0 || pooled == 0 {
        out.fill(T::ZERO);
        return;
    }
    // One plane per task: each writes only its own output plane, in the same order
    // (bit-identical for every thread count).
    let tiled = pool_tiles::tiles(g);
    let taps = Taps::new(g);
    let route = |p: usize, dst: &mut [T]| {
        let src = &x[p * plane..(p + 1) * plane];
        if !select {
            dst.fill(T::ZERO);
        }
        if tiled {
            let v = if select { &v[p * plane..(p + 1) * plane] } else { &v[p * pooled..(p + 1) * pooled] };
            return match (g.kh, g.kw) {
                (2, 2) => pool_tiles::route_plane(g, [2, 2], select, src, v, dst),
                _ => pool_tiles::route_plane(g, [g.kh, g.kw], select, src, v, dst),
            };
        }
        for y in 0..g.oh {
            for xo in 0..g.ow {
                let window = match &taps {
                    Some(taps) => {
                        first_max(src, taps.at(g, y * g.ow + xo).filter(|&at| at != PAD).map(|at| at as usize))
                    }
                    None => window_argmax(g, src, y, xo),
                };
                let Some(at) = window else { continue };
                let o = y * g.ow + xo;
                if select {
                    dst[o] = v[p * plane + at];
                } else {
                    dst[at] += v[p * pooled + o];
                }
            }
        }
    };
    let chunk = if select { pooled } else { plane };
    if crate::threads::current() > 1 && out.len() >= MIN_PARALLEL_ELEMS / 8 {
        out.par_chunks_mut(chunk).enumerate().for_each(|(p, dst)| route(p, dst));
    } else {
        out.chunks_mut(chunk).enumerate().for_each(|(p, dst)| route(p, dst));
    }
}

/// `avg_pool2d_grad(g)`: each window's gradient spread over its in-range positions.
pub fn avg_pool_grad(g: &Geometry, count_include_pad: bool, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_float!(class, T => {
        let (grad, dx): (&[T], &mut [T]) = (ins.get(0)?, out_mut(out)?);
        let (plane, pooled) = (g.h * g.w, g.oh * g.ow);
        dx.fill(T::ZERO);
        for p in 0..g.n * g.c {
            for y in 0..g.oh {
                for xo in 0..g.ow {
                    let rows = || (0..g.kh).filter_map(|ky| g.source(0, y, ky, g.h));
                    let cols = || (0..g.kw).filter_map(|kx| g.source(1, xo, kx, g.w));
                    let divisor = if count_include_pad { g.kh * g.kw } else { rows().count() * cols().count() };
                    let share = grad[p * pooled + y * g.ow + xo] / T::from_usize(divisor);
                    for iy in rows() {
                        for ix in cols() {
                            dx[p * plane + iy * g.w + ix] += share;
                        }
                    }
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Geometry of a conv with per-side padding `[top, left, bottom, right]`.
    fn geometry(
        x: [usize; 4],
        o: usize,
        k: [usize; 2],
        stride: [usize; 2],
        dil: [usize; 2],
        pad: [usize; 4],
    ) -> Geometry {
        let extent = |a: usize| (x[2 + a] + pad[a] + pad[2 + a] - dil[a] * (k[a] - 1) - 1) / stride[a] + 1;
        let [n, c, h, w] = x;
        Geometry {
            n,
            c,
            h,
            w,
            o,
            oh: extent(0),
            ow: extent(1),
            kh: k[0],
            kw: k[1],
            stride,
            dilation: dil,
            pad: [pad[0], pad[1]],
        }
    }

    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// The direct loop in f64: each output and the sum of its terms' magnitudes.
    fn oracle(g: &Geometry, groups: usize, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<(f64, f64)> {
        let (cg, og) = (g.c / groups, g.o / groups);
        let mut out = Vec::new();
        for b in 0..g.n {
            for f in 0..g.o {
                for y in 0..g.oh {
                    for xo in 0..g.ow {
                        let b0 = bias.map_or(0.0, |bias| bias[f] as f64);
                        let (mut acc, mut mag) = (b0, b0.abs());
                        for ci in 0..cg {
                            let chan = f / og * cg + ci;
                            for ky in 0..g.kh {
                                let Some(iy) = g.source(0, y, ky, g.h) else { continue };
                                for kx in 0..g.kw {
                                    let Some(ix) = g.source(1, xo, kx, g.w) else { continue };
                                    let t = x[((b * g.c + chan) * g.h + iy) * g.w + ix] as f64
                                        * w[((f * cg + ci) * g.kh + ky) * g.kw + kx] as f64;
                                    acc += t;
                                    mag += t.abs();
                                }
                            }
                        }
                        out.push((acc, mag));
                    }
                }
            }
        }
        out
    }

    /// Each case against the f64 loop (within `depth + 1` roundings of the terms'
    /// magnitudes) and bit for bit across 1, 2 and 3 threads; the cases take the im2col
    /// and pointwise paths, split by products and inside one product.
    #[test]
    fn gemm_conv_matches_the_direct_loop_and_every_thread_count() {
        #[rustfmt::skip]
        let cases = [
            // (input, filters, kernel, stride, dilation, pad, groups, bias)
            ([1, 3, 23, 19], 5, [3, 3], [1, 1], [1, 1], [1, 1, 1, 1], 1, true),
            ([2, 4, 17, 16], 6, [5, 3], [2, 3], [1, 2], [2, 0, 3, 1], 2, false),
            ([4, 8, 16, 16], 16, [3, 3], [1, 1], [1, 1], [1, 1, 1, 1], 2, true),
            ([1, 16, 32, 32], 32, [3, 3], [1, 1], [1, 1], [1, 1, 1, 1], 1, true),
            ([1, 64, 28, 28], 48, [1, 1], [1, 1], [1, 1], [0, 0, 0, 0], 1, false),
            ([3, 12, 9, 11], 12, [1, 1], [1, 1], [1, 1], [0, 0, 0, 0], 3, true),
            ([1, 8, 20, 20], 24, [1, 1], [2, 2], [1, 1], [0, 0, 0, 0], 1, true),
            ([2, 6, 7, 7], 6, [3, 3], [1, 1], [2, 2], [0, 0, 2, 2], 6, true),
            ([1, 2, 3, 3], 4, [3, 3], [1, 1], [1, 1], [3, 3, 3, 3], 1, true),
            ([1, 3, 64, 64], 8, [7, 7], [2, 2], [1, 1], [3, 3, 3, 3], 1, true),
            ([1, 2, 3, 1], 3, [1, 1], [1, 4], [1, 1], [0, 5, 0, 5], 1, true),
        ];
        for (i, &(xd, o, k, stride, dil, pad, groups, has_bias)) in cases.iter().enumerate() {
            let g = geometry(xd, o, k, stride, dil, pad);
            let x = values(xd.iter().product(), 3 * i as u64 + 1);
            let w = values(o * xd[1] / groups * k[0] * k[1], 3 * i as u64 + 2);
            let bias = has_bias.then(|| values(o, 3 * i as u64 + 3));
            let run = |threads: usize| {
                let mut out = vec![f32::NAN; g.n * g.o * g.oh * g.ow];
                crate::threads::pool(threads)
                    .unwrap()
                    .install(|| conv_typed(&g, groups, &x, &w, bias.as_deref(), &mut out));
                out
            };
            let one = run(1);
            let depth = xd[1] / groups * k[0] * k[1];
            let u = f32::EPSILON as f64 / 2.0;
            for (j, (&got, &(want, mag))) in one.iter().zip(&oracle(&g, groups, &x, &w, bias.as_deref())).enumerate() {
                let bound = (depth + 1) as f64 * u * mag;
                assert!((got as f64 - want).abs() <= bound, "case {i} output {j}: {got} vs {want} (bound {bound})");
            }
            for threads in [2, 3] {
                assert!(
                    one.iter().zip(&run(threads)).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "case {i}: 1 and {threads} threads differ"
                );
            }
        }
    }

    /// The padded-plane im2col and col2im of narrow outputs give the same bits as the
    /// strided-row ones (both run on any geometry), and the gradients the same bits on 1,
    /// 2 and 3 threads: strides, dilation, padding past the window, uneven padding.
    #[test]
    fn padded_taps_match_row_copies_and_every_thread_count() {
        #[rustfmt::skip]
        let cases = [
            // (input, filters, kernel, stride, dilation, pad, groups)
            ([64, 32, 4, 4], 64, [3, 3], [1, 1], [1, 1], [1, 1, 1, 1], 1),
            ([5, 1, 8, 8], 3, [3, 3], [1, 1], [1, 1], [1, 1, 1, 1], 1),
            ([2, 4, 9, 11], 6, [3, 2], [2, 3], [1, 2], [2, 0, 3, 1], 2),
            ([3, 2, 3, 3], 4, [3, 3], [1, 1], [1, 1], [3, 3, 3, 3], 1),
            ([2, 3, 13, 5], 2, [5, 3], [3, 1], [2, 1], [0, 4, 1, 0], 1),
            ([1, 2, 3, 1], 3, [1, 1], [1, 4], [1, 1], [0, 5, 0, 5], 1),
        ];
        for (i, &(xd, o, k, stride, dil, pad, groups)) in cases.iter().enumerate() {
            let g = geometry(xd, o, k, stride, dil, pad);
            let padded = Padded::new(&g).expect("a narrow output");
            let cg = xd[1] / groups;
            let (plane, depth) = (g.oh * g.ow, cg * k[0] * k[1]);
            let x = values(xd.iter().product(), 11 * i as u64 + 1);
            let images: Vec<&[f32]> = x.chunks(cg * g.h * g.w).take(xd[0]).collect();
            let im2col_with = |p: Option<&Padded>| {
                let mut col = vec![f32::NAN; depth * images.len() * plane];
                let mut planes = vec![f32::NAN; padded_len(p, images.len(), cg)];
                im2col(&g, p, &images, &mut planes, &mut col, 1);
                col
            };
            let rows = im2col_with(None);
            assert!(
                rows.iter().zip(&im2col_with(Some(&padded))).all(|(a, b)| a.to_bits() == b.to_bits()),
                "case {i}: im2col"
            );
            let width = images.len() * plane;
            let dcol = values(depth * width, 11 * i as u64 + 2);
            let col2im_with = |p: Option<&Padded>| {
                let mut dx = vec![0.0f32; cg * g.h * g.w];
                let mut buf = vec![f32::NAN; padded_len(p, 1, 1)];
                col2im_add(&g, (p, &mut buf), cg, &dcol, ((images.len() - 1) * plane, width), &mut dx);
                dx
            };
            let rows = col2im_with(None);
            assert!(
                rows.iter().zip(&col2im_with(Some(&padded))).all(|(a, b)| a.to_bits() == b.to_bits()),
                "case {i}: col2im"
            );
            let w = values(o * depth, 11 * i as u64 + 3);
            let grad = values(g.n * o * plane, 11 * i as u64 + 4);
            let grads = |threads: usize| {
                let (mut dx, mut dw) = (vec![f32::NAN; x.len()], vec![f32::NAN; w.len()]);
                crate::threads::pool(threads).unwrap().install(|| {
                    grad_input_typed(&g, groups, &grad, &w, &mut dx);
                    grad_weight_typed(&g, groups, &x, &grad, &mut dw);
                });
                (dx, dw)
            };
            let one = grads(1);
            for threads in [2, 3] {
                let other = grads(threads);
                let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same(&one.0, &other.0) && same(&one.1, &other.1), "case {i}: 1 and {threads} threads differ");
            }
        }
    }

    /// A pool case: input, kernel, stride, padding (top, left, bottom, right).
    type PoolCase = ([usize; 4], [usize; 2], [usize; 2], [usize; 4]);

    /// Pools whose windows tile the input, some with rows and columns left over: one plane
    /// per vector with a masked tail, several planes per vector, and planes after the last
    /// whole group of them.
    #[rustfmt::skip]
    const TILED_POOLS: [PoolCase; 7] = [
        ([3, 5, 8, 8], [2, 2], [2, 2], [0, 0, 0, 0]),
        ([2, 3, 9, 11], [3, 3], [3, 3], [0, 0, 0, 0]),
        ([1, 2, 5, 7], [2, 2], [2, 2], [0, 0, 0, 0]),
        ([4, 9, 4, 4], [2, 2], [2, 2], [0, 0, 0, 0]),
        ([3, 7, 9, 11], [3, 3], [3, 3], [0, 0, 0, 0]),
        ([1, 3, 11, 13], [2, 2], [2, 2], [0, 0, 0, 0]),
        ([2, 3, 8, 8], [4, 1], [4, 1], [0, 0, 0, 0]),
    ];

    /// The pools, bit for bit against the direct loop (taps in the same order) and across
    /// thread counts, windows hanging into the padding and past the input.
    #[test]
    fn pools_match_the_direct_loop_bit_for_bit() {
        fn direct(g: &Geometry, avg: Option<bool>, x: &[f32]) -> Vec<f32> {
            let mut out = Vec::new();
            for plane in 0..g.n * g.c {
                let src = &x[plane * g.h * g.w..(plane + 1) * g.h * g.w];
                for y in 0..g.oh {
                    for xo in 0..g.ow {
                        let (mut acc, mut count) = (if avg.is_some() { 0.0 } else { f32::NEG_INFINITY }, 0);
                        for ky in 0..g.kh {
                            let Some(iy) = g.source(0, y, ky, g.h) else { continue };
                            for kx in 0..g.kw {
                                let Some(ix) = g.source(1, xo, kx, g.w) else { continue };
                                let v = src[iy * g.w + ix];
                                acc = if avg.is_some() { acc + v } else { acc.max_nan(v) };
                                count += 1;
                            }
                        }
                        out.push(match avg {
                            None => acc,
                            Some(true) => acc / (g.kh * g.kw) as f32,
                            Some(false) => acc / count as f32,
                        });
                    }
                }
            }
            out
        }
        #[rustfmt::skip]
        let cases = [
            // (input, kernel, stride, pad)
            ([1, 64, 112, 112], [3, 3], [2, 2], [1, 1, 1, 1]),
            ([2, 3, 9, 10], [2, 3], [2, 1], [1, 2, 0, 1]),
            ([1, 2, 3, 1], [1, 1], [1, 4], [0, 5, 0, 5]),
            ([1, 1, 4, 4], [4, 4], [1, 1], [3, 3, 3, 3]),
        ];
        for (i, &(xd, k, stride, pad)) in cases.iter().chain(&TILED_POOLS).enumerate() {
            let g = geometry(xd, xd[1], k, stride, [1, 1], pad);
            let mut x = values(xd.iter().product(), 7 * i as u64 + 1);
            // A NaN, and a -0 beside a +0 (a max keeps the first of the two).
            x[1] = f32::NAN;
            x[2] = -0.0;
            x[3] = 0.0;
            for avg in [None, Some(true), Some(false)] {
                let want = direct(&g, avg, &x);
                for threads in [1, 2, 3] {
                    let mut out = vec![0.0; want.len()];
                    crate::threads::pool(threads).unwrap().install(|| pool_typed(&g, avg, &x, &mut out));
                    assert!(
                        want.iter().zip(&out).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "case {i} {avg:?} on {threads} threads differs from the direct loop"
                    );
                    // The vector kernel, where this host and geometry take it.
                    let mut out = vec![0.0; want.len()];
                    let fast = avg.is_none()
                        && crate::threads::pool(threads)
                            .unwrap()
                            .install(|| pool_tiles::max_pool_f32(&g, Fold::Max, &x, &[], &mut out));
                    assert!(
                        !fast || want.iter().zip(&out).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "case {i}: the vector max pool on {threads} threads differs from the direct loop"
                    );
                }
            }
        }
    }

    /// Max pooling's gradient routing and selection, bit for bit against the direct loop
    /// (each window's first maximum, NaN counting as the maximum) on every path (tiled
    /// windows, the tap table, strided rows) and thread count, with ties, NaN, infinities
    /// and signed zeros.
    #[test]
    fn max_pool_routes_match_the_direct_loop_bit_for_bit() {
        fn direct(g: &Geometry, select: bool, x: &[f32], v: &[f32]) -> Vec<f32> {
            let (plane, pooled) = (g.h * g.w, g.oh * g.ow);
            let mut out = vec![0.0f32; if select { g.n * g.c * pooled } else { x.len() }];
            for p in 0..g.n * g.c {
                for y in 0..g.oh {
                    for xo in 0..g.ow {
                        let mut best: Option<(usize, f32)> = None;
                        for ky in 0..g.kh {
                            let Some(iy) = g.source(0, y, ky, g.h) else { continue };
                            for kx in 0..g.kw {
                                let Some(ix) = g.source(1, xo, kx, g.w) else { continue };
                                let at = p * plane + iy * g.w + ix;
                                let better = match best {
                                    None => true,
                                    Some((_, b)) => !b.is_nan() && (x[at].is_nan() || x[at] > b),
                                };
                                if better {
                                    best = Some((at, x[at]));
                                }
                            }
                        }
                        let Some((at, _)) = best else { continue };
                        let o = p * pooled + y * g.ow + xo;
                        if select {
                            out[o] = v[at];
                        } else {
                            out[at] += v[o];
                        }
                    }
                }
            }
            out
        }
        #[rustfmt::skip]
        let cases = [
            // (input, kernel, stride, pad): overlapping windows, padding
            ([2, 3, 9, 10], [3, 3], [2, 2], [1, 1, 1, 1]),
            ([1, 4, 33, 40], [3, 2], [2, 1], [1, 0, 1, 1]),
        ];
        for (i, &(xd, k, stride, pad)) in TILED_POOLS.iter().chain(&cases).enumerate() {
            let g = geometry(xd, xd[1], k, stride, [1, 1], pad);
            // Values on a coarse grid, so that windows hold ties.
            let mut x: Vec<f32> =
                values(xd.iter().product(), 5 * i as u64 + 1).iter().map(|v| (v * 3.0).round()).collect();
            for (j, special) in [f32::NAN, -0.0, 0.0, f32::INFINITY, f32::NEG_INFINITY].into_iter().enumerate() {
                x[3 * j + 1] = special;
            }
            for select in [false, true] {
                let mut v = values(if select { x.len() } else { g.n * g.c * g.oh * g.ow }, 5 * i as u64 + 2);
                // Routed onto zero, a -0 gradient arrives as +0.
                v[0] = -0.0;
                let want = direct(&g, select, &x, &v);
                for threads in [1, 2, 3] {
                    let mut out = vec![f32::NAN; want.len()];
                    crate::threads::pool(threads).unwrap().install(|| route_typed(&g, select, &x, &v, &mut out));
                    assert!(
                        want.iter().zip(&out).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "case {i} (select {select}) on {threads} threads differs from the direct loop"
                    );
                    // The vector kernel, where this host and geometry take it.
                    let mut out = vec![f32::NAN; want.len()];
                    let fold = if select { Fold::Select } else { Fold::Route };
                    let fast = crate::threads::pool(threads)
                        .unwrap()
                        .install(|| pool_tiles::max_pool_f32(&g, fold, &x, &v, &mut out));
                    assert!(
                        !fast || want.iter().zip(&out).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "case {i}: the vector {fold:?} on {threads} threads differs from the direct loop"
                    );
                }
            }
        }
    }
}
