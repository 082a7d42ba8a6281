#!/usr/bin/env python3
"""Exact float32 simulation of the vmath kernels + accuracy report.

Every kernel below is written exactly as the Rust code is meant to be written:
  * all arithmetic on np.float32 arrays -> one IEEE-754 round-to-nearest-even
    rounding per + - * / (numpy never fuses a*b+c), Horner order as written;
  * "select(mask, a, b)" = compute both, pick per lane (np.where);
  * bit casts via .view(int32/uint32); integer ops wrap (two's complement);
  * sin/cos/tan reduce the argument in f32 for |x| <= 6000 and in f64 (np.float64) above.
Denormals are not flushed (numpy does not set FTZ/DAZ).

Coefficients come from coeffs.json (written by fit.py).

Usage:  python3 check.py [--full] [--quick] [names...]
"""
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
F = np.float32
I = np.int32
U = np.uint32
D = np.float64

np.seterr(all="ignore")

# --------------------------------------------------------------------------
# helpers (each maps to one SIMD op)
# --------------------------------------------------------------------------


def f32(a):
    return np.asarray(a, dtype=np.float32)


def bits(x):                      # f32 -> i32 bit cast
    return np.asarray(x, dtype=np.float32).view(np.int32)


def from_bits(i):                 # i32 -> f32 bit cast
    return np.asarray(i, dtype=np.int32).view(np.float32)


def select(m, a, b):
    return np.where(m, a, b).astype(np.float32, copy=False)


def selecti(m, a, b):
    return np.where(m, a, b).astype(np.int32, copy=False)


def horner(x, cs):
    """cs[0] + x*(cs[1] + x*(cs[2] + ...)), innermost first, f32."""
    p = F(cs[-1]) + np.zeros_like(x)
    for c in reversed(cs[:-1]):
        p = p * x + F(c)
    return p


def fabs(x):
    return from_bits(bits(x) & I(0x7FFFFFFF))


def signbit(x):                   # i32 with only the sign bit of x
    return bits(x) & I(-0x80000000)


def copysign_from(mag, sgn_bits):  # mag >= 0 (or NaN); OR in the sign bit
    return from_bits(bits(mag) | sgn_bits)


# --------------------------------------------------------------------------
# constants
# --------------------------------------------------------------------------
C = {}


def load_coeffs(path=os.path.join(HERE, "coeffs.json")):
    with open(path) as fh:
        js = json.load(fh)
    for k, v in js.items():
        vals = [F(e["dec"]) for e in v]
        for e, val in zip(v, vals):   # decimal literal must round-trip to the hex
            assert "0x%08x" % int(np.array(val).view(np.uint32)) == e["hex"], (k, e)
        C[k] = vals


def set_coeffs(name, cs):
    C[name] = [F(c) for c in cs]


load_coeffs()

LOG2E = F("1.44269504")          # 0x3fb8aa3b
LN2_HI = F("0.693359375")        # 0x3f318000  (9 significant bits)
LN2_LO = F("-2.12194440e-4")     # 0xb95e8083  ln2 - LN2_HI
MAGIC = F("12582912.0")          # 1.5*2^23    0x4b400000
EXP_HI = F("89.0")
EXP_LO = F("-104.0")

FLT_MIN = F("1.17549435e-38")    # 0x00800000
TWO23 = F("8388608.0")           # 2^23
LOG_OFF = I(0x3F800000 - 0x3F3504F3)   # 0x004afb0d
SQRTH_BITS = I(0x3F3504F3)       # bits of f32(sqrt(0.5))

# trig reduction (f64)
TWO_OVER_PI_D = D(0.6366197723675814)           # 0x3fe45f306dc9c883
MAGIC_D = D(6755399441055744.0)                 # 1.5*2^52
PIO2_HI_D = D(1.5707963258028030)               # pi/2 to 29 bits (see below)
PIO2_LO_D = D(0.0)                               # filled below


def _pio2_split():
    import mpmath as mp
    mp.mp.dps = 50
    pio2 = mp.pi / 2
    hi = float(mp.nint(pio2 * 2 ** 28)) / 2 ** 28   # 29 significant bits
    lo = float(pio2 - hi)
    return D(hi), D(lo)


PIO2_HI_D, PIO2_LO_D = _pio2_split()

# trig reduction (f32, |x| <= SHORT_RANGE; tools/vmath/trig_short_range.py derives these)
TWO_OVER_PI = from_bits(I(0x3f22f983))
PIO2_C1 = from_bits(I(0x3fc90000))
PIO2_C2 = from_bits(I(0x39fda000))
PIO2_C3 = from_bits(I(0x33a22000))
PIO2_C4 = from_bits(I(0x2c34611a))
SHORT_RANGE = F("6000.0")

PIO2_HI = F("1.57079637")        # f32(pi/2)            0x3fc90fdb
PIO2_LO = F("-4.37113883e-8")    # pi/2 - PIO2_HI       0xb33bbd2e
PIO4_HI = F("0.785398185")       # f32(pi/4)            0x3f490fdb
PIO4_LO = F("-2.18556941e-8")    # pi/4 - PIO4_HI       0xb2bbbd2e
TAN3PI8 = F("2.41421356")        # 0x401a827a
TANPI8 = F("0.414213568")        # 0x3ed413cd

