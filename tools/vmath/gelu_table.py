#!/usr/bin/env python3
"""Fit the table of gelu's AVX-512 kernel and measure it over every f32.

gelu(x) = x * Phi(x). With a = |x| and the upper tail Q(a) = Phi(-a) = erfc(a / sqrt 2) / 2,
Phi(x) is Q(a) for x < 0 and 1 - Q(a) for x >= 0, and Q(a) = e^(-a^2 / 2) * g(a), where
g(a) = erfcx(a / sqrt 2) / 2 is smooth and slowly varying (g(0) = 1/2, g(a) ~ 1/(a sqrt(2 pi))).
The kernel (crates/backends/rlx-cpu/src/vmath/gelu_avx512.rs):

* ac = min(a, XMAX); the 32 intervals of ac are read off its top bits (exponent and 2
  mantissa bits: 4 per binade, [2^-4, 16)); interval 0 also takes [0, 2^-4).
* g(ac) = c0 + t*(c1 + ... + t*cD), t = ac - b (exact: b/2 <= ac <= 2b), b an f32 inside
  the interval whose g lies nearest an f32; each of b, c0..cD is one `vpermt2ps` lookup.
* -ac^2 / 2 = hi + lo exactly (ac split at 12 bits), e^(hi + lo) = 2^k e^r with
  k = round((hi + lo) log2 e), r = (hi - k ln2_hi) + (lo - k ln2_lo) and the degree-6
  polynomial of the other exp kernels, hi clamped at -104 as they do;
* Q = scalef(e^r * g, k) (`vscalefps`: one rounding, also where Q is subnormal);
* Phi = x >= 0 ? 1 - Q : Q, gelu = x * Phi, and -0 for x = -inf.

No division (the other arms' erfc takes 1 / (1 + a)) and one exp instead of an erf and an
erfc polynomial side by side.

Every f32 in [LOW, HIGH] then goes through an exact simulation of the kernel (f64
products, which are exact, rounded once to f32 through long double sums) and the maximum
relative error against gelu in f64 (scipy's erfc) is printed.

Usage: python3 gelu_table.py [--degree D] [--rust] [--quick]
  --rust prints the table as Rust constants (the kernel's file holds that output).
"""
import argparse
import os
import sys

import mpmath as mp
import numpy as np
from scipy.special import erfc, erfcx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fit import cheb_nodes, fit_f32  # noqa: E402
from intervals import F, INTERVALS, f32_bits, f32_from_bits, fma32, interval, poly, print_rust  # noqa: E402

mp.mp.dps = 40
# Past XMAX, Q(a) < 2^-160 whatever g: gelu is x or -0 (and e^-104 underflows anyway).
XMAX = float(F(14.8))
# The bound's domain, as docs/vmath.md states it: Phi(x) normal from -12.9 on; from
# HIGH on, 1 - Q rounds to 1 and gelu(x) = x exactly.
LOW, HIGH = -12.9, 6.0



def bits32(b):
    return F(f32_from_bits(b))


# The exp constants of crates/backends/rlx-cpu/src/vmath/mod.rs.
LOG2E = bits32(0x3FB8AA3B)
LN2_HI = bits32(0x3F318000)
LN2_LO = bits32(0xB95E8083)
MAGIC = bits32(0x4B400000)
EXP_LO = F(-104.0)
EXP_P = [bits32(b) for b in (0x3EFFFFFC, 0x3E2AAA47, 0x3D2AADCC, 0x3C091DED, 0x3AB428B4)]


def g_mp(a):
    a = mp.mpf(a)
    return mp.erfc(a / mp.sqrt(2)) * mp.exp(a * a / 2) / 2


def best_center(lo, hi):
    """The f32 near (lo + hi) / 2 whose g is closest to an f32, in ulps."""
    mid = F((lo + hi) / 2)
    cands = np.array([f32_bits(mid)], dtype=np.int64) + np.arange(-4096, 4097)
    b = cands.astype(np.uint32).view(np.float32).astype(np.float64)
    g = erfcx(b / np.sqrt(2)) / 2
    r = g.astype(np.float32).astype(np.float64)
    ulp = np.spacing(g.astype(np.float32)).astype(np.float64)
    i = int(np.argmin(np.abs(g - r) / ulp))
    return float(b[i])


