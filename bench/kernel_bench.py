"""The compare metrics kernel against numpy reading the same bytes, in one run, one thread.

    PYTHONPATH=src .venv/bin/python bench/kernel_bench.py [--elements 1048576] [--file-elements 16777216]
        [--repeat 15] [--dtypes float32,bfloat16,float16] [--dir /tmp]

Three tables, each a ratio "numpy time / opdiff time" (1.0 = as fast as numpy merely reading the bytes;
issue 23's target is >= 0.5). Every pair of timings is taken interleaved (opdiff, numpy, opdiff, ...,
the best of --repeat each), and timed in CPU time of the calling thread (time.thread_time: user + system,
page faults included), so time spent waiting for a core on a loaded machine counts for neither. One
thread throughout: the ratio is per core (compare spreads pairs over --workers threads; numpy's sum is
single-threaded too).

1. The kernel alone (kernel.fold) on fp32 pairs in memory, identical, 1e-6, 1e-3 and 100 % apart
   (near and far pairs take different KL paths), against `g.sum(); t.sum()`: the compute ceiling.
   1b: the same on pairs of one block each (4,096 elements, as a dump's small tensors; numpy sums each
   slice too): similar pairs, fp32 against its bf16 rounding, a GELU output likewise (its flat minimum
   puts elements outside the KL near path's range in every block) and independent values.
2. pair_metrics per dtype on arrays in memory (fp16/bf16 upcast chunk by chunk to float32; the ranges
   given as compare gives them from the records' statistics) against numpy summing the same bytes
   viewed as float32. Both sides cache-resident at 2^20 elements: numpy runs at cache bandwidth.
3. The same from files in the page cache, as compare reads dumps: pair_metrics on two files
   (TensorSource path + offset: memory-mapped, chunked, pages released) against the faster of
   `np.memmap(...).sum()` and `np.fromfile(...).sum()` of both files (bytes viewed as float32).

--profile instead times each part of the kernel alone (where the time goes; docs/compare.md).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numba as nb
import numpy as np

from opdiff.metrics import kernel as K
from opdiff.metrics.tensor import TensorSource, Workspace, pair_metrics


def interleaved(a: Callable[[], object], b: Callable[[], object], repeat: int) -> tuple[float, float]:
    """The best time of each of two functions, run alternately (after one warm-up call each)."""
    a()
    b()
    ta = tb = float("inf")
    for _ in range(repeat):
        t = time.thread_time()
        a()
        ta = min(ta, time.thread_time() - t)
        t = time.thread_time()
        b()
        tb = min(tb, time.thread_time() - t)
    return ta, tb


def pair(name: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, tuple, tuple]:
    """A golden/target pair 0.1 % apart in dtype `name`, and each side's (min, max, shift) as records give."""
    dt = np.dtype(getattr(ml_dtypes, name, None) or name)
    g32 = rng.standard_normal(n, dtype=np.float32)
    g, t = g32.astype(dt), (g32 * np.float32(1.001)).astype(dt)
    return g, t, _range(g), _range(t)


def _range(x: np.ndarray) -> tuple[float, float, float]:
    f = x.astype(np.float32)
    return float(f.min()), float(f.max()), float(f.mean())


def kernel_table(n: int, repeat: int, rng: np.random.Generator) -> None:
    print("| pairs differ by | kernel ns/pair | kernel GB/s per side | numpy sum ns/pair (both sides) | numpy time / kernel time |")
    print("|---|---|---|---|---|")
    for noise in (0.0, 1e-6, 1e-3, 1.0):
        g = rng.standard_normal(n, dtype=np.float32)
        t = (g + g * np.float32(noise) * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)
        p = np.zeros(K.N_PARAM)
        p[K.P_GMIN], p[K.P_GINV] = g.min(), 1 / (g.max() - g.min())
        p[K.P_TMIN], p[K.P_TINV] = t.min(), 1 / (t.max() - t.min())
        scratch = np.zeros(K.N_ACC)

        def kernel() -> None:
            acc, cnt = K.new_state()
            K.fold(g, t, p, acc, cnt, scratch, 0)

        tk, tn = interleaved(kernel, lambda: (g.sum(), t.sum()), repeat)
        print(f"| {noise:g} | {tk * 1e9 / n:.2f} | {4 * n / tk / 1e9:.2f} | {tn * 1e9 / n:.2f} | {tn / tk:.2f} |")


