"""Reassembly of a sharded run: throughput and peak memory against a plain numpy read of the same bytes.

Writes (once, with opdiff's writer) a two-rank run whose records are Shard(0) halves and Partial(sum)
pieces of fp32 tensors, `--gb` per side, then in fresh processes:

- plain: every shard's bytes read with numpy (memory map, summed) — the floor for touching the data;
- assemble: merge_ranks() and every logical tensor read (concatenated / reduced) one at a time;
- compare: `opdiff compare GOLDEN TARGET` on the same run against its unsharded golden, all metrics.

    PYTHONPATH=src .venv/bin/python bench/parallel_bench.py --out /tmp/parallel_bench --gb 2
    PYTHONPATH=src .venv/bin/python bench/parallel_bench.py --out /tmp/parallel_bench --reuse

Quote ratios; the machine may be shared (docs/parallel.md).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RECORD_MB = 16  # one logical fp32 tensor


def _full(i: int, rows: int) -> np.ndarray:
    return np.random.default_rng(i).random((rows, 1024), dtype=np.float32) - np.float32(0.5)


def _pieces(i: int, full: np.ndarray) -> tuple[list[np.ndarray], list[str]]:
    """Rank 0's and rank 1's piece of logical tensor i: a quarter are Partial(sum), the rest Shard(0) halves."""
    if i % 4 == 3:
        a = (full * np.float32(0.25)).astype(np.float32)
        return [a, full - a], ["P(sum)"]
    h = full.shape[0] // 2
    return [full[:h], full[h:]], ["S(0)"]


def write(out: Path, gb: float) -> None:
    """The golden (one rank, whole tensors) and the target (two ranks, pieces), part by part."""
    from opdiff.store.writer import DumpWriter
    from opdiff.testing.synthetic import Tensor, make_record

    n = max(1, int(gb * 1024 / RECORD_MB))
    rows = RECORD_MB * (1 << 20) // 4 // 1024
    g = DumpWriter(out / "golden", {"framework": "numpy", "mode": "tensor"})
    g.begin(0, 0)
    for i in range(n):
        full = _full(i, rows)
        g.add(make_record(Tensor(f"layer.{i}", "Linear", "output", "0", full)), full)
    g.close(complete=True)
    t = DumpWriter(out / "target", {"framework": "numpy", "mode": "tensor", "world_size": 2})
    for r in (0, 1):
        t.begin(r, 0)
        for i in range(n):
            pieces, lay = _pieces(i, _full(i, rows))
            extra = {"layout": {"mesh": [0, 1], "mesh_shape": [2], "placements": lay}}
            piece = np.ascontiguousarray(pieces[r])
            t.add(make_record(Tensor(f"layer.{i}", "Linear", "output", "0", piece, extra=extra)), piece)
    t.close(complete=True)


def child(kind: str, out: Path) -> None:
    """One measurement in this process: seconds and bytes of tensor data, printed as JSON."""
    import tracemalloc

    import opdiff
    from opdiff.store.logical import merge_ranks

    tracemalloc.start()  # numpy reports its allocations: the heap peak, mapped file pages aside
    t0 = time.perf_counter()
    nbytes = 0
    if kind == "plain":  # the same bytes, each shard's span memory-mapped by numpy and summed
        base = opdiff.load(out / "target")
        for r, s in base.parts:
            d = base.with_part(r, s)
            for rec in d.records:
                sp = d.span(rec)
                x = np.memmap(sp.path, dtype=np.float32, mode="r", offset=sp.offset, shape=(sp.numel,))
                nbytes += x.nbytes
                float(x.sum(dtype=np.float64))
    else:
        t = merge_ranks(opdiff.load(out / "target"))
        for rec in t.records:
            x = t.tensor(rec)
            nbytes += x.nbytes
            float(x.sum(dtype=np.float64))
    secs = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    heap = tracemalloc.get_traced_memory()[1]
    print(json.dumps({"kind": kind, "seconds": secs, "bytes": nbytes, "peak_rss": peak, "peak_heap": heap}))


def measure(kind: str, out: Path) -> dict:
    p = subprocess.run([sys.executable, __file__, "--child", kind, "--out", str(out)], capture_output=True, text=True,
                       check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def compare_run(out: Path) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-m", "opdiff", "compare", str(out / "golden"),
                        str(out / "target"), "-o", str(out / "cmp"), "--force", "--format", "json", "--no-progress",
                        "--top", "0"], capture_output=True, text=True)
    secs = time.perf_counter() - t0
    peak = int(p.stderr.strip().splitlines()[-1]) * 1024
    return {"kind": "compare", "seconds": secs, "rc": p.returncode, "peak_rss": peak}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gb", type=float, default=2.0, help="logical tensor data per side")
    ap.add_argument("--reuse", action="store_true", help="use the dumps already in --out")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.out)
    if not a.reuse:
        shutil.rmtree(a.out, ignore_errors=True)
        a.out.mkdir(parents=True)
        t0 = time.perf_counter()
        write(a.out, a.gb)
        print(f"wrote {a.gb} GB per side in {time.perf_counter() - t0:.1f} s")
    rows = [measure("plain", a.out), measure("assemble", a.out), compare_run(a.out)]
    plain = rows[0]
    for r in rows:
        rate = plain["bytes"] / r["seconds"] / 1e9
        print(f"{r['kind']:9s} {r['seconds']:7.2f} s  {rate:5.2f} GB/s of target data  "
              f"{r['seconds'] / plain['seconds']:5.2f}x plain  peak RSS {r['peak_rss'] / 1e6:7.0f} MB"
              + (f"  peak numpy heap {r['peak_heap'] / 1e6:6.0f} MB" if "peak_heap" in r else "")
              + (f"  exit {r['rc']}" if "rc" in r else ""))


if __name__ == "__main__":
    main()
