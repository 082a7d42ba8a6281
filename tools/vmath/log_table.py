#!/usr/bin/env python3
"""Fit the tables of ln's and ln_1p's AVX-512 kernel and measure it.

The kernel (crates/backends/rlx-cpu/src/vmath/log_avx512.rs) writes u = m * 2^e with m in
[0.75, 1.5) (`vgetmantps`), and splits m into 32 intervals by bits(m) >> 18: 16 of width
1/32 over [1, 1.5), 16 of width 1/64 over [0.75, 1). Per interval j, INVC[j] ~ 1/c with
6 significant bits (1 exactly on the two intervals beside 1), so r = m * INVC[j] - 1 is
exact in f32 (one FMA); ln u = e ln2 - ln INVC[j] + ln1p(r), ln1p(r) = r + r^2 P(r) with
P a relative minimax fit on r's range. H = e * LN2_HI + T_HI[j] is exact (both multiples
of 2^-15), H + r is summed with its rounding error kept (Fast2Sum), and the small terms
(e * LN2_LO + T_LO[j], r^2 P) are added to that error. ln_1p adds err/u, err the rounding
error of u = 1 + x, as err * INVC[j] * 2^-e * (1 - r).

Every f32 (or every STEP-th) of [2^-30, 2^30] for ln and of [-0.999, -2^-14] and [2^-14,
1e6] for ln_1p goes through a simulation of the kernel (f32 numpy, FMAs through long
double) against f64 numpy; the script asserts that r and H are exact.

Usage: python3 log_table.py [--rust] [--step N]
"""
import argparse
import os
import sys

import mpmath as mp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fit import cheb_nodes, fit_f32  # noqa: E402
from intervals import F, fma32  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--rust", action="store_true")
ap.add_argument("--step", type=int, default=1)
args = ap.parse_args()

mp.mp.dps = 40
LN2_HI = F(np.array([0x3f317200], dtype=np.uint32).view(np.float32)[0])
LN2_LO = F(np.float64(mp.log(2)) - np.float64(LN2_HI))
INV_BITS = 6   # 7 leaves r inexact on some intervals
DEG = 5        # ln1p(r) = r + r^2 * (degree-3 P)


def interval(j):
    # j = (bits(m) >> 18) & 31 for m in [0.75, 1.5)
    if j < 16:
        lo = 1.0 + j / 32
        return lo, lo + 1 / 32
    lo = 0.5 * (1.0 + j / 32)
    return lo, lo + 1 / 64


def round_bits(v, bits):
    e = np.floor(np.log2(abs(v)))
    q = 2.0 ** (e - (bits - 1))
    return float(np.round(v / q) * q)


rows = []
for j in range(32):
    lo, hi = interval(j)
    if j in (0, 31):
        invc = 1.0
    else:
        invc = round_bits(2.0 / (lo + hi), INV_BITS)
    T = -mp.log(mp.mpf(invc))
    t_hi = float(mp.nint(T * 2**15) / 2**15)
    t_lo = float(F(float(T - mp.mpf(t_hi))))
    rows.append((invc, t_hi, t_lo, lo, hi))
rmin = min(lo * invc - 1 for invc, _, _, lo, hi in rows)
rmax = max(hi * invc - 1 for invc, _, _, lo, hi in rows)
print(f"r in [{rmin:.5f}, {rmax:.5f}]")

# log1p(r) = r + r^2 P(r), relative minimax on [rmin, rmax]
r = cheb_nodes(rmin * 1.001, rmax * 1.001, 1500)
r = r[np.abs(r) > 1e-12]
tgt = np.array([float((mp.log1p(mp.mpf(v)) - v) / v**2) for v in r])
w = np.array([float(v**2 / mp.log1p(mp.mpf(v))) for v in r])
c, err, _ = fit_f32(r, tgt, w, DEG - 1)
print("P", c, "fit err", err)

INVC = np.array([x[0] for x in rows], dtype=np.float32)
THI = np.array([x[1] for x in rows], dtype=np.float32)
TLO = np.array([x[2] for x in rows], dtype=np.float32)
assert np.all(THI.astype(np.float64) == np.array([x[1] for x in rows]))
P = np.array(c, dtype=np.float32)