def fit_interval(j, degree):
    lo, hi = interval(j)
    hi = min(hi, XMAX)  # the last interval, [14, 16), is clamped at XMAX
    b = best_center(lo, hi) if j > 0 else 0.0
    a = cheb_nodes(lo, hi, 600)
    tgt = np.array([float(g_mp(v)) for v in a])
    c, err, _ = fit_f32(a - b, tgt, 1.0 / tgt, degree + 1, fixed=[float(F(g_mp(b)))])
    return b, c, err


def table(degree):
    return [fit_interval(j, degree) for j in range(INTERVALS)]


def kernel(x, rows):
    """The AVX-512 kernel, operation for operation (x: f32 array)."""
    ac = np.minimum(np.abs(x), F(XMAX))
    g = poly(ac, rows)
    # -ac^2 / 2 = hi + lo: the 12-bit head squared is exact, so is halving.
    ah = (ac.view(np.uint32) & np.uint32(0xFFFFF000)).view(np.float32)
    al = (ac - ah).astype(np.float32)
    hi = (-(ah * ah).astype(np.float32) * F(0.5)).astype(np.float32)
    lo = (-(al * (ac + ah).astype(np.float32)).astype(np.float32) * F(0.5)).astype(np.float32)
    hi = np.maximum(hi, EXP_LO)
    s = (hi + lo).astype(np.float32)
    kf = (fma32(s, LOG2E, MAGIC) - MAGIC).astype(np.float32)
    r = (fma32(-kf, LN2_HI, hi) + fma32(-kf, LN2_LO, lo)).astype(np.float32)
    p = np.full_like(r, EXP_P[-1])
    for c in EXP_P[-2::-1]:
        p = fma32(p, r, c)
    p = fma32(p, r, F(1.0))
    p = fma32(p, r, F(1.0))
    m = (p * g).astype(np.float32)
    q = (m.astype(np.float64) * np.exp2(kf.astype(np.float64))).astype(np.float32)
    phi = np.where(x >= 0, (F(1.0) - q).astype(np.float32), q)
    y = (x * phi).astype(np.float32)
    return np.where(x == -np.inf, F(-0.0), y)


def reference(x):
    x = x.astype(np.float64)
    return x * erfc(-x / np.sqrt(2)) / 2


def every_f32(lo, hi, chunk=1 << 24):
    """Every f32 in [lo, hi] (lo < 0 < hi), negative then positive, in chunks."""
    for s in range(f32_bits(F(0.0)), f32_bits(F(-lo)) + 1, chunk):
        yield -np.arange(s, min(s + chunk, f32_bits(F(-lo)) + 1), dtype=np.uint32).view(np.float32)
    for s in range(f32_bits(F(0.0)) + 1, f32_bits(F(hi)) + 1, chunk):
        yield np.arange(s, min(s + chunk, f32_bits(F(hi)) + 1), dtype=np.uint32).view(np.float32)


def measure(rows, quick):
    """The largest relative error where gelu(x) is a normal f32, and the largest absolute
    error in units of 2^-149 (the least subnormal) where it is not."""
    worst, at, sub = 0.0, 0.0, 0.0
    step = 97 if quick else 1
    for x in every_f32(LOW, HIGH):
        x = x[::step]
        y = kernel(x, rows).astype(np.float64)
        ref = reference(x)
        normal = np.abs(ref) >= 2.0**-126
        rel = np.abs(y - ref)[normal] / np.abs(ref[normal])
        if rel.size and rel.max() > worst:
            i = int(np.argmax(rel))
            worst, at = float(rel[i]), float(x[normal][i])
        tiny = np.abs(y - ref)[~normal] / 2.0**-149
        sub = max(sub, float(tiny.max(initial=0.0)))
    return worst, at, sub


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--degree", type=int, default=5)
    ap.add_argument("--rust", action="store_true")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rows = table(args.degree)
    print(f"XMAX = {XMAX!r} ({f32_bits(XMAX):#010x}), degree {args.degree}")
    for j, (b, c, err) in enumerate(rows):
        lo, hi = interval(j)
        print(f"  [{lo:.6g}, {hi:.6g}) b={b:.9g} fit error {err:.2e}")
    worst, at, sub = measure(rows, args.quick)
    what = "every 97th" if args.quick else "every"
    print(f"over {what} f32 in [{LOW}, {HIGH}]: max relative error {worst:.3e} (at {at!r}) where gelu is normal,")
    print(f"  max absolute error {sub:.3f} x 2^-149 where it is subnormal")
    if args.rust:
        print_rust("GELU", rows, args.degree)


if __name__ == "__main__":
    main()
