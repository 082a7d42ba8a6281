//! Direct NCHW convolution and pooling (semantics in `rlx_ir::ops::conv`).

use crate::arena::{Args, Out, out_mut};
use crate::buffer::{Class, Float, Num};
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

pub fn conv2d(g: &Geometry, groups: usize, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_float!(class, T => {
        let bias: Option<&[T]> = if ins.len() > 2 { Some(ins.get(2)?) } else { None };
        conv_typed::<T>(g, groups, ins.get(0)?, ins.get(1)?, bias, out_mut(out)?);
        Ok(())
    })
}

fn conv_typed<T: Float>(g: &Geometry, groups: usize, x: &[T], w: &[T], bias: Option<&[T]>, out: &mut [T]) {
    let (cg, og) = (g.c / groups, g.o / groups);
    let plane = g.oh * g.ow;
    if plane == 0 {
        return;
    }
    // One task per (image, filter) output plane.
    let per_plane = |bf: usize, out: &mut [T]| {
        let (b, f) = (bf / g.o, bf % g.o);
        let group = f / og;
        for y in 0..g.oh {
            for xo in 0..g.ow {
                let mut acc = bias.map_or(T::ZERO, |bias| bias[f]);
                for ci in 0..cg {
                    let chan = group * cg + ci;
                    for ky in 0..g.kh {
                        let Some(iy) = g.source(0, y, ky, g.h) else { continue };
                        for kx in 0..g.kw {
                            let Some(ix) = g.source(1, xo, kx, g.w) else { continue };
                            let xv = x[((b * g.c + chan) * g.h + iy) * g.w + ix];
                            let wv = w[((f * cg + ci) * g.kh + ky) * g.kw + kx];
                            acc += xv * wv;
                        }
                    }
                }
                out[y * g.ow + xo] = acc;
            }
        }
    };
    if rayon::current_num_threads() > 1 && g.n * g.o > 1 {
        out.par_chunks_mut(plane).enumerate().for_each(|(bf, o)| per_plane(bf, o));
    } else {
        out.chunks_mut(plane).enumerate().for_each(|(bf, o)| per_plane(bf, o));
    }
}

/// Max pooling (`avg = None`) or average pooling (`avg = Some(count_include_pad)`).
pub fn pool(g: &Geometry, avg: Option<bool>, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_float!(class, T => {
        pool_typed::<T>(g, avg, ins.get(0)?, out_mut(out)?);
        Ok(())
    })
}

fn pool_typed<T: Float>(g: &Geometry, avg: Option<bool>, x: &[T], out: &mut [T]) {
    for plane in 0..g.n * g.c {
        let src = &x[plane * g.h * g.w..(plane + 1) * g.h * g.w];
        for y in 0..g.oh {
            for xo in 0..g.ow {
                let mut acc = if avg.is_some() { T::ZERO } else { T::MAX_ID };
                let mut count = 0usize;
                for ky in 0..g.kh {
                    let Some(iy) = g.source(0, y, ky, g.h) else { continue };
                    for kx in 0..g.kw {
                        let Some(ix) = g.source(1, xo, kx, g.w) else { continue };
                        let v = src[iy * g.w + ix];
                        acc = if avg.is_some() { acc + v } else { acc.max_nan(v) };
                        count += 1;
                    }
                }
                out[(plane * g.oh + y) * g.ow + xo] = match avg {
                    None => acc,
                    Some(true) => acc / T::from_usize(g.kh * g.kw),
                    Some(false) => acc / T::from_usize(count),
                };
            }
        }
    }
}

/// `dx` of conv2d (geometry of the forward conv: input `x`, weight `w`, output `g`).
pub fn conv2d_grad_input(g: &Geometry, groups: usize, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_float!(class, T => {
        grad_input_typed::<T>(g, groups, ins.get(0)?, ins.get(1)?, out_mut(out)?);
        Ok(())
    })
}

