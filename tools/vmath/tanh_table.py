#!/usr/bin/env python3
"""Fit the table of tanh's AVX-512 kernel and measure it over every f32.

The kernel (crates/backends/rlx-cpu/src/vmath/tanh_avx512.rs) splits |x| in [0, 16) into
32 intervals by the top bits of the f32 (exponent and 2 mantissa bits: 4 per binade,
[2^-4, 16)); interval 0 also takes [0, 2^-4). On each, tanh(a) = c0 + t*(c1 + t*(... cD))
with t = a - b, b an f32 inside the interval (t is exact: b/2 <= a <= 2b); the 32 values of
each of b, c0..cD are one `vpermt2ps` lookup each. Past CUT the result is exactly 1.

* b is the f32 nearest the interval's middle whose tanh is nearest an f32 (c0 = f32(tanh b)
  then carries ~0.001 ulp of error instead of up to 0.5);
* c1..cD are a relative-error minimax fit (fit.py's method: LP on Chebyshev nodes, rounded
  to f32 lowest degree first, the rest refitted);
* interval 0 has b = 0, c0 = 0, c1 = 1 exactly: tiny and subnormal a give a itself.

Then every f32 in [0, CUT] goes through an exact simulation of the kernel's FMAs (f64 for
the products, which are exact, then one rounding to f32 of the sum computed in long double)
and the maximum relative error against f64 tanh is printed.

Usage: python3 tanh_table.py [--degree D] [--rust] [--quick]
  --rust prints the table as Rust constants (the kernel's file holds that output).
"""
import argparse
import os
import sys

import mpmath as mp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fit import cheb_nodes, fit_f32  # noqa: E402
from intervals import F, INTERVALS, f32_bits, f32_from_bits, interval, poly, print_rust  # noqa: E402

mp.mp.dps = 40


def cut():
    """The least f32 a with f32(tanh a) == 1: tanh(a) >= 1 - 2^-25 (the tie goes to 1.0)."""
    a = float(mp.atanh(1 - mp.mpf(2) ** -25))
    c = F(a)
    while float(mp.tanh(mp.mpf(float(c)))) < 1 - 2.0 ** -25:
        c = np.nextafter(c, F(np.inf))
    while float(mp.tanh(mp.mpf(float(np.nextafter(c, F(0)))))) >= 1 - 2.0 ** -25:
        c = np.nextafter(c, F(0))
    return float(c)


def best_center(lo, hi):
    """The f32 near (lo + hi) / 2 whose tanh is closest to an f32, in ulps."""
    mid = F((lo + hi) / 2)
    cands = np.array([f32_bits(mid)], dtype=np.int64) + np.arange(-4096, 4097)
    b = cands.astype(np.uint32).view(np.float32).astype(np.float64)
    th = np.tanh(b)
    r = th.astype(np.float32).astype(np.float64)
    ulp = np.spacing(th.astype(np.float32)).astype(np.float64)
    i = int(np.argmin(np.abs(th - r) / ulp))
    return float(b[i])


def fit_interval(j, degree, top):
    lo, hi = interval(j)
    hi = min(hi, top)
    n = 600
    if j == 0:
        a = cheb_nodes(0.0, hi, n)
        a = a[a > 0]
        tgt = np.array([float(mp.tanh(mp.mpf(v))) for v in a])
        b, c = 0.0, [0.0, 1.0]
        t = a
    else:
        b = best_center(lo, hi)
        a = cheb_nodes(lo, hi, n)
        tgt = np.array([float(mp.tanh(mp.mpf(v))) for v in a])
        c = [float(F(mp.tanh(mp.mpf(b))))]
        t = a - b
    c, err, _ = fit_f32(t, tgt, 1.0 / tgt, degree + 1, fixed=c)
    return b, c, err


def table(degree):
    top = cut()
    rows = []
    for j in range(INTERVALS):
        lo, _ = interval(j)
        if lo >= top:
            rows.append((lo, [1.0] + [0.0] * degree, 0.0))  # every a here is past CUT
            continue
        b, c, err = fit_interval(j, degree, top)
        rows.append((b, c, err))
    return top, rows


def kernel(x, top, rows):
    """The AVX-512 kernel, operation for operation (x: f32 array)."""
    a = np.abs(x)
    p = poly(a, rows)
    p = np.where(a >= F(top), F(1.0), p)
    return np.copysign(p, x)


def every_f32(lo, hi, chunk=1 << 24):
    b0, b1 = f32_bits(lo), f32_bits(hi)
    for s in range(b0, b1 + 1, chunk):
        yield np.arange(s, min(s + chunk, b1 + 1), dtype=np.uint32).view(np.float32)


def measure(top, rows, quick):
    worst = 0.0
    at = 0.0
    step = 97 if quick else 1
    for x in every_f32(f32_from_bits(1), float(np.nextafter(F(top), F(np.inf)))):
        x = x[::step]
        y = kernel(x, top, rows).astype(np.float64)
        ref = np.tanh(x.astype(np.float64))
        rel = np.abs(y - ref) / ref
        i = int(np.argmax(rel))
        if rel[i] > worst:
            worst, at = float(rel[i]), float(x[i])
    return worst, at


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--degree", type=int, default=5)
    ap.add_argument("--rust", action="store_true")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    top, rows = table(args.degree)
    print(f"CUT = {top!r} ({f32_bits(top):#010x}), degree {args.degree}")
    for j, (b, c, err) in enumerate(rows):
        lo, hi = interval(j)
        print(f"  [{lo:.6g}, {hi:.6g}) b={b:.9g} fit error {err:.2e}")
    worst, at = measure(top, rows, args.quick)
    print(f"max relative error over {'every 97th' if args.quick else 'every'} f32 in (0, CUT]: {worst:.3e} at {at!r}")
    if args.rust:
        print_rust("TANH", rows, args.degree)


if __name__ == "__main__":
    main()
