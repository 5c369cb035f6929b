"""The hot loop: every real-data metric of a tensor pair in one streaming pass over chunks.

Each chunk (float32 or float64, both sides the same dtype, cache-sized) is folded into float64
accumulators. All-finite chunks take a vectorized path (fastmath is safe there: no nan/inf);
chunks holding nan/inf take a careful scalar path that counts them and skips them. LLVM does not
vectorize float max reductions, so maxima are taken over the int64 bit patterns of the
non-negative error buffers. All functions release the GIL (nogil) and are cached on disk.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

EPS64 = float(np.finfo(np.float64).eps)  # msprobe's FLOAT_EPSILON: the relative-error guard for golden == 0
EPS32 = float(np.finfo(np.float32).eps)  # msaccucmp's floor of the normalized KL distributions
KL_SERIES_MAX = 1e-3  # |x| below this: log1p(x) by a 4-term series (error < 1e-16 relative)

# float64 accumulator slots
A_SUM_AD, A_SUM_D2, A_SUM_G2, A_SUM_T2, A_SUM_GT = 0, 1, 2, 3, 4
A_SUM_GC, A_SUM_TC, A_SUM_GC2, A_SUM_TC2 = 5, 6, 7, 8  # shifted sums for mean/std without cancellation
A_SUM_REL, A_CNT_1K, A_CNT_5K, A_SUM_ACC = 9, 10, 11, 12
A_KL_SA, A_KL_SB, A_KL_SL = 13, 14, 15
A_MAX_AD, A_MAX_REL, A_WORST_G, A_WORST_T = 16, 17, 18, 19
A_KL_SD = 20  # sum of (a - b): log(B/A) = -log1p(SD/B) without cancelling two large sums
N_ACC = 21
# int64 counter slots
C_G_NAN, C_G_PINF, C_G_NINF, C_T_NAN, C_T_PINF, C_T_NINF = 0, 1, 2, 3, 4, 5
C_MISMATCH, C_FIRST_MISMATCH, C_WORST_IDX, C_FINITE, C_DIFF = 6, 7, 8, 9, 10
N_CNT = 11
# kernel parameter slots: KL normalization (x - min) * inv per side, and the shifts for mean/std
P_GMIN, P_GINV, P_TMIN, P_TINV, P_GSHIFT, P_TSHIFT = 0, 1, 2, 3, 4, 5
N_PARAM = 6

_OPTS = dict(nogil=True, cache=True, error_model="numpy")
_FAST = dict(_OPTS, fastmath=True)


def new_state() -> tuple[np.ndarray, np.ndarray]:
    """Fresh accumulators for one tensor pair."""
    acc = np.zeros(N_ACC, dtype=np.float64)
    cnt = np.zeros(N_CNT, dtype=np.int64)
    cnt[C_FIRST_MISMATCH] = -1
    cnt[C_WORST_IDX] = -1
    return acc, cnt


@nb.njit(nogil=True, cache=True, error_model="numpy", fastmath={"reassoc", "contract"})
def all_finite(g, t):
    """True when neither chunk holds nan or inf (x * 0 is nan exactly for those)."""
    s = 0.0
    for i in range(g.size):
        s += np.float64(g[i]) * 0.0 + np.float64(t[i]) * 0.0
    return s == 0.0


@nb.njit(**_FAST)
def _sums(g, t, p, acc, sad):
    s_ad = 0.0
    s_d2 = 0.0
    s_g2 = 0.0
    s_t2 = 0.0
    s_gt = 0.0
    s_gc = 0.0
    s_tc = 0.0
    s_gc2 = 0.0
    s_tc2 = 0.0
    ndiff = 0.0
    kg = p[P_GSHIFT]
    kt = p[P_TSHIFT]
    for i in range(g.size):
        gi = np.float64(g[i])
        ti = np.float64(t[i])
        d = ti - gi
        ad = abs(d)
        s_ad += ad
        s_d2 += d * d
        s_g2 += gi * gi
        s_t2 += ti * ti
        s_gt += gi * ti
        gc = gi - kg
        tc = ti - kt
        s_gc += gc
        s_tc += tc
        s_gc2 += gc * gc
        s_tc2 += tc * tc
        ndiff += 1.0 if ti != gi else 0.0
        sad[i] = ad
    acc[A_SUM_AD] += s_ad
    acc[A_SUM_D2] += s_d2
    acc[A_SUM_G2] += s_g2
    acc[A_SUM_T2] += s_t2
    acc[A_SUM_GT] += s_gt
    acc[A_SUM_GC] += s_gc
    acc[A_SUM_TC] += s_tc
    acc[A_SUM_GC2] += s_gc2
    acc[A_SUM_TC2] += s_tc2
    return ndiff


@nb.njit(**_FAST)
def _relative(g, t, p, acc, sad, srel):
    """Relative errors (msprobe) and the KL terms (msaccucmp); returns how many KL terms need a real log."""
    s_rel = 0.0
    c1 = 0.0
    c5 = 0.0
    s_acc = 0.0
    sa = 0.0
    sb = 0.0
    sl = 0.0
    sd = 0.0
    far = 0.0
    gmin = p[P_GMIN]
    ginv = p[P_GINV]
    tmin = p[P_TMIN]
    tinv = p[P_TINV]
    for i in range(g.size):
        gi = np.float64(g[i])
        ti = np.float64(t[i])
        ag = abs(gi)
        den = ag if ag != 0.0 else EPS64
        r = sad[i] / den
        srel[i] = r
        s_rel += r
        c1 += 1.0 if r < 0.001 else 0.0
        c5 += 1.0 if r < 0.005 else 0.0
        s_acc += r if ag > EPS64 else 0.0
        a = (ti - tmin) * tinv
        a = a if a > EPS32 else EPS32
        b = (gi - gmin) * ginv
        b = b if b > EPS32 else EPS32
        sa += a
        sb += b
        sd += a - b
        x = (a - b) / b
        ok = abs(x) < KL_SERIES_MAX
        lg = x * (1.0 - x * (0.5 - x * (1.0 / 3.0 - x * 0.25)))
        sl += a * lg if ok else 0.0
        far += 0.0 if ok else 1.0
    acc[A_SUM_REL] += s_rel
    acc[A_CNT_1K] += c1
    acc[A_CNT_5K] += c5
    acc[A_SUM_ACC] += s_acc
    acc[A_KL_SA] += sa
    acc[A_KL_SB] += sb
    acc[A_KL_SL] += sl
    acc[A_KL_SD] += sd
    return far


@nb.njit(**_OPTS)
def _kl_far(g, t, p, acc):
    """The KL terms the series cannot take, with a real log1p."""
    sl = 0.0
    for i in range(g.size):
        a = max((np.float64(t[i]) - p[P_TMIN]) * p[P_TINV], EPS32)
        b = max((np.float64(g[i]) - p[P_GMIN]) * p[P_GINV], EPS32)
        x = (a - b) / b
        if not abs(x) < KL_SERIES_MAX:
            sl += a * math.log1p(x)
    acc[A_KL_SL] += sl


@nb.njit(**_OPTS)
def _max_bits(buf, n):
    """Largest of n non-negative finite float64s, via their int64 bit patterns (vectorizes)."""
    ia = buf[:n].view(np.int64)
    m = 0
    for i in range(n):
        m = max(m, ia[i])
    return m


@nb.njit(**_OPTS)
def _bits(x):
    """The int64 bit pattern of a float64 (orders like the value for x >= 0)."""
    a = np.empty(1, dtype=np.float64)
    a[0] = x
    return a.view(np.int64)[0]


@nb.njit(**_OPTS)
def chunk_fast(g, t, p, acc, cnt, sad, srel, base):
    """Fold one all-finite chunk starting at flat index `base` into the accumulators."""
    n = g.size
    cnt[C_DIFF] += np.int64(_sums(g, t, p, acc, sad))
    if _relative(g, t, p, acc, sad, srel) > 0.0:
        _kl_far(g, t, p, acc)
    cnt[C_FINITE] += n
    m = _max_bits(sad, n)
    ia = sad[:n].view(np.int64)
    if cnt[C_WORST_IDX] < 0 or m > _bits(acc[A_MAX_AD]):
        for i in range(n):
            if ia[i] == m:
                acc[A_MAX_AD] = sad[i]
                acc[A_WORST_G] = g[i]
                acc[A_WORST_T] = t[i]
                cnt[C_WORST_IDX] = base + i
                break
    mr = _max_bits(srel, n)
    if mr > _bits(acc[A_MAX_REL]):
        ir = srel[:n].view(np.int64)
        for i in range(n):
            if ir[i] == mr:
                acc[A_MAX_REL] = srel[i]
                break


@nb.njit(**_OPTS)
def fold(g, t, p, acc, cnt, sad, srel, base):
    """Fold a chunk of any length in cache-sized blocks (len(sad)): the vectorized path for
    all-finite blocks, the careful one for blocks holding nan/inf."""
    n = g.size
    step = sad.size
    for s in range(0, n, step):
        e = min(n, s + step)
        gs = g[s:e]
        ts = t[s:e]
        if all_finite(gs, ts):
            chunk_fast(gs, ts, p, acc, cnt, sad, srel, base + s)
        else:
            chunk_careful(gs, ts, p, acc, cnt, base + s)


@nb.njit(**_OPTS)
def chunk_careful(g, t, p, acc, cnt, base):
    """Fold a chunk holding nan/inf: count them per side, compare the finite pairs one by one."""
    for i in range(g.size):
        gi = np.float64(g[i])
        ti = np.float64(t[i])
        gf = math.isfinite(gi)
        tf = math.isfinite(ti)
        if not gf:
            if math.isnan(gi):
                cnt[C_G_NAN] += 1
            elif gi > 0:
                cnt[C_G_PINF] += 1
            else:
                cnt[C_G_NINF] += 1
        if not tf:
            if math.isnan(ti):
                cnt[C_T_NAN] += 1
            elif ti > 0:
                cnt[C_T_PINF] += 1
            else:
                cnt[C_T_NINF] += 1
        if not (gf and tf):
            same = (math.isnan(gi) and math.isnan(ti)) or gi == ti
            if not same:
                cnt[C_DIFF] += 1
                cnt[C_MISMATCH] += 1
                if cnt[C_FIRST_MISMATCH] < 0:
                    cnt[C_FIRST_MISMATCH] = base + i
            continue
        d = ti - gi
        ad = abs(d)
        if ti != gi:
            cnt[C_DIFF] += 1
        cnt[C_FINITE] += 1
        acc[A_SUM_AD] += ad
        acc[A_SUM_D2] += d * d
        acc[A_SUM_G2] += gi * gi
        acc[A_SUM_T2] += ti * ti
        acc[A_SUM_GT] += gi * ti
        gc = gi - p[P_GSHIFT]
        tc = ti - p[P_TSHIFT]
        acc[A_SUM_GC] += gc
        acc[A_SUM_TC] += tc
        acc[A_SUM_GC2] += gc * gc
        acc[A_SUM_TC2] += tc * tc
        ag = abs(gi)
        r = ad / (ag if ag != 0.0 else EPS64)
        acc[A_SUM_REL] += r
        if r < 0.001:
            acc[A_CNT_1K] += 1.0
        if r < 0.005:
            acc[A_CNT_5K] += 1.0
        if ag > EPS64:
            acc[A_SUM_ACC] += r
        a = max((ti - p[P_TMIN]) * p[P_TINV], EPS32)
        b = max((gi - p[P_GMIN]) * p[P_GINV], EPS32)
        acc[A_KL_SA] += a
        acc[A_KL_SB] += b
        acc[A_KL_SD] += a - b
        acc[A_KL_SL] += a * math.log1p((a - b) / b)
        if cnt[C_WORST_IDX] < 0 or ad > acc[A_MAX_AD]:
            acc[A_MAX_AD] = ad
            acc[A_WORST_G] = gi
            acc[A_WORST_T] = ti
            cnt[C_WORST_IDX] = base + i
        if r > acc[A_MAX_REL]:
            acc[A_MAX_REL] = r


@nb.njit(**_OPTS)
def finite_range(x):
    """(min, max, first finite value, any finite) of a chunk over its finite elements."""
    lo = np.inf
    hi = -np.inf
    first = 0.0
    found = False
    for i in range(x.size):
        v = np.float64(x[i])
        if math.isfinite(v):
            if not found:
                first = v
                found = True
            if v < lo:
                lo = v
            if v > hi:
                hi = v
    return lo, hi, first, found
