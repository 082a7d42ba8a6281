use crate::common::*;
use rlx::prelude::*;

/// Direct convolution over an explicitly zero-padded copy of the input.
fn conv_reference(x: &In, w: &In, bias: Option<&[f64]>, p: &Conv2dParams) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    let [n, c, h, wd] = [x.dims[0], x.dims[1], x.dims[2], x.dims[3]];
    let [o, cg, kh, kw] = [w.dims[0], w.dims[1], w.dims[2], w.dims[3]];
    let [pt, pl, pb, pr] = p.padding;
    let (ph, pw) = (h + pt + pb, wd + pl + pr);
    let mut padded = vec![0.0; n * c * ph * pw];
    for b in 0..n {
        for ch in 0..c {
            for y in 0..h {
                for xx in 0..wd {
                    padded[((b * c + ch) * ph + y + pt) * pw + xx + pl] = x.values[((b * c + ch) * h + y) * wd + xx];
                }
            }
        }
    }
    let oh = (ph - p.dilation[0] * (kh - 1) - 1) / p.stride[0] + 1;
    let ow = (pw - p.dilation[1] * (kw - 1) - 1) / p.stride[1] + 1;
    let og = o / p.groups;
    let (mut vals, mut mags) = (Vec::new(), Vec::new());
    for b in 0..n {
        for f in 0..o {
            let g = f / og;
            for y in 0..oh {
                for xx in 0..ow {
                    let mut s = bias.map_or(0.0, |bb| bb[f]);
                    let mut m = s.abs();
                    for ci in 0..cg {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = y * p.stride[0] + ky * p.dilation[0];
                                let ix = xx * p.stride[1] + kx * p.dilation[1];
                                let t = padded[((b * c + g * cg + ci) * ph + iy) * pw + ix]
                                    * w.values[((f * cg + ci) * kh + ky) * kw + kx];
                                s += t;
                                m += t.abs();
                            }
                        }
                    }
                    vals.push(s);
                    mags.push(m);
                }
            }
        }
    }
    (vec![n, o, oh, ow], vals, mags)
}

#[test]
fn conv2d_matches_reference() {
    let mut rng = Rng::new(70);
    let p = Conv2dParams::default;
    let cases: Vec<(&[usize], &[usize], Conv2dParams, bool)> = vec![
        (&[1, 1, 1, 1], &[1, 1, 1, 1], p(), false),
        (&[2, 3, 7, 6], &[4, 3, 3, 3], p(), true),
        (&[1, 2, 9, 9], &[3, 2, 3, 2], p().with_stride(2).with_padding(1), true),
        (&[1, 2, 8, 7], &[2, 2, 3, 3], Conv2dParams { padding: [2, 0, 1, 3], ..p() }, false),
        (&[1, 3, 11, 10], &[2, 3, 3, 3], Conv2dParams { dilation: [2, 3], ..p() }, true),
        (&[2, 4, 5, 5], &[4, 1, 3, 3], Conv2dParams { groups: 4, padding: [1; 4], ..p() }, true),
        (&[1, 6, 4, 4], &[9, 2, 1, 2], Conv2dParams { groups: 3, stride: [1, 2], ..p() }, false),
        (&[0, 2, 4, 4], &[3, 2, 3, 3], p(), true),
    ];
    for dtype in FLOATS {
        for (xd, wd, params, with_bias) in &cases {
            let x = rand_input(&mut rng, dtype, xd, -2.0, 2.0);
            let w = rand_input(&mut rng, dtype, wd, -1.0, 1.0);
            let b = rand_input(&mut rng, dtype, &[wd[0]], -1.0, 1.0);
            let (out, expected, mags) = conv_reference(&x, &w, with_bias.then_some(&b.values[..]), params);
            let taps = (wd[1] * wd[2] * wd[3]) as f64;
            let got = eval_ok(&[x, w, b], |g, v| g.conv2d(v[0], v[1], with_bias.then_some(v[2]), *params));
            assert_close(
                &got,
                dtype,
                &out,
                &expected,
                |i| bound(dtype, taps + 2.0, mags[i], expected[i]),
                &format!("conv2d {dtype} x{xd:?} w{wd:?} {params:?}"),
            );
        }
    }
}