def _gelu(x: np.ndarray) -> np.ndarray:
    return (x * 0.5 * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))).astype(np.float32)


def block_table(n: int, repeat: int, rng: np.random.Generator) -> None:
    """The kernel on many pairs of one block each (as a dump's small tensors), each pair with its own
    range: the KL path is chosen per pair from its one block, so a pair that the near path refuses
    pays for both paths."""
    g = rng.standard_normal(n, dtype=np.float32)
    gelu = _gelu(g)
    kinds = {
        "1e-3 apart": (g, (g * np.float32(1.001)).astype(np.float32)),
        "fp32 vs the same rounded to bf16": (g, g.astype(ml_dtypes.bfloat16).astype(np.float32)),
        "GELU output, fp32 vs rounded to bf16": (gelu, gelu.astype(ml_dtypes.bfloat16).astype(np.float32)),
        "independent (100 % apart)": (g, rng.standard_normal(n, dtype=np.float32)),
    }
    print(f"| pairs of {K.BLOCK} elements | kernel ns/pair | numpy sum ns/pair (both sides) | numpy time / kernel time |")
    print("|---|---|---|---|")
    for label, (a, b) in kinds.items():
        starts = range(0, n - K.BLOCK + 1, K.BLOCK)
        params = []
        for s in starts:
            p = np.zeros(K.N_PARAM)
            ga, tb = a[s:s + K.BLOCK], b[s:s + K.BLOCK]
            p[K.P_GMIN], p[K.P_GINV] = ga.min(), 1 / (float(ga.max()) - float(ga.min()))
            p[K.P_TMIN], p[K.P_TINV] = tb.min(), 1 / (float(tb.max()) - float(tb.min()))
            params.append(p)
        scratch = np.zeros(K.N_ACC)

        def kernel(a: np.ndarray = a, b: np.ndarray = b, params: list = params) -> None:
            for k, s in enumerate(starts):
                acc, cnt = K.new_state()
                K.fold(a[s:s + K.BLOCK], b[s:s + K.BLOCK], params[k], acc, cnt, scratch, 0)

        def numpy_sum(a: np.ndarray = a, b: np.ndarray = b) -> None:
            for s in starts:
                a[s:s + K.BLOCK].sum()
                b[s:s + K.BLOCK].sum()

        m = len(starts) * K.BLOCK
        tk, tn = interleaved(kernel, numpy_sum, repeat)
        print(f"| {label} | {tk * 1e9 / m:.2f} | {tn * 1e9 / m:.2f} | {tn / tk:.2f} |")


def memory_table(names: list[str], n: int, repeat: int, rng: np.random.Generator) -> None:
    print("| dtype | pair_metrics ns/pair | numpy sum of the same bytes ns/pair | numpy time / pair_metrics time |")
    print("|---|---|---|---|")
    for name in names:
        g, t, rg, rt = pair(name, n, rng)
        gs, ts = TensorSource.of(g), TensorSource.of(t)
        ws = Workspace()
        gb, tb = g.view(np.float32), t.view(np.float32)
        tp, tn = interleaved(lambda: pair_metrics(gs, ts, ws, golden_range=rg, target_range=rt, verify=False),
                             lambda: (gb.sum(), tb.sum()), repeat)
        print(f"| {name} | {tp * 1e9 / n:.2f} | {tn * 1e9 / n:.2f} | {tn / tp:.2f} |")


