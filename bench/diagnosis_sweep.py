"""Diagnosis sweep: opdiff measures its own accuracy on many transformers architectures x fault classes x levels.

Builds each architecture of opdiff.testing.sweep.archs small on the CPU with seeded weights, plants each fault
or benign change of opdiff.testing.sweep.catalog into the target with plain torch code, proves the claim with an
oracle of plain forward hooks, captures both runs at each level, runs compare and diagnose, and grades the
diagnosis against the ground truth. Prints confusion tables per level, per class and per family, the worst cases
with the command that reproduces each, and writes OUT/results.json. Resumable: finished cases are kept in
OUT/cases/ and skipped on the next run. docs/diagnose.md ("Sweep") has the figures.

    PYTHONPATH=src python bench/diagnosis_sweep.py --out /tmp/sweep --workers 2
    PYTHONPATH=src python bench/diagnosis_sweep.py --archs gpt2,llama --classes norm_eps,swap_qk --levels module
    PYTHONPATH=src python bench/diagnosis_sweep.py --out /tmp/sweep --scheduler local:2    # or tcp://host:8786
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from opdiff.testing.sweep import archs, catalog, runner, tables
from opdiff.testing.sweep.case import Case


def _pick(value: str | None, known, what: str) -> list[str]:
    if not value or value == "all":
        return list(known)
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in known]
    if bad:
        sys.exit(f"unknown {what}: {', '.join(bad)} (known: {', '.join(known)})")
    return names


def _same_cases(results: Path) -> list[Case]:
    """The cases of an earlier sweep, in its order; a case whose architecture or class no longer exists is an error."""
    out = []
    for rec in json.loads(results.read_text())["cases"]:
        arch, klass, level, precision = rec["id"].split(".")
        if arch not in archs.ARCHS or klass not in catalog.CLASSES:
            raise SystemExit(f"{results}: case {rec['id']} names an unknown architecture or class")
        out.append(Case(arch, klass, level, precision))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="sweep-out", help="output directory (results kept per case: resumable)")
    ap.add_argument("--archs", help="comma-separated architectures (default all); families: decoder,encoder,...")
    ap.add_argument("--families", help="comma-separated families: decoder,encoder,encdec,vision,audio,ssm")
    ap.add_argument("--classes", help="comma-separated fault/benign classes (default all but `compiled`)")
    ap.add_argument("--levels", default="module,api,aten")
    ap.add_argument("--precisions", default="fp32,bf16", help="the target's dtype: fp32, bf16")
    ap.add_argument("--workers", type=int, default=1, help="worker processes")
    ap.add_argument("--scheduler", metavar="ADDRESS|local:N",
                    help="run the cases on Dask distributed: a scheduler address, or local:N worker processes here "
                         "(as `opdiff compare --scheduler`); each case in a fresh process, resumable as with --workers")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per case")
    ap.add_argument("--limit", type=int, help="run at most this many cases (after selection)")
    ap.add_argument("--shuffle", type=int, metavar="SEED", help="run the cases in a seeded random order (a cut-off run is a fair sample)")
    ap.add_argument("--patch", action="store_true",
                    help="also confirm each case by patching (diagnose_models' proof); graded as `patch.grade` per case")
    ap.add_argument("--same-cases", metavar="RESULTS_JSON",
                    help="run exactly the cases of an earlier sweep's results.json (before/after on one sample)")
    ap.add_argument("--report-only", action="store_true", help="tabulate the cases already in --out, run nothing")
    args = ap.parse_args()
    if args.patch:
        os.environ["OPDIFF_SWEEP_PATCH"] = "1"  # read by the workers (testing/sweep/case.py)

    names = _pick(args.archs, archs.ARCHS, "architecture")
    if args.families:
        fams = set(args.families.split(","))
        names = [n for n in names if archs.ARCHS[n].family in fams]
    default_classes = [k for k in catalog.CLASSES if k != "compiled"]
    klasses = _pick(args.classes, catalog.CLASSES, "class") if args.classes else default_classes
    levels = _pick(args.levels, runner.LEVELS, "level")
    precisions = _pick(args.precisions, runner.PRECISIONS, "precision")
    todo = runner.cases(names, klasses, levels, precisions)
    if args.shuffle is not None:
        import random

        random.Random(args.shuffle).shuffle(todo)
    if args.same_cases:
        todo = _same_cases(Path(args.same_cases))
    if args.limit:
        todo = todo[: args.limit]
    t0 = time.perf_counter()
    if args.report_only:
        recs = [json.loads((Path(args.out) / "cases" / f"{c.id}.json").read_text()) for c in todo
                if (Path(args.out) / "cases" / f"{c.id}.json").exists()]
    else:
        where = f"Dask {args.scheduler}" if args.scheduler else f"{args.workers} worker(s)"
        print(f"{len(todo)} cases ({len(names)} architectures x {len(klasses)} classes x {len(levels)} levels x "
              f"{len(precisions)} precisions), {where}, out {args.out}", flush=True)

        def progress(rec, i, n):
            print(f"[{i}/{n}] {rec['id']}: {rec['grade']} {rec.get('verdict') or ''} {rec.get('culprit') or ''} "
                  f"({rec.get('seconds', 0):.1f} s)", flush=True)

        recs = runner.run(todo, args.out, workers=args.workers, timeout=args.timeout, progress=progress,
                          scheduler=args.scheduler)
    wall = time.perf_counter() - t0
    report(recs, args.out, wall)
    return 0


def report(recs, out: str, wall: float) -> None:
    for key, title in (("level", "level"), ("klass", "class"), ("precision", "precision")):
        print()
        print(tables.render(tables.confusion(recs, key), title))
    fams = [{**r, "family": archs.ARCHS[r["arch"]].family} for r in recs if r.get("arch") in archs.ARCHS]
    print()
    print(tables.render(tables.confusion(fams, "family"), "family"))
    summ = tables.summary(recs)
    print("\nsummary:", json.dumps(summ))
    skipped = sorted({(r["arch"], r["klass"], r.get("reason", "")) for r in recs if r.get("grade") == "n/a"})
    print(f"\n{len(skipped)} (architecture, class) pairs not applicable; {len({r['arch'] for r in recs})} architectures")
    print("\nworst cases:")
    for r in tables.worst(recs):
        print(f"  {r['grade']:<14} {r['id']}: verdict {r.get('verdict')}, culprit {r.get('culprit')!r}, "
              f"truth {r.get('culprits')}, planted change {tables._effect(r):.3g} u"
              f"{' (compare/diagnose disagree)' if r.get('disagree') else ''}")
        if r.get("reason"):
            print(f"      reason: {r['reason'][:200]}")
        print(f"      {r.get('command') or ''}")
    print(f"\n{len(recs)} cases in {wall:.0f} s wall")
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "results.json").write_text(json.dumps({"summary": summ, "wall_s": wall, "cases": recs}, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
