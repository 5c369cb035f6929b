"""GE dumps: opening (headers only) and comparing tensors kept in ND against the same tensors in device formats.

    PYTHONPATH=src .venv/bin/python bench/ge_bench.py [--out /tmp/ge_bench] [--mb 256] [--tensors 64] [--repeat 3]

Writes one golden (.npy files) and three GE dumps of the same fp32 activations (MB megabytes per side in
TENSORS tensors of shape (n, 64, 32, 32)): ND (read in place, zero-copy), NC1HWC0 and FRACTAL_NZ
(read whole and converted back to the logical layout), the target = golden with 1e-6 relative noise.
Prints, best of REPEAT, the time to open each dump and to compare it with the golden (1 worker, page
cache warm), and each device format's compare time over ND's: the cost of undoing the layout.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
from kernel_bench import best  # bench/ is on sys.path when this script runs


def build(out: Path, mb: float, tensors: int) -> dict[str, Path]:
    from opdiff.testing.ge_dumps import Op, Tensor, write_ge_dump

    n = max(1, int(mb * 1e6 / 4 / tensors / (64 * 32 * 32)))
    rng = np.random.default_rng(0)
    gold = [rng.standard_normal((n, 64, 32, 32), dtype=np.float32) for _ in range(tensors)]
    noisy = [g * (1 + np.float32(1e-6) * rng.standard_normal(g.shape, dtype=np.float32)) for g in gold]
    paths = {"golden": out / "golden"}
    paths["golden"].mkdir(parents=True)
    for k, g in enumerate(gold):
        np.save(paths["golden"] / f"Relu.op_{k}.{k + 2}.{1_700_000_000_000_000 + k}.output.0.npy", g)
    for fmt, origin in (("ND", "ND"), ("NC1HWC0", "NCHW"), ("FRACTAL_NZ", "ND")):
        ops = [Op(f"op_{k}", "Relu", [], [Tensor(t, fmt, origin)]) for k, t in enumerate(noisy)]
        paths[fmt] = write_ge_dump(out / fmt, ops, graph=False)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/ge_bench"))
    ap.add_argument("--mb", type=float, default=256)
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    import opdiff
    from opdiff.compare import compare

    shutil.rmtree(a.out, ignore_errors=True)
    paths = build(a.out, a.mb, a.tensors)
    golden = opdiff.load(paths["golden"])
    compare(golden, opdiff.load(paths["ND"]), workers=1)  # numba compiled, pages cached
    rows = {}
    for fmt in ("ND", "NC1HWC0", "FRACTAL_NZ"):
        t_open = best(lambda: opdiff.load(paths[fmt]), a.repeat)
        target = opdiff.load(paths[fmt])
        t_cmp = best(lambda: compare(golden, target, workers=1), a.repeat)
        cmp = compare(golden, target, workers=1)
        assert all(r.result == "PASS" for r in cmp.results), fmt
        rows[fmt] = (t_open, t_cmp)
    print(f"{a.tensors} tensors, {a.mb:.0f} MB fp32 per side, 1 worker, best of {a.repeat}")
    print("| target format | open (s) | compare (s) | compare / ND's |")
    print("|---|---|---|---|")
    for fmt, (t_open, t_cmp) in rows.items():
        print(f"| {fmt} | {t_open:.3f} | {t_cmp:.2f} | {t_cmp / rows['ND'][1]:.2f} |")


if __name__ == "__main__":
    main()
