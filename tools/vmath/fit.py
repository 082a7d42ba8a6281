#!/usr/bin/env python3
"""Fit the f32 polynomial coefficients used by the vmath kernels.

Method
------
For every kernel polynomial we fit a *weighted discrete minimax* approximation
on a dense set of Chebyshev nodes of the reduced interval:

    minimise  max_i | w(x_i) * (target(x_i) - sum_j c_j * phi_j(x_i)) |

The target values are computed with mpmath (40 digits).  The minimax problem
is solved as a linear program (scipy HiGHS) for the *correction* to a
weighted least-squares start, which keeps the LP well scaled even though the
errors are ~1e-9 relative to the data.

Coefficients are then rounded to f32 one at a time, lowest degree first; after
each rounding the remaining (higher-degree) coefficients are re-fitted with
the rounded ones held fixed, so the later coefficients absorb the rounding
error of the earlier ones.

The f32 accuracy of the complete kernels (with every rounding) is then
measured by check.py; no further hand tuning was applied.

Output: coeffs.json (name -> list of f32 values, stored as decimal strings
that round-trip, plus the hex bit patterns).
"""
import json
import sys
import os

import mpmath as mp
import numpy as np
from scipy.optimize import linprog

mp.mp.dps = 40
HERE = os.path.dirname(os.path.abspath(__file__))


def f32(v):
    return float(np.float32(v))


def lin_minimax(X, b, w):
    """min_c max|w*(b - X c)|. X: n x m float64, returns (c, maxerr)."""
    sc = np.abs(X).max(axis=0)
    sc[sc == 0] = 1.0
    A = X / sc
    Aw = A * w[:, None]
    bw = b * w
    c0 = np.linalg.lstsq(Aw, bw, rcond=None)[0]
    r0 = bw - Aw @ c0
    s = np.abs(r0).max()
    if s == 0:
        return c0 / sc, 0.0
    n, m = Aw.shape
    cvec = np.zeros(m + 1)
    cvec[-1] = 1.0
    ones = np.ones((n, 1))
    Aub = np.vstack([np.hstack([-Aw / s, -ones]), np.hstack([Aw / s, -ones])])
    bub = np.concatenate([-r0 / s, r0 / s])
    res = linprog(cvec, A_ub=Aub, b_ub=bub,
                  bounds=[(None, None)] * m + [(0, None)], method="highs")
    if res.x is None:
        c = c0
    else:
        c = c0 + res.x[:m] * s
    err = np.abs(bw - Aw @ c).max()
    return c / sc, err


def fit_f32(u, target, weight, ncoef, basis=None, fixed=()):
    """Fit sum_j c_j * basis(u)^j, rounding c_j to f32 sequentially.

    u, target, weight: float64 arrays; `fixed`: the lowest coefficients, given.  Returns
    list of f32 python floats and the (float64-evaluated) weighted max error of the
    rounded polynomial.
    """
    if basis is None:
        basis = u
    X = np.stack([basis ** j for j in range(ncoef)], axis=1)
    fixed = list(fixed)
    for j in range(len(fixed), ncoef):
        resid = target - (X[:, :j] @ np.array(fixed) if j else 0.0)
        c, _ = lin_minimax(X[:, j:], resid, weight)
        fixed.append(f32(c[0]))
    err = np.abs(weight * (target - X @ np.array(fixed))).max()
    # also the unrounded minimax error for reference
    _, err_exact = lin_minimax(X, target, weight)
    return fixed, err, err_exact


def cheb_nodes(a, b, n):
    k = np.arange(n)
    return (a + b) / 2 + (b - a) / 2 * np.cos(np.pi * (k + 0.5) / n)[::-1]


def mpmap(fn, xs):
    return np.array([float(fn(mp.mpf(float(x)))) for x in xs])


# --------------------------------------------------------------------------
# Individual fits
# --------------------------------------------------------------------------
N = 1200


def fit_exp(ncoef=5):
    # e^r = 1 + r + r^2 * P(r),  |r| <= ln2/2 (+ margin for k misrounding)
    r = cheb_nodes(-0.3467, 0.3467, N)
    tgt = mpmap(lambda t: (mp.exp(t) - 1 - t) / t ** 2, r)
    w = mpmap(lambda t: t ** 2 / mp.exp(t), r)          # relative error
    return fit_f32(r, tgt, w, ncoef)


def fit_log(ncoef=3):
    # log1p(f) = 2s + s*R,  R = z*P(z), s=f/(2+f), z=s^2 <= ((sqrt2-1)/(sqrt2+1))^2
    z = cheb_nodes(0.0, 0.02945, N)
    def h(zz):
        s = mp.sqrt(zz)
        return 2 * (mp.atanh(s) / s - 1) / zz
    tgt = mpmap(h, z)
    # error dR contributes s*dR to log1p(f) ~ 2s  ->  relative dR/2 ; dR = z*dP
    w = mpmap(lambda zz: zz * mp.sqrt(zz) / (2 * mp.atanh(mp.sqrt(zz))), z)
    return fit_f32(z, tgt, w, ncoef)


