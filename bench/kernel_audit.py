"""Audit the float32 metrics kernel against a float64 one on real dumps: every metric's difference in
units of its documented tolerance (docs/metrics.md, "Precision"), and every verdict/status difference.

Runs `opdiff compare --format json` on each GOLDEN:TARGET dump pair twice, once with each source tree
(--old-src: a tree with the float64 kernel, e.g. an unpacked earlier commit; --new-src: this one), and
compares the two reports pair by pair. A metric's "units" is |new - old| / its tolerance, so <= 1 is
within what the docs promise; exact metrics read 0 or inf.

    PYTHONPATH=src python bench/kernel_audit.py --old-src /tmp/s8-start/src --out /tmp/audit \\
        /tmp/dumps/golden:/tmp/dumps/target [more pairs ...]
    PYTHONPATH=src python bench/kernel_audit.py --out /tmp/audit --report-only   # tabulate what is there
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

U22 = 2.0 ** -22
U53 = 2.0 ** -53
EPS64 = 2.0 ** -52
EXACT = ("MaxAbsErr", "NormalizedMaxAbsErr", "WorstIndex", "WorstGolden", "WorstTarget", "GoldenAbsMax", "Numel",
         "Compared", "DiffCount", "GoldenNaN", "GoldenPosInf", "GoldenNegInf", "TargetNaN", "TargetPosInf",
         "TargetNegInf", "NonFiniteMismatch")
REL22 = ("MaxRelativeErr", "MaxRelativeError")
REL6 = ("MeanAbsErr", "RootMeanSquareError", "EucDist", "RelativeEuclideanDistance", "MeanRelativeErr",
        "AccumulatedRelativeError", "MeanRelativeError", "GoldenStd", "TargetStd")
RATIOS = ("One Thousandth Err Ratio", "Five Thousandth Err Ratio")


def _diff(old: Any, new: Any) -> float | None:
    """|new - old|, 0 for equal values (None/nan included), None where only one side is a number."""
    if old == new or (isinstance(old, float) and isinstance(new, float) and math.isnan(old) and math.isnan(new)):
        return 0.0
    if not isinstance(old, (int, float)) or not isinstance(new, (int, float)):
        return None
    return abs(float(new) - float(old))


def _units(d: float | None, tol: float) -> float:
    if d is None:
        return math.inf
    if d == 0.0:
        return 0.0
    return d / tol if tol > 0.0 else math.inf


def pair_units(old: dict[str, Any], new: dict[str, Any]) -> dict[str, float]:
    """Each metric's |new - old| in units of its tolerance (docs/metrics.md, "Precision")."""
    out: dict[str, float] = {}
    for k in EXACT:
        out[k] = _units(_diff(old.get(k), new.get(k)), 0.0)
    for k in REL22:
        v = old.get(k)
        out[k] = _units(_diff(v, new.get(k)), U22 * abs(v) if isinstance(v, (int, float)) else 0.0)
    for k in REL6:
        v = old.get(k)
        out[k] = _units(_diff(v, new.get(k)), 1e-6 * abs(v) if isinstance(v, (int, float)) else 0.0)
    for side in ("Golden", "Target"):
        m, s = old.get(f"{side}Mean"), old.get(f"{side}Std")
        tol = 1e-6 * max(abs(m), s) if isinstance(m, (int, float)) and isinstance(s, (int, float)) else 0.0
        out[f"{side}Mean"] = _units(_diff(m, new.get(f"{side}Mean")), tol)
    red = old.get("RelativeEuclideanDistance")
    red2 = red * red if isinstance(red, (int, float)) else 0.0
    cos = old.get("Cosine")
    d = _diff(cos, new.get("Cosine"))
    out["Cosine"] = _units(d, 1e-7)
    if isinstance(cos, (int, float)) and red2 <= 1.0:  # close sides: 1 - cos to 1e-6 rel or 1e-5 RED^2
        # floor: cos is a float64 near 1, spaced 2^-53 below it (either tree rounds 1 - cos to that quantum)
        out["Cosine (1-cos, close)"] = _units(d, max(1e-6 * (1.0 - cos), 1e-5 * red2, 4 * U53))
    kl = old.get("KullbackLeiblerDivergence")
    kl_tol = max(1e-6 * abs(kl), 1e-6 * red2, EPS64) if isinstance(kl, (int, float)) else 0.0  # |KL| < eps64: 0
    out["KullbackLeiblerDivergence"] = _units(_diff(kl, new.get("KullbackLeiblerDivergence")), kl_tol)
    n = old.get("Compared") or 0
    for k in RATIOS:  # elements that changed side: may only be those within 2.4e-7 of the bound (not checked here)
        d = _diff(old.get(k), new.get(k))
        out[k + " (elements)"] = math.inf if d is None else round(d * n)
    return out