TANH_CUT = F("0.71875")
TANH_EXP_MAX = F("20.0")
ERF_CUT = F("1.0")               # erf: polynomial below, 1 - erfc above
ERFC_CUT = F("0.75")             # erfc/gelu: 1 -+ erf polynomial below, exp*G above
ERFC_K = F("1.0")
ERFC_YMAX = F("10.5")
GELU_XMAX = F("14.8")            # ~ 10.5*sqrt(2)
FRAC_1_SQRT2 = F("0.707106769")  # 0x3f3504f3
SPLIT_MASK = I(-4096)            # 0xfffff000 : keep 12 significant bits
GT_K0 = F("1.59576917")          # 2*sqrt(2/pi)          0x3fcc422a
GT_K1 = F("0.0713548139")        # 2*sqrt(2/pi)*0.044715 0x3d922279

INF = F(np.inf)
NAN = F(np.nan)

# --------------------------------------------------------------------------
# exp
# --------------------------------------------------------------------------


def _exp_poly(r):
    c = C["exp"]   # c2..c6
    p = horner(r, c)
    p = p * r + F(1.0)
    p = p * r + F(1.0)
    return p


def _exp_scale(p, ki):
    k1 = ki >> 1                  # arithmetic shift
    k2 = ki - k1
    s1 = from_bits((k1 + I(127)) << 23)
    s2 = from_bits((k2 + I(127)) << 23)
    return (p * s1) * s2


def exp(x):
    x = f32(x)
    x = select(x > EXP_HI, EXP_HI, x)      # NaN passes (compare false)
    x = select(x < EXP_LO, EXP_LO, x)
    t = x * LOG2E + MAGIC
    kf = t - MAGIC
    ki = bits(t) - bits(MAGIC)
    r = (x - kf * LN2_HI) - kf * LN2_LO
    return _exp_scale(_exp_poly(r), ki)


def exp_hl(hi, lo):
    """exp(hi + lo) where hi - k*LN2_HI is exact (hi has <= 24-9 ... bits) and
    lo is small; used by erfc/gelu for exp(-y^2) with y^2 = hi + lo."""
    hi = select(hi < EXP_LO, EXP_LO, hi)   # callers only pass hi <= 0, lo <= 0
    t = (hi + lo) * LOG2E + MAGIC          # k from the full argument
    kf = t - MAGIC
    ki = bits(t) - bits(MAGIC)
    r = (hi - kf * LN2_HI) + (lo - kf * LN2_LO)
    return _exp_scale(_exp_poly(r), ki)


# --------------------------------------------------------------------------
# log / ln_1p
# --------------------------------------------------------------------------


def _log_core(u, e_adj, corr):
    """Returns e*ln2 + log(m) + corr where u = m * 2^(e - e_adj)."""
    ix = bits(u) + LOG_OFF
    e = (ix >> 23) - I(127) + e_adj
    m = from_bits((ix & I(0x007FFFFF)) + SQRTH_BITS)
    f = m - F(1.0)
    s = f / (F(2.0) + f)
    z = s * s
    R = z * horner(z, C["log"])
    hfsq = F(0.5) * f * f
    ef = e.astype(np.float32)            # exact int -> float conversion
    inner = f - (hfsq - (s * (hfsq + R) + (ef * LN2_LO + corr)))
    return ef * LN2_HI + inner


def log(x):
    x = f32(x)
    sub = x < FLT_MIN
    xs = select(sub, x * TWO23, x)
    eadj = selecti(sub, I(-23), I(0))
    r = _log_core(xs, eadj, F(0.0))
    r = select(x == INF, INF, r)
    r = select(x == F(0.0), -INF, r)
    r = select(~(x >= F(0.0)), NAN, r)       # x < 0 or NaN
    return r


def ln_1p(x):
    x = f32(x)
    u = F(1.0) + x
    # exact rounding error of 1+x (Fast2Sum with the larger operand first)
    err = select(x > F(1.0), F(1.0) - (u - x), x - (u - F(1.0)))
    corr = err / u
    r = _log_core(u, I(0), corr)
    r = select(x == INF, INF, r)
    r = select(x == F(-1.0), -INF, r)
    r = select(~(x >= F(-1.0)), NAN, r)      # x < -1 or NaN
    r = select(x == F(0.0), x, r)            # keep signed zero
    return r


# --------------------------------------------------------------------------
# sin / cos / tan
# --------------------------------------------------------------------------


def _trig_reduce_wide(x):
    xd = f32(x).astype(np.float64)
    t = xd * TWO_OVER_PI_D + MAGIC_D
    kd = t - MAGIC_D
    q = t.view(np.int64).astype(np.int32)          # low 32 bits hold k
    rd = (xd - kd * PIO2_HI_D) - kd * PIO2_LO_D
    rh = rd.astype(np.float32)
    # NEGATED low part: rn = rh - rd (exact in f64, then rounded to f32).  Using
    # the negated tail and subtracting keeps sin(-0) = -0 and tan(-0) = -0.
    rn = (rh.astype(np.float64) - rd).astype(np.float32)
    return rh, rn, q


def _trig_reduce_short(x):
    """The f32 Cody-Waite reduction (valid for |x| <= SHORT_RANGE): k*C1, k*C2, k*C3 are
    exact, x - k*(C1+C2) is exact, and the rounding error of subtracting k*C3 is kept
    (Fast2Sum) in the negated low part along with k*C4."""
    x = f32(x)
    t = x * TWO_OVER_PI + MAGIC
    k = t - MAGIC
    q = bits(t) - bits(MAGIC)
    a = (x - k * PIO2_C1) - k * PIO2_C2
    b = k * PIO2_C3
    rh = a - b
    rn = k * PIO2_C4 - ((a - rh) - b)
    return rh, rn, q


