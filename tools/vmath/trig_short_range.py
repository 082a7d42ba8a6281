#!/usr/bin/env python3
"""The f32 argument reduction of sin / cos / tan (vmath `reduce_short`, |x| <= 6000).

Derives the four parts of pi/2 (each remainder truncated, so all are positive) and
bounds the reduction's error where it matters most: at the f32 inputs nearest each
multiple k*pi/2 in range, where x - k*pi/2 is smallest and tan's error is relative.
Exact rational arithmetic (fractions), no dependencies.

Usage: python3 tools/vmath/trig_short_range.py
"""
import math
import struct
from fractions import Fraction

PI = Fraction("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899862803482534211706798214808651")
PIO2 = PI / 2
SHORT_RANGE = 6000.0


def f32(v):
    return struct.unpack("<f", struct.pack("<f", float(v)))[0]


def f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def from_bits(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


def ulp32(v):
    """The spacing of f32 values at normal |v|."""
    return 2.0 ** (math.frexp(abs(v))[1] - 24)


def truncate(v, lsb_exp):
    unit = Fraction(2) ** lsb_exp
    return Fraction(math.floor(v / unit)) * unit


def main():
    c1 = truncate(PIO2, -11)
    c2 = truncate(PIO2 - c1, -23)
    c3 = truncate(PIO2 - c1 - c2, -34)
    c4 = Fraction(f32(PIO2 - c1 - c2 - c3))
    rest = PIO2 - c1 - c2 - c3 - c4
    for name, c in [("PIO2_C1", c1), ("PIO2_C2", c2), ("PIO2_C3", c3), ("PIO2_C4", c4)]:
        assert Fraction(f32(c)) == c and c > 0
        print(f"{name} = 0x{f32_bits(f32(c)):08x}  ({float(c):.10e})")
    print(f"pi/2 - (C1 + C2 + C3 + C4) = {float(rest):.3e}")

    kmax = math.floor(f32(SHORT_RANGE * f32(2 / math.pi)) + 0.5)
    assert kmax < 2 ** 12, "k * C1..C3 must stay exact"
    print(f"|x| <= {SHORT_RANGE}: |k| <= {kmax} < 2^12")

    # The error left in (rh, rn): k times the rest, and the rounding of k*C4 (rn's own
    # rounding is a fraction of an ulp of the result and is part of the measured bounds).
    worst = (0.0, 0, 0.0)
    nearest = (math.inf, 0, 0.0)
    for k in range(1, kmax + 1):
        target = k * PIO2
        b = f32_bits(f32(target))
        for d in (-1, 0, 1):
            x = from_bits(b + d)
            v = abs(Fraction(x) - target)
            err = k * float(rest) + 0.5 * ulp32(f32(k * float(c4)))
            if float(v) < nearest[0]:
                nearest = (float(v), k, x)
            if err / float(v) > worst[0]:
                worst = (err / float(v), k, x)
    print(f"smallest |x - k*pi/2|: {nearest[0]:.3e} at x = {nearest[2]!r} (k = {nearest[1]})")
    print(f"largest relative reduction error: {worst[0]:.2e} at x = {worst[2]!r} (k = {worst[1]})")


if __name__ == "__main__":
    main()
