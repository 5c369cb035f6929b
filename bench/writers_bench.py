"""Each report writer of a comparison alone (issue 23: the default outputs <= 12 us per row together, memory of
writing flat in the number of rows): CPU per row, best of --repeat, and the peak of Python allocations while
writing (tracemalloc, a separate pass), then all of them through report.write_many (one pass over the rows for
the CSV and XLSX, and the JSON too in trees since session 5) where the tree has it.

    PYTHONPATH=src .venv/bin/python bench/writers_bench.py [--records 100000] [--formats csv,xlsx,json]
                                                          [--repeat 3] [--out /tmp/opdiff-writers] [--reuse] [--keep]
                                                          [--no-memory] [--profile FORMAT]

Writes (bench/many_records_bench.py's DumpWriter chain of 64-element fp32 tensors, a fault in the middle) a
golden and a target of N records per side, compares them once in this process (one worker), then calls each
writer of the report registry on that one Comparison into --out. CPU seconds are this process's own
(time.process_time): on a loaded machine the fairer figure. `--profile csv` prints a cProfile of one write.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import time
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from many_records_bench import make


def cpu(fn) -> float:
    c0 = time.process_time()
    fn()
    return time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--formats", default="csv,xlsx,json")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("/tmp/opdiff-writers"))
    ap.add_argument("--reuse", action="store_true", help="keep the dumps of an earlier run in --out")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc pass")
    ap.add_argument("--profile", default=None, help="print a cProfile of one write of this format")
    a = ap.parse_args()
    from opdiff import load, report
    from opdiff.compare import compare

    g, t = make(a.out / f"n{a.records}", a.records, a.reuse)
    cmp = compare(load(g), load(t), workers=1, progress=False)
    rows = len(cmp.results)
    print(f"{rows:,} rows; load average {os.getloadavg()[0]:.1f} (2 cores, shared)")
    try:
        total = 0.0
        for fmt in a.formats.split(","):
            path = a.out / f"compare.{fmt.replace('-', '.')}"
            w = report.writer(cmp, fmt)
            best = min(cpu(lambda: w(cmp, path)) for _ in range(a.repeat))
            total += best
            line = f"{fmt:>13}: best of {a.repeat} {best:6.2f} s CPU = {best / rows * 1e6:5.2f} us/row, " \
                   f"{path.stat().st_size / 1e6:7.1f} MB"
            if not a.no_memory:
                tracemalloc.start()
                w(cmp, path)
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                line += f", peak Python allocations while writing {peak / 1e6:6.1f} MB"
            print(line + f" (load {os.getloadavg()[0]:.1f})", flush=True)
            if a.profile == fmt:
                prof = cProfile.Profile()
                prof.runcall(w, cmp, path)
                pstats.Stats(prof).sort_stats("tottime").print_stats(15)
        print(f"each alone, summed: {total:.2f} s CPU = {total / rows * 1e6:.2f} us/row")
        if hasattr(report, "write_many"):  # the compare command's way: CSV and XLSX in one pass over the rows
            outs = [(f, a.out / f"many.{f.replace('-', '.')}") for f in a.formats.split(",")]
            best = min(cpu(lambda: report.write_many(cmp, outs)) for _ in range(a.repeat))
            print(f"report.write_many({a.formats}): best of {a.repeat} {best:.2f} s CPU = {best / rows * 1e6:.2f} "
                  f"us/row (load {os.getloadavg()[0]:.1f})")
    finally:
        if not a.keep:
            shutil.rmtree(a.out, ignore_errors=True)


if __name__ == "__main__":
    main()
