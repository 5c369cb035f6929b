"""Benchmark of compare on Dask distributed: throughput with 1, 2 and 4 local workers (docs/scale.md).

    PYTHONPATH=src .venv/bin/python bench/scale_bench.py [--ranks 4] [--mb 64] [--workers 1,2,4] [--shard-mb 256]
                                                        [--repeat 3]

Writes (with opdiff's synthetic writer) a golden/target run of RANKS ranks, each MB MiB of fp32
tensor data per side in 32 records, then compares every (rank, step) part: single-process
(opdiff.compare.compare, one thread, part after part, for reference) and per worker count on the
cluster `--scheduler local:N` starts (N processes, one thread each). Each figure is the fastest
of REPEAT timed runs (after one warm-up run), with the CPU seconds of client, scheduler and
workers. Throughput counts the tensor bytes of both sides read and compared; the cluster's
start-up is timed apart. Shards are in the page cache (just written). Every Dask result is
checked to equal the single-process one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from opdiff.compare.distributed import compare_distributed
from opdiff.compare.run import compare
from opdiff.store import load
from opdiff.testing.synthetic import Tensor, write_run

RECORDS = 32


def make(root: Path, ranks: int, mb: int) -> tuple[Path, Path]:
    """A golden and a target run; the target differs by fp32 rounding-sized noise."""
    n = (mb << 20) // 4 // RECORDS
    rng = np.random.default_rng(0)
    g, t = {}, {}
    for r in range(ranks):
        arrs = [rng.standard_normal(n, dtype=np.float32) for _ in range(RECORDS)]
        g[(r, 0)] = [Tensor(f"layers.{i}", "Linear", "output", "0", a) for i, a in enumerate(arrs)]
        t[(r, 0)] = [Tensor(f"layers.{i}", "Linear", "output", "0", a * np.float32(1 + 1e-7))
                     for i, a in enumerate(arrs)]
    write_run(root / "golden", g)
    write_run(root / "target", t)
    return root / "golden", root / "target"


def single(g: Path, t: Path, ranks: int) -> tuple[float, float, dict]:
    """(wall seconds, CPU seconds, comparisons) of compare() part after part in this process, one thread."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = {(r, 0): compare(load(g, rank=r, step=0), load(t, rank=r, step=0), workers=1) for r in range(ranks)}
    return time.perf_counter() - t0, time.process_time() - c0, out


def warm() -> None:
    """Compile the metric kernels in a worker (the first compare in a process pays numba's start-up)."""
    from opdiff.metrics.tensor import tensor_metrics

    a = np.ones(1024, np.float32)
    tensor_metrics(a, a)


def on_dask(g: Path, t: Path, n: int, shard_mb: int, root: Path, repeat: int) -> tuple[float, float, float, dict]:
    """(start-up seconds, best wall seconds, its CPU seconds over client, scheduler and workers, comparisons)."""
    from opdiff.compare import tasks
    from opdiff.compare.cluster import connect

    t0 = time.perf_counter()
    c, lc = connect(f"local:{n}")  # what `--scheduler local:N` starts
    with lc, c:
        c.run(warm)  # imports and numba compilation happen before the timing
        up = time.perf_counter() - t0
        best = (float("inf"), 0.0, {})
        for k in range(repeat + 1):  # the first run warms the workers' caches of compiled kernels
            out = root / f"out{n}-{k}"
            c.run(tasks.forget_parts)  # every run opens its dumps afresh, as the single process does
            cpu0 = time.process_time() + sum(c.run(time.process_time).values())
            t1 = time.perf_counter()
            run = compare_distributed(g, t, out, client=c, shard_bytes=shard_mb << 20)
            wall = time.perf_counter() - t1
            cpu = time.process_time() + sum(c.run(time.process_time).values()) - cpu0
            shutil.rmtree(out)
            if k and wall < best[0]:
                best = (wall, cpu, run.comparisons)
        return up, *best


def same(a, b) -> bool:
    return all(x.result == y.result and x.metrics == y.metrics for x, y in zip(a.results, b.results)) \
        and len(a.results) == len(b.results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--mb", type=int, default=64, help="MiB of tensor data per rank and side")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--shard-mb", type=int, default=256, help="MiB of tensor data per task (the CLI's default)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per configuration; the fastest is reported")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="opdiff-scale-") as tmp:
        root = Path(tmp)
        g, t = make(root, args.ranks, args.mb)
        total = 2 * args.ranks * (args.mb << 20)
        rows = []
        single(g, t, args.ranks)  # warms the page cache and numba's cache for the workers
        secs, cpu, ref = min((single(g, t, args.ranks) for _ in range(args.repeat)), key=lambda x: x[0])
        rows.append({"run": "single process, 1 thread", "startup_s": 0.0, "seconds": secs, "cpu_s": cpu,
                     "MB/s": total / secs / 1e6})
        for n in (int(x) for x in args.workers.split(",")):
            up, secs, cpu, got = on_dask(g, t, n, args.shard_mb, root, args.repeat)
            assert all(same(got[p], ref[p]) for p in ref), f"{n} workers: result differs from single process"
            rows.append({"run": f"dask, {n} worker(s)", "startup_s": up, "seconds": secs, "cpu_s": cpu,
                         "MB/s": total / secs / 1e6})
    print(f"{args.ranks} ranks x {args.mb} MiB per side ({total / 1e6:.0f} MB read in all), shards of "
          f"{args.shard_mb} MiB, {os.cpu_count()} CPU cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}, "
          f"best of {args.repeat}")
    for r in rows:
        print(f"{r['run']:<28} start-up {r['startup_s']:5.1f} s   compare {r['seconds']:6.2f} s   "
              f"CPU {r['cpu_s']:6.2f} s   {r['MB/s']:7.0f} MB/s")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
