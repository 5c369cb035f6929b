"""msprobe's layer mapping file (`layer_mapping.yaml`, MindSpore target against a PyTorch golden) as opdiff renames.

msprobe keys its file by the target's module (Cell) class: under each class, a child's name (or an
API called in it, `sub.api`) in the target and its name in the golden; `TopLayer` renames the root.

    TopLayer:                      {network_with_loss: module}
    ParallelTransformerLayer:      {attention: self_attention}
    ParallelAttention:             {flash_attention_score: core_attention_flash.npu_fusion_attention}

Which module paths have which class is read from the target dump's module records; each entry
becomes regex renames of module-path prefixes (deepest first, the root last), so that the golden's
module paths come out and the sequence pass pairs the ops inside them (API names differ between
frameworks: the ops pair by position, role and shape within a module, docs/compare.md "Alignment").
"""

from __future__ import annotations

import re
from typing import Any

from ..base.record import Record
from .mapping import Mapping, Rename

TOP = "TopLayer"


def is_layer_mapping(doc: Any) -> bool:
    """A document of msprobe's layer-mapping shape: {class: {target name: golden name}} (not opdiff's keys)."""
    return isinstance(doc, dict) and bool(doc) and not set(doc) & {"names", "rename", "fusion"} and all(
        isinstance(v, dict) and all(isinstance(a, str) and isinstance(b, str) for a, b in v.items())
        for v in doc.values())


def _classes(records: list[Record]) -> dict[str, str]:
    """module path -> class of every module call in the target."""
    return {r.module: r.op for r in records if r.level == "module" and r.module}


def _rules(path: str, src: str, dst: str) -> list[Rename]:
    """Renames for one entry under the module at `path`: a child module, or an API (last part) in a sub-path."""
    src_mod, _, src_api = src.rpartition(".")
    dst_mod, _, _ = dst.rpartition(".")
    out = [Rename(re.compile(rf"^{re.escape(path)}\.{re.escape(src)}(?=[./])"), f"{path}.{dst}")]
    # an API in (a sub-path of) the module: its records sit under the sub-path, the golden's under dst's
    here = f"{path}.{src_mod}" if src_mod else path
    there = f"{path}.{dst_mod}" if dst_mod else path
    if here != there or src_mod or dst_mod:
        out.append(Rename(re.compile(rf"^{re.escape(here)}/(?=[^/#]*\b{re.escape(src_api)}#)"), f"{there}/"))
    return out


def layer_renames(doc: dict[str, dict[str, str]], target: list[Record]) -> list[Rename]:
    """The renames msprobe's layer mapping means for this target (deepest module first, the root last)."""
    rules: list[Rename] = []
    for path, cls in sorted(_classes(target).items(), key=lambda x: -x[0].count(".")):
        for src, dst in (doc.get(cls) or {}).items():
            rules += _rules(path, src, dst)
    for src, dst in (doc.get(TOP) or {}).items():
        rules.append(Rename(re.compile(rf"^{re.escape(src)}(?=[./])"), dst))
    return rules


def resolve(mapping: Mapping, target: list[Record]) -> Mapping:
    """The mapping with its msprobe layer and API entries turned into renames for this target (layers first:
    a layer entry naming an API finds it by the target's op name)."""
    if not mapping.layers and not mapping.apis:
        return mapping
    from .api_mapping import api_renames

    renames = layer_renames(mapping.layers, target) + api_renames(mapping.apis, target) + mapping.renames
    return Mapping(names=mapping.names, renames=renames, fusions=mapping.fusions, source=mapping.source)