/// conv2d_grad_input and conv2d_grad_weight against f64 sums taken straight from the
/// forward's definition: narrow outputs (the kernels' tap-table path), wide ones (row
/// copies), strides, dilation, uneven padding, groups, and batches of images large
/// enough that the weight gradient sums several GEMMs.
#[test]
fn conv2d_gradients_match_reference() {
    let mut rng = Rng::new(71);
    let p = Conv2dParams::default;
    let cases: Vec<(&[usize], &[usize], Conv2dParams)> = vec![
        (&[3, 2, 6, 5], &[4, 2, 3, 3], p().with_padding(1)),
        (
            &[2, 4, 9, 40],
            &[6, 2, 3, 2],
            Conv2dParams { stride: [2, 1], padding: [1, 0, 1, 2], dilation: [1, 2], groups: 2 },
        ),
        (&[7, 3, 20, 37], &[5, 3, 3, 3], p().with_padding(1)),
        (&[2, 3, 18, 33], &[4, 3, 1, 1], p()),
    ];
    for (xd, wd, params) in &cases {
        let x = rand_input(&mut rng, DType::F32, xd, -2.0, 2.0);
        let w = rand_input(&mut rng, DType::F32, wd, -1.0, 1.0);
        let (out, _, _) = conv_reference(&x, &w, None, params);
        let grad = rand_input(&mut rng, DType::F32, &out, -1.0, 1.0);
        let [n, c, h, wdt] = [xd[0], xd[1], xd[2], xd[3]];
        let [o, cg, kh, kw] = [wd[0], wd[1], wd[2], wd[3]];
        let [oh, ow] = [out[2], out[3]];
        let og = o / params.groups;
        let (mut dx, mut dx_mag) = (vec![0.0; x.values.len()], vec![0.0; x.values.len()]);
        let (mut dw, mut dw_mag) = (vec![0.0; w.values.len()], vec![0.0; w.values.len()]);
        for b in 0..n {
            for f in 0..o {
                for y in 0..oh {
                    for xo in 0..ow {
                        let gv = grad.values[((b * o + f) * oh + y) * ow + xo];
                        for ci in 0..cg {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (y * params.stride[0] + ky * params.dilation[0]) as isize
                                        - params.padding[0] as isize;
                                    let ix = (xo * params.stride[1] + kx * params.dilation[1]) as isize
                                        - params.padding[1] as isize;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= wdt as isize {
                                        continue;
                                    }
                                    let xi = ((b * c + f / og * cg + ci) * h + iy as usize) * wdt + ix as usize;
                                    let wi = ((f * cg + ci) * kh + ky) * kw + kx;
                                    dx[xi] += gv * w.values[wi];
                                    dx_mag[xi] += (gv * w.values[wi]).abs();
                                    dw[wi] += gv * x.values[xi];
                                    dw_mag[wi] += (gv * x.values[xi]).abs();
                                }
                            }
                        }
                    }
                }
            }
        }
        let what = format!("x{xd:?} w{wd:?} {params:?}");
        let got = eval_ok(&[grad.clone(), w.clone()], |g, v| g.conv2d_grad_input(v[0], v[1], *params, [n, c, h, wdt]));
        let terms = (o * kh * kw) as f64;
        assert_close(
            &got,
            DType::F32,
            xd,
            &dx,
            |i| bound(DType::F32, terms + 2.0, dx_mag[i], dx[i]),
            &format!("dx {what}"),
        );
        let got = eval_ok(&[x.clone(), grad], |g, v| g.conv2d_grad_weight(v[0], v[1], *params, [o, cg, kh, kw]));
        let terms = (n * oh * ow) as f64;
        assert_close(
            &got,
            DType::F32,
            wd,
            &dw,
            |i| bound(DType::F32, terms + 2.0, dw_mag[i], dw[i]),
            &format!("dw {what}"),
        );
    }
}