def _trig(x, kernel):
    """kernel(reduced) per value, through the f32 reduction where |x| <= SHORT_RANGE and
    the f64 one elsewhere (the Rust slice kernels skip the f64 one for chunks that need
    none of it; the values are the same)."""
    short = kernel(*_trig_reduce_short(x))
    wide = kernel(*_trig_reduce_wide(x))
    return select(fabs(f32(x)) <= SHORT_RANGE, short, wide)


def _sin_poly(rh, rn, z):
    return rh - (rn - rh * (z * horner(z, C["sin"])))


def _cos_poly(rh, rn, z):
    return F(1.0) + (z * horner(z, C["cos"]) + rh * rn)


def _sincos_pick(s, c, q):
    v = select((q & I(1)) != 0, c, s)
    return from_bits(bits(v) ^ ((q & I(2)) << 30))


def _sin_reduced(rh, rn, q):
    z = rh * rh
    return _sincos_pick(_sin_poly(rh, rn, z), _cos_poly(rh, rn, z), q)


def _cos_reduced(rh, rn, q):
    z = rh * rh
    return _sincos_pick(_sin_poly(rh, rn, z), _cos_poly(rh, rn, z), q + I(1))


def _tan_reduced(rh, rn, q):
    z = rh * rh
    y = rh * (z * horner(z, C["tan"]))
    t = rh - ((rn + rn * z) - y)      # tail*(1+z) ~ tail*(1+tan^2)
    return select((q & I(1)) != 0, F(-1.0) / t, t)


def sin(x):
    return _trig(x, _sin_reduced)


def cos(x):
    return _trig(x, _cos_reduced)


def tan(x):
    return _trig(x, _tan_reduced)


# --------------------------------------------------------------------------
# atan
# --------------------------------------------------------------------------


def atan(x):
    x = f32(x)
    sb = signbit(x)
    a = fabs(x)
    big = a > TAN3PI8
    mid = a > TANPI8
    num = select(big, F(-1.0), select(mid, a - F(1.0), a))
    den = select(big, a, select(mid, a + F(1.0), F(1.0)))
    t = num / den
    offh = select(big, PIO2_HI, select(mid, PIO4_HI, F(0.0)))
    offl = select(big, PIO2_LO, select(mid, PIO4_LO, F(0.0)))
    z = t * t
    r = offh + (t + (t * (z * horner(z, C["atan"])) + offl))
    return copysign_from(r, sb)


# --------------------------------------------------------------------------
# tanh, sigmoid
# --------------------------------------------------------------------------


def tanh(x):
    x = f32(x)
    sb = signbit(x)
    a = fabs(x)
    z = a * a
    ps = a + a * (z * horner(z, C["tanh"]))
    # exp_tanh: e^(2a) = p * 2^k, 2a clamped at 20 (k <= 29)
    y = a + a
    y = select(y > TANH_EXP_MAX, TANH_EXP_MAX, y)
    t = y * LOG2E + MAGIC
    kf = t - MAGIC
    k = bits(t) - bits(MAGIC)
    p = _exp_poly((y - kf * LN2_HI) - kf * LN2_LO)
    # 1 - 2/(p*2^k + 1) with the powers of two applied to the operands (same bits)
    pb = F(1.0) - from_bits((I(128) - k) << 23) / (p + from_bits((I(127) - k) << 23))
    r = select(a < TANH_CUT, ps, pb)
    return copysign_from(r, sb)


def sigmoid(x):
    x = f32(x)
    e = exp(-fabs(x))
    n = select(x < F(0.0), e, F(1.0))
    return n / (F(1.0) + e)


# --------------------------------------------------------------------------
# erf / erfc
# --------------------------------------------------------------------------


def _erf_small(a):               # erf(a), |a| < ERF_CUT, relative accuracy
    z = a * a
    return a + a * horner(z, C["erf"])


def _erfc_big(a, hi, lo):        # erfc(a) = exp(hi+lo) * t*H(t), t = K/(K+a), hi+lo = -a^2
    t = ERFC_K / (ERFC_K + a)
    return exp_hl(hi, lo) * (t * horner(t, C["erfc_g"]))


def _neg_sq_split(v):
    """-(v*v) as hi + lo, hi exact with <= 24 bits."""
    vh = from_bits(bits(v) & SPLIT_MASK)
    vl = v - vh
    return -(vh * vh), -(vl * (v + vh))


def erf(x):
    x = f32(x)
    sb = signbit(x)
    a = fabs(x)
    ps = _erf_small(a)
    ac = select(a > ERFC_YMAX, ERFC_YMAX, a)
    hi, lo = _neg_sq_split(ac)
    pb = F(1.0) - _erfc_big(ac, hi, lo)
    r = select(a < ERF_CUT, ps, pb)
    return copysign_from(r, sb)


def erfc(x):
    x = f32(x)
    a = fabs(x)
    neg = x < F(0.0)
    ps = _erf_small(a)
    ac = select(a > ERFC_YMAX, ERFC_YMAX, a)
    hi, lo = _neg_sq_split(ac)
    E = _erfc_big(ac, hi, lo)
    small = select(neg, F(1.0) + ps, F(1.0) - ps)
    big = select(neg, F(2.0) - E, E)
    return select(a < ERFC_CUT, small, big)


# --------------------------------------------------------------------------
# composite activations
# --------------------------------------------------------------------------


