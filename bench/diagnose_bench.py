"""How long diagnose takes beyond compare's own time, on synthetic dumps of 10,000 records.

Prints the per-record cost of compare (CPU and wall, after one unmeasured call that loads the
kernels) and diagnose's time over compare's (issue 23: <= 10 % at 100,000 records). CPU seconds
are this process's: on a machine loaded by other jobs they are the fairer figure.

Writes a golden and a target run (DumpWriter; an aten-like chain of ops with producer links,
nested in modules, small tensors or statistics only) whose target has a fault in the middle,
compares them once, then times diagnose() on that comparison (replay off: it needs torch).

    .venv/bin/python bench/diagnose_bench.py [--records 10000] [--mode tensor|stats] [--level aten|module] [--repeat 3]
                                         [--workers 1]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from opdiff import load
from opdiff.compare import compare
from opdiff.diagnose import diagnose
from opdiff.store import DumpWriter, Record
from opdiff.store.format import node_name, record_name
from opdiff.store.stats import tensor_stats


def write_run(path: Path, records: int, mode: str, fault_at: int | None, numel: int = 64, level: str = "aten") -> int:
    """A root call around ops y = tanh(x w + w) + x/2 in modules layers.i.{attn,mlp}: aten-like ops with
    producer links, or (level "module") module calls without them, the way module-level dumps are."""
    rng = np.random.default_rng(0)
    noise = np.random.default_rng(1)
    w = DumpWriter(path, {"framework": "synthetic"})
    w.begin(0, 0)
    n = 0

    def add(node, module, op, call, role, pos, arr, src=None, level=level):
        nonlocal n
        name = record_name(node, "forward", role, pos)
        rec = Record(index=0, name=name, node=node, module=module, op=op, level=level, call=call, direction="forward",
                     role=role, pos=pos, dtype="float32", shape=arr.shape, stats=tensor_stats(arr), src=src)
        w.add(rec, arr if mode == "tensor" else None)
        n += 1
        return name

    x = rng.standard_normal(numel).astype(np.float32)
    add("Model#0", "", "Model", 0, "input", "0", x, level="module")
    src, ops = None, (records - 2) // 3
    for k in range(ops):
        module = f"layers.{k // 20}.{'attn' if k % 20 < 10 else 'mlp'}"
        node = node_name(module, "aten.f.default", k % 10)
        wk = rng.standard_normal(numel).astype(np.float32)
        add(node, module, "aten.f.default", k % 10, "input", "0", x, src if level == "aten" else None)
        add(node, module, "aten.f.default", k % 10, "input", "1", wk)
        y = (np.tanh(x * wk + wk) + 0.5 * x).astype(np.float32)
        if fault_at is not None and k >= fault_at:
            y = y * (1 + 1e-4 * noise.standard_normal(numel)).astype(np.float32) if k == fault_at else y
        src = add(node, module, "aten.f.default", k % 10, "output", "0", y)
        x = y
    add("Model#0", "", "Model", 0, "output", "0", x, level="module")
    w.close()
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--mode", choices=("tensor", "stats"), default="tensor")
    ap.add_argument("--level", choices=("aten", "module"), default="aten")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ops = (args.records - 2) // 3
        n = write_run(root / "golden", args.records, args.mode, None, level=args.level)
        write_run(root / "target", args.records, args.mode, ops // 2, level=args.level)
        g, t = load(root / "golden"), load(root / "target")
        compare(g, t, workers=args.workers)  # loads (or compiles) the kernels
        c0, t0 = time.process_time(), time.perf_counter()
        cmp = compare(load(root / "golden"), load(root / "target"), workers=args.workers)
        c_cmp, t_cmp = time.process_time() - c0, time.perf_counter() - t0
        times, cpus = [], []
        d = None
        for _ in range(args.repeat):
            d = None  # the previous diagnosis (its graph: 100,000 objects) is freed here, not inside the timed call
            c0, t0 = time.process_time(), time.perf_counter()
            d = diagnose(g, t, comparison=cmp, replay=False)
            times.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        print(f"records per side: {n} ({args.mode} mode, {args.level} level), ops: {ops}, "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"compare (dumps opened, {args.workers} worker(s)): {t_cmp:.3f} s wall, {c_cmp:.3f} s CPU: "
              f"{c_cmp / n * 1e6:.1f} us CPU per record")
        print(f"diagnose beyond compare: best {min(times):.3f} s, median {sorted(times)[len(times) // 2]:.3f} s "
              f"over {args.repeat} runs; CPU best {min(cpus):.3f} s = {min(cpus) / c_cmp:.1%} of compare's CPU")
        print(f"verdict: {d.verdict}, culprit: {d.culprit.module if d.culprit else None} "
              f"(expected layers.{(ops // 2) // 20}.{'attn' if (ops // 2) % 20 < 10 else 'mlp'})")


if __name__ == "__main__":
    main()
