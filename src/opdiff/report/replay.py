"""Console report of one replayed op (`opdiff replay`): inputs' dtypes, arguments that differ, each output's errors."""

from __future__ import annotations

from rich.console import Console

from ..base import numfmt
from ..base.termsafe import safe
from ..metrics.names import COSINE, column
from ..replay.result import ReplayResult

COMPARED = (("replay_vs_golden", "replay vs golden"), ("replay_vs_target", "replay vs target"),
            ("target_vs_golden", "target vs golden"))


def print_replay(res: ReplayResult, console: Console | None = None) -> None:
    """What replaying the op showed, or why it could not run."""
    c = console or Console(width=160)
    c.print(f"[bold]replay[/] {safe(res.node)}  ({safe(res.level)} op {safe(res.op or '?')} in {safe(res.module or '<root>')})")
    if res.status != "ok":
        c.print(f"[yellow]could not replay:[/] {safe(res.reason)}")
        return
    if res.input_dtypes:
        c.print("inputs: golden data cast to the target's dtypes " +
                ", ".join(f"{k}={v}" for k, v in res.input_dtypes.items()))
    for d in res.arg_differences:
        c.print(f"argument {safe(d['arg'])}: golden {safe(repr(d['golden']))}, target {safe(repr(d['target']))}")
    for o in res.outputs:
        parts = [f"output {o['pos']}"]
        for key, label in COMPARED:
            if o.get(key):
                parts.append(f"{label}: {numfmt.num(o[key]['error_units'], 4)} units "
                             f"(cos {numfmt.num(o[key][column(COSINE)], 9)})")
        c.print("  " + " | ".join(parts))
    c.print(f"[bold]conclusion:[/] {safe(res.conclusion)}")


__all__ = ["print_replay"]
