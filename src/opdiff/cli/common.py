"""Helpers shared by the CLI commands."""

from __future__ import annotations

from ..base.errors import DumpError
from ..store import Dump, load


def open_dump(path: str, rank: int | None, step: int | None, allow_partial: bool, verb: str = "compare") -> Dump:
    """A dump part for a command; an incomplete (cut-off) one only with --allow-partial."""
    d = load(path, rank=rank, step=step)
    if not d.complete and not allow_partial:
        why = d.problems[0] if d.problems else f"{d.root}: capture did not finish"
        raise DumpError(f"{why} — the dump is incomplete; use --allow-partial to {verb} up to where it stops")
    return d
