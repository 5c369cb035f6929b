"""The float32 block of the metrics kernel: every sum of one block in float32 lanes, folded into the
float64 accumulators by the caller (kernel._chunk32), so the rounding of a block's sums stays near
float32's 6e-8 of the block while the pair's totals are float64 (docs/metrics.md, "Precision").

Why float32: on the AVX-512 cores this runs on, a float64 operation costs what a float32 one does on
half the lanes; the float64 block was arithmetic-bound at 5x numpy's read (docs/compare.md, "The
metrics kernel"). What keeps the results readable: differences are formed first (t - g is exact
where the sides are close), cosine comes from sum (t - g)^2 and sum (t - g)(t + g) instead of a
rounded dot product, and KL from its Bregman terms a log(a/b) - (a - b) >= 0 with a - b taken from
t - g. A block whose magnitudes float32 squares cannot hold is refused (the caller folds it in float64).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import numba as nb
import numpy as np

from .kernel import EPS32, EPS64, F64, S_NEAR, Chunk, _as_float32
from .kernel import _as_int as _as_int_any

_as_int = cast(Callable[[Any], Any], _as_int_any)  # float32 bits as int32 (jitted code only)

f32 = np.float32
Z, ONE, TWO = f32(0.0), f32(1.0), f32(2.0)
E64, E32 = f32(EPS64), f32(EPS32)  # both powers of two: exact in float32
TH_1K, TH_5K = f32(0.001), f32(0.005)
SNEAR = f32(S_NEAR)
LN2 = f32(math.log(2.0))
SQRT2 = f32(math.sqrt(2.0))
# 2 atanh(s) = 2s + 2s z (1/3 + z/5 + z^2/7 + z^3/9 + z^4/11), z = s^2 <= 0.0295: truncation < 1e-8 relative
Q0, Q1, Q2, Q3, Q4, Q5, Q6 = (f32(1 / k) for k in (3, 5, 7, 9, 11, 13, 15))
THREE = f32(3.0)
MANT32 = np.int32(0x007FFFFF)
ONE32 = np.int32(0x3F800000)
EXP32 = np.int32(0x7F800000)
I0: Any = np.int32(0)
# per block: float32 squares and relative errors hold without overflow or underflow between these
BIG_BITS: int = int(np.float32(2.0 ** 58).view(np.int32))  # |x| <= 2^58: 1,024 squares sum below 2^127
# a side's largest |x| at least 2^-40: then any nonzero difference of its values (>= its ulp, 2^-63) squares to a
# normal float32, so the shifted sums (std) hold; the differences' largest at least 2^-52: the terms of
# sum (t - g)^2 that underflow (< 2^-150 each) stay below 2^-36 of it
TINY_BITS: int = int(np.float32(2.0 ** -40).view(np.int32))
TINY_D_BITS: int = int(np.float32(2.0 ** -52).view(np.int32))

# float32 block result slots (o32), beside the float64 accumulator layout of kernel.py
B_AD, B_D2, B_G2, B_T2, B_DP, B_GC, B_TC, B_GC2, B_TC2, B_REL, B_C1, B_C5, B_ACC = range(13)
B_SA, B_SD, B_BR = 13, 14, 15
N_B = 16


@nb.njit(inline="always", fastmath=True)
def _q7(z: np.float32) -> np.float32:
    """_q to z^6, for z = s^2 <= 1/9 (a/b within [1/2, 2]): truncation < 2e-8 relative."""
    return Q0 + z * (Q1 + z * (Q2 + z * (Q3 + z * (Q4 + z * (Q5 + z * Q6)))))


@nb.njit(inline="always", fastmath=True)
def _q(z: np.float32) -> np.float32:
    """(2 atanh(s) - 2s) / (2 s z): 1/3 + z/5 + ... to z^4, float32."""
    return Q0 + z * (Q1 + z * (Q2 + z * (Q3 + z * Q4)))


@nb.njit(nogil=True, cache=True, error_model="numpy", fastmath=True)
def sums32(g: Chunk, t: Chunk, kg: np.float32, kt: np.float32, o: F64) -> tuple[Any, ...]:
    """The sums of one float32 block into o (B_* slots, as float64): shifted by the block's own kg, kt.
    Returns (nan/inf seen, elements that differ, max |t - g|, max r, max r over |g| > eps, max |g|,
    max |t|), maxima as int32 bits of non-negative float32s (integer max reductions vectorize)."""
    s_ad = s_d2 = s_g2 = s_t2 = s_dp = Z
    s_gc = s_tc = s_gc2 = s_tc2 = Z
    s_rel = c1 = c5 = s_acc = nd = bad = Z
    m_ad = m_rel = m_acc = m_g = m_t = I0
    for i in range(g.size):
        gr = g[i]
        tr = t[i]
        ig = _as_int(gr)
        it = _as_int(tr)
        bad += ONE if ((ig & EXP32) == EXP32) | ((it & EXP32) == EXP32) else Z
        d = tr - gr
        ad = abs(d)
        s_ad += ad
        s_d2 += d * d
        s_g2 += gr * gr
        s_t2 += tr * tr
        s_dp += d * (gr + tr)
        gc = gr - kg
        tc = tr - kt
        s_gc += gc
        s_tc += tc
        s_gc2 += gc * gc
        s_tc2 += tc * tc
        nd += ONE if tr != gr else Z
        ag = abs(gr)
        den = ag if ag != Z else E64
        r = ad / den
        ir = _as_int(r)
        m_ad = max(m_ad, _as_int(ad))
        m_rel = max(m_rel, ir)
        m_g = max(m_g, _as_int(ag))
        m_t = max(m_t, _as_int(abs(tr)))
        s_rel += r
        c1 += ONE if r < TH_1K else Z
        c5 += ONE if r < TH_5K else Z
        s_acc += r if ag > E64 else Z
        m_acc = max(m_acc, ir if ag > E64 else I0)
    o[B_AD] = s_ad
    o[B_D2] = s_d2
    o[B_G2] = s_g2
    o[B_T2] = s_t2
    o[B_DP] = s_dp
    o[B_GC] = s_gc
    o[B_TC] = s_tc
    o[B_GC2] = s_gc2
    o[B_TC2] = s_tc2
    o[B_REL] = s_rel
    o[B_C1] = c1
    o[B_C5] = c5
    o[B_ACC] = s_acc
    return int(bad), int(nd), m_ad, m_rel, m_acc, m_g, m_t


@nb.njit(inline="always", fastmath=True)
def _ab(g: np.float32, t: np.float32, gmin: np.float32, ginv: np.float32, tmin: np.float32, tinv: np.float32,
        c1: np.float32, c2: np.float32) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """(a, b, a - b of the rounded a, b, a - b for the sums): the normalized values floored at eps32, and their
    difference to float32 precision of the differences themselves where the sides are close:
    (t - g) tinv + (g - gmin)(tinv - ginv) - (tmin - gmin) tinv, where no term is floored."""
    gb = g - gmin
    ar = (t - tmin) * tinv
    br = gb * ginv
    a = ar if ar > E32 else E32
    b = br if br > E32 else E32
    dr = a - b
    dtv = (t - g) * tinv
    gbc = gb * c1
    dx = dtv + gbc - c2
    # dx where its terms are smaller than a + b (close sides: its rounding is then the smaller); else the rounded
    # a - b, whose common scale errors (tinv's, ginv's rounding) KL does not see (it normalizes a and b)
    fine = (ar > E32) & (br > E32) & (abs(dtv) + abs(gbc) + abs(c2) < a + b)
    return a, b, dr, (dx if fine else dr)


@nb.njit(nogil=True, cache=True, error_model="numpy", fastmath=True)
def kl_near32(g: Chunk, t: Chunk, gmin64: float, ginv64: float, tmin64: float, tinv64: float, c164: float,
              c264: float, o: F64) -> int:
    """KL sums of a block whose ratios a/b lie within sqrt2: A, D = sum(a - b) (from t - g) and the Bregman sum
    sum(a log(a/b) - (a - b)) = sum((a - b) s + 2 a s z q(z)), s = (a - b)/(a + b), every term >= 0.
    Returns the elements outside that range (any makes the Bregman sum wrong: the general path redoes it)."""
    gmin, ginv, tmin, tinv, c1, c2 = f32(gmin64), f32(ginv64), f32(tmin64), f32(tinv64), f32(c164), f32(c264)
    sa = sd = br = Z
    far = Z
    for i in range(g.size):
        a, b, dr, dx = _ab(g[i], t[i], gmin, ginv, tmin, tinv, c1, c2)
        s = dx / (a + b)
        z = s * s
        sa += a
        sd += dx
        br += dx * s + TWO * a * s * z * _q(z)
        far += ONE if abs(s) > SNEAR else Z
    o[B_SA] = sa
    o[B_SD] = sd
    o[B_BR] = br
    return int(far)


@nb.njit(nogil=True, cache=True, error_model="numpy", fastmath=True)
def kl_general32(g: Chunk, t: Chunk, gmin64: float, ginv64: float, tmin64: float, tinv64: float, c164: float,
                 c264: float, o: F64) -> int:
    """KL sums of any block: the near form of the Bregman term where a/b lies within [1/2, 2] (s = (a - b)/(a + b),
    |s| <= 1/3, 7-term series; no cancellation), elsewhere a log(a/b) - (a - b) with log(a/b) split as
    e ln2 + 2 atanh((ma - mb)/(ma + mb)) over the float32 exponent and mantissa (the term's rounding then at
    most 4x its size's). Returns the elements beyond sqrt2 (the next block tries the near path when none)."""
    gmin, ginv, tmin, tinv, c1, c2 = f32(gmin64), f32(ginv64), f32(tmin64), f32(tinv64), f32(c164), f32(c264)
    sa = sd = br = Z
    far = Z
    for i in range(g.size):
        a, b, dr, dx = _ab(g[i], t[i], gmin, ginv, tmin, tinv, c1, c2)
        ia = _as_int(a)
        ib = _as_int(b)
        e = np.int32(np.int32(ia >> 23) - np.int32(ib >> 23))  # int32 throughout: 16 lanes, as the floats
        ma = _as_float32(np.int32(np.int32(ia & MANT32) | ONE32))
        mb = _as_float32(np.int32(np.int32(ib & MANT32) | ONE32))
        up = ma > SQRT2 * mb
        dn = mb > SQRT2 * ma
        mb = mb * TWO if up else mb
        ma = ma * TWO if dn else ma
        e = np.int32(e + np.int32(1)) if up else (np.int32(e - np.int32(1)) if dn else e)
        near = THREE * abs(dx) <= a + b  # a/b within [1/2, 2]: the Bregman term's near form, no cancellation
        s = (dx if near else ma - mb) / (a + b if near else ma + mb)
        z = s * s
        w = TWO * s * z * _q7(z)
        fe = f32(e)
        sa += a
        sd += dx
        br += (dx * s + a * w) if near else (a * (fe * LN2 + TWO * s + w) - dx)
        far += Z if e == I0 else ONE
    o[B_SA] = sa
    o[B_SD] = sd
    o[B_BR] = br
    return int(far)
