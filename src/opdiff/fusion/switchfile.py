"""The switch file: which engine passes to keep on and which to turn off (JSON), like the fusion
switch file of Ascend's fusion-exception workflow. Written by `opdiff fusion`, read by capture."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..base.docfile import read_doc

SWITCH_FORMAT = "opdiff-fusion-switches"


def switch_doc(engine: str, switches: list[str], off: list[str], **fields: Any) -> dict[str, Any]:
    """{"format", "engine", "switches": {name: "on"|"off"}, ...}: every candidate, just `off` turned off."""
    return {"format": SWITCH_FORMAT, "version": 1, "engine": engine,
            "switches": {s: "off" if s in off else "on" for s in switches}, "off": list(off), **fields}


def write_switches(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def read_switches(path: str | Path, engine: str) -> dict[str, Any]:
    """A switch file for `engine`; a wrong or malformed file is a one-line OpdiffError naming it."""
    def check(doc: Any) -> dict[str, Any]:
        if not isinstance(doc, dict) or doc.get("format") != SWITCH_FORMAT:
            raise ValueError(f"not an opdiff switch file (expected \"format\": \"{SWITCH_FORMAT}\")")
        if doc.get("engine") != engine:
            raise ValueError(f"switches for {doc.get('engine')!r}, not {engine!r}")
        sw = doc.get("switches")
        if not isinstance(sw, dict) or not all(isinstance(k, str) and v in ("on", "off") for k, v in sw.items()):
            raise ValueError("\"switches\" must map pass names to \"on\" or \"off\"")
        return doc

    return read_doc(path, "switch file", check)


def off_switches(doc: dict[str, Any]) -> list[str]:
    """Names the switch file turns off."""
    return [k for k, v in doc["switches"].items() if v == "off"]
