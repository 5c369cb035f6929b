"""Verdict thresholds: dtype-dependent default rules, named presets, and a YAML/JSON override file.

A rule set maps a dtype class (the lower precision of the two dtypes compared: "float32",
"bfloat16", ..., "int" for integers and bool, "*" for anything else) to PASS conditions and
optional WARNING conditions. A bound may be written in units of u, the rounding unit of that
dtype ("<=64u"), so one rule reads the same for every precision. See docs/compare.md.
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache

from ..base.docfile import read_doc
from ..base.errors import OpdiffError
from ..store.format import FLOAT_DTYPES
from . import names as M

# unit roundoff u = 2^-p of each float format (p = significand bits incl. the implicit one)
ROUNDING_UNIT = {
    "float64": 2.0**-53,
    "float32": 2.0**-24,
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
    "float8_e4m3fn": 2.0**-4,
    "float8_e5m2": 2.0**-3,
}
INT_CLASS = "int"
ANY_CLASS = "*"
_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt, "==": operator.eq}
Bound = tuple[str, Callable[[float, float], bool], float]  # a condition at one u: field, comparison, bound
_COND_RE = re.compile(r"^\s*(<=|>=|==|<|>)?\s*([-+0-9.eE]+|inf)\s*(u?)\s*$")
_EXPR_RE = re.compile(r"^\s*([A-Za-z][\w ]*?)\s*(<=|>=|==|<|>)\s*(\S+)\s*$")
SIGNIFICANT = 32.0  # units of rounding above which a fresh error is no rounding noise (docs/diagnose.md)


def unit(*dtypes: str | None) -> float:
    """Rounding unit of the lowest-precision float dtype among `dtypes`; 0 when none is a float."""
    units = [ROUNDING_UNIT[d] for d in dtypes if d in ROUNDING_UNIT]
    return max(units) if units else 0.0



@dataclass(frozen=True)
class Condition:
    """`metric op value`, value optionally a multiple of the rounding unit u.

    `metric` may be given by its column name ("MaxRelativeErr") or its field name ("max_rel_err"); it
    is kept as the column name, which rules are written and shown in, and `key` is its field."""

    metric: str
    op: str
    value: float
    in_u: bool = False
    key: str = field(init=False, repr=False, compare=False)  # the metrics field the condition reads

    def __post_init__(self) -> None:
        key = M.field_of(self.metric)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "metric", M.COLUMN[key])

    def bound(self, u: float) -> float:
        return self.value * u if self.in_u else self.value

    def holds(self, metrics: Mapping[str, object], u: float) -> bool | None:
        """True/False, or None when the metric is N/A."""
        v = metrics.get(self.key)
        if not isinstance(v, (int, float)):
            return None
        return bool(_OPS[self.op](float(v), self.bound(u)))

    def at(self, u: float) -> Bound:
        """The condition at one rounding unit u, for all_hold: (field, comparison, bound)."""
        return self.key, _OPS[self.op], self.bound(u)

    def text(self) -> str:
        return f"{self.metric} {self.op} {_fmt(self.value)}{'u' if self.in_u else ''}"

    @classmethod
    def parse(cls, metric: str, spec: object) -> Condition:
        """From a bare number (<= or >= by the metric's direction) or a string like "<0.01", ">=0.99", "64u"."""
        default_op = ">=" if M.field_of(metric) in M.HIGHER_IS_BETTER else "<="
        if isinstance(spec, bool):
            return cls(metric, "==", float(spec))
        if isinstance(spec, (int, float)):
            return cls(metric, default_op, float(spec))
        m = _COND_RE.match(str(spec))
        if not m:
            raise ValueError(f"bad condition {spec!r} for {metric} (write e.g. '<=0.01', '>=0.99' or '64u')")
        return cls(metric, m.group(1) or default_op, float(m.group(2)), bool(m.group(3)))


def _fmt(x: float) -> str:
    return f"{x:g}"


@dataclass
class Band:
    """PASS conditions and, optionally, the looser WARNING conditions of one dtype class."""

    passing: list[Condition]
    warning: list[Condition] | None = None

    def to_json(self) -> dict[str, list[str]]:
        d = {"pass": [c.text() for c in self.passing]}
        if self.warning is not None:
            d["warning"] = [c.text() for c in self.warning]
        return d


@dataclass
class Thresholds:
    """Rules by compare mode ("tensor", "stats") and dtype class; hash mode needs none."""

    name: str
    tensor: dict[str, Band] = field(default_factory=dict)
    stats: dict[str, Band] = field(default_factory=dict)

    def band(self, mode: str, cls: str) -> Band | None:
        rules = self.tensor if mode == "tensor" else self.stats
        return rules.get(cls) or rules.get(ANY_CLASS)

    def to_json(self) -> dict[str, str | dict[str, dict[str, list[str]]]]:
        return {
            "name": self.name,
            "tensor": {k: b.to_json() for k, b in self.tensor.items()},
            "stats": {k: b.to_json() for k, b in self.stats.items()},
        }


@cache  # a few distinct (dtype, dtype, floor) in a run, asked once per pair
def dtype_class(golden_dtype: str, target_dtype: str, floor: str | None = None) -> tuple[str, float]:
    """The dtype class of a pair (its lower precision, or `floor` when that is lower still: the
    lowest float precision that ran before it) and that class's rounding unit u. Integer and
    bool pairs are the "int" class whatever the floor."""
    us = [(ROUNDING_UNIT[d], d) for d in (golden_dtype, target_dtype) if d in FLOAT_DTYPES]
    if not us:
        return INT_CLASS, 0.0
    if floor in ROUNDING_UNIT:
        us.append((ROUNDING_UNIT[floor], floor))
    u, d = max(us)
    return d, u


@cache  # asked once per record and per pair, of a few distinct dtypes
def lower_precision(a: str | None, b: str | None) -> str | None:
    """The lower-precision float dtype of the two (None when neither is a float dtype)."""
    cands = [(ROUNDING_UNIT[d], d) for d in (a, b) if d in ROUNDING_UNIT]
    return max(cands)[1] if cands else None


def _u_band(red_pass: int, max_pass: int, red_warn: int, max_warn: int, stats: bool = False) -> Band:
    """PASS/WARNING bands on the relative L2 error and the max error in units of the tensor's scale."""
    red, mx = (M.NORM_REL_DIFF, M.NORM_STATS_DIFF) if stats else (M.RED, M.NORM_MAX_ABS_ERR)
    return Band(
        passing=[Condition(red, "<=", red_pass, True), Condition(mx, "<=", max_pass, True)],
        warning=[Condition(red, "<=", red_warn, True), Condition(mx, "<=", max_warn, True)],
    )


def _default() -> Thresholds:
    high = (64, 256, 1024, 4096)  # fp32/fp64: ops compute at storage precision, rounding grows with depth
    low = (8, 32, 16, 64)  # fp16/bf16: fp32 accumulation, error dominated by a few output roundings
    fp8 = (1, 2, 2, 4)
    table = {"float64": high, "float32": high, "float16": low, "bfloat16": low,
             "float8_e4m3fn": fp8, "float8_e5m2": fp8}
    exact = Band(passing=[Condition(M.DIFF_COUNT, "<=", 0)])
    exact_stats = Band(passing=[Condition(M.NORM_STATS_DIFF, "<=", 0)])
    return Thresholds(
        name="default",
        tensor={k: _u_band(*v) for k, v in table.items()} | {INT_CLASS: exact},
        stats={k: _u_band(*v, stats=True) for k, v in table.items()} | {INT_CLASS: exact_stats},
    )


def _msprobe_torchair() -> Thresholds:
    # msprobe TorchAir documentation: PASS when Cosine >= 0.99 and MaxRelativeErr < 0.01; else FAIL.
    return Thresholds(
        name="msprobe-torchair",
        tensor={ANY_CLASS: Band(passing=[Condition(M.COSINE, ">=", 0.99), Condition(M.MAX_REL_ERR, "<", 0.01)])},
        stats={ANY_CLASS: Band(passing=[Condition(M.NORM_REL_DIFF, "<", 0.01), Condition(M.NORM_STATS_DIFF, "<", 0.01)])},
    )


def _msaccucmp() -> Thresholds:
    # Ascend Model Accuracy Analyzer's recommended acceptance: Cosine > 0.99, RED < 0.05, KL < 0.005.
    return Thresholds(
        name="msaccucmp",
        tensor={ANY_CLASS: Band(passing=[Condition(M.COSINE, ">", 0.99), Condition(M.RED, "<", 0.05),
                                         Condition(M.KL_DIV, "<", 0.005)])},
        stats={ANY_CLASS: Band(passing=[Condition(M.NORM_REL_DIFF, "<", 0.05)])},
    )


def _bitwise() -> Thresholds:
    return Thresholds(
        name="bitwise",
        tensor={ANY_CLASS: Band(passing=[Condition(M.DIFF_COUNT, "<=", 0)])},
        stats={ANY_CLASS: Band(passing=[Condition(M.NORM_STATS_DIFF, "<=", 0), Condition(M.NORM_REL_DIFF, "<=", 0)])},
    )


PRESETS = {"default": _default, "msprobe-torchair": _msprobe_torchair, "msaccucmp": _msaccucmp, "bitwise": _bitwise}


def preset(name: str) -> Thresholds:
    """A named rule set: default, msprobe-torchair, msaccucmp, bitwise."""
    try:
        return PRESETS[name]()
    except KeyError:
        raise OpdiffError(f"unknown threshold preset {name!r} (choose from {', '.join(PRESETS)})") from None


def _parse_band(where: str, spec: object) -> Band:
    if not isinstance(spec, dict) or "pass" not in spec:
        raise ValueError(f"{where}: expected a mapping with 'pass' (and optional 'warning') conditions")
    warning = spec.get("warning")
    return Band(passing=_parse_conditions(f"{where}.pass", spec["pass"]),
                warning=None if warning is None else _parse_conditions(f"{where}.warning", warning))


def _parse_conditions(where: str, conds: object) -> list[Condition]:
    if not isinstance(conds, dict):
        raise ValueError(f"{where}: expected a mapping of metric: condition")
    return [Condition.parse(str(m), c) for m, c in conds.items()]


def thresholds_from_dict(d: object, base: str | None = None) -> Thresholds:
    """Apply an override document (see load_thresholds) onto its base preset."""
    if not isinstance(d, dict):
        raise ValueError("expected a mapping at the top level")
    unknown = set(d) - {"preset", "tensor", "stats"}
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(sorted(unknown))} (allowed: preset, tensor, stats)")
    th = preset(str(d.get("preset") or base or "default"))
    th.name = f"{th.name}+custom"
    for mode in ("tensor", "stats"):
        rules = d.get(mode) or {}
        if not isinstance(rules, dict):
            raise ValueError(f"{mode}: expected a mapping of dtype class to rules")
        for cls, spec in rules.items():
            getattr(th, mode)[str(cls)] = _parse_band(f"{mode}.{cls}", spec)
    return th


