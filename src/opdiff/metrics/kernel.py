"""The hot loop: every real-data metric of a tensor pair in one streaming pass over chunks.

Each chunk (float32 or float64, both sides the same dtype) is folded in blocks of BLOCK elements
into float64 accumulators by two vectorized loops per block (the sums and relative errors, then
the KL terms; both read the block from L1), whatever the data: the KL log is computed with
arithmetic and integer ops (no libm call, which would stop vectorization), without the exponent split
while every ratio of a block stays within sqrt2 (_kl_near: similar tensors). nan/inf are found in
the same loop by integer tests on the bits; a block holding any is discarded and folded again by a
careful scalar path that counts them and skips them. Maxima are taken over the int64 bit patterns
of non-negative float64s (integer max reductions vectorize, float ones do not). All functions
release the GIL (nogil) and are cached on disk.

float32 chunks take the float32 blocks (the second half of this file) instead (BLOCK32 elements, float32 arithmetic
within a block, float64 across blocks: docs/metrics.md, "Precision"), through _chunk32; a block they
cannot hold (magnitudes) comes back here, to the float64 block.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import numba as nb
import numpy as np
import numpy.typing as npt
from numba import types
from numba.extending import intrinsic, overload

EPS64 = float(np.finfo(np.float64).eps)  # msprobe's FLOAT_EPSILON: the relative-error guard for golden == 0
EPS32 = float(np.finfo(np.float32).eps)  # msaccucmp's floor of the normalized KL distributions
KL_SERIES_MAX = 1e-3  # |x| below this: log1p(x) by a 4-term series (error < 1e-16 relative)
PROBE = 512  # elements of a block the KL near path tries first (see _kl_sums)
S_NEAR = 0.1716  # |s| = |a - b|/(a + b) up to this (a/b in [1/sqrt2, sqrt2], 3 - 2 sqrt2 = 0.17157): the KL series holds

# float64 accumulator slots
A_SUM_AD, A_SUM_D2, A_SUM_G2, A_SUM_T2, A_SUM_GT = 0, 1, 2, 3, 4
A_SUM_GC, A_SUM_TC, A_SUM_GC2, A_SUM_TC2 = 5, 6, 7, 8  # shifted sums for mean/std without cancellation
A_SUM_REL, A_CNT_1K, A_CNT_5K, A_SUM_ACC = 9, 10, 11, 12
A_KL_SA, A_KL_SB, A_KL_SL = 13, 14, 15
A_MAX_AD, A_MAX_REL, A_WORST_G, A_WORST_T = 16, 17, 18, 19
A_KL_SD = 20  # sum of (a - b): log(B/A) = -log1p(SD/B) without cancelling two large sums
A_MAX_ACC = 21  # max r over |g| > eps: msaccucmp's MaxRelativeError (elements with golden ~ 0 count as 0)
A_SUM_DP = 22  # sum of (t - g)(t + g): with A_SUM_D2, 1 - cosine without cancellation (tensor.cosine)
N_ACC = 23
# int64 counter slots
C_G_NAN, C_G_PINF, C_G_NINF, C_T_NAN, C_T_PINF, C_T_NINF = 0, 1, 2, 3, 4, 5
C_MISMATCH, C_FIRST_MISMATCH, C_WORST_IDX, C_FINITE, C_DIFF = 6, 7, 8, 9, 10
N_CNT = 11
# kernel parameter slots: KL normalization (x - min) * inv per side, and the shifts for mean/std
P_GMIN, P_GINV, P_TMIN, P_TINV, P_GSHIFT, P_TSHIFT = 0, 1, 2, 3, 4, 5
N_PARAM = 6
BLOCK = 1 << 12  # elements per fused loop: nan/inf found in a block send only that block down the careful path
BLOCK32 = 1 << 10  # elements per float32 block: its sums' rounding stays near float32's eps (docs/metrics.md)

_jit = nb.njit(nogil=True, cache=True, error_model="numpy")
_jit_fast = nb.njit(nogil=True, cache=True, error_model="numpy", fastmath=True)

Chunk = npt.NDArray[np.float32] | npt.NDArray[np.float64]  # a chunk of one side, in the kernel dtype
F64 = npt.NDArray[np.float64]  # accumulators, parameters, scratch
I64 = npt.NDArray[np.int64]  # counters
# what numba's code generators receive: typing context, IR builder, signature, argument values
Codegen = Callable[[Any, Any, Any, Any], Any]


def new_state() -> tuple[F64, I64]:
    """Fresh accumulators for one tensor pair."""
    acc = np.zeros(N_ACC, dtype=np.float64)
    cnt = np.zeros(N_CNT, dtype=np.int64)
    cnt[C_FIRST_MISMATCH] = -1
    cnt[C_WORST_IDX] = -1
    return acc, cnt


@intrinsic
def _as_int_intrinsic(typingctx: Any, x: types.Type) -> tuple[Any, Codegen] | None:
    """The bits of a float as a same-width signed integer (a no-op bitcast: vectorizes)."""
    if not isinstance(x, types.Float):
        return None
    ity = types.int64 if x.bitwidth == 64 else types.int32

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.bitcast(args[0], context.get_value_type(ity))

    return ity(x), codegen


@intrinsic
def _as_float_intrinsic(typingctx: Any, x: types.Type) -> tuple[Any, Codegen] | None:
    """The float64 whose bits are the int64 `x` (the float32 of an int32)."""
    if x not in (types.int64, types.int32):
        return None
    fty = types.float64 if x == types.int64 else types.float32

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.bitcast(args[0], context.get_value_type(fty))

    return fty(x), codegen


# as the jitted kernels call them (numba passes the typing context itself); callable from jitted code only
_as_int = cast(Callable[[float], int], _as_int_intrinsic)
_as_float = cast(Callable[[int], float], _as_float_intrinsic)
_as_float32 = cast(Callable[[np.int32], np.floating[Any]], _as_float_intrinsic)


def _is_nonfinite(x: float) -> int:
    """1 when the float x is nan or inf (all exponent bits set), else 0: integer ops only, so that
    no fast-math assumption can remove the test. Callable from jitted code only (see the overload)."""
    raise NotImplementedError("_is_nonfinite is compiled by numba (see _is_nonfinite_impl)")


# numba requires the typing function's signature to equal its implementations' (the lambdas below,
# unannotated), annotations included: this one stays unannotated.
@overload(_is_nonfinite, inline="always")
def _is_nonfinite_impl(x):  # type: ignore[no-untyped-def]
    if x == types.float32:
        return lambda x: np.int64((_as_int(x) & np.int32(0x7F800000)) == np.int32(0x7F800000))
    return lambda x: np.int64((_as_int(x) & np.int64(0x7FF0000000000000)) == np.int64(0x7FF0000000000000))


_LN2 = math.log(2.0)
_SQRT2 = math.sqrt(2.0)
# log(m) = 2 atanh(s), s = (m - 1)/(m + 1), |s| <= 0.1716: 2s (1 + z/3 + z^2/5 + ...), z = s^2, to z^10 (< 3e-17)
_C = tuple(2.0 / (2 * k + 1) for k in range(1, 11))


_MANT = 0x000FFFFFFFFFFFFF
_ONE = 0x3FF0000000000000


@nb.njit(inline="always", fastmath=True)
def _log_ratio_parts(a: float, b: float) -> tuple[float, float, float]:
    """log(a / b) for positive normal float64 a, b, without libm (so the loop vectorizes), as
    e ln2 + log(ma/mb): a = 2^ea ma, b = 2^eb mb with ma, mb in [1, 2), one of them doubled so that
    ma/mb lies in [1/sqrt2, sqrt2]. Returns (e, ma - mb, ma + mb): the caller forms
    s = (ma - mb)/(ma + mb) (sharing one division with other work) and calls _log_ratio_finish.
    ma - mb is exact, so s keeps its full relative precision when a and b are close."""
    ia = _as_int(a)
    ib = _as_int(b)
    e = (ia >> 52) - (ib >> 52)
    ma = _as_float((ia & _MANT) | _ONE)
    mb = _as_float((ib & _MANT) | _ONE)
    up = ma > _SQRT2 * mb
    dn = mb > _SQRT2 * ma
    mb = mb * 2.0 if up else mb
    ma = ma * 2.0 if dn else ma
    e = e + 1 if up else (e - 1 if dn else e)
    return np.float64(e), ma - mb, ma + mb


@nb.njit(inline="always", fastmath=True)
def _log_ratio_finish(e: float, s: float) -> float:
    """e ln2 + 2 atanh(s) for |s| <= 0.1716, by the series 2s (1 + s^2/3 + ... + s^14/15): its
    truncation error is below 4e-14 of the result (docs/metrics.md)."""
    z = s * s
    q = _C[6]
    q = _C[5] + z * q
    q = _C[4] + z * q
    q = _C[3] + z * q
    q = _C[2] + z * q
    q = _C[1] + z * q
    q = _C[0] + z * q
    return e * _LN2 + (s * z * q + 2.0 * s)


@nb.njit(inline="always", fastmath=True)
def _kl_ab(x: float, lo: float, inv: float) -> float:
    """msaccucmp's normalized value of one element: (x - min) / (max - min), floored at eps32."""
    a = (x - lo) * inv
    return a if a > EPS32 else EPS32