def gelu(x):
    """x * Phi(x),  Phi(x) = erfc(-x/sqrt2)/2; exp(-x^2/2) from x directly."""
    x = f32(x)
    neg = x < F(0.0)
    ax = fabs(x)
    a = ax * FRAC_1_SQRT2                    # |x|/sqrt2 (rounded)
    ps = _erf_small(a)
    xc = select(ax > GELU_XMAX, GELU_XMAX, ax)
    hi, lo = _neg_sq_split(xc)
    hi = hi * F(0.5)
    lo = lo * F(0.5)
    ac = select(a > ERFC_YMAX, ERFC_YMAX, a)
    E = _erfc_big(ac, hi, lo)                # erfc(|x|/sqrt2)
    hps = F(0.5) * ps
    hE = F(0.5) * E
    small = select(neg, F(0.5) - hps, F(0.5) + hps)
    big = select(neg, hE, F(1.0) - hE)
    phi = select(a < ERFC_CUT, small, big)
    r = x * phi
    return select(x == -INF, F(-0.0), r)


def gelu_tanh(x):
    x = f32(x)
    u = x * (GT_K0 + GT_K1 * (x * x))
    r = x * sigmoid(u)
    return select(x == -INF, F(-0.0), r)


def silu(x):
    x = f32(x)
    r = x * sigmoid(x)
    return select(x == -INF, F(-0.0), r)


def softplus(x):
    x = f32(x)
    l = ln_1p(exp(-fabs(x)))
    m = select(x > F(0.0), x, F(0.0))
    return m + l


def mish(x):
    x = f32(x)
    r = x * tanh(softplus(x))
    return select(x == -INF, F(-0.0), r)


def log_sigmoid(x):
    return -softplus(-f32(x))


# ==========================================================================
# Accuracy testing
# ==========================================================================
from scipy import special as sp  # noqa: E402

RNG = np.random.default_rng(12345)


def all_f32_between(lo, hi):
    """every f32 in [lo, hi] (lo, hi same sign, finite)."""
    lo, hi = F(lo), F(hi)
    if lo >= 0:
        a, b = int(bits(lo)), int(bits(hi))
        return from_bits(np.arange(a, b + 1, dtype=np.int64).astype(np.int32))
    if hi <= 0:
        a, b = int(bits(-hi)), int(bits(-lo))
        return -from_bits(np.arange(a, b + 1, dtype=np.int64).astype(np.int32))
    return np.concatenate([all_f32_between(lo, F(-0.0)), all_f32_between(F(0.0), hi)])


def every_mag(lo, hi, step=1):
    """every step-th f32 with lo <= |x| <= hi, both signs."""
    v = all_f32_between(lo, hi)[::step]
    return np.concatenate([v, -v])


def rand_uniform(lo, hi, n):
    return f32(RNG.uniform(lo, hi, n))


def rand_bits(lo, hi, n):
    """uniform over the f32 *bit patterns* in [lo, hi], lo,hi >= 0."""
    a, b = int(bits(F(lo))), int(bits(F(hi)))
    return from_bits(RNG.integers(a, b + 1, n, dtype=np.int64).astype(np.int32))


def rand_bits_signed(lo, hi, n):
    v = rand_bits(lo, hi, n)
    s = RNG.integers(0, 2, n).astype(bool)
    return select(s, -v, v)


def ulp32(y):
    """size of one f32 ulp at |y| (float64)."""
    y = np.abs(np.asarray(y, dtype=np.float64))
    y = np.minimum(y, 3.4e38)
    e = np.floor(np.log2(np.maximum(y, 2.0 ** -126)))
    return 2.0 ** (e - 23)


class Stat:
    def __init__(self, label):
        self.label = label
        self.n = 0
        self.max = 0.0
        self.arg = None
        self.ulp = 0.0

    def add(self, x, err, ulperr=None):
        self.n += x.size
        if x.size == 0:
            return
        err = np.where(np.isnan(err), np.inf, err)
        i = int(np.argmax(err))
        if err[i] > self.max:
            self.max = float(err[i])
            self.arg = float(x[i])
        if ulperr is not None:
            ulperr = np.where(np.isnan(ulperr), np.inf, ulperr)
            self.ulp = max(self.ulp, float(ulperr.max()))

    def __str__(self):
        s = "  %-58s max %.3e" % (self.label, self.max)
        if self.ulp:
            s += " (%.2f ulp)" % self.ulp
        s += "  at x=%s  n=%d" % (repr(F(self.arg)) if self.arg is not None else "-", self.n)
        return s.replace("np.float32(", "").replace(")", "", 1) if self.arg is not None else s


def chunks(xs, size=1 << 22):
    for i in range(0, xs.size, size):
        yield xs[i:i + size]


class Every:
    """every f32 with lo <= |x| <= hi (sign: +1, -1 or 0 for both), in chunks."""
    def __init__(self, lo, hi, sign=0):
        self.a, self.b = int(bits(F(lo))), int(bits(F(hi)))
        self.sign = sign
        self.size = (self.b - self.a + 1) * (2 if sign == 0 else 1)

    def chunks(self, size=1 << 22):
        for s in ([1, -1] if self.sign == 0 else [self.sign]):
            for i in range(self.a, self.b + 1, size):
                v = from_bits(np.arange(i, min(i + size, self.b + 1), dtype=np.int64).astype(np.int32))
                yield v if s > 0 else -v