#[test]
fn conv2d_rejects_bad_geometry() {
    let x = || input(DType::F32, &[1, 4, 5, 5], vec![0.0; 100]);
    let e = eval(&[x(), input(DType::F32, &[2, 3, 3, 3], vec![0.0; 54])], |g, v| {
        g.conv2d(v[0], v[1], None, Conv2dParams::default())
    })
    .unwrap_err();
    assert!(e.message().contains("groups"), "{e}");
    let e = eval(&[x(), input(DType::F32, &[2, 4, 7, 3], vec![0.0; 168])], |g, v| {
        g.conv2d(v[0], v[1], None, Conv2dParams::default())
    })
    .unwrap_err();
    assert!(e.message().contains("height"), "{e}");
    let e = eval(&[x(), input(DType::F32, &[2, 4, 3, 3], vec![0.0; 72])], |g, v| {
        g.conv2d(v[0], v[1], None, Conv2dParams { stride: [0, 1], ..Default::default() })
    })
    .unwrap_err();
    assert!(e.message().contains("stride"), "{e}");
}

fn pool_reference(x: &In, p: &PoolParams, avg: Option<bool>) -> (Vec<usize>, Vec<f64>) {
    let [n, c, h, w] = [x.dims[0], x.dims[1], x.dims[2], x.dims[3]];
    let [pt, pl, pb, pr] = p.padding;
    let oh = (h + pt + pb - p.kernel[0]) / p.stride[0] + 1;
    let ow = (w + pl + pr - p.kernel[1]) / p.stride[1] + 1;
    let mut vals = Vec::new();
    for plane in 0..n * c {
        for y in 0..oh {
            for xx in 0..ow {
                let mut window = Vec::new();
                for ky in 0..p.kernel[0] {
                    for kx in 0..p.kernel[1] {
                        let (iy, ix) = (
                            (y * p.stride[0] + ky) as isize - pt as isize,
                            (xx * p.stride[1] + kx) as isize - pl as isize,
                        );
                        if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w {
                            window.push(x.values[(plane * h + iy as usize) * w + ix as usize]);
                        }
                    }
                }
                vals.push(match avg {
                    None => window
                        .iter()
                        .fold(f64::NEG_INFINITY, |m, &v| if m.is_nan() || v.is_nan() { f64::NAN } else { m.max(v) }),
                    Some(true) => window.iter().sum::<f64>() / (p.kernel[0] * p.kernel[1]) as f64,
                    Some(false) => window.iter().sum::<f64>() / window.len() as f64,
                });
            }
        }
    }
    (vec![n, c, oh, ow], vals)
}

#[test]
fn pooling_matches_reference() {
    let mut rng = Rng::new(71);
    let cases = [
        ([1usize, 1, 1, 1], PoolParams::square(1)),
        ([2, 3, 8, 8], PoolParams::square(2)),
        ([1, 2, 7, 9], PoolParams { kernel: [3, 3], stride: [2, 2], padding: [1; 4] }),
        ([1, 1, 5, 6], PoolParams { kernel: [2, 3], stride: [1, 2], padding: [0, 2, 1, 0] }),
    ];
    for dtype in FLOATS {
        for (dims, p) in &cases {
            for avg in [None, Some(true), Some(false)] {
                let mut x = rand_input(&mut rng, dtype, dims, -5.0, 5.0);
                if avg.is_none() && x.values.len() > 4 {
                    x.values[3] = f64::NAN;
                }
                let (out, expected) = pool_reference(&x, p, avg);
                let got = eval_ok(&[x], |g, v| match avg {
                    None => g.max_pool2d(v[0], *p),
                    Some(inc) => g.avg_pool2d(v[0], *p, inc),
                });
                let k = (p.kernel[0] * p.kernel[1]) as f64 + 2.0;
                assert_close(
                    &got,
                    dtype,
                    &out,
                    &expected,
                    |i| bound(dtype, k, 5.0, expected[i]),
                    &format!("pool {avg:?} {dtype} {dims:?} {p:?}"),
                );
            }
        }
    }
    let e = eval(&[input(DType::F32, &[1, 1, 4, 4], vec![0.0; 16])], |g, v| {
        g.max_pool2d(v[0], PoolParams { kernel: [2, 2], stride: [2, 2], padding: [2, 0, 0, 0] })
    })
    .unwrap_err();
    assert!(e.message().contains("padding"), "{e}");
}