def run_compare(src: str, golden: str, target: str, out: Path) -> Path:
    """One `opdiff compare` with the given source tree; the JSON report's path."""
    if not (out / "compare.json").exists():
        env = {**os.environ, "PYTHONPATH": src}
        cmd = [sys.executable, "-m", "opdiff", "compare", golden, target, "-o", str(out), "--format", "json",
               "--workers", "1", "--no-progress", "--gate", "thresholds", "--allow-unmatched", "--force"]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode not in (0, 1):
            raise SystemExit(f"{golden}: compare failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    return out / "compare.json"


def key(p: dict[str, Any]) -> tuple[Any, str, str]:
    """A pair's identity in both reports: its index and record names (names repeat across steps/updates)."""
    return (p.get("rank"), p.get("step"), p.get("index")), (p.get("golden") or {}).get("name", ""), (p.get("target") or {}).get("name", "")


def audit_pair(old_json: Path, new_json: Path, label: str) -> dict[str, Any]:
    """Per metric the worst units over the pairs of one report, and the pairs whose verdict/status differ."""
    return audit_lists(json.loads(old_json.read_text())["pairs"], json.loads(new_json.read_text())["pairs"], label)


def audit_lists(old: list[dict[str, Any]], new: list[dict[str, Any]], label: str) -> dict[str, Any]:
    """audit_pair of two lists of report pairs."""
    new_by = {key(p): p for p in new}
    worst: dict[str, list[Any]] = {}
    changed = []
    for p in old:
        q = new_by.get(key(p))
        if q is None:
            changed.append({"pair": key(p), "what": "missing in new"})
            continue
        for f in ("result", "status"):
            if p.get(f) != q.get(f):
                changed.append({"pair": key(p), "what": f, "old": p.get(f), "new": q.get(f),
                                "old_metrics": p.get("metrics"), "new_metrics": q.get("metrics")})
        if p.get("status") != "compared" or not p.get("metrics"):
            continue
        for m, u in pair_units(p["metrics"], q["metrics"]).items():
            if m not in worst or u > worst[m][0]:
                name = m.split(" (")[0]
                worst[m] = [u, label, key(p)[2], p["metrics"].get(name), q["metrics"].get(name),
                            p["metrics"].get("Numel"), (p.get("golden") or {}).get("dtype"),
                            (p.get("target") or {}).get("dtype")]
    return {"label": label, "pairs": len(old), "worst": worst, "changed": changed}


def load_old(src: str) -> Any:
    """The reference tree's metrics.tensor module, imported as package `opdiff_ref` beside this `opdiff`
    (its imports are relative, so the two trees do not mix)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("opdiff_ref", Path(src) / "opdiff" / "__init__.py",
                                                  submodule_search_locations=[str(Path(src) / "opdiff")])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["opdiff_ref"] = mod
    spec.loader.exec_module(mod)
    return importlib.import_module("opdiff_ref.metrics.tensor")


def kernel_pair(report: Path, old_tensor: Any, label: str) -> dict[str, Any]:
    """Both kernels on the very arrays of each compared pair of one report (read by this tree), so a
    change of dump format or alignment between the trees does not count; verdicts by this tree's rules."""
    import opdiff
    from opdiff.metrics import names as M
    from opdiff.metrics import thresholds as TH
    from opdiff.metrics.tensor import tensor_metrics
    from opdiff.metrics.verdict import verdict

    doc = json.loads(report.read_text())
    dumps = [opdiff.load(doc[s]["path"]) for s in ("golden", "target")]
    parts: dict[tuple[int, int, int], list[Any]] = {}

    def array(i: int, side: str, p: dict[str, Any]) -> Any:
        """The array of one side of a pair, from the part (rank, step) the pair belongs to."""
        at = (i, p.get("rank", doc[side]["rank"]), p.get("step", doc[side]["step"]))
        if at not in parts:
            part = dumps[i].with_part(at[1], at[2])
            parts[at] = [part, list(part)]
        part, recs = parts[at]
        return part.tensor(recs[p[side]["index"]])

    th = TH.preset("default")
    old_pairs, new_pairs = [], []
    for p in doc["pairs"]:
        if p.get("status") != "compared" or p.get("mode") != "tensor":
            continue
        g, t = array(0, "golden", p), array(1, "target", p)
        pair = {k: p.get(k) for k in ("rank", "step", "index", "golden", "target", "status")}
        for out, fn in ((old_pairs, old_tensor.tensor_metrics), (new_pairs, tensor_metrics)):
            m = fn(g, t)
            res, _ = verdict(m, p["golden"]["dtype"], p["target"]["dtype"], "tensor", th)
            out.append({**pair, "metrics": {M.COLUMN.get(k, k): v for k, v in m.items()}, "result": str(res)})
    return audit_lists(old_pairs, new_pairs, label)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", nargs="*", help="GOLDEN:TARGET dump directories (LABEL=GOLDEN:TARGET to name one)")
    ap.add_argument("--old-src", default="/tmp/s8-start/src", help="source tree of the reference (float64) kernel")
    ap.add_argument("--new-src", default=str(Path(__file__).resolve().parents[1] / "src"))
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--report-only", action="store_true", help="tabulate the reports already in --out")
    ap.add_argument("--kernel", action="store_true",
                    help="with --report-only: run both kernels in this process on the arrays of each compared pair "
                         "(read by this tree), instead of comparing the two trees' reports")
    ns = ap.parse_args(argv)
    results = []
    for i, spec in enumerate(ns.pairs):
        label, _, dirs = spec.rpartition("=")
        golden, target = dirs.split(":")
        label = label or f"pair{i}"
        base = ns.out / label
        o = run_compare(ns.old_src, golden, target, base / "old")
        n = run_compare(ns.new_src, golden, target, base / "new")
        results.append(audit_pair(o, n, label))
        print(f"{label}: {results[-1]['pairs']} pairs, {len(results[-1]['changed'])} verdict/status change(s)",
              flush=True)
    if ns.report_only:
        old_tensor = load_old(ns.old_src) if ns.kernel else None
        for d in sorted(p for p in ns.out.iterdir() if (p / "new" / "compare.json").exists()):
            if ns.kernel:
                results.append(kernel_pair(d / "new" / "compare.json", old_tensor, d.name))
            else:
                results.append(audit_pair(d / "old" / "compare.json", d / "new" / "compare.json", d.name))
            print(f"{d.name}: {results[-1]['pairs']} pairs", flush=True)
    table(results, ns.out)
    return 0


def table(results: list[dict[str, Any]], out: Path) -> None:
    """Print and write (OUT/audit.json) the worst units per metric over every report."""
    worst: dict[str, list[Any]] = {}
    for r in results:
        for m, w in r["worst"].items():
            if m not in worst or w[0] > worst[m][0]:
                worst[m] = w
    pairs = sum(r["pairs"] for r in results)
    changed = [dict(c, report=r["label"]) for r in results for c in r["changed"]]
    print(f"{len(results)} reports, {pairs} pairs, {len(changed)} verdict/status change(s)")
    print(f"{'metric':34} {'worst units':>12}  report / pair (old -> new; numel; dtypes)")
    for m, w in sorted(worst.items()):
        print(f"{m:34} {w[0]:12.3g}  {w[1]} / {w[2]} ({w[3]!r} -> {w[4]!r}; {w[5]}; {w[6]}/{w[7]})")
    for c in changed:
        print(f"changed: {c['report']} {c['pair'][2]}: {c['what']} {c.get('old')} -> {c.get('new')}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "audit.json").write_text(json.dumps({"pairs": pairs, "worst": worst, "changed": changed}, indent=1,
                                               default=str))


if __name__ == "__main__":
    sys.exit(main())
