"""The compare metrics kernel alone against numpy reading the same bytes, in one run, one thread.

    .venv/bin/python bench/kernel_bench.py [--elements 1048576] [--repeat 15]

For fp32 pairs that are identical, 1e-6, 1e-3 and 100 % apart (the kernel must not slow down when
pairs differ): ns per element pair, GB/s per side, and the time of `g.sum(); t.sum()` (numpy
reading both sides) over the kernel's time. Arrays are in memory (no file reading, no hash):
this is the compute ceiling of `opdiff compare` per worker; bench/compare_bench.py measures the
whole command on dumps. Targets (issue 13): >= 2.5 GB/s per side, >= 0.3 of numpy's read.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from opdiff.metrics import kernel as K


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


if __name__ == "__main__":
    main()
