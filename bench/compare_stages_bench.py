"""Per-record CPU of each stage of `compare()` up to its Comparison (issue 23): reading both indexes (the
columnar copy, and the JSON lines alone), the plan (run check, shard headers, alignment, precision floors),
the small pairs' metrics, the verdicts, and compare() whole (dumps loaded and their headers read before it,
then on freshly loaded dumps, reading their shard headers itself as `opdiff compare` does).

    .venv/bin/python bench/compare_stages_bench.py [--records 20000] [--repeat 3] [--out /tmp/opdiff-stages] [--keep]

Writes (or reuses, with --keep from an earlier run) bench/many_records_bench.py's pair of DumpWriter dumps
(64-element fp32 records, a fault in the middle of the target), then times each stage in this process on
the CPU clock (time.process_time), best of --repeat, as µs per record (per side) or per pair. The reads
run in a fresh `load()` each time; the later stages reuse one load. "small pairs' results in compare's batches"
is compare_subset over the plan's batches of 1,024 pairs, as compare() runs them (the stage before it takes
every pair in one batch).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from many_records_bench import make

from opdiff.compare import run as R
from opdiff.compare.sameness import check_comparable
from opdiff.match.align import align
from opdiff.metrics.tensor import Workspace
from opdiff.metrics.thresholds import preset
from opdiff.metrics.verdict import Judge
from opdiff.store import load
from opdiff.store import validate as V


def best(fn: Callable[..., object], repeat: int, setup: Callable[[], tuple[object, ...]] | None = None) -> float:
    """Least CPU seconds of `repeat` calls of fn(*setup()) (setup untimed; the collector run before each)."""
    out = float("inf")
    for _ in range(repeat):
        args = setup() if setup else ()
        gc.collect()
        t0 = time.process_time()
        fn(*args)
        out = min(out, time.process_time() - t0)
    return out


def json_only(g: Path, t: Path) -> None:
    """Both indexes read from their JSON lines, the columnar copies ignored."""
    for root in (g, t):
        index = root / "rank0/step0/index.jsonl"
        if hasattr(V, "_read_lines"):
            V._read_lines(index, index.read_bytes())
        else:  # a source tree from before the columnar copy (--src of many_records_bench)
            V.read_index(index)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("/tmp/opdiff-stages"))
    ap.add_argument("--keep", action="store_true", help="keep the dumps (and reuse them next time)")
    args = ap.parse_args()
    n = args.records
    print(f"load average at start {os.getloadavg()[0]:.1f} (2 cores, shared)")
    try:
        gp, tp = make(args.out / f"n{n}", n, reuse=True)
        g, t = load(gp), load(tp)
        th = preset("default")
        R.compare(g, t, workers=1, all_steps=False)  # numba's kernels loaded, shard headers read once
        plan = R.plan_pairs(g, t, None, "auto")
        pos = [i for i, _ in plan.work]
        ws = Workspace()
        done = R.small_pair_metrics(g, t, plan.pairs, pos, "auto", ws)
        fresh = lambda: (load(gp), load(tp))
        print(f"{'shard headers, both sides':48s} "
              f"{best(lambda a, b: (a.check(), b.check()), args.repeat, fresh) / n * 1e6:7.2f} us per record")
        stages: list[tuple[str, Callable[[], object], int]] = [
            ("read both indexes (columnar copy)", fresh, n),
            ("read both indexes (JSON lines only)", lambda: json_only(gp, tp), n),
            ("run check (sameness)", lambda: check_comparable(g, t, mapping=None), n),
            ("alignment", lambda: align(g, t, None), n),
            ("plan (check, align, floors, sizes)", lambda: R.plan_pairs(g, t, None, "auto"), n),
            ("small pairs' metrics (read, kernel, finalize)",
             lambda: R.small_pair_metrics(g, t, plan.pairs, pos, "auto", ws), n),
            *([("small pairs' results (metrics, PASS by columns)",
                lambda: R.small_pair_results(g, t, plan, pos, "auto", ws, Judge(th)), n)]
              if hasattr(R, "small_pair_results") else []),  # a source tree from before the verdicts by columns
            ("small pairs' results in compare's batches",  # compare_subset per batch of _BATCH_PAIRS, as compare()
             lambda: [R.compare_subset(g, t, plan, b, "auto", th, ws) for b in R._batches(plan.work)], n),
            ("per-pair checks and verdicts",
             lambda: [R.compare_pair(g, t, plan.pairs[i], "auto", th, ws, plan.floors[i], done.get(i)) for i in pos],
             n),
            ("compare() whole (dumps loaded)", lambda: R.compare(g, t, workers=1, all_steps=False), n),
        ]
        for label, fn, per in stages:
            sec = best(fn, args.repeat)
            print(f"{label:48s} {sec / per * 1e6:7.2f} us per record/pair  ({sec:.3f} s CPU for {per:,})", flush=True)
        sec = best(lambda a, b: R.compare(a, b, workers=1, all_steps=False), args.repeat, fresh)
        print(f"{'compare() whole, shard headers read in it':48s} {sec / n * 1e6:7.2f} us per record/pair  "
              f"({sec:.3f} s CPU for {n:,})", flush=True)
        ws.close()
        print(f"load average at end {os.getloadavg()[0]:.1f}")
    finally:
        if not args.keep:
            shutil.rmtree(args.out, ignore_errors=True)


if __name__ == "__main__":
    main()