@nb.njit(inline="always", fastmath=True)
def _kl_near(g: Chunk, t: Chunk, gmin: float, ginv: float, tmin: float, tinv: float
             ) -> tuple[float, float, float, float, int]:
    """The KL sums of a block whose ratios a/b all lie in [1/sqrt2, sqrt2] (|s| <= S_NEAR): then a - b is
    exact (Sterbenz) and log(a/b) = 2 atanh(s) with s = (a - b)/(a + b), no exponent split. Returns
    (A, B, S, D, elements outside that range): any makes S wrong, and S is computed the general way
    (_kl_sums)."""
    sa = sb = sl = sd = 0.0
    far = 0
    for i in range(g.size):
        a = _kl_ab(np.float64(t[i]), tmin, tinv)
        b = _kl_ab(np.float64(g[i]), gmin, ginv)
        dd = a - b
        sa += a
        sb += b
        sd += dd
        s = dd / (a + b)
        far += 1 if abs(s) > S_NEAR else 0
        sl += a * _log_ratio_finish(0.0, s)
    return sa, sb, sl, sd, far


@nb.njit(inline="always", fastmath=True)
def _kl_general(g: Chunk, t: Chunk, gmin: float, ginv: float, tmin: float, tinv: float
                ) -> tuple[float, float, float, float, int]:
    """The KL sums of any block (exponent split, _log_ratio_parts). Returns (A, B, S, D, elements whose
    ratio a/b is outside [1/sqrt2, sqrt2]): none means the next block may try _kl_near."""
    sa = sb = sl = sd = 0.0
    far = 0
    for i in range(g.size):
        a = _kl_ab(np.float64(t[i]), tmin, tinv)
        b = _kl_ab(np.float64(g[i]), gmin, ginv)
        sa += a
        sb += b
        sd += a - b
        e, num, sden = _log_ratio_parts(a, b)
        far += 1 if e != 0.0 else 0
        sl += a * _log_ratio_finish(e, num / sden)
    return sa, sb, sl, sd, far