def measure(stat, fn, ref, xs, kind, floor=0.0, scale=None):
    """kind: 'rel' -> |y-r|/|r| ; 'abs' -> |y-r| ; 'absx' -> |y-r|/max(|x|,floor)"""
    it = xs.chunks() if isinstance(xs, Every) else chunks(xs)
    for xc in it:
        y = fn(xc).astype(np.float64)
        r = ref(xc.astype(np.float64))
        d = np.abs(y - r)
        if kind == "rel":
            e = d / np.abs(r)
            e = np.where(d == 0, 0.0, e)
            u = d / ulp32(r)
        elif kind == "abs":
            e = d
            u = None
        elif kind == "absx":
            e = d / np.maximum(np.abs(xc.astype(np.float64)), floor)
            u = None
        stat.add(xc, e, u)
    return stat


# ---- special value checks ------------------------------------------------

def same(a, b):
    a = np.float32(a)
    b = np.float32(b)
    if np.isnan(a) or np.isnan(b):
        return bool(np.isnan(a) and np.isnan(b))
    return bool(a == b and np.signbit(a) == np.signbit(b))


def special_checks():
    tiny = F(1e-30)
    den = from_bits(np.array([1], np.int32))[0]       # 2^-149
    cases = [
        ("exp", exp, [(np.nan, np.nan), (np.inf, np.inf), (-np.inf, 0.0), (88.73, np.inf),
                      (88.72, np.exp(float(F(88.72)))), (-104.0, 0.0), (-103.98, 0.0), (0.0, 1.0),
                      (-0.0, 1.0), (1e-30, 1.0)]),
        ("log", log, [(np.nan, np.nan), (np.inf, np.inf), (0.0, -np.inf), (-0.0, -np.inf),
                      (-1.0, np.nan), (-np.inf, np.nan), (1.0, 0.0), (float(den), np.log(2.0 ** -149))]),
        ("ln_1p", ln_1p, [(np.nan, np.nan), (np.inf, np.inf), (-1.0, -np.inf), (-1.5, np.nan),
                          (-np.inf, np.nan), (0.0, 0.0), (-0.0, -0.0), (1e-30, 1e-30),
                          (-1e-30, -1e-30), (float(den), float(den))]),
        ("sin", sin, [(np.nan, np.nan), (np.inf, np.nan), (-np.inf, np.nan), (0.0, 0.0),
                      (-0.0, -0.0), (1e-30, 1e-30), (-1e-30, -1e-30), (float(den), float(den))]),
        ("cos", cos, [(np.nan, np.nan), (np.inf, np.nan), (0.0, 1.0), (-0.0, 1.0), (1e-30, 1.0)]),
        ("tan", tan, [(np.nan, np.nan), (np.inf, np.nan), (0.0, 0.0), (-0.0, -0.0),
                      (1e-30, 1e-30), (-1e-30, -1e-30), (float(den), float(den))]),
        ("atan", atan, [(np.nan, np.nan), (np.inf, float(F(np.pi / 2))), (-np.inf, -float(F(np.pi / 2))),
                        (0.0, 0.0), (-0.0, -0.0), (1e-30, 1e-30), (-1e-30, -1e-30),
                        (float(den), float(den)), (3.4e38, float(F(np.pi / 2)))]),
        ("tanh", tanh, [(np.nan, np.nan), (np.inf, 1.0), (-np.inf, -1.0), (0.0, 0.0), (-0.0, -0.0),
                        (1e-30, 1e-30), (-1e-30, -1e-30), (float(den), float(den)), (10.0, 1.0),
                        (-10.0, -1.0), (100.0, 1.0), (3e38, 1.0)]),
        ("sigmoid", sigmoid, [(np.nan, np.nan), (np.inf, 1.0), (-np.inf, 0.0), (0.0, 0.5), (-0.0, 0.5),
                              (100.0, 1.0)]),
        ("erf", erf, [(np.nan, np.nan), (np.inf, 1.0), (-np.inf, -1.0), (0.0, 0.0), (-0.0, -0.0),
                      (1e-30, float(F(1e-30) * F(2 / np.sqrt(np.pi)))), (-1e-30, -float(F(1e-30) * F(2 / np.sqrt(np.pi)))),
                      (5.0, 1.0), (-5.0, -1.0)]),
        ("erfc", erfc, [(np.nan, np.nan), (np.inf, 0.0), (-np.inf, 2.0), (0.0, 1.0), (-0.0, 1.0),
                        (11.0, 0.0), (-11.0, 2.0)]),
        ("gelu", gelu, [(np.nan, np.nan), (np.inf, np.inf), (-np.inf, -0.0), (0.0, 0.0), (-0.0, -0.0),
                        (-30.0, -0.0)]),
        ("gelu_tanh", gelu_tanh, [(np.nan, np.nan), (np.inf, np.inf), (-np.inf, -0.0), (0.0, 0.0),
                                  (-0.0, -0.0)]),
        ("silu", silu, [(np.nan, np.nan), (np.inf, np.inf), (-np.inf, -0.0), (0.0, 0.0), (-0.0, -0.0)]),
        ("softplus", softplus, [(np.nan, np.nan), (np.inf, np.inf), (-np.inf, 0.0), (0.0, float(F(np.log(2)))),
                                (100.0, 100.0)]),
        ("mish", mish, [(np.nan, np.nan), (np.inf, np.inf), (-np.inf, -0.0), (0.0, 0.0), (-0.0, -0.0)]),
        ("log_sigmoid", log_sigmoid, [(np.nan, np.nan), (np.inf, -0.0), (-np.inf, -np.inf),
                                      (0.0, -float(F(np.log(2))))]),
    ]
    bad = 0
    for name, fn, lst in cases:
        xs = f32([c[0] for c in lst])
        ys = fn(xs)
        for (xv, want), got in zip(lst, ys):
            wantf = F(want)
            ok = same(got, wantf)
            if not ok:
                bad += 1
                print("  SPECIAL MISMATCH %s(%r) = %r, want %r" % (name, xv, got, wantf))
    print("special-value checks: %s" % ("all OK" if bad == 0 else "%d mismatches" % bad))
    # NaN with payload / negative NaN
    nans = from_bits(np.array([0x7fc00001, -0x3fffff, 0x7f800001], np.int32))
    for name, fn, _ in cases:
        if not np.all(np.isnan(fn(nans))):
            print("  NaN NOT PROPAGATED by", name)
            bad += 1
    return bad


