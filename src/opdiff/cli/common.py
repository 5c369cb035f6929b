"""Helpers shared by the CLI commands."""

from __future__ import annotations

from dataclasses import dataclass

import click

from ..base.errors import DumpError
from ..store import Dump, load


@dataclass(frozen=True)
class Invocation:
    """How the command line was started (click's context object): `exits` when the process ends with the
    command (the `opdiff` program itself, not main(argv) called from Python), so that a command may leave
    its big results to the operating system instead of freeing them (base/gcpause.keep_until_exit)."""

    exits: bool = False


def process_exits() -> bool:
    """Whether the running command is the process's last act (see Invocation)."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    return isinstance(obj, Invocation) and obj.exits


def open_dump(path: str, rank: int | None, step: int | None, allow_partial: bool, verb: str = "compare") -> Dump:
    """A dump part for a command; an incomplete (cut-off) one only with --allow-partial."""
    d = load(path, rank=rank, step=step)
    if not d.complete and not allow_partial:
        why = d.problems[0] if d.problems else f"{d.root}: capture did not finish"
        raise DumpError(f"{why} — the dump is incomplete; use --allow-partial to {verb} up to where it stops")
    return d
