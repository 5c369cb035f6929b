"""The user's mapping file (YAML or JSON): exact names, regex renames and fusion groups.

    names:            # exact: target record or node name -> golden record or node name
      "decoder.fc/Linear#0": "model.fc/Linear#0"
    rename:           # regex substitutions turning target names (and module paths) into golden ones
      - {target: '^transformer\\.h\\.(\\d+)\\.', golden: 'model.layers.\\1.'}
    fusion:           # one target op stands for several golden ops, in golden execution order
      - target: 'h\\.(\\d+)\\.mlp/FusedMLP#0'          # regex, full match on a target node name
        golden: ['h.\\1.mlp.fc/Linear#0', 'h.\\1.mlp.act/GELU#0']

See docs/compare.md ("Mapping file").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..base.docfile import read_doc


@dataclass(frozen=True)
class Rename:
    """re.sub(pattern, golden, target_name): a target name rewritten into a golden one."""

    pattern: re.Pattern[str]
    golden: str

    def apply(self, name: str) -> str:
        return self.pattern.sub(self.golden, name)


@dataclass(frozen=True)
class Fusion:
    """Target nodes fully matching `target` stand for the golden nodes `golden` (templates with \\1...)."""

    target: re.Pattern[str]
    golden: tuple[str, ...]

    def expand(self, target_node: str) -> list[str] | None:
        m = self.target.fullmatch(target_node)
        return [m.expand(g) for g in self.golden] if m else None


@dataclass
class Mapping:
    """What the user told us about names that differ between the two runs."""

    names: dict[str, str] = field(default_factory=dict)
    renames: list[Rename] = field(default_factory=list)
    fusions: list[Fusion] = field(default_factory=list)
    source: str = ""
    layers: dict[str, dict[str, str]] = field(default_factory=dict)  # msprobe's layer mapping (match/layer_mapping.py)
    apis: list[Any] = field(default_factory=list)  # msprobe's API mapping entries (match/api_mapping.ApiMap)

    def rename(self, name: str) -> str:
        """A target name after every rename rule (the name itself when none applies)."""
        for r in self.renames:
            name = r.apply(name)
        return name

    def fusion_of(self, target_node: str) -> list[str] | None:
        for f in self.fusions:
            golden = f.expand(target_node)
            if golden is not None:
                return golden
        return None


def _compile(where: str, pattern: Any) -> re.Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"{where}: expected a non-empty regex string")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{where}: bad regex {pattern!r} ({exc})") from None


def _probe(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """A regex with the same groups as `pattern` that matches "": expands a replacement to validate it."""
    names = {i: n for n, i in pattern.groupindex.items()}
    return re.compile("".join(f"(?P<{names[i]}>)" if i in names else "()" for i in range(1, pattern.groups + 1)))


def mapping_from_dict(doc: Any, source: str = "") -> Mapping:
    """Validate a parsed mapping document; raises ValueError naming the bad entry."""
    if doc is None:
        doc = {}
    from .api_mapping import api_maps, is_api_mapping
    from .layer_mapping import is_layer_mapping

    if is_api_mapping(doc):  # msprobe's api_mapping.yaml (`-am`): resolved against the target when aligning
        return Mapping(apis=api_maps(doc), source=source)
    if is_layer_mapping(doc):  # msprobe's layer_mapping.yaml: resolved against the target when aligning
        return Mapping(layers={str(k): dict(v) for k, v in doc.items()}, source=source)
    if not isinstance(doc, dict):
        raise ValueError("expected a mapping at the top level (keys: names, rename, fusion)")
    unknown = set(doc) - {"names", "rename", "fusion"}
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(sorted(map(str, unknown)))} (allowed: names, rename, fusion)")
    names = doc.get("names") or {}
    if not isinstance(names, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in names.items()):
        raise ValueError("names: expected a mapping of target name -> golden name (strings)")
    renames = []
    for i, r in enumerate(doc.get("rename") or []):
        if not isinstance(r, dict) or set(r) != {"target", "golden"} or not isinstance(r["golden"], str):
            raise ValueError(f"rename[{i}]: expected {{target: REGEX, golden: REPLACEMENT}}")
        rn = Rename(_compile(f"rename[{i}].target", r["target"]), r["golden"])
        try:
            _probe(rn.pattern).sub(rn.golden, "")
        except (re.error, IndexError) as exc:
            raise ValueError(f"rename[{i}].golden: bad replacement {r['golden']!r} ({exc})") from None
        renames.append(rn)
    fusions = []
    for i, f in enumerate(doc.get("fusion") or []):
        gold = f.get("golden") if isinstance(f, dict) else None
        if not isinstance(f, dict) or set(f) != {"target", "golden"} or not isinstance(gold, list) or not gold \
                or not all(isinstance(g, str) for g in gold):
            raise ValueError(f"fusion[{i}]: expected {{target: REGEX, golden: [golden node, ...]}}")
        fusions.append(Fusion(_compile(f"fusion[{i}].target", f["target"]), tuple(gold)))
    return Mapping(names=dict(names), renames=renames, fusions=fusions, source=source)


def load_mapping(path: str | os.PathLike[str]) -> Mapping:
    """Read a YAML (.yaml/.yml) or JSON mapping file; any problem is one OpdiffError line naming the file."""
    return read_doc(path, "mapping file", lambda doc: mapping_from_dict(doc, str(path)))


def merge(mappings: list[Mapping]) -> Mapping:
    """Several mapping files as one (e.g. msprobe's layer and API mapping): every entry of each, in order."""
    out = Mapping(source=", ".join(m.source for m in mappings if m.source))
    for m in mappings:
        out.names.update(m.names)
        out.renames += m.renames
        out.fusions += m.fusions
        out.layers.update(m.layers)
        out.apis += m.apis
    return out


def load_mappings(paths: tuple[str, ...] | list[str]) -> Mapping | None:
    """The mapping files a repeatable --map names, merged (None when there are none)."""
    if not paths:
        return None
    maps = [load_mapping(p) for p in paths]
    return maps[0] if len(maps) == 1 else merge(maps)
