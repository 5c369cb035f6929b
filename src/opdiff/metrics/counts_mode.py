"""Counts mode: compare two records by the few fields a format measured instead of the values.

A tfdbg health or SHAPE dump (and formats like it) holds, per tensor, only some of: element count,
nan / +inf / -inf counts (or one "any nan/inf" flag), negative / zero / positive counts, dtype,
shape. A reader lists what a record holds in `extra["held"]` and the counts in `extra["counts"]`;
a pair is judged on the fields both sides hold and on nothing else (docs/readers.md, "tfdbg").
"""

from __future__ import annotations

from typing import Any

from ..base.pair import Metrics
from ..base.record import Record
from ..base.vocab import FAIL, NA, PASS, WARNING, PairVerdict
from . import names as M
from .names import ERR_MESSAGE

HELD = "held"  # Record.extra key: the fields the record holds (below)
COUNTS = "counts"  # Record.extra key: {field: count} of the count fields it holds
FIELDS = ("numel", "nan", "posinf", "neginf", "nonfinite", "negative", "zero", "positive", "dtype", "shape")
NONFINITE = ("nan", "posinf", "neginf")
SIGNS = ("negative", "zero", "positive")
WARN_FRACTION = 0.01  # elements moved between negative / zero / positive: up to this share is WARNING, beyond FAIL
# what a record of a full-valued format holds (statistics carry numel and the nan/inf counts)
_FULL = frozenset({"numel", "nan", "posinf", "neginf", "nonfinite", "dtype", "shape"})


def held(rec: Record) -> frozenset[str]:
    """The fields a record holds: its reader's list, or everything of a format that keeps values."""
    h = rec.extra.get(HELD)
    return frozenset(h) if isinstance(h, (list, tuple)) else _FULL


def needs_counts(g: Record, t: Record) -> bool:
    """Whether the pair is judged in counts mode: a side holds only some fields (a health or SHAPE dump)."""
    return HELD in g.extra or HELD in t.extra


def _count(rec: Record, f: str) -> int | None:
    counts = rec.extra.get(COUNTS)
    if isinstance(counts, dict) and f in counts:
        return int(counts[f])
    s = rec.stats
    if s is None:
        return None
    if f == "numel":
        return s.numel
    if f in NONFINITE:
        return int(getattr(s, f))
    if f == "nonfinite":
        return int(s.nan + s.posinf + s.neginf > 0)
    return None


def counts_compare(g: Record, t: Record) -> tuple[Metrics, PairVerdict, str]:
    """(metrics, result, reason) from the fields both records hold; N/A when they share none that says
    anything about values (the reason names what could not be judged)."""
    both = held(g) & held(t)
    out: Metrics = {}
    judged: list[str] = []
    fails: list[str] = []
    warns: list[str] = []
    val: dict[str, Any] = {f: (_count(g, f), _count(t, f)) for f in FIELDS if f in both}
    if "numel" in val and None not in val["numel"]:
        out[M.NUMEL] = val["numel"][1]
        judged.append("element count")
        if val["numel"][0] != val["numel"][1]:
            fails.append(f"element counts differ: golden {val['numel'][0]}, target {val['numel'][1]}")
    _nonfinite(val, out, judged, fails)
    _signs(val, out, judged, fails, warns)
    if "shape" in both:
        judged.append("shape")
        if tuple(g.shape) != tuple(t.shape):
            fails.append(f"shapes differ: golden {list(g.shape)}, target {list(t.shape)}")
    if "dtype" in both:
        judged.append("dtype")
        if g.dtype != t.dtype:
            warns.append(f"dtypes differ: golden {g.dtype}, target {t.dtype}")
    missing = sorted(set(FIELDS) - both - ({"nonfinite"} if "nan" in both else set()))
    note = f"judged on {', '.join(judged) or 'nothing'} only (not held: {', '.join(missing) or 'none'}; no values)"
    out[ERR_MESSAGE] = note
    if not judged:
        return out, NA, "the records hold no value, count or shape to compare"
    if fails:
        return out, FAIL, "; ".join(fails)
    if warns:
        return out, WARNING, "; ".join(warns)
    return out, PASS, ""


def _nonfinite(val: dict[str, Any], out: Metrics, judged: list[str], fails: list[str]) -> None:
    """nan/inf: exact counts where both hold them, else the any-nan/inf flag."""
    if all(f in val and None not in val[f] for f in NONFINITE):
        (gn, tn), (gp, tp), (gm, tm) = (val[f] for f in NONFINITE)
        out.update({M.GOLDEN_NAN: gn, M.GOLDEN_POSINF: gp, M.GOLDEN_NEGINF: gm,
                    M.TARGET_NAN: tn, M.TARGET_POSINF: tp, M.TARGET_NEGINF: tm})
        mism = abs(gn - tn) + abs(gp - tp) + abs(gm - tm)
        out[M.NONFINITE_MISMATCH] = mism
        judged.append("nan/inf counts")
        if mism:
            fails.append(f"nan/inf counts differ: golden nan={gn} +inf={gp} -inf={gm}, target nan={tn} +inf={tp} -inf={tm}")
    elif "nonfinite" in val and None not in val["nonfinite"]:
        gf, tf = val["nonfinite"]
        out[M.NONFINITE_MISMATCH] = int(bool(gf) != bool(tf))
        judged.append("nan/inf flag")
        if bool(gf) != bool(tf):
            fails.append(f"nan/inf on the {'target' if tf else 'golden'} side only")


def _signs(val: dict[str, Any], out: Metrics, judged: list[str], fails: list[str], warns: list[str]) -> None:
    """negative / zero / positive counts: elements that moved between them (a lower bound on elements that differ)."""
    if not all(f in val and None not in val[f] for f in SIGNS):
        return
    moved = sum(abs(val[f][0] - val[f][1]) for f in SIGNS) // 2
    out[M.DIFF_COUNT] = moved
    judged.append("negative/zero/positive counts")
    if not moved:
        return
    numel = max(1, sum(val[f][0] for f in SIGNS))
    what = ", ".join(f"{f} {val[f][0]} -> {val[f][1]}" for f in SIGNS if val[f][0] != val[f][1])
    (warns if moved <= WARN_FRACTION * numel else fails).append(f"at least {moved} elements changed sign or zero ({what})")