@nb.njit(inline="always", fastmath=True)
def _kl_sums(g: Chunk, t: Chunk, gmin: float, ginv: float, tmin: float, tinv: float, near: bool
             ) -> tuple[float, float, float, float, int, bool]:
    """The KL sums of one block by the near path when asked (`near`), else by the general one. The near
    path first runs on the block's first PROBE elements: one outside its range there sends the whole
    block to the general path at once (a pair far apart wastes PROBE elements of near work, not the
    block). Returns (A, B, S, D, elements outside the near range, S valid); S is invalid only when the
    near path met such an element after the probe (the caller then redoes S: _kl_redo)."""
    if not near:
        sa, sb, sl, sd, far = _kl_general(g, t, gmin, ginv, tmin, tinv)
        return sa, sb, sl, sd, far, True
    m = min(g.size, PROBE)
    sa, sb, sl, sd, far = _kl_near(g[:m], t[:m], gmin, ginv, tmin, tinv)
    if far > 0:
        sa, sb, sl, sd, far = _kl_general(g, t, gmin, ginv, tmin, tinv)
        return sa, sb, sl, sd, max(far, 1), True
    if m == g.size:
        return sa, sb, sl, sd, 0, True
    sa2, sb2, sl2, sd2, far = _kl_near(g[m:], t[m:], gmin, ginv, tmin, tinv)
    return sa + sa2, sb + sb2, sl + sl2, sd + sd2, far, far == 0


