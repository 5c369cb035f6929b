"""`opdiff diagnose GOLDEN TARGET` and `opdiff replay GOLDEN TARGET OP`: thin CLI over opdiff.diagnose / opdiff.replay.

diagnose exits 0 on pass, 1 on any other verdict, 2 on bad input. replay exits 0 when the op
could be replayed, 1 when it could not, 2 on bad input.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from ..base.errors import OpdiffError
from ..base.outdir import check_replaceable, check_writable
from ..base.termsafe import safe
from ..base.vocab import TORCH_LEVELS as LEVELS
from .common import open_dump
from .dask_opts import dask_options
from .parallel_opts import merged, open_sides, parallel_check, parallel_options, print_parallel, refuse_scheduler


def _out_file(path: str | None, force: bool) -> Path | None:
    if path is None:
        return None
    p = Path(path)
    if os.path.lexists(p) and not force:
        raise OpdiffError(f"{p}: exists (use --force to overwrite)")
    if not p.parent.is_dir():
        raise OpdiffError(f"{p.parent}: no such directory")
    check_replaceable(p)
    check_writable(p.parent)
    return p


@click.command("diagnose")
@click.argument("golden", type=click.Path())
@click.argument("target", type=click.Path())
@click.option("--map", "map_file", type=click.Path(), multiple=True,
              help="Mapping file (as for compare; repeatable): renames, fusions, msprobe layer/API mapping.")
@click.option("--json", "as_json", is_flag=True, help="Print the diagnosis as JSON (schema: docs/diagnose.md).")
@click.option("-o", "--out", "out", type=click.Path(), help="Also write the diagnosis JSON to this file.")
@click.option("--force", is_flag=True, help="Overwrite --out and --html if they exist.")
@click.option("--html", "html_file", type=click.Path(), help="Also write the visual HTML report to this file (docs/report.md).")
@click.option("--level", type=click.Choice(LEVELS), default=None, help="Diagnose only the records of this capture level.")
@click.option("--rank", type=int, default=None, help="Rank to diagnose (default: every rank).")
@click.option("--step", type=int, default=None, help="Step to diagnose (default: every step, reporting the first that diverges).")
@click.option("--replay/--no-replay", default=True, show_default=True,
              help="Confirm the culprit by replaying it on golden's inputs (needs tensor mode and torch).")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Parallel workers for the comparison.")
@click.option("--allow-partial", is_flag=True, help="Diagnose an incomplete (cut-off) dump up to where it stops.")
@dask_options
@parallel_options
def diagnose_cmd(golden, target, map_file, as_json, out, force, html_file, level, rank, step, replay, workers,
                 allow_partial, scheduler, placement, shard_mb, layout_file, merge):
    """Name the op where TARGET first goes wrong against GOLDEN, and why.

    One verdict: pass, inputs-differ, overflow, fault (with the culprit op) or drift.
    Exits 0 on pass, 1 on any other verdict, 2 on bad input.
    """
    from .. import report
    from ..diagnose import diagnose
    from ..match.mapping import load_mappings

    out_path = _out_file(out, force)
    html_path = _out_file(html_file, force)
    mapping = load_mappings(map_file)
    g, t = open_sides(golden, target, rank, step, allow_partial, layout_file, merge, "diagnose")
    refuse_scheduler(g, t, scheduler)
    cmp: Any = None
    html_cmp = None
    if scheduler:  # the comparisons on Dask (docs/scale.md), the diagnosis here
        from .dask_opts import distributed_comparisons

        tasks = out_path.with_name(out_path.name + ".tasks") if out_path is not None else None
        cmp = distributed_comparisons(g, t, scheduler=scheduler, placement=placement, shard_mb=shard_mb, tasks=tasks,
                                      rank=rank, step=step, mapping=mapping, allow_partial=allow_partial)
        html_cmp = cmp.get((g.rank, g.step))
    if html_path is not None and html_cmp is None:  # the report shows every pair: keep the comparison diagnose makes
        from ..compare import compare

        html_cmp = compare(g, t, mapping=mapping, workers=workers)
        cmp = cmp or html_cmp
    if cmp is None and merged(t):  # one comparison for the diagnosis and the parallel checks
        from ..compare import compare

        cmp = compare(g, t, mapping=mapping, workers=workers, progress=False)
    d = diagnose(g, t, mapping=mapping, comparison=cmp, replay=replay, level=level, workers=workers, rank=rank, step=step)
    if out_path is not None:
        report.write(d, "json", out_path)
    if html_path is not None:
        report.write(d, "html", html_path, comparison=html_cmp, title=f"opdiff diagnose: {g.where.name} vs {t.where.name}")
    ranks = parallel_check(g, t, d, cmp)
    if as_json:
        text = report.text(d)
        if ranks is not None:  # the rank and shard, beside the diagnosis (docs/parallel.md)
            doc = json.loads(text)
            doc["parallel"] = ranks.to_json()
            text = json.dumps(doc, indent=2)
        click.echo(text)
    else:
        report.render(d, Console(width=160), golden=str(g.where), target=str(t.where))  # render makes them terminal-safe
        if ranks is not None:
            print_parallel(ranks, t)
        for p in (out_path, html_path):
            if p is not None:
                click.echo(f"written: {safe(p)}")
    return 1 if ranks is not None and ranks.failed() else d.exit_code


@click.command("replay")
@click.argument("golden", type=click.Path())
@click.argument("target", type=click.Path())
@click.argument("op")
@click.option("--golden-op", default=None, help="The op's node name in golden, when it differs from the target's.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--rank", type=int, default=None, help="Rank (default: the first).")
@click.option("--step", type=int, default=None, help="Step (default: the first).")
@click.option("--allow-partial", is_flag=True, help="Use an incomplete (cut-off) dump.")
def replay_cmd(golden, target, op, golden_op, as_json, rank, step, allow_partial):
    """Re-execute the target's op OP on GOLDEN's inputs under the target's dtypes; compare with golden.

    OP is a node name (as `opdiff ls` and diagnose show it), a record name, or a regex matching one op.
    Supported: api and aten ops from their call lines; at module level Linear, Conv1D, Embedding and
    activations. Exits 0 when the op was replayed, 1 when it could not be, 2 on bad input.
    """
    from .. import report
    from ..replay import replay

    g = open_dump(golden, rank, step, allow_partial, "diagnose")
    t = open_dump(target, rank, step, allow_partial, "diagnose")
    res = replay(g, t, op, golden_node=golden_op)
    if as_json:
        click.echo(report.text(res))
    else:
        report.render(res, Console(width=160))
    return 0 if res.status == "ok" else 1


def register(cli: click.Group) -> None:
    cli.add_command(diagnose_cmd)
    cli.add_command(replay_cmd)
