"""The compare metrics kernel alone against numpy reading the same bytes, in one run, one thread.

    .venv/bin/python bench/kernel_bench.py [--elements 1048576] [--repeat 15] [--dtypes float32,bfloat16,float16]

For fp32 pairs that are identical, 1e-6, 1e-3 and 100 % apart (the kernel must not slow down when
pairs differ): ns per element pair, GB/s per side, and the time of `g.sum(); t.sum()` (numpy
reading both sides) over the kernel's time. Arrays are in memory (no file reading, no hash):
this is the compute ceiling of `opdiff compare` per worker; bench/compare_bench.py measures the
whole command on dumps. Targets (issue 13): >= 2.5 GB/s per side, >= 0.3 of numpy's read.

A second table runs pair_metrics itself on each dtype (fp16/bf16 upcast chunk by chunk to float32,
the ranges given as compare gives them from the records' statistics) against numpy summing the same
bytes read as float32 (issue 23's target: >= 0.5).
"""

from __future__ import annotations

import argparse
import os
import time

import ml_dtypes
import numpy as np

from opdiff.metrics import kernel as K
from opdiff.metrics.tensor import TensorSource, Workspace, pair_metrics


def best(fn, repeat: int) -> float:
    fn()
    out = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--elements", type=int, default=1 << 20)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--dtypes", default="float32,bfloat16,float16")
    a = ap.parse_args()
    n = a.elements
    rng = np.random.default_rng(0)
    print(f"{n} fp32 element pairs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print("| pairs differ by | kernel ns/pair | kernel GB/s per side | numpy read GB/s (both sides) | numpy time / kernel time |")
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

        tk = best(kernel, a.repeat)
        tn = best(lambda: (g.sum(), t.sum()), a.repeat)
        print(f"| {noise:g} | {tk * 1e9 / n:.2f} | {4 * n / tk / 1e9:.2f} | {8 * n / tn / 1e9:.1f} | {tn / tk:.2f} |")
    print("\n| dtype | pair_metrics ns/pair | numpy read of the same bytes ns/pair | numpy time / pair_metrics time |")
    print("|---|---|---|---|")
    for name in a.dtypes.split(","):
        dt = np.dtype(getattr(ml_dtypes, name, None) or name)
        g32 = rng.standard_normal(n, dtype=np.float32)
        g, t = g32.astype(dt), (g32 * np.float32(1.001)).astype(dt)
        rg = (float(g.astype(np.float32).min()), float(g.astype(np.float32).max()), 0.0)
        rt = (float(t.astype(np.float32).min()), float(t.astype(np.float32).max()), 0.0)
        gs, ts = TensorSource.of(g), TensorSource.of(t)
        ws = Workspace()
        tp = best(lambda: pair_metrics(gs, ts, ws, golden_range=rg, target_range=rt, verify=False), a.repeat)
        gb, tb = g.view(np.uint8).view(np.float32), t.view(np.uint8).view(np.float32)
        tn = best(lambda: (gb.sum(), tb.sum()), a.repeat)
        print(f"| {name} | {tp * 1e9 / n:.2f} | {tn * 1e9 / n:.2f} | {tn / tp:.2f} |")


if __name__ == "__main__":
    main()