def load_thresholds(path: str | os.PathLike[str], base: str | None = None) -> Thresholds:
    """Read a YAML or JSON thresholds file; a bad file is one OpdiffError line naming it."""
    return read_doc(path, "thresholds file", lambda doc: thresholds_from_dict(doc, base))


def parse_expr(expr: str) -> Condition:
    """'Cosine>=0.999' or 'RelativeEuclideanDistance<=64u' -> Condition (for CLI flags)."""
    m = _EXPR_RE.match(expr)
    if not m:
        raise OpdiffError(f"bad rule {expr!r} (write METRIC OP VALUE, e.g. 'Cosine>=0.999' or 'MaxRelativeErr<0.01')")
    try:
        return Condition.parse(m.group(1).strip(), m.group(2) + m.group(3))
    except ValueError as exc:
        raise OpdiffError(str(exc)) from None


def with_rules(th: Thresholds, passing: list[Condition], warning: list[Condition] | None) -> Thresholds:
    """Replace the tensor-mode rules of every dtype class by the given conditions (CLI --pass-if)."""
    band = Band(passing=list(passing), warning=list(warning) if warning else None)
    th.tensor = {ANY_CLASS: band}
    th.name = f"{th.name}+flags"
    return th


def all_hold(conds: list[Bound], metrics: Mapping[str, object]) -> bool:
    """Whether every condition holds (Condition.holds of each is True; an N/A metric holds none)."""
    get = metrics.get
    for key, op, bound in conds:
        v = get(key)
        if not isinstance(v, (int, float)) or not op(float(v), bound):
            return False
    return True
