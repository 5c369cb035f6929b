"""Confusion tables and the worst cases of a sweep's records (plain Python, no framework)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from . import grade as G

COLUMNS = (G.EXACT, G.NEAR, G.WRONG, G.WRONG_STEP, G.MISSED, G.INCONCLUSIVE, G.BENIGN_OK, G.FALSE_FAULT, G.INVALID, G.ERROR, G.TIMEOUT)


_FAULTS = "_graded_faults"  # hidden column: the denominator of exact%
DISAGREE = "cmp!=diag"  # compare and diagnose give opposite pass/fail on the same dumps


def confusion(recs: list[dict[str, Any]], key: str) -> dict[str, Counter[str]]:
    """key value -> Counter of grades, plus DISAGREE (n/a cases left out)."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for r in recs:
        if r.get("grade") != G.NOT_APPLICABLE:
            out[str(r.get(key))][r["grade"]] += 1
            out[str(r.get(key))][DISAGREE] += bool(r.get("disagree"))
            out[str(r.get(key))][_FAULTS] += r.get("kind") in ("fault", "training") and r["grade"] in G.FAULT_GRADES
    return dict(out)


CLEAR_UNITS = 64.0  # a fault whose own change is this many rounding units of the target dtype is beyond any noise floor


def _effect(r: dict[str, Any]) -> float:
    return float((r.get("oracle") or {}).get("effect_units") or 0.0)


def summary(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline figures: exact rate on valid faults per level, benign failures, compare/diagnose disagreements."""
    out: dict[str, Any] = {}
    for level in sorted({r["level"] for r in recs}):
        f = [r for r in recs if r["level"] == level and r.get("kind") in ("fault", "training") and r["grade"] in G.FAULT_GRADES]
        clear = [r for r in f if _effect(r) >= CLEAR_UNITS]
        b = [r for r in recs if r["level"] == level and r.get("kind") == "benign" and r["grade"] in G.BENIGN_GRADES]
        out[level] = {"faults": len(f), "exact": sum(r["grade"] == G.EXACT for r in f),
                      "exact_rate": round(sum(r["grade"] == G.EXACT for r in f) / len(f), 4) if f else None,
                      f"exact_rate_over_{CLEAR_UNITS:g}u": round(sum(r["grade"] == G.EXACT for r in clear) / len(clear), 4) if clear else None,
                      "clear_faults": len(clear),
                      "benign": len(b), "false_fault": sum(r["grade"] == G.FALSE_FAULT for r in b),
                      "inconclusive": sum(r["grade"] == G.INCONCLUSIVE for r in f + b),
                      "disagree": sum(bool(r.get("disagree")) for r in recs if r["level"] == level)}
    return out


def render(table: dict[str, Counter[str]], title: str) -> str:
    cols = [c for c in (*COLUMNS, DISAGREE) if any(t[c] for t in table.values())]
    width = max([len(title)] + [len(k) for k in table])
    lines = [f"{title:<{width}}  " + "  ".join(f"{c:>12}" for c in cols) + f"  {'exact%':>7}"]
    for k in sorted(table):
        t = table[k]
        graded = t[_FAULTS]
        pct = f"{100 * t[G.EXACT] / graded:6.1f}%" if graded else "      -"
        lines.append(f"{k:<{width}}  " + "  ".join(f"{t[c]:>12}" for c in cols) + f"  {pct:>7}")
    return "\n".join(lines)


_BAD = {G.MISSED: 0, G.FALSE_FAULT: 0, G.WRONG: 1, G.WRONG_STEP: 1, G.INCONCLUSIVE: 2, G.ERROR: 3, G.TIMEOUT: 3, G.NEAR: 4}


def worst(recs: list[dict[str, Any]], n: int = 20) -> list[dict[str, Any]]:
    """The worst cases: misses and false faults first, then wrong modules, inconclusive, errors, near misses;
    within one grade, clear faults (beyond CLEAR_UNITS) first, then the classes that fail most often; two per class."""
    bad = [r for r in recs if r.get("grade") in _BAD or r.get("disagree")]
    per_class = Counter(r["klass"] for r in bad)
    bad.sort(key=lambda r: (_BAD.get(r["grade"], 5), _effect(r) < CLEAR_UNITS, -per_class[r["klass"]], -_effect(r), r["id"]))
    out, seen = [], Counter[tuple[str, str]]()
    for r in bad:  # at most two per (class, grade): the worst cases of many classes
        key = (r["klass"], r["grade"])
        if seen[key] < 2:
            seen[key] += 1
            out.append(r)
    return out[:n]
