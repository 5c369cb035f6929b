"""`opdiff ls` and `opdiff info`: look inside a dump without any framework installed."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from ..base.errors import DumpError, OpdiffError
from ..base.record import Record
from ..base.termsafe import plain, safe
from ..store import load
from ..store.format import numpy_dtype


def fmt_num(x: float | int | None) -> str:
    """Short, aligned rendering of a statistic."""
    if x is None:
        return "-"
    if isinstance(x, int):
        return str(x)
    return f"{x:.6g}"


def record_row(r: Record) -> list[str]:
    s = r.stats
    return [
        str(r.index),
        safe(r.name),
        safe(r.op),
        safe(r.dtype),
        "x".join(map(str, r.shape)) or "()",
        fmt_num(s.min if s else None),
        fmt_num(s.max if s else None),
        fmt_num(s.mean if s else None),
        fmt_num(s.norm if s else None),
        "" if not s or not (s.nan or s.posinf or s.neginf) else f"nan={s.nan} inf={s.posinf + s.neginf}",
    ]


@click.command("ls")
@click.argument("dump", type=click.Path())
@click.option("--name", "name_re", help="Regex on the record name.")
@click.option("--op", "op_re", help="Regex on the op or module type.")
@click.option("--module", "module_re", help="Regex on the module path.")
@click.option("--rank", type=int, default=None, help="Rank to list (default: the first).")
@click.option("--step", type=int, default=None, help="Step to list (default: the first).")
@click.option("--limit", type=int, default=0, help="Show at most this many records (0: all).")
@click.option("--names-only", is_flag=True, help="Print only the record names, one per line.")
def ls_cmd(dump, name_re, op_re, module_re, rank, step, limit, names_only):
    """List the records of DUMP: name, type, dtype, shape and statistics."""
    d = load(dump, rank=rank, step=step)
    if limit < 0:
        raise OpdiffError(f"--limit must be 0 or more, not {limit}")
    recs = d.select(name=name_re, op=op_re, module=module_re)
    if limit:
        recs = recs[:limit]
    if names_only:
        for r in recs:
            click.echo(plain(r.name))
        return
    console = Console(width=200)
    table = Table(title=f"{safe(d.root)}  rank {d.rank} step {d.step}", show_lines=False)
    for col in ("#", "name", "op", "dtype", "shape", "min", "max", "mean", "norm", "special"):
        table.add_column(col, overflow="fold")
    for r in recs:
        table.add_row(*record_row(r))
    console.print(table)
    for p in d.problems:
        console.print(f"[yellow]warning:[/] {safe(p)}")
    _fail_if_partial(d.problems)


def _fail_if_partial(problems: list[str]) -> None:
    """After showing what is readable, a cut-off or unfinished dump is an error (exit 2) for scripts."""
    if problems:
        raise DumpError("; ".join(dict.fromkeys(problems)))


@click.command("info")
@click.argument("dump", type=click.Path())
def info_cmd(dump):
    """Print the meta data of DUMP and totals per part, level, direction and role."""
    d = load(dump)
    console = Console(width=200)
    meta = d.meta
    for key in ("format_version", "opdiff_version", "framework", "framework_version", "model", "device", "default_dtype",
                "seed", "num_threads", "level", "mode", "backward", "steps", "include", "exclude", "rank", "world_size",
                "created", "finished", "complete", "host", "command"):
        if key in meta:
            console.print(f"[bold]{key}[/]: {safe(meta[key])}")
    problems: list[str] = []
    for rank, step in d.parts:
        part = d if (rank, step) == (d.rank, d.step) else d.with_part(rank, step)
        counts: dict[str, int] = {}
        nbytes = 0
        for r in part.records:
            counts[f"{r.level}/{r.direction}/{r.role}"] = counts.get(f"{r.level}/{r.direction}/{r.role}", 0) + 1
            if r.data is not None:
                nbytes += r.numel * numpy_dtype(r.dtype).itemsize
        nodes = len({r.node for r in part.records})
        console.print(f"[bold]rank {rank} step {step}[/]: {len(part.records)} records, {nodes} op calls, "
                      f"{nbytes / 1e6:.1f} MB of tensor data")
        for k in sorted(counts):
            console.print(f"  {safe(k)}: {counts[k]}")
        for p in part.problems:
            console.print(f"  [yellow]warning:[/] {safe(p)}")
        problems.extend(part.problems)
    _fail_if_partial(problems)


def register(cli: click.Group) -> None:
    cli.add_command(ls_cmd)
    cli.add_command(info_cmd)
