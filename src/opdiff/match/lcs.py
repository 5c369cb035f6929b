"""Longest common subsequence of two key sequences: Myers' O((N+M)·D) diff, with a patience fallback.

Myers runs in numba up to `max_d` edits; past that (two runs with little in common) the keys that
occur exactly once on each side anchor the alignment (patience diff) and Myers runs between anchors.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter

import numba as nb
import numpy as np
import numpy.typing as npt

MAX_D = 2000  # edit budget of one Myers call: trace memory is (D+1)^2 int32 (16 MB at 2000)


@nb.njit(nogil=True, cache=True)
def _myers(a: npt.NDArray[np.int64], b: npt.NDArray[np.int64],
           max_d: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], bool]:
    """Matched (i, j) index pairs of an LCS of a and b, or found=False when more than max_d edits."""
    n = a.size
    m = b.size
    maxd = min(max_d, n + m)
    off = maxd + 1
    v = np.zeros(2 * maxd + 3, dtype=np.int32)
    trace = np.empty(1024, dtype=np.int32)
    tlen = 0
    found = -1
    for d in range(maxd + 1):
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[off + k - 1] < v[off + k + 1]):
                x = v[off + k + 1]
            else:
                x = v[off + k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            v[off + k] = x
            if x >= n and y >= m:
                found = d
                break
        need = tlen + 2 * d + 1
        if need > trace.size:
            bigger = np.empty(max(2 * trace.size, need), dtype=np.int32)
            bigger[:tlen] = trace[:tlen]
            trace = bigger
        trace[tlen:need] = v[off - d:off + d + 1]
        tlen = need
        if found >= 0:
            break
    ia = np.empty(min(n, m), dtype=np.int64)
    ib = np.empty(min(n, m), dtype=np.int64)
    if found < 0:
        return ia[:0], ib[:0], False
    cnt = 0
    x = n
    y = m
    for d in range(found, 0, -1):
        base = (d - 1) * (d - 1) + (d - 1)  # V_{d-1}[k] lives at base + k
        k = x - y
        if k == -d or (k != d and trace[base + k - 1] < trace[base + k + 1]):
            pk = k + 1
        else:
            pk = k - 1
        px = trace[base + pk]
        py = px - pk
        while x > px and y > py:
            x -= 1
            y -= 1
            ia[cnt] = x
            ib[cnt] = y
            cnt += 1
        x = px
        y = py
    while x > 0 and y > 0:
        x -= 1
        y -= 1
        ia[cnt] = x
        ib[cnt] = y
        cnt += 1
    return ia[:cnt][::-1].copy(), ib[:cnt][::-1].copy(), True


def longest_increasing(seq: list[int]) -> list[int]:
    """Indices into `seq` of one longest strictly increasing subsequence (O(n log n))."""
    tails: list[int] = []
    tails_idx: list[int] = []
    parent = [-1] * len(seq)
    for i, v in enumerate(seq):
        j = bisect_left(tails, v)
        if j == len(tails):
            tails.append(v)
            tails_idx.append(i)
        else:
            tails[j] = v
            tails_idx[j] = i
        parent[i] = tails_idx[j - 1] if j else -1
    out = []
    i = tails_idx[-1] if tails_idx else -1
    while i >= 0:
        out.append(i)
        i = parent[i]
    return out[::-1]


def _patience(a: np.ndarray, b: np.ndarray, max_d: int) -> list[tuple[int, int]]:
    ca, cb = Counter(a.tolist()), Counter(b.tolist())
    pos_b = {k: j for j, k in enumerate(b.tolist()) if cb[k] == 1}
    cand = [(i, pos_b[k]) for i, k in enumerate(a.tolist()) if ca[k] == 1 and k in pos_b]
    anchors = [cand[i] for i in longest_increasing([j for _, j in cand])]
    out: list[tuple[int, int]] = []
    pi, pj = 0, 0
    for i, j in anchors + [(a.size, b.size)]:
        if i > pi and j > pj:
            sa, sb, ok = _myers(a[pi:i], b[pj:j], max_d)
            if ok:
                out.extend(zip((sa + pi).tolist(), (sb + pj).tolist()))
        if i < a.size:
            out.append((i, j))
        pi, pj = i + 1, j + 1
    return out


def lcs(a: list[int], b: list[int], max_d: int = MAX_D) -> list[tuple[int, int]]:
    """(i, j) pairs with a[i] == b[j], increasing in both, as many as a bounded search finds."""
    if not a or not b:
        return []
    aa = np.asarray(a, dtype=np.int64)
    bb = np.asarray(b, dtype=np.int64)
    ia, ib, ok = _myers(aa, bb, max_d)
    if ok:
        return list(zip(ia.tolist(), ib.tolist()))
    return _patience(aa, bb, max_d)
