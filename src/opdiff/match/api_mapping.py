"""msprobe's API mapping file (`msprobe compare -am api_mapping.yaml`) as opdiff renames.

A list of entries, each a MindSpore (target) API and the PyTorch (golden) API it stands for, with the
argument and output positions that correspond (lists of equal length; a kwarg by its name):

    - ms_api: Mint.cos                 pt_api: Torch.cos
      ms_args: [0]                     pt_args: [0]
      ms_output: [0]                   pt_output: [0]

As msprobe does when `-am` is given, `Mint.x` also stands for `Torch.x` and `MintFunctional.x` for
`Functional.x`. Target records are found by the msprobe name they were read from, so API records
inside layer-mapped modules pair by the mapped name instead of by position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..base.record import Record
from ..store.readers.msprobe_names import api_op
from .mapping import Rename

CLASS_RULES = {"Mint": "Torch", "MintFunctional": "Functional"}  # msprobe's rule for every -am run
_TERMS = (("args", "input"), ("output", "output"))


@dataclass(frozen=True)
class ApiMap:
    """One target API (msprobe spelling) and its golden API, with corresponding positions per term."""

    target: str
    golden: str
    positions: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()  # (role, ((target pos, golden pos), ...))


def is_api_mapping(doc: Any) -> bool:
    """A document of msprobe's API-mapping shape: a list of {ms_api, pt_api, ...} entries."""
    return isinstance(doc, list) and bool(doc) and all(isinstance(e, dict) and "ms_api" in e for e in doc)


def _pos(v: Any) -> str:
    """opdiff's position of an msprobe argument: an index, or a kwarg's name."""
    s = str(v)
    return s if s.isdigit() else f"kwargs.{s}"


def api_maps(doc: list[Any]) -> list[ApiMap]:
    """Validate msprobe's API mapping entries; raises ValueError naming the bad entry."""
    out = []
    for i, e in enumerate(doc):
        ms, pt = e.get("ms_api"), e.get("pt_api")
        if not (isinstance(ms, str) and "." in ms and isinstance(pt, str) and "." in pt):
            raise ValueError(f"entry {i}: expected ms_api and pt_api as 'Prefix.name' strings")
        roles = []
        for term, role in _TERMS:
            a, b = e.get(f"ms_{term}") or [], e.get(f"pt_{term}") or []
            if not isinstance(a, list) or not isinstance(b, list) or len(a) != len(b):
                raise ValueError(f"entry {i} ({ms}): ms_{term} and pt_{term} must be lists of equal length")
            roles.append((role, tuple((_pos(x), _pos(y)) for x, y in zip(a, b))))
        out.append(ApiMap(ms, pt, tuple(roles)))
    return out


def _target_ops(records: list[Record]) -> dict[str, str]:
    """msprobe API name (`Mint.cos`) -> opdiff op of the target records read from it."""
    ops: dict[str, str] = {}
    for r in records:
        name = r.extra.get("msprobe_tensor") if r.level != "module" else None
        if isinstance(name, str) and "." in name:
            parts = name.split(".")
            for n in range(len(parts) - 1, 1, -1):  # the API name is every part before the call counter
                if parts[n - 1].isdigit() and parts[n] in ("forward", "backward"):
                    ops.setdefault(".".join(parts[:n - 1]), r.op)
                    break
    return ops


def _golden_op(msprobe_api: str) -> str:
    prefix, _, api = msprobe_api.partition(".")
    return api_op(prefix, api)


def _rules(target_op: str, golden_op: str, amap: ApiMap | None) -> list[Rename]:
    """Position renames first (they match the target op, so a swap is applied once), then the op itself."""
    if target_op == golden_op:
        return []
    op = rf"(^|/){re.escape(target_op)}#(\d+)/forward/"
    out = [Rename(re.compile(op + rf"{role}/{re.escape(a)}$"), rf"\g<1>{golden_op}#\g<2>/forward/{role}/{b}")
           for role, pairs in (amap.positions if amap else ()) for a, b in pairs]
    out.append(Rename(re.compile(rf"(^|/){re.escape(target_op)}#"), rf"\g<1>{golden_op}#"))
    return out


def api_renames(maps: list[ApiMap], target: list[Record]) -> list[Rename]:
    """The renames msprobe's API mapping means for this target's API records."""
    if not maps:  # msprobe's Mint/MintFunctional rule comes with an API mapping only
        return []
    ops = _target_ops(target)
    by_target = {m.target: m for m in maps}
    rules: list[Rename] = []
    for ms_api, op in sorted(ops.items()):
        amap = by_target.get(ms_api)
        if amap is None:
            prefix, _, api = ms_api.partition(".")
            if prefix not in CLASS_RULES:
                continue
            golden = f"{CLASS_RULES[prefix]}.{api}"
        else:
            golden = amap.golden
        rules += _rules(op, _golden_op(golden), amap)
    return rules
