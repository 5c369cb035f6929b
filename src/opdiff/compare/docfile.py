"""Read a user's YAML or JSON settings file (mapping, thresholds): any problem is one line naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, TypeVar

from ..errors import OpdiffError

T = TypeVar("T")


def read_doc(path: str | Path, what: str, parse: Callable[[Any], T]) -> T:
    """Load `path` (.json as JSON, anything else as YAML) and pass the document to `parse`.

    Errors (unreadable file, syntax, or a ValueError/OpdiffError from `parse`) become
    OpdiffError("{path}: bad {what}: ...").
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise OpdiffError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        if path.suffix.lower() == ".json":
            doc = json.loads(text)
        else:
            import yaml

            doc = yaml.safe_load(text)
        return parse(doc)
    except Exception as exc:  # syntax or structure: one line, naming the file
        msg = " ".join(str(exc).split())
        raise OpdiffError(f"{path}: bad {what}: {msg}") from None