@_jit_fast
def _block_fast(g: Chunk, t: Chunk, p: F64, o: F64, near: bool
                ) -> tuple[int, np.int64, int, int, bool, int, int, int]:
    """Every sum of one block into o (accumulator slots); returns (nan/inf seen, elements that differ,
    KL terms the arithmetic log cannot take, elements outside the near range, whether the KL sum S is
    valid (see _kl_sums), max |t - g|, max r and max r over |g| > eps as int64 bits). Assumes nothing:
    the caller discards the block's sums when nan/inf were seen (fastmath makes them meaningless)."""
    s_ad = s_d2 = s_g2 = s_t2 = s_gt = s_dp = 0.0
    s_gc = s_tc = s_gc2 = s_tc2 = 0.0
    s_rel = c1 = c5 = s_acc = 0.0
    ndiff = np.int64(0)
    bad = 0
    m_ad = 0
    m_rel = 0
    m_acc = 0
    kg = p[P_GSHIFT]
    kt = p[P_TSHIFT]
    gmin = p[P_GMIN]
    ginv = p[P_GINV]
    tmin = p[P_TMIN]
    tinv = p[P_TINV]
    for i in range(g.size):
        gr = g[i]
        tr = t[i]
        bad += _is_nonfinite(gr) + _is_nonfinite(tr)
        gi = np.float64(gr)
        ti = np.float64(tr)
        d = ti - gi
        ad = abs(d)
        s_ad += ad
        s_d2 += d * d
        s_g2 += gi * gi
        s_t2 += ti * ti
        s_gt += gi * ti
        s_dp += d * (gi + ti)
        gc = gi - kg
        tc = ti - kt
        s_gc += gc
        s_tc += tc
        s_gc2 += gc * gc
        s_tc2 += tc * tc
        ndiff += np.int64(ti != gi)
        m_ad = max(m_ad, _as_int(ad))
        ag = abs(gi)
        den = ag if ag != 0.0 else EPS64
        r = ad / den
        m_rel = max(m_rel, _as_int(r))
        s_rel += r
        c1 += 1.0 if r < 0.001 else 0.0
        c5 += 1.0 if r < 0.005 else 0.0
        s_acc += r if ag > EPS64 else 0.0
        m_acc = max(m_acc, _as_int(r) if ag > EPS64 else 0)
    # the KL terms in a second loop over the same block (in L1): one loop holding every sum runs
    # out of vector registers and is slower than the two
    sa, sb, sl, sd, far, kl_ok = _kl_sums(g, t, gmin, ginv, tmin, tinv, near)
    # a or b infinite (ranges far off the data) shows in their sums: checked once, not per element
    odd = _is_nonfinite(sa) + _is_nonfinite(sb)
    o[A_SUM_AD] = s_ad
    o[A_SUM_D2] = s_d2
    o[A_SUM_G2] = s_g2
    o[A_SUM_T2] = s_t2
    o[A_SUM_GT] = s_gt
    o[A_SUM_GC] = s_gc
    o[A_SUM_TC] = s_tc
    o[A_SUM_GC2] = s_gc2
    o[A_SUM_TC2] = s_tc2
    o[A_SUM_REL] = s_rel
    o[A_CNT_1K] = c1
    o[A_CNT_5K] = c5
    o[A_SUM_ACC] = s_acc
    o[A_KL_SA] = sa
    o[A_KL_SB] = sb
    o[A_KL_SL] = sl
    o[A_KL_SD] = sd
    o[A_SUM_DP] = s_dp
    return bad, ndiff, odd, far, kl_ok, m_ad, m_rel, m_acc


@nb.njit(inline="always")
def _log_of_ratio(a: float, b: float) -> float:
    """log(a / b) for positive a, b: log1p((a - b)/b) where a and b are close (no cancellation),
    log a - log b where a is tiny beside b ((a - b)/b rounds to -1, where log1p gives -inf)."""
    x = (a - b) / b
    return math.log1p(x) if x > -0.5 else math.log(a) - math.log(b)


@_jit
def _kl_far(g: Chunk, t: Chunk, p: F64) -> float:
    """The KL sum with a real log1p where the series cannot take a term (ratios the arithmetic log cannot take)."""
    sl = 0.0
    for i in range(g.size):
        a = max((np.float64(t[i]) - p[P_TMIN]) * p[P_TINV], EPS32)
        b = max((np.float64(g[i]) - p[P_GMIN]) * p[P_GINV], EPS32)
        x = (a - b) / b
        if abs(x) < KL_SERIES_MAX:
            sl += a * (x * (1.0 - x * (0.5 - x * (1.0 / 3.0 - x * 0.25))))
        else:
            sl += a * _log_of_ratio(a, b)
    return sl


@_jit
def _bits(x: float) -> int:
    """The int64 bit pattern of a float64 (orders like the value for x >= 0)."""
    return _as_int(np.float64(x))


@_jit_fast
def _kl_redo(g: Chunk, t: Chunk, p: F64) -> float:
    """S of a block the near path could not take, by the general path (fastmath, as _block_fast: without
    it the loop does not vectorize and costs 8x; the block is known free of nan/inf here)."""
    return _kl_general(g, t, p[P_GMIN], p[P_GINV], p[P_TMIN], p[P_TINV])[2]


@_jit
def chunk_fast(g: Chunk, t: Chunk, p: F64, acc: F64, cnt: I64, o: F64, base: int) -> bool:
    """Fold one block starting at flat index `base`; False (and nothing folded) when it holds nan/inf."""
    return _chunk_fast(g, t, p, acc, cnt, o, base, False) >= 0