fn grad_input_typed<T: Float>(g: &Geometry, groups: usize, grad: &[T], w: &[T], dx: &mut [T]) {
    let (cg, og) = (g.c / groups, g.o / groups);
    let image = g.c * g.h * g.w;
    if image == 0 {
        return;
    }
    // One task per image: every output position scatters into its input window, in a
    // fixed order per image.
    let per_image = |b: usize, dx: &mut [T]| {
        dx.fill(T::ZERO);
        for f in 0..g.o {
            let group = f / og;
            for y in 0..g.oh {
                for xo in 0..g.ow {
                    let gv = grad[((b * g.o + f) * g.oh + y) * g.ow + xo];
                    for ci in 0..cg {
                        let chan = group * cg + ci;
                        for ky in 0..g.kh {
                            let Some(iy) = g.source(0, y, ky, g.h) else { continue };
                            for kx in 0..g.kw {
                                let Some(ix) = g.source(1, xo, kx, g.w) else { continue };
                                dx[(chan * g.h + iy) * g.w + ix] += gv * w[((f * cg + ci) * g.kh + ky) * g.kw + kx];
                            }
                        }
                    }
                }
            }
        }
    };
    if rayon::current_num_threads() > 1 && g.n > 1 {
        dx.par_chunks_mut(image).enumerate().for_each(|(b, d)| per_image(b, d));
    } else {
        dx.chunks_mut(image).enumerate().for_each(|(b, d)| per_image(b, d));
    }
}

/// `dw` of conv2d (geometry of the forward conv).
pub fn conv2d_grad_weight(g: &Geometry, groups: usize, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_float!(class, T => {
        grad_weight_typed::<T>(g, groups, ins.get(0)?, ins.get(1)?, out_mut(out)?);
        Ok(())
    })
}

fn grad_weight_typed<T: Float>(g: &Geometry, groups: usize, x: &[T], grad: &[T], dw: &mut [T]) {
    let (cg, og) = (g.c / groups, g.o / groups);
    let filter = cg * g.kh * g.kw;
    if filter == 0 {
        return;
    }
    // One task per filter: its taps summed over images and positions in a fixed order.
    let per_filter = |f: usize, dw: &mut [T]| {
        let group = f / og;
        for ci in 0..cg {
            let chan = group * cg + ci;
            for ky in 0..g.kh {
                for kx in 0..g.kw {
                    let mut acc = T::ZERO;
                    for b in 0..g.n {
                        for y in 0..g.oh {
                            let Some(iy) = g.source(0, y, ky, g.h) else { continue };
                            for xo in 0..g.ow {
                                let Some(ix) = g.source(1, xo, kx, g.w) else { continue };
                                acc += grad[((b * g.o + f) * g.oh + y) * g.ow + xo]
                                    * x[((b * g.c + chan) * g.h + iy) * g.w + ix];
                            }
                        }
                    }
                    dw[(ci * g.kh + ky) * g.kw + kx] = acc;
                }
            }
        }
    };
    if rayon::current_num_threads() > 1 && g.o > 1 {
        dw.par_chunks_mut(filter).enumerate().for_each(|(f, d)| per_filter(f, d));
    } else {
        dw.chunks_mut(filter).enumerate().for_each(|(f, d)| per_filter(f, d));
    }
}

/// Position (row-major index in the plane) of the first maximum of window `(y, x)` of
/// `src`; NaN counts as the maximum, as in the forward pool.
fn window_argmax<T: Float>(g: &Geometry, src: &[T], y: usize, xo: usize) -> Option<usize> {
    let mut best: Option<(usize, T)> = None;
    for ky in 0..g.kh {
        let Some(iy) = g.source(0, y, ky, g.h) else { continue };
        for kx in 0..g.kw {
            let Some(ix) = g.source(1, xo, kx, g.w) else { continue };
            let (at, v) = (iy * g.w + ix, src[iy * g.w + ix]);
            let better = match best {
                None => true,
                Some((_, b)) => !b.is_nan() && (v.is_nan() || v > b),
            };
            if better {
                best = Some((at, v));
            }
        }
    }
    best.map(|(at, _)| at)
}

/// `max_pool2d_grad(x, g)` (`select = false`, out like x) or `max_pool2d_select(x, t)`
/// (`select = true`, out pooled).
pub fn max_pool_route(g: &Geometry, select: bool, class: Class, ins: &Args, out: &mut Out) -> Result<()> {
    with_float!(class, T => {
        let (x, v, out): (&[T], &[T], &mut [T]) = (ins.get(0)?, ins.get(1)?, out_mut(out)?);
        let (plane, pooled) = (g.h * g.w, g.oh * g.ow);
        if !select {
            out.fill(T::ZERO);
        }
        for p in 0..g.n * g.c {
            let src = &x[p * plane..(p + 1) * plane];
            for y in 0..g.oh {
                for xo in 0..g.ow {
                    let Some(at) = window_argmax(g, src, y, xo) else { continue };
                    let o = p * pooled + y * g.ow + xo;
                    if select {
                        out[o] = v[p * plane + at];
                    } else {
                        out[p * plane + at] += v[o];
                    }
                }
            }
        }
        Ok(())
    })
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
