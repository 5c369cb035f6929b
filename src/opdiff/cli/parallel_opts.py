"""--layout and --merge-ranks for compare and diagnose: a run on N ranks against one on M (docs/parallel.md).

When golden and target hold different numbers of ranks (one rank against N, TP=2 against TP=4), each
side with more than one rank is merged into its logical tensors (store/logical.py) before comparing;
`--merge-ranks` forces it, `--per-rank` keeps rank i against rank i. After the comparison the parallel
checks (compare/shards.py) name the rank and shard where a logical tensor goes wrong.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..base.errors import OpdiffError
from ..base.jsonsafe import dumps
from ..base.termsafe import safe
from ..store import Dump
from .common import open_dump


def parallel_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add --layout FILE and --merge-ranks/--per-rank to a command."""
    @click.option("--layout", "layout_file", type=click.Path(),
                  help="Layout file (YAML/JSON): record regex -> shard dim / partial / replicate, for hand-written "
                       "tensor parallelism (docs/parallel.md).")
    @click.option("--merge-ranks/--per-rank", "merge", default=None,
                  help="Merge every rank into logical tensors (default: when the two runs have different rank counts).")
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)
    return wrapper


def _ranks(d: Dump) -> int:
    return len({r for r, s in d.parts if s == d.step})


def open_sides(golden: str, target: str, rank: int | None, step: int | None, allow_partial: bool,
               layout_file: str | None, merge: bool | None, verb: str = "compare") -> tuple[Dump, Dump]:
    """The two dumps a command compares: parts as before, or every rank merged where the rank counts differ."""
    rules = None
    if layout_file:
        from ..store.layout import load_rules

        rules = load_rules(layout_file)  # a bad file is one line before any dump is read
    g = open_dump(golden, rank if merge is not True else None, step, allow_partial, verb)
    t = open_dump(target, rank if merge is not True else None, step, allow_partial, verb)
    if merge is None:
        merge = rank is None and _ranks(g) != _ranks(t)
    if not merge:
        return g, t
    from ..store.logical import merge_ranks

    return (merge_ranks(g, rules) if _ranks(g) > 1 else g), (merge_ranks(t, rules) if _ranks(t) > 1 else t)


def refuse_scheduler(g: Dump, t: Dump, scheduler: str | None) -> None:
    """--scheduler compares rank i with rank i on Dask and cannot merge ranks: one line, before any work."""
    if scheduler and (merged(g) or merged(t)):
        raise OpdiffError(f"--scheduler compares rank i with rank i and cannot merge ranks ({_ranks(g)} in "
                          f"{g.where}, {_ranks(t)} in {t.where}): drop --scheduler, or compare one part with "
                          f"--rank N --per-rank")


def merged(d: Dump) -> bool:
    """Whether a side is a merged (logical) run."""
    from ..store.logical import LogicalDump

    return isinstance(d, LogicalDump)


def parallel_check(g: Dump, t: Dump, diagnosis: Any, cmp: Any) -> Any:
    """The parallel checks for diagnose (None unless the target was merged), on the pairs of the comparison it
    made or was given."""
    from ..store.logical import LogicalDump

    if not isinstance(t, LogicalDump):
        return None
    from ..compare import compare
    from ..compare.shards import check_parallel

    results = cmp.results if cmp is not None and hasattr(cmp, "results") else compare(g, t, progress=False).results
    # (diagnose hands in the comparison it made; a dict of Dask comparisons falls back to comparing here)
    return check_parallel(t, g, results)


def print_parallel(chk: Any, t: Any) -> None:
    """The findings, origin first."""
    o = chk.origin()
    click.echo(f"parallel: {len(t.records)} logical tensors from ranks {t.ranks}; "
               f"{chk.checked_replicas} replicated checked, {chk.checked_collectives} collectives checked; "
               f"{len(chk.findings)} finding(s)")
    if o is not None:
        click.echo(f"  origin: {safe(o.line())}")
        for f in chk.findings[1:10]:
            click.echo(f"  {safe(f.line())}")


def parallel_report(g: Dump, t: Dump, results: Any, thresholds: Any, out: Path | None) -> bool:
    """Run the parallel checks when the target was merged; print the findings; write parallel.json into `out`.
    Returns True when a finding fails the run (replicas disagree, a collective mis-reduced)."""
    from ..store.logical import LogicalDump

    if not isinstance(t, LogicalDump):
        return False
    from ..base.outdir import check_replaceable, write_atomic
    from ..compare.shards import check_parallel

    chk = check_parallel(t, g, results, thresholds)
    print_parallel(chk, t)
    if out is not None:
        path = out / "parallel.json"
        check_replaceable(path)
        text = dumps(chk.to_json(), indent=2)
        write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return bool(chk.failed())