def file_table(names: list[str], n: int, repeat: int, rng: np.random.Generator, where: Path) -> None:
    print("| dtype | pair_metrics from files ns/pair | numpy memmap+sum ns/pair | numpy fromfile+sum ns/pair "
          "| numpy (faster) time / pair_metrics time |")
    print("|---|---|---|---|---|")
    for name in names:
        g, t, rg, rt = pair(name, n, rng)
        paths = [where / f"golden.{name}.bin", where / f"target.{name}.bin"]
        g.tofile(paths[0])
        t.tofile(paths[1])
        del g, t
        gs, ts = (TensorSource(dtype=name, shape=(n,), path=p) for p in paths)

        def memmap_sum() -> None:
            for p in paths:
                np.memmap(p, dtype=np.float32, mode="r").sum()

        def fromfile_sum() -> None:
            for p in paths:
                np.fromfile(p, dtype=np.float32).sum()

        with Workspace() as ws:
            tp, tm = interleaved(lambda: pair_metrics(gs, ts, ws, golden_range=rg, target_range=rt, verify=False),
                                 memmap_sum, repeat)
            tp2, tf = interleaved(lambda: pair_metrics(gs, ts, ws, golden_range=rg, target_range=rt, verify=False),
                                  fromfile_sum, repeat)
        tp = min(tp, tp2)
        for p in paths:
            p.unlink()
        print(f"| {name} | {tp * 1e9 / n:.2f} | {tm * 1e9 / n:.2f} | {tf * 1e9 / n:.2f} | {min(tm, tf) / tp:.2f} |")


@nb.njit(nogil=True, fastmath=True, error_model="numpy")  # as the kernel: no zero-division checks, sums reassociated
def _kl_block(g: np.ndarray, t: np.ndarray, p: np.ndarray, near: bool) -> float:
    """The kernel's KL loop alone on one block (the same inlined code _block_fast runs)."""
    if near:
        r = K._kl_near(g, t, p[K.P_GMIN], p[K.P_GINV], p[K.P_TMIN], p[K.P_TINV])
    else:
        r = K._kl_general(g, t, p[K.P_GMIN], p[K.P_GINV], p[K.P_TMIN], p[K.P_TINV])
    return r[0] + r[1] + r[2] + r[3] + r[4]


@nb.njit(nogil=True)
def _kl_only(g: np.ndarray, t: np.ndarray, p: np.ndarray, near: bool) -> float:
    """_kl_block over every block, as fold walks them."""
    out = 0.0
    for s in range(0, g.size, K.BLOCK):
        out += _kl_block(g[s:s + K.BLOCK], t[s:s + K.BLOCK], p, near)
    return out


@nb.njit(nogil=True)
def _parts32(g: np.ndarray, t: np.ndarray, p: np.ndarray, o: np.ndarray, part: int) -> None:
    """One part of the float32 kernel over every block as fold walks them: 0 the sums loop (kernel.sums32),
    1 the near KL loop, 2 the general KL loop."""
    c1 = p[K.P_TINV] - p[K.P_GINV]
    c2 = (p[K.P_TMIN] - p[K.P_GMIN]) * p[K.P_TINV]
    for s in range(0, g.size, K.BLOCK32):
        gs, ts = g[s:s + K.BLOCK32], t[s:s + K.BLOCK32]
        if part == 0:
            K.sums32(gs, ts, gs[0], ts[0], o)
        elif part == 1:
            K.kl_near32(gs, ts, p[K.P_GMIN], p[K.P_GINV], p[K.P_TMIN], p[K.P_TINV], c1, c2, o)
        else:
            K.kl_general32(gs, ts, p[K.P_GMIN], p[K.P_GINV], p[K.P_TMIN], p[K.P_TINV], c1, c2, o)