@_jit
def _chunk_fast(g: Chunk, t: Chunk, p: F64, acc: F64, cnt: I64, o: F64, base: int, near: bool) -> int:
    """chunk_fast, with the KL path to try (`near`): -1 when the block holds nan/inf (nothing folded),
    else 1 when the next block should try the near path, 0 when not."""
    n = g.size
    bad, ndiff, odd, far, kl_ok, m_ad, m_rel, m_acc = _block_fast(g, t, p, o, near)
    if bad > 0:
        return -1
    if odd > 0:
        o[A_KL_SL] = _kl_far(g, t, p)
    elif not kl_ok:
        o[A_KL_SL] = _kl_redo(g, t, p)
    for k in range(A_MAX_AD):
        acc[k] += o[k]
    acc[A_KL_SD] += o[A_KL_SD]
    acc[A_SUM_DP] += o[A_SUM_DP]
    cnt[C_DIFF] += ndiff
    cnt[C_FINITE] += n
    if cnt[C_WORST_IDX] < 0 or m_ad > _bits(acc[A_MAX_AD]):
        _take_worst(g, t, m_ad, acc, cnt, base)
    if m_rel > _bits(acc[A_MAX_REL]):
        acc[A_MAX_REL] = _as_float(m_rel)
    if m_acc > _bits(acc[A_MAX_ACC]):
        acc[A_MAX_ACC] = _as_float(m_acc)
    return 1 if far == 0 else 0


@_jit
def fold(g: Chunk, t: Chunk, p: F64, acc: F64, cnt: I64, o: F64, base: int) -> None:
    """Fold a chunk of any length in cache-sized blocks (BLOCK): one fused vectorized loop per
    block, the careful element-by-element path for blocks holding nan/inf. `o` is scratch (N_ACC)."""
    n = g.size
    near = True  # similar tensors keep every ratio a/b near 1: the cheaper KL path, until a block says not
    bs = _block_len(g, t)
    for s in range(0, n, bs):
        e = min(n, s + bs)
        gs = g[s:e]
        ts = t[s:e]
        got = _chunk_any(gs, ts, p, acc, cnt, o, base + s, near)
        if got == -2:  # float32 refused the block (magnitudes): float64
            got = _chunk_fast(gs, ts, p, acc, cnt, o, base + s, near)
        if got < 0:
            chunk_careful(gs, ts, p, acc, cnt, base + s)
        else:
            near = got > 0


@_jit
def fold_segments(g: Chunk, t: Chunk, offsets: I64, params: F64, acc: F64, cnt: I64, o: F64) -> None:
    """Fold many small pairs laid end to end in one call: pair s is g[offsets[s]:offsets[s + 1]] (and t's),
    with its own parameter row params[s] and accumulator rows acc[s], cnt[s]. Each pair is folded exactly
    as `fold` folds it alone (flat indices count from the pair's start): one call instead of one per pair."""
    for s in range(offsets.size - 1):
        a = offsets[s]
        b = offsets[s + 1]
        fold(g[a:b], t[a:b], params[s], acc[s], cnt[s], o, 0)


@_jit
def chunk_careful(g: Chunk, t: Chunk, p: F64, acc: F64, cnt: I64, base: int) -> None:
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
        acc[A_SUM_DP] += d * (gi + ti)
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
            if r > acc[A_MAX_ACC]:
                acc[A_MAX_ACC] = r
        a = max((ti - p[P_TMIN]) * p[P_TINV], EPS32)
        b = max((gi - p[P_GMIN]) * p[P_GINV], EPS32)
        acc[A_KL_SA] += a
        acc[A_KL_SB] += b
        acc[A_KL_SD] += a - b
        acc[A_KL_SL] += a * _log_of_ratio(a, b)
        if cnt[C_WORST_IDX] < 0 or ad > acc[A_MAX_AD]:
            acc[A_MAX_AD] = ad
            acc[A_WORST_G] = gi
            acc[A_WORST_T] = ti
            cnt[C_WORST_IDX] = base + i
        if r > acc[A_MAX_REL]:
            acc[A_MAX_REL] = r


@_jit
def half_to_float(src: npt.NDArray[np.uint16], dst: npt.NDArray[np.float32]) -> None:
    """IEEE half-precision bits to float32, bit-exact (subnormals, inf, nan payloads, signed zeros)
    and vectorized: numpy's float16 cast runs element by element, 18x slower on this machine."""
    for i in range(src.size):
        h = np.int32(src[i])
        em = h & np.int32(0x7FFF)
        bits = (em << np.int32(13)) + np.int32(0x38000000)  # rebias the exponent by 127 - 15
        bits = (em << np.int32(13)) | np.int32(0x7F800000) if em >= np.int32(0x7C00) else bits  # inf / nan
        f = _as_float32(np.int32(bits))  # numba widens int32 arithmetic to int64: narrow it back
        f = np.float32(em) * np.float32(2.0 ** -24) if em < np.int32(0x0400) else f  # subnormal or zero: exact
        dst[i] = -f if h & np.int32(0x8000) else f


