"""Read a user's YAML or JSON settings file (mapping, thresholds): any problem is one line naming it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .errors import OpdiffError

T = TypeVar("T")


def read_doc(path: str | os.PathLike[str], what: str, parse: Callable[[Any], T]) -> T:
    """Load `path` (.json as JSON, anything else as YAML) and pass the document to `parse`.

    Errors (unreadable file, syntax, or a ValueError/OpdiffError from `parse`) become
    OpdiffError("{path}: bad {what}: ...").
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise OpdiffError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    import yaml

    try:
        doc = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:  # syntax: one line, naming the file
        raise OpdiffError(f"{path}: bad {what}: {_one_line(exc)}") from None
    try:
        return parse(doc)
    except (ValueError, OpdiffError) as exc:  # structure, as the parser reports it; anything else is a bug
        raise OpdiffError(f"{path}: bad {what}: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