def profile_table(n: int, repeat: int, rng: np.random.Generator) -> None:
    """Where the kernel's time goes, each part timed alone in CPU time against numpy's sum of the same
    fp32 pairs: the KL loop (near and general path), the rest of the block (sums, relative errors,
    maxima, counts: the whole fold minus the KL loop) and the fp16/bf16 upcast of one chunk per side."""
    g = rng.standard_normal(n, dtype=np.float32)
    near_t = (g * np.float32(1.001)).astype(np.float32)
    far_t = rng.standard_normal(n, dtype=np.float32)
    out = np.empty(n, np.float32)
    bf, hf = g.astype(ml_dtypes.bfloat16), g.astype(np.float16).view(np.uint16)
    rows: list[tuple[str, float]] = []
    for label, t in (("near", near_t), ("general", far_t)):
        p = np.zeros(K.N_PARAM)
        p[K.P_GMIN], p[K.P_GINV] = g.min(), 1 / (g.max() - g.min())
        p[K.P_TMIN], p[K.P_TINV] = t.min(), 1 / (t.max() - t.min())
        scratch = np.zeros(K.N_ACC)

        def fold(t: np.ndarray = t, p: np.ndarray = p) -> None:
            acc, cnt = K.new_state()
            K.fold(g, t, p, acc, cnt, scratch, 0)

        whole, _ = interleaved(fold, lambda: None, repeat)
        sums, kl = interleaved(lambda t=t, p=p: _parts32(g, t, p, scratch, 0),
                               lambda t=t, p=p, near=label == "near": _parts32(g, t, p, scratch, 1 if near else 2), repeat)
        kl64, _ = interleaved(lambda t=t, p=p, near=label == "near": _kl_only(g, t, p, near), lambda: None, repeat)
        rows += [(f"whole kernel (float32 blocks), {label} KL path", whole), (f"  KL loop, float32 ({label} path)", kl),
                 ("  sums loop, float32: 13 sums, relative errors, maxima, counts, nan/inf test", sums),
                 ("  the rest: block bookkeeping, float64 folds, maxima re-taken", whole - kl - sums),
                 (f"  (the float64 KL loop, {label} path, for comparison)", kl64)]
    conv_bf, conv_hf = interleaved(lambda: np.copyto(out, bf, casting="unsafe"), lambda: K.half_to_float(hf, out),
                                   repeat)
    rows += [("bf16 -> fp32 upcast, both sides", 2 * conv_bf), ("fp16 -> fp32 upcast, both sides", 2 * conv_hf)]
    _, tn = interleaved(lambda: None, lambda: (g.sum(), near_t.sum()), repeat)
    rows += [("numpy sum of both fp32 sides", tn), ("numpy sum of both bf16/fp16 sides", tn / 2)]
    print("| part | ns/pair |")
    print("|---|---|")
    for label, sec in rows:
        print(f"| {label} | {sec * 1e9 / n:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--elements", type=int, default=1 << 20)
    ap.add_argument("--file-elements", type=int, default=1 << 24, help="elements per side of table 3 (0: skip it)")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--dtypes", default="float32,bfloat16,float16")
    ap.add_argument("--dir", default=None, help="where table 3 writes its two files (default: a temporary folder)")
    ap.add_argument("--profile", action="store_true", help="only the profile: each part of the kernel timed alone")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    names = a.dtypes.split(",")
    print(f"one thread, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    if a.profile:
        print(f"profile, {a.elements} pairs in memory\n")
        profile_table(a.elements, a.repeat, rng)
        return
    print(f"1. kernel alone, {a.elements} fp32 pairs in memory\n")
    kernel_table(a.elements, a.repeat, rng)
    print(f"\n1b. kernel alone, {a.elements} fp32 pairs in memory as pairs of one block each\n")
    block_table(a.elements, a.repeat, rng)
    print(f"\n2. pair_metrics, {a.elements} pairs in memory\n")
    memory_table(names, a.elements, a.repeat, rng)
    if a.file_elements:
        print(f"\n3. pair_metrics, {a.file_elements} pairs from two files in the page cache\n")
        with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
            file_table(names, a.file_elements, max(3, a.repeat // 3), rng, Path(tmp))
    print(f"\nload average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
