"""Re-run chosen cases of an earlier diagnosis sweep, to compare grades before and after a change.

    PYTHONPATH=src python bench/sweep_rerun.py --results bench/results/diagnosis-sweep-after/results.json \\
        --select bf16-faults --out /tmp/rerun
    PYTHONPATH=src python bench/sweep_rerun.py --results ... --select fp32-faults --limit 100 --seed 0 --out /tmp/rerun

Selections: bf16-faults, fp32-faults (graded fault cases of that target precision), benign (graded benign
cases). Cases already in --out are kept (resumable). Prints each case, then before -> after counts per level.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
from collections import Counter

from opdiff.testing.sweep import catalog, runner
from opdiff.testing.sweep.case import Case

SKIP = ("n/a", "invalid-injection")


def select(cases: list[dict], which: str, limit: int | None, seed: int) -> list[dict]:
    """The graded cases of one selection, shuffled by `seed` when a limit cuts them."""
    def kind(c: dict) -> str:
        return catalog.CLASSES[c["id"].split(".")[1]].kind

    graded = [c for c in cases if c["grade"] not in SKIP]
    pick = {"bf16-faults": lambda c: kind(c) == "fault" and c["id"].endswith(".bf16"),
            "fp32-faults": lambda c: kind(c) == "fault" and c["id"].endswith(".fp32"),
            "benign": lambda c: kind(c) == "benign"}[which]
    chosen = [c for c in graded if pick(c)]
    if limit is not None:
        random.Random(seed).shuffle(chosen)
        chosen = chosen[:limit]
    return chosen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", required=True, help="results.json of the earlier sweep")
    ap.add_argument("--select", required=True, choices=("bf16-faults", "fp32-faults", "benign"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=180)
    args = ap.parse_args()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    with open(args.results, encoding="utf-8") as f:
        before = {c["id"]: c for c in json.load(f)["cases"]}
    chosen = select(list(before.values()), args.select, args.limit, args.seed)
    print(f"{len(chosen)} cases", flush=True)

    def progress(rec: dict, i: int, n: int) -> None:
        print(f"[{i}/{n}] {rec['id']}: {before[rec['id']]['grade']} -> {rec['grade']} {rec.get('culprit')}", flush=True)

    after = runner.run([Case(*c["id"].split(".")) for c in chosen], args.out, workers=1, timeout=args.timeout,
                       progress=progress)
    for level in ("module", "api", "aten"):
        ids = [r["id"] for r in after if r["id"].split(".")[2] == level]
        old = Counter(before[i]["grade"] for i in ids)
        new = Counter(r["grade"] for r in after if r["id"] in ids)
        print(f"{level:6s} {len(ids):4d} cases  before {dict(old)}  after {dict(new)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