def split(u):
    mant, ex = np.frexp(u.astype(np.float64))  # u = mant * 2^ex, mant in [0.5, 1)
    m = (mant * 2).astype(np.float32)
    e = (ex - 1).astype(np.float32)
    big = m >= F(1.5)
    m = np.where(big, m * F(0.5), m).astype(np.float32)
    e = np.where(big, e + F(1), e).astype(np.float32)
    return m, e


def core(u, err=None):
    m, e = split(u)
    j = (m.view(np.uint32) >> 18) & 31
    invc, thi, tlo = INVC[j], THI[j], TLO[j]
    r = fma32(m, invc, F(-1))
    exact = (m.astype(np.float64) * invc.astype(np.float64) - 1) == r.astype(np.float64)
    assert exact.all(), "r not exact"
    r2 = (r * r).astype(np.float32)
    p = np.full_like(r, P[-1])
    for k in range(len(P) - 2, -1, -1):
        p = fma32(p, r, P[k])
    H = fma32(e, LN2_HI, thi)
    assert (H.astype(np.float64) == e.astype(np.float64) * float(LN2_HI) + thi.astype(np.float64)).all(), "H not exact"
    L = fma32(e, LN2_LO, tlo)
    if err is not None:
        ec = (err * invc).astype(np.float32)
        ec = (ec.astype(np.float64) * 2.0 ** (-e.astype(np.float64))).astype(np.float32)  # scalef
        corr = fma32(-r, ec, ec)
        L = (L + corr).astype(np.float32)
    s1 = (H + r).astype(np.float32)
    z = (s1 - H).astype(np.float32)
    e1 = (r - z).astype(np.float32)
    t = fma32(r2, p, L)
    t2 = (e1 + t).astype(np.float32)
    return (s1 + t2).astype(np.float32)


def ln_1p(x):
    u = (F(1) + x).astype(np.float32)
    err = np.where(x > F(1), (F(1) - (u - x)), (x - (u - F(1)))).astype(np.float32)
    return core(u, err)


def rel(got, ref):
    ok = ref != 0
    return np.abs(got.astype(np.float64)[ok] - ref[ok]) / np.abs(ref[ok])


def every(lo, hi, step=1):
    b0 = np.array([lo], np.float32).view(np.uint32)[0]
    b1 = np.array([hi], np.float32).view(np.uint32)[0]
    for s in range(int(b0), int(b1), 1 << 24):
        yield np.arange(s, min(s + (1 << 24), int(b1)), step, dtype=np.uint32).view(np.float32)


if args.rust:
    def hexes(v):
        return ", ".join("%#010x" % int(np.array([x], np.float32).view(np.uint32)[0]) for x in v)
    print("const INVC: [u32; 32] = [%s];" % hexes(INVC))
    print("const T_HI: [u32; 32] = [%s];" % hexes(THI))
    print("const T_LO: [u32; 32] = [%s];" % hexes(TLO))
    print("const LOG1P_P: [f32; 4] = bits([%s]);" % hexes(P))
    print("const LN2_HI15: f32 = f32::from_bits(%s);" % hexes([LN2_HI]))
    print("const LN2_LO15: f32 = f32::from_bits(%s);" % hexes([LN2_LO]))
step = args.step
worst = 0
for x in every(2.0 ** -30, 2.0 ** 30, step):
    e_ = rel(core(x), np.log(x.astype(np.float64))).max()
    worst = max(worst, e_)
print(f"log rel err [2^-30, 2^30] step {step}: {worst:.3e}")
worst = 0
for x in every(2.0 ** -14, 1e6, step):
    worst = max(worst, rel(ln_1p(x), np.log1p(x.astype(np.float64))).max())
for x in every(2.0 ** -14, 0.999, step):
    x = -x
    worst = max(worst, rel(ln_1p(x), np.log1p(x.astype(np.float64))).max())
print(f"ln_1p rel err: {worst:.3e}")
rng = np.random.default_rng(1)
x = (rng.uniform(-1e-4, 1e-4, 2_000_000)).astype(np.float32)
print(f"ln_1p tiny: {rel(ln_1p(x), np.log1p(x.astype(np.float64))).max():.3e}")