def fit_sin(ncoef=3):
    z = cheb_nodes(0.0, 0.7854 ** 2, N)
    tgt = mpmap(lambda zz: (mp.sin(mp.sqrt(zz)) / mp.sqrt(zz) - 1) / zz, z)
    w = z * np.sqrt(z)                                      # absolute error
    return fit_f32(z, tgt, w, ncoef)


def fit_cos(ncoef=4):
    z = cheb_nodes(0.0, 0.7854 ** 2, N)
    tgt = mpmap(lambda zz: (mp.cos(mp.sqrt(zz)) - 1) / zz, z)
    w = z.copy()                                            # absolute error
    return fit_f32(z, tgt, w, ncoef)


def fit_tan(ncoef=7):
    z = cheb_nodes(0.0, 0.7854 ** 2, N)
    tgt = mpmap(lambda zz: (mp.tan(mp.sqrt(zz)) / mp.sqrt(zz) - 1) / zz, z)
    w = mpmap(lambda zz: zz * mp.sqrt(zz) / mp.tan(mp.sqrt(zz)), z)   # relative
    return fit_f32(z, tgt, w, ncoef)


def fit_atan(ncoef=5):
    z = cheb_nodes(0.0, 0.41425 ** 2, N)
    tgt = mpmap(lambda zz: (mp.atan(mp.sqrt(zz)) / mp.sqrt(zz) - 1) / zz, z)
    w = mpmap(lambda zz: zz * mp.sqrt(zz) / mp.atan(mp.sqrt(zz)), z)  # relative
    return fit_f32(z, tgt, w, ncoef)


TANH_CUT = 0.71875


def fit_tanh(ncoef=5, cut=None):
    cut = TANH_CUT if cut is None else cut
    z = cheb_nodes(0.0, cut ** 2, N)
    tgt = mpmap(lambda zz: (mp.tanh(mp.sqrt(zz)) / mp.sqrt(zz) - 1) / zz, z)
    w = mpmap(lambda zz: zz * mp.sqrt(zz) / mp.tanh(mp.sqrt(zz)), z)
    return fit_f32(z, tgt, w, ncoef)


ERF_CUT = 1.0      # erf polynomial used on [0, 1)
ERFC_CUT = 0.75    # erfc = exp*G used on [0.75, 10.5] (erf uses it from 1.0)
ERFC_K = 1.0
G_YMAX = 10.6


def fit_erf(ncoef=7, cut=None):
    cut = ERF_CUT if cut is None else cut
    # erf(x) = x + x*E(z), E(0) = 2/sqrt(pi) - 1 ; relative error weight
    z = cheb_nodes(0.0, cut ** 2, N)
    tgt = mpmap(lambda zz: mp.erf(mp.sqrt(zz)) / mp.sqrt(zz) - 1, z)
    w = mpmap(lambda zz: mp.sqrt(zz) / mp.erf(mp.sqrt(zz)), z)
    return fit_f32(z, tgt, w, ncoef)


def fit_erfc_g(ncoef=10, cut=None, k=None):
    # erfc(y) = exp(-y^2) * t * H(t),  t = K/(K+y),  y in [cut, G_YMAX]
    cut = ERFC_CUT if cut is None else cut
    k = ERFC_K if k is None else k
    t0, t1 = k / (k + G_YMAX), k / (k + cut)
    t = cheb_nodes(t0 * 0.999, t1 * 1.0005, N)
    def g(tt):
        y = k / tt - k
        return mp.exp(y * y) * mp.erfc(y)
    tgt = mpmap(g, t)
    return fit_f32(t, tgt / t, t / tgt, ncoef)             # relative error of G


FITS = {
    "exp": fit_exp,
    "log": fit_log,
    "sin": fit_sin,
    "cos": fit_cos,
    "tan": fit_tan,
    "atan": fit_atan,
    "tanh": fit_tanh,
    "erf": fit_erf,
    "erfc_g": fit_erfc_g,
}


def hexbits(v):
    return "0x%08x" % int(np.array(v, dtype=np.float32).view(np.uint32))


def f32repr(v):
    return repr(np.float32(v)).replace("np.float32(", "").rstrip(")")


def save(coeffs, path=os.path.join(HERE, "coeffs.json")):
    out = {}
    for k, cs in coeffs.items():
        out[k] = [{"dec": f32repr(c), "hex": hexbits(c)} for c in cs]
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)


def main():
    coeffs = {}
    for name, fn in FITS.items():
        cs, err, err_exact = fn()
        coeffs[name] = cs
        print("%-7s n=%d  minimax(f64) %.3e  after f32 rounding %.3e" %
              (name, len(cs), err_exact, err))
        for c in cs:
            print("        %-16s %s" % (f32repr(c), hexbits(c)))
    save(coeffs)


if __name__ == "__main__":
    main()