@_jit
def finite_range(x: Chunk) -> tuple[float, float, float, bool]:
    """(min, max, mean, any finite) of a chunk over its finite elements. The mean is the shift of the
    mean/std sums: a shift k several std from the mean makes var = sum (x - k)^2/n - (mean - k)^2 cancel by
    1 + ((mean - k)/std)^2, which float32 blocks cannot afford (the first element of a gradient: 5 std)."""
    lo = np.inf
    hi = -np.inf
    s = 0.0
    n = 0
    for i in range(x.size):
        v = np.float64(x[i])
        if math.isfinite(v):
            s += v
            n += 1
            if v < lo:
                lo = v
            if v > hi:
                hi = v
    return lo, hi, (s / n if n else 0.0), n > 0


# ---------------------------------------------------------------------------------------------------------------
# The float32 blocks: float32 lanes within a block, float64 across blocks. Kept in this file, not a module of its
# own: numba's on-disk cache of `fold` holds the code of every kernel it calls but is invalidated only by a change
# of this file (its source stamp), so a kernel that `fold` calls in another file could run stale after an edit.
#
# The float32 block of the metrics kernel: every sum of one block in float32 lanes, folded into the
# float64 accumulators by the caller (kernel._chunk32), so the rounding of a block's sums stays near
# float32's 6e-8 of the block while the pair's totals are float64 (docs/metrics.md, "Precision").
#
# Why float32: on the AVX-512 cores this runs on, a float64 operation costs what a float32 one does on
# half the lanes; the float64 block was arithmetic-bound at 5x numpy's read (docs/compare.md, "The
# metrics kernel"). What keeps the results readable: differences are formed first (t - g is exact
# where the sides are close), cosine comes from sum (t - g)^2 and sum (t - g)(t + g) instead of a
# rounded dot product, and KL from its Bregman terms a log(a/b) - (a - b) >= 0 with a - b taken from
# t - g. A block whose magnitudes float32 squares cannot hold is refused (the caller folds it in float64).


_as_int32 = cast(Callable[[Any], Any], _as_int)  # float32 bits as int32 (jitted code only)

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
TINY32 = np.float32(2.0 ** -40)  # a shift below this is taken as 0 (_shift32)

# float32 block result slots (o32), beside the float64 accumulator layout of kernel.py
B_AD, B_D2, B_G2, B_T2, B_DP, B_GC, B_TC, B_GC2, B_TC2, B_REL, B_C1, B_C5, B_ACC = range(13)
B_SA, B_SD, B_BR, B_GT = 13, 14, 15, 16
B_SB, B_SL = 17, 18  # sum b and sum a log(a/b) directly: a block whose A and B are far apart (_fold32)
N_B = 19


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
    s_ad = s_d2 = s_g2 = s_t2 = s_dp = s_gt = Z
    s_gc = s_tc = s_gc2 = s_tc2 = Z
    s_rel = c1 = c5 = s_acc = nd = bad = Z
    m_ad = m_rel = m_acc = m_g = m_t = I0
    for i in range(g.size):
        gr = g[i]
        tr = t[i]
        ig = _as_int32(gr)
        it = _as_int32(tr)
        bad += ONE if ((ig & EXP32) == EXP32) | ((it & EXP32) == EXP32) else Z
        d = tr - gr
        ad = abs(d)
        s_ad += ad
        s_d2 += d * d
        s_g2 += gr * gr
        s_t2 += tr * tr
        s_gt += gr * tr
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
        ir = _as_int32(r)
        m_ad = max(m_ad, _as_int32(ad))
        m_rel = max(m_rel, ir)
        m_g = max(m_g, _as_int32(ag))
        m_t = max(m_t, _as_int32(abs(tr)))
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
    o[B_GT] = s_gt
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
    o[B_SB] = sa - sd  # every ratio within sqrt2: B within sqrt2 of A, _fold32 takes the Bregman form
    o[B_SL] = br + sd
    return int(far)


