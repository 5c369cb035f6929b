"""`opdiff demo` over many seeds in a row: counts tracebacks (the issue's "one run in nine crashed")
and how often the diagnosis found the secret. Not a timed benchmark: a robustness run.

Each seed runs the demo in this process (torch is imported once) with its console discarded; an
exception is a traceback the user would have seen. Also checks that the JSON outputs are strict JSON
(no NaN/Infinity tokens).

    nice .venv/bin/python bench/demo_seeds.py [--seeds 50] [--first 0] [--benign] [--out DIR]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import tempfile
import time
import traceback
from pathlib import Path


def strict_json(path: Path) -> None:
    """json.loads that refuses NaN/Infinity tokens (opdiff writes strict JSON)."""
    def bad(tok: str) -> None:
        raise ValueError(f"{path}: non-strict JSON token {tok}")
    json.loads(path.read_text(encoding="utf-8"), parse_constant=bad)


def one(seed: int, out: Path, benign: bool) -> dict:
    from rich.console import Console

    from opdiff.demo import run_demo

    with open(os.devnull, "w") as sink:
        res = run_demo(out, seed=seed, force=True, benign=benign, console=Console(file=sink, width=160))
    for name in ("compare.json", "diagnosis.json"):
        strict_json(out / name)
    return {"fault": res.fault, "verdict": res.verdict, "found": res.found, "seconds": round(res.seconds["total"], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--benign", action="store_true", help="draw benign changes (the demo's --benign)")
    ap.add_argument("--out", type=Path, default=None, help="keep the runs' outputs here (default: a temp dir)")
    args = ap.parse_args()
    base = args.out or Path(tempfile.mkdtemp(prefix="opdiff-demo-seeds-"))
    tracebacks: list[tuple[int, str]] = []
    rows = []
    t0 = time.perf_counter()
    for seed in range(args.first, args.first + args.seeds):
        out = base / f"seed-{seed}"
        try:
            row = one(seed, out, args.benign)
        except Exception:  # what the user would have seen as a traceback
            tracebacks.append((seed, traceback.format_exc()))
            print(f"seed {seed}: TRACEBACK\n{tracebacks[-1][1]}", flush=True)
            continue
        rows.append(row)
        print(f"seed {seed}: {row['fault']:<18} verdict {row['verdict']:<13} found {row['found']}  {row['seconds']} s", flush=True)
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)
    faults = collections.Counter(r["fault"] for r in rows)
    print(f"\n{args.seeds} seeds in {time.perf_counter() - t0:.0f} s: {len(tracebacks)} tracebacks "
          f"(seeds {[s for s, _ in tracebacks]}), found {sum(r['found'] for r in rows)}/{len(rows)}; faults drawn {dict(faults)}")
    if args.out is None:
        shutil.rmtree(base, ignore_errors=True)
    raise SystemExit(1 if tracebacks else 0)


if __name__ == "__main__":
    main()
