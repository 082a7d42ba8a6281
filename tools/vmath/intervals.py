"""What tanh_table.py and gelu_table.py share: the 32 intervals of |x| that the AVX-512
kernels read off the top bits of an f32 (bits >> 21: the exponent and two mantissa bits,
four a binade over [2^-4, 16); interval 0 also takes [0, 2^-4)), f32 bit helpers, an exact
simulation of one FMA (log_table.py's too), and the `--rust` printer of a table.
"""
import numpy as np

F = np.float32
FIRST_CODE = 0x3D800000 >> 21  # 2^-4: bits >> 21 = 492
INTERVALS = 32


def f32_from_bits(b):
    return float(np.array([b], dtype=np.uint32).view(np.float32)[0])


def f32_bits(v):
    return int(np.array([v], dtype=np.float32).view(np.uint32)[0])


def interval(j):
    lo = 0.0 if j == 0 else f32_from_bits((FIRST_CODE + j) << 21)
    hi = f32_from_bits((FIRST_CODE + j + 1) << 21)
    return lo, hi


def index(a):
    """The interval of each a >= 0 (an f32 array), as `vpermt2ps` reads it: the code's low
    5 bits, so the tables are stored rotated (see `print_rust`)."""
    code = (np.maximum(a, F(2.0**-4)).view(np.uint32) >> 21).astype(np.int64)
    return (code - FIRST_CODE) % INTERVALS


def fma32(x, y, z):
    """f32(x*y + z) with one rounding: the product is exact in f64; the sum in long double
    (64-bit mantissa) then f32 rounds twice only when the long double sum is a tie, which
    the comparison with the portable order would show as a stray count."""
    p = np.asarray(x, np.float32).astype(np.float64) * np.asarray(y, np.float32).astype(np.float64)
    return (p.astype(np.longdouble) + np.asarray(z, np.float32).astype(np.longdouble)).astype(np.float32)


def poly(a, rows):
    """The kernels' per-interval polynomial: c0 + t*(c1 + ... + t*cD), t = a - b, with
    `rows[j] = (b, [c0..cD], ...)` for interval j."""
    j = index(a)
    bs = np.array([r[0] for r in rows], dtype=np.float32)[j]
    cs = np.array([r[1] for r in rows], dtype=np.float32)[:, ::-1]  # highest degree first
    t = (a - bs).astype(np.float32)
    p = cs[j, 0]
    for k in range(1, cs.shape[1]):
        p = fma32(p, t, cs[j, k])
    return p


def print_rust(prefix, rows, degree):
    """The table as Rust constants `{prefix}_B`, `{prefix}_C0`.. (entry (FIRST_CODE + j) % 32
    holds interval j: the kernel indexes with the code's low 5 bits, no subtraction)."""
    names = [f"{prefix}_B"] + [f"{prefix}_C{k}" for k in range(degree + 1)]
    cols = [[r[0] for r in rows]] + [[r[1][k] for r in rows] for k in range(degree + 1)]
    for name, col in zip(names, cols):
        col = [col[(p - FIRST_CODE) % INTERVALS] for p in range(INTERVALS)]
        hexes = ", ".join(f"{f32_bits(v):#010x}" for v in col)
        print(f"const {name}: [u32; {INTERVALS}] = [{hexes}];")