# ---- accuracy tests ------------------------------------------------------
FULL = "--full" in sys.argv
QUICK = "--quick" in sys.argv
NS = 500_000 if QUICK else 4_000_000


def T_exp():
    out = []
    xs = np.concatenate([rand_uniform(-87.3, 88.72, NS), rand_bits_signed(0, 87.3, NS),
                         every_mag(2.0 ** -8, 2.0, 7),
                         all_f32_between(88.0, 88.7228),
                         all_f32_between(-87.3, -86.0)])
    xs = xs[(xs >= F(-87.3)) & (xs <= F(88.7228))]
    out.append(measure(Stat("exp rel err, x in [-87.3, 88.7228]"), exp, np.exp, xs, "rel"))
    if FULL:
        out.append(measure(Stat("exp rel err, EVERY f32 x in [-87.3,-2^-12]"), exp, np.exp,
                           Every(2.0 ** -12, 87.3, -1), "rel"))
        out.append(measure(Stat("exp rel err, EVERY f32 x in [2^-12, 88.7228]"), exp, np.exp,
                           Every(2.0 ** -12, 88.7228, 1), "rel"))
    xs = all_f32_between(-103.97, -87.3)      # every f32: subnormal/near-subnormal results
    st = Stat("exp abs err in units of 2^-149, x in [-103.97,-87.3] (every f32)")
    for xc in chunks(xs):
        y = exp(xc).astype(np.float64)
        r = np.exp(xc.astype(np.float64))
        st.add(xc, np.abs(y - r) / 2.0 ** -149)
    out.append(st)
    return out


def T_log():
    out = []
    xs = np.concatenate([rand_bits(2.0 ** -30, 2.0 ** 30, NS),
                         all_f32_between(0.5, 2.0),            # every f32 in [0.5,2]
                         all_f32_between(0.999, 1.001)])
    out.append(measure(Stat("log rel err, x in [2^-30, 2^30]"), log, np.log, xs, "rel"))
    if FULL:
        out.append(measure(Stat("log rel err, EVERY f32 in [2^-30, 2^30]"), log, np.log,
                           Every(2.0 ** -30, 2.0 ** 30, 1), "rel"))
    xs = np.concatenate([all_f32_between(1e-45, 1.17549435e-38)[::3], rand_bits(1e-45, 2.0 ** -30, NS),
                         rand_bits(2.0 ** 30, 3.4e38, NS)])
    out.append(measure(Stat("log rel err, subnormal + [2^-149, 2^-30] + [2^30, max]"), log, np.log, xs, "rel"))
    return out