@nb.njit(nogil=True, cache=True, error_model="numpy", fastmath=True)
def kl_general32(g: Chunk, t: Chunk, gmin64: float, ginv64: float, tmin64: float, tinv64: float, c164: float,
                 c264: float, o: F64) -> int:
    """KL sums of any block: the near form of the Bregman term where a/b lies within [1/2, 2] (s = (a - b)/(a + b),
    |s| <= 1/3, 7-term series; no cancellation), elsewhere a log(a/b) - (a - b) with log(a/b) split as
    e ln2 + 2 atanh((ma - mb)/(ma + mb)) over the float32 exponent and mantissa (the term's rounding then at
    most 4x its size's). Also sum b and sum a log(a/b) directly, for a block whose A and B are far apart
    (_fold32). Returns the elements beyond sqrt2 (the next block tries the near path when none)."""
    gmin, ginv, tmin, tinv, c1, c2 = f32(gmin64), f32(ginv64), f32(tmin64), f32(tinv64), f32(c164), f32(c264)
    sa = sd = br = sb = sl = Z
    far = Z
    for i in range(g.size):
        a, b, dr, dx = _ab(g[i], t[i], gmin, ginv, tmin, tinv, c1, c2)
        ia = _as_int32(a)
        ib = _as_int32(b)
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
        lg = a * ((Z if near else fe * LN2) + TWO * s + w)  # a log(a/b)
        sa += a
        sb += b
        sd += dx
        sl += lg
        br += (dx * s + a * w) if near else (lg - dx)
        far += Z if e == I0 else ONE
    o[B_SA] = sa
    o[B_SD] = sd
    o[B_BR] = br
    o[B_SB] = sb
    o[B_SL] = sl
    return int(far)


def _block_len(g: Chunk, t: Chunk) -> int:
    """Elements per block for the chunk dtype (BLOCK32 for float32, BLOCK for float64). Jitted code only."""
    raise NotImplementedError("_block_len is compiled by numba (see _block_len_impl)")


@overload(_block_len, inline="always")
def _block_len_impl(g, t):  # type: ignore[no-untyped-def]
    if g.dtype == types.float32 and t.dtype == types.float32:
        return lambda g, t: BLOCK32
    return lambda g, t: BLOCK


def _chunk_any(g: Chunk, t: Chunk, p: F64, acc: F64, cnt: I64, o: F64, base: int, near: bool) -> int:
    """_chunk32 for float32 chunks, _chunk_fast for float64 ones. Jitted code only."""
    raise NotImplementedError("_chunk_any is compiled by numba (see _chunk_any_impl)")


@overload(_chunk_any, inline="always")
def _chunk_any_impl(g, t, p, acc, cnt, o, base, near):  # type: ignore[no-untyped-def]
    if g.dtype == types.float32 and t.dtype == types.float32:
        return lambda g, t, p, acc, cnt, o, base, near: _chunk32(g, t, p, acc, cnt, o, base, near)
    return lambda g, t, p, acc, cnt, o, base, near: _chunk_fast(g, t, p, acc, cnt, o, base, near)


_BIG, _TINY, _TINY_D = BIG_BITS, TINY_BITS, TINY_D_BITS


@_jit
def _chunk32(g: Chunk, t: Chunk, p: F64, acc: F64, cnt: I64, o: F64, base: int, near: bool) -> int:
    """_chunk_fast for a float32 block by float32 arithmetic (sums32, kl_near32, kl_general32): -1 when it holds nan/inf, -2
    when float32 cannot hold its squares or relative errors (nothing folded: the caller folds it in
    float64), else 1 when the next block should try the near KL path, 0 when not."""
    n = g.size
    kg = _shift32(p[P_GSHIFT], g[0])
    kt = _shift32(p[P_TSHIFT], t[0])
    bad, nd, m_ad, m_rel, m_acc, m_g, m_t = sums32(g, t, kg, kt, o)
    if bad:
        return -1
    if m_g > _BIG or m_t > _BIG or 0 < m_g < _TINY or 0 < m_t < _TINY or 0 < m_ad < _TINY_D:
        return -2
    gmin, ginv, tmin, tinv = p[P_GMIN], p[P_GINV], p[P_TMIN], p[P_TINV]
    c1 = tinv - ginv
    c2 = (tmin - gmin) * tinv
    far = kl_near32(g, t, gmin, ginv, tmin, tinv, c1, c2, o) if near else 1
    if far > 0:
        far = kl_general32(g, t, gmin, ginv, tmin, tinv, c1, c2, o)
    tot = 0.0
    for k in range(N_B):
        tot += o[k]
    if not math.isfinite(tot):
        return -2
    _fold32(o, p, acc, n, np.float64(kg), np.float64(kt))
    cnt[C_DIFF] += nd
    cnt[C_FINITE] += n
    if cnt[C_WORST_IDX] < 0 or np.float64(_as_float32(np.int32(m_ad))) * (1.0 + 2.0 ** -22) > acc[A_MAX_AD]:
        _worst64(g, t, acc, cnt, base)
    r = np.float64(_as_float32(np.int32(m_rel)))  # float32's r: within two roundings of the float64 one
    if r > acc[A_MAX_REL]:
        acc[A_MAX_REL] = r
    r = np.float64(_as_float32(np.int32(m_acc)))
    if r > acc[A_MAX_ACC]:
        acc[A_MAX_ACC] = r
    return 1 if far == 0 else 0