def T_ln1p():
    out = []
    xs = np.concatenate([rand_uniform(-0.999, 1e6, NS // 4), rand_uniform(-0.999, 2.0, NS),
                         rand_bits(0.0, 1e6, NS), -rand_bits(0.0, 0.999, NS),
                         every_mag(2.0 ** -12, 0.5, 5), -all_f32_between(0.99, 0.999)])
    out.append(measure(Stat("ln_1p rel err, x in [-0.999, 1e6]"), ln_1p, np.log1p, xs, "rel"))
    if FULL:
        out.append(measure(Stat("ln_1p rel err, EVERY f32 in [-0.999, -2^-14]"), ln_1p, np.log1p,
                           Every(2.0 ** -14, 0.999, -1), "rel"))
        out.append(measure(Stat("ln_1p rel err, EVERY f32 in [2^-14, 1e6]"), ln_1p, np.log1p,
                           Every(2.0 ** -14, 1e6, 1), "rel"))
    xs = np.concatenate([rand_bits_signed(0, 1e-4, NS)])
    out.append(measure(Stat("ln_1p rel err, |x| < 1e-4 (incl. subnormal)"), ln_1p, np.log1p, xs, "rel"))
    return out


def _trig_xs(lim):
    xs = [rand_uniform(-lim, lim, NS), rand_bits_signed(0, lim, NS),
          rand_uniform(-10, 10, NS // 2), every_mag(2.0 ** -12, 4.0, 31)]
    # near multiples of pi/4 (every f32 within a few thousand ulps)
    ks = np.arange(-40, 41) * (np.pi / 4)
    ks = np.concatenate([ks, np.round(RNG.uniform(-lim, lim, 40) / (np.pi / 4)) * np.pi / 4])
    for c in ks:
        c32 = F(c)
        b = int(bits(np.abs(c32)))
        v = from_bits(np.arange(b - 3000, b + 3000, dtype=np.int64).astype(np.int32))
        xs.append(v if c >= 0 else -v)
    xs = np.concatenate(xs)
    return xs[np.abs(xs) <= F(lim)]


def T_sincos():
    out = []
    xs = _trig_xs(1e6)
    out.append(measure(Stat("sin abs err, |x| <= 1e6"), sin, np.sin, xs, "abs"))
    out.append(measure(Stat("cos abs err, |x| <= 1e6"), cos, np.cos, xs, "abs"))
    if FULL:
        xs = Every(2.0 ** -12, 2.0 ** 7, 1)     # odd/even: sign handled by bit logic
        out.append(measure(Stat("sin abs err, EVERY f32 2^-12<=x<=128"), sin, np.sin, xs, "abs"))
        out.append(measure(Stat("cos abs err, EVERY f32 2^-12<=x<=128"), cos, np.cos, xs, "abs"))
        xs = Every(128.0, 6000.0, 1)            # the rest of the f32 reduction's range
        out.append(measure(Stat("sin abs err, EVERY f32 128<=x<=6000"), sin, np.sin, xs, "abs"))
        out.append(measure(Stat("cos abs err, EVERY f32 128<=x<=6000"), cos, np.cos, xs, "abs"))
    xs = rand_bits_signed(0, 0.78, NS)
    out.append(measure(Stat("sin rel err, |x| <= 0.78"), sin, np.sin, xs, "rel"))
    xs = rand_bits_signed(1e6, 1e8, NS // 4)
    out.append(measure(Stat("sin abs err, 1e6 < |x| <= 1e8 (info only)"), sin, np.sin, xs, "abs"))
    return out


def T_tan():
    out = []
    xs = _trig_xs(1e4)
    # every f32 near poles pi/2 + k*pi for a few k: the nearest ones are the worst
    out.append(measure(Stat("tan rel err, |x| <= 1e4"), tan, np.tan, xs, "rel"))
    xs = _trig_xs(1e6)
    out.append(measure(Stat("tan rel err, |x| <= 1e6"), tan, np.tan, xs, "rel"))
    if FULL:
        xs = Every(2.0 ** -12, 2.0 ** 7, 1)
        out.append(measure(Stat("tan rel err, EVERY f32 2^-12<=x<=128"), tan, np.tan, xs, "rel"))
        out.append(measure(Stat("tan rel err, EVERY f32 128<=x<=6000"), tan, np.tan,
                           Every(128.0, 6000.0, 1), "rel"))
    return out


def T_atan():
    out = []
    xs = np.concatenate([rand_bits_signed(0, 3.4e38, NS), rand_uniform(-5, 5, NS),
                         all_f32_between(0.40, 0.43), all_f32_between(2.38, 2.45),
                         all_f32_between(0.9, 1.1)[::3], -all_f32_between(0.40, 0.43)])
    out.append(measure(Stat("atan abs err, all f32"), atan, np.arctan, xs, "abs"))
    if FULL:
        out.append(measure(Stat("atan abs err, EVERY f32 2^-12<=x<=2^26"), atan, np.arctan,
                           Every(2.0 ** -12, 2.0 ** 26, 1), "abs"))
        out.append(measure(Stat("atan rel err, EVERY f32 2^-12<=x<=2^26"), atan, np.arctan,
                           Every(2.0 ** -12, 2.0 ** 26, 1), "rel"))
    out.append(measure(Stat("atan rel err, all f32"), atan, np.arctan, xs[xs != 0], "rel"))
    return out


def T_tanh():
    out = []
    xs = np.concatenate([rand_uniform(-10, 10, NS), rand_bits_signed(0, 10, NS),
                         all_f32_between(0.5, 1.0), -all_f32_between(0.6, 0.65)])
    out.append(measure(Stat("tanh rel err, |x| <= 10"), tanh, np.tanh, xs[xs != 0], "rel"))
    if FULL:
        out.append(measure(Stat("tanh rel err, EVERY f32 2^-12<=x<=10"), tanh, np.tanh,
                           Every(2.0 ** -12, 10.0, 1), "rel"))
    xs = rand_uniform(9.02, 1e4, NS // 4)
    y = tanh(xs)
    print("    tanh(x) == 1 exactly for all %d sampled x in [9.02,1e4]: %s; tanh(-x) == -1: %s;"
          " first x with tanh(x)==1: %r" % (xs.size, bool(np.all(y == 1)),
                                              bool(np.all(tanh(-xs) == -1)),
                                              F(all_f32_between(8.0, 10.0)[np.argmax(tanh(all_f32_between(8.0, 10.0)) == 1)])))
    return out


def _sigmoid_ref(x):
    return sp.expit(x)


def T_sigmoid():
    out = []
    xs = np.concatenate([rand_uniform(-87, 88, NS), rand_bits_signed(0, 88, NS),
                         every_mag(2.0 ** -10, 2.0, 13)])
    xs = xs[(xs >= -87) & (xs <= 88)]
    out.append(measure(Stat("sigmoid rel err, x in [-87, 88]"), sigmoid, _sigmoid_ref, xs, "rel"))
    xs = all_f32_between(-103.0, -87.0)
    st = Stat("sigmoid abs err / 2^-149, x in [-103,-87] (subnormal results)")
    st.add(xs, np.abs(sigmoid(xs).astype(np.float64) - _sigmoid_ref(xs.astype(np.float64))) / 2.0 ** -149)
    out.append(st)
    return out


def T_erf():
    out = []
    xs = np.concatenate([rand_bits_signed(0, 3.4e38, NS), rand_uniform(-6, 6, NS),
                         all_f32_between(0.7, 0.8), all_f32_between(2.0, 4.0)[::5]])
    out.append(measure(Stat("erf abs err, all f32"), erf, sp.erf, xs, "abs"))
    if FULL:
        out.append(measure(Stat("erf abs err, EVERY f32 2^-8<=x<=5"), erf, sp.erf, Every(2.0 ** -8, 5.0, 1), "abs"))
        out.append(measure(Stat("erf rel err, EVERY f32 2^-12<=x<=1"), erf, sp.erf, Every(2.0 ** -12, 1.0, 1), "rel"))
        out.append(measure(Stat("erfc rel err, EVERY f32 2^-8<=|x|<=9.1"), erfc, sp.erfc, Every(2.0 ** -8, 9.1, 0), "rel"))
    xs = np.concatenate([rand_bits_signed(2.0 ** -126, 1.0, NS), rand_uniform(-1, 1, NS),
                         all_f32_between(0.5, 1.0)])
    out.append(measure(Stat("erf rel err, 2^-126 <= |x| < 1"), erf, sp.erf, xs, "rel"))
    xs = rand_bits_signed(1e-45, 2.0 ** -126, NS // 4)
    st = Stat("erf abs err / 2^-149, subnormal x")
    st.add(xs, np.abs(erf(xs).astype(np.float64) - sp.erf(xs.astype(np.float64))) / 2.0 ** -149)
    out.append(st)
    # erfc
    xs = np.concatenate([rand_uniform(-10, 10.0, NS), rand_bits_signed(0, 10.0, NS),
                         all_f32_between(0.7, 0.8), all_f32_between(8.0, 10.0)[::3]])
    xs = xs[xs <= 10.0]
    r = sp.erfc(xs.astype(np.float64))
    xs = xs[r >= 2.0 ** -126]
    out.append(measure(Stat("erfc rel err, x in [-10, 9.1] (normal results)"), erfc, sp.erfc, xs, "rel"))
    xs = all_f32_between(9.1, 10.1)
    st = Stat("erfc err in ulps (subnormal-aware), x in [9.1, 10.1] (tiny results)")
    st.add(xs, np.abs(erfc(xs).astype(np.float64) - sp.erfc(xs.astype(np.float64))) / ulp32(sp.erfc(xs.astype(np.float64))))
    out.append(st)
    return out


def _gelu_ref(x):
    return 0.5 * x * sp.erfc(-x / np.sqrt(2.0))


def _gelu_tanh_ref(x):
    return x * sp.expit(2 * np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))


def _silu_ref(x):
    return x * sp.expit(x)


def _softplus_ref(x):
    return np.logaddexp(0.0, x)


def _mish_ref(x):
    return x * np.tanh(np.logaddexp(0.0, x))


def _logsig_ref(x):
    return -np.logaddexp(0.0, -x)


def T_composite():
    out = []
    xs = np.concatenate([rand_uniform(-20, 20, NS), rand_bits_signed(0, 20, NS),
                         every_mag(2.0 ** -10, 2.0, 13)])
    xs = xs[xs != 0]
    xd = xs.astype(np.float64)
    for name, fn, ref in [
        ("gelu", gelu, _gelu_ref),
        ("gelu_tanh", gelu_tanh, _gelu_tanh_ref),
        ("silu", silu, _silu_ref),
        ("softplus", softplus, _softplus_ref),
        ("mish", mish, _mish_ref),
        ("log_sigmoid", log_sigmoid, _logsig_ref),
    ]:
        y = np.concatenate([fn(c) for c in chunks(xs)]).astype(np.float64)
        r = ref(xd)
        d = np.abs(y - r)
        st = Stat("%s abs err / max(|x|,1), x in [-20,20]" % name)
        st.add(xs, d / np.maximum(np.abs(xd), 1.0))
        out.append(st)
        # relative error where the result (and, for x*g(x) forms, g(x)) is a normal f32
        g = np.abs(r) / np.maximum(np.abs(xd), 1.0)
        m = g >= 2.0 ** -126
        st = Stat("%s rel err, x in [-20,20] where |f(x)|/max(1,|x|) >= 2^-126" % name)
        st.add(xs[m], np.where(d[m] == 0, 0, d[m] / np.abs(r[m])), d[m] / ulp32(r[m]))
        out.append(st)
        if name == "gelu_tanh":
            m = (xs >= -5) & (np.abs(r) >= 2.0 ** -126)
            st = Stat("gelu_tanh rel err, x in [-5,20], normal results")
            st.add(xs[m], np.where(d[m] == 0, 0, d[m] / np.abs(r[m])), d[m] / ulp32(r[m]))
            out.append(st)
    for lo, hi in [(-3, 0), (-6, -3), (-10, -6), (-12.9, -10)]:
        x2 = rand_uniform(lo, hi, NS // 4)
        out.append(measure(Stat("gelu rel err, x in [%g,%g]" % (lo, hi)), gelu, _gelu_ref, x2[x2 != 0], "rel"))
    return out


TESTS = {
    "exp": T_exp, "log": T_log, "ln_1p": T_ln1p, "sincos": T_sincos, "tan": T_tan,
    "atan": T_atan, "tanh": T_tanh, "sigmoid": T_sigmoid, "erf": T_erf, "composite": T_composite,
}

def main():
    names = [a for a in sys.argv[1:] if not a.startswith("--")] or list(TESTS)
    print("coefficients:", {k: len(v) for k, v in C.items()})
    special_checks()
    for n in names:
        t0 = time.time()
        print("[%s]" % n)
        for st in TESTS[n]():
            print(st)
        print("    (%.1fs)" % (time.time() - t0))


if __name__ == "__main__":
    main()