@_jit
def _shift32(k: float, first: np.float32) -> np.float32:
    """The pair's shift k rounded to float32 (the block's sums around it; the rounding moved back exactly in
    float64 by _fold32), or the block's first element when k is not a finite float32. A shift below 2^-40
    is 0: (x - k)^2 of a block of zeros would underflow float32 (subnormal, or flushed by fastmath), while the
    squares of x itself are guarded by TINY_BITS; the shift then moves back in float64 (k^2 holds there)."""
    k32 = np.float32(k)
    if not math.isfinite(k32):
        return first
    return k32 if abs(k32) >= TINY32 else Z


@_jit
def _fold32(o: F64, p: F64, acc: F64, n: int, kg: float, kt: float) -> None:
    """Add a float32 block's sums (o, the B_* slots) into the float64 accumulators; the block's own
    shifts kg, kt (the pair's rounded to float32) moved to the pair's (p) exactly in float64, B = A - D derived."""
    acc[A_SUM_AD] += o[B_AD]
    acc[A_SUM_D2] += o[B_D2]
    acc[A_SUM_G2] += o[B_G2]
    acc[A_SUM_T2] += o[B_T2]
    acc[A_SUM_GT] += o[B_GT]
    acc[A_SUM_DP] += o[B_DP]
    dg = kg - p[P_GSHIFT]
    dt = kt - p[P_TSHIFT]
    acc[A_SUM_GC] += o[B_GC] + n * dg
    acc[A_SUM_TC] += o[B_TC] + n * dt
    acc[A_SUM_GC2] += o[B_GC2] + 2.0 * dg * o[B_GC] + n * dg * dg
    acc[A_SUM_TC2] += o[B_TC2] + 2.0 * dt * o[B_TC] + n * dt * dt
    acc[A_SUM_REL] += o[B_REL]
    acc[A_CNT_1K] += o[B_C1]
    acc[A_CNT_5K] += o[B_C5]
    acc[A_SUM_ACC] += o[B_ACC]
    sa = o[B_SA]
    sd = o[B_SD]
    sb = o[B_SB]
    acc[A_KL_SA] += sa
    if sa + sa < sb or sb + sb < sa:
        # A and B far apart: the float32 a - b of an element where b << a (or a << b) loses b (a), so B = A - D
        # would miss them (B = 0 for constant sides -4 vs 3), and the Bregman terms (b - a where a << b) would
        # cancel in S; here KL is not small, so B and S summed directly keep it to float32's rounding
        acc[A_KL_SB] += sb
        acc[A_KL_SD] += sa - sb
        acc[A_KL_SL] += o[B_SL]
    else:
        acc[A_KL_SB] += sa - sd  # B = A - D exactly: the KL's log(B/A) and its S then cancel consistently
        acc[A_KL_SD] += sd
        acc[A_KL_SL] += o[B_BR] + sd  # sum a log(a/b) = Bregman sum + sum(a - b)


@_jit_fast
def _max_ad_bits(g: Chunk, t: Chunk) -> int:
    """max |t - g| over a block in float64, as int64 bits (an integer max reduction: vectorizes)."""
    m = 0
    for i in range(g.size):
        m = max(m, _as_int(abs(np.float64(t[i]) - np.float64(g[i]))))
    return m


@_jit
def _worst64(g: Chunk, t: Chunk, acc: F64, cnt: I64, base: int) -> None:
    """The block's largest |t - g| in float64 and its first index, kept when larger than the pair's so far."""
    m = _max_ad_bits(g, t)
    if cnt[C_WORST_IDX] < 0 or m > _bits(acc[A_MAX_AD]):
        _take_worst(g, t, m, acc, cnt, base)


@_jit
def _take_worst(g: Chunk, t: Chunk, m: int, acc: F64, cnt: I64, base: int) -> None:
    """Make the block's first element whose float64 |t - g| has the bits m the pair's worst."""
    for i in range(g.size):
        ad = abs(np.float64(t[i]) - np.float64(g[i]))
        if _as_int(ad) == m:
            acc[A_MAX_AD] = ad
            acc[A_WORST_G] = g[i]
            acc[A_WORST_T] = t[i]
            cnt[C_WORST_IDX] = base + i
            break
