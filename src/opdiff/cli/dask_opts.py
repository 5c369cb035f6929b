"""--scheduler for compare and diagnose: the same commands on Dask distributed (docs/scale.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..base.errors import OpdiffError
from ..base.outdir import claim_dir

if TYPE_CHECKING:
    from ..compare.run import Comparison
    from ..store import Dump

OPTIONS = [
    click.option("--scheduler", default=None, metavar="ADDRESS|local:N",
                 help="Run on Dask distributed: a scheduler address, or local:N to start N worker processes here."),
    click.option("--placement", type=click.Path(), default=None,
                 help="With --scheduler: YAML/JSON `ranks: {0: host, \"2-3\": host}` saying which host holds each rank's files."),
    click.option("--shard-mb", type=click.IntRange(min=1), default=256, show_default=True,
                 help="With --scheduler: MiB of tensor data per task."),
]


def dask_options(fn):
    """Add --scheduler, --placement and --shard-mb to a command."""
    for opt in reversed(OPTIONS):
        fn = opt(fn)
    return fn


def claim_resumable(out: Path, force: bool) -> None:
    """OUT may hold an interrupted run's task results (no reports yet): that run is resumed."""
    from ..compare.distributed import TASK_DIR

    interrupted = (out / TASK_DIR).is_dir() and not any(p.name != TASK_DIR for p in out.iterdir())
    if not interrupted:
        claim_dir(out, force, hint="use --force to write into it")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OpdiffError(f"{out}: cannot create output directory: {exc.strerror or exc}") from None


def run_compare(golden: str, target: str, out: Path, *, scheduler: str, placement: str | None, shard_mb: int,
                fmts: list[str], top: int, allow_unmatched: bool, **kw: Any) -> int:
    """`opdiff compare --scheduler`: every selected (rank, step) part, reports per part."""
    from .. import report
    from ..compare.distributed import compare_distributed

    claim_resumable(out, kw.pop("force"))
    run = compare_distributed(golden, target, out, scheduler=scheduler, placement=placement,
                              shard_bytes=shard_mb << 20, **kw)
    for (rank, step), cmp in sorted(run.comparisons.items()):
        where = out if len(run.comparisons) == 1 and not run.failed else out / f"rank{rank}-step{step}"
        where.mkdir(exist_ok=True)
        paths = [report.output_path(where, f, "compare") for f in fmts]
        report.render(cmp, top=top, outputs=[str(p) for p in paths], allow_unmatched=allow_unmatched)
        for f, path in zip(fmts, paths):
            report.write(cmp, f, path)
    click.echo(f"dask: {len(run.comparisons)} parts compared on {run.workers} workers in {run.elapsed:.1f} s; "
               f"{len(run.computed)} tasks computed, {len(run.reused)} reused from {out}")
    for _part, why in sorted(run.failed.items()):
        click.echo(f"opdiff: not compared: {why}", err=True)
    return 0 if run.passed(allow_unmatched) else 1


def distributed_comparisons(golden: Dump, target: Dump, *, scheduler: str, placement: str | None, shard_mb: int,
                            tasks: Path | None, rank: int | None, step: int | None,
                            **kw: Any) -> dict[tuple[int, int], Comparison]:
    """Every (rank, step) part's Comparison (those of `rank`/`step` when given), computed on Dask, for
    diagnose; task results in `tasks` (a temporary directory without it). A part not compared is an error."""
    import tempfile

    from ..compare.distributed import compare_distributed

    with tempfile.TemporaryDirectory(prefix="opdiff-tasks-") as tmp:
        run = compare_distributed(str(golden.where), str(target.where), tasks or Path(tmp), scheduler=scheduler,
                                  placement=placement, shard_bytes=shard_mb << 20, rank=rank, step=step, **kw)
    if run.failed:
        raise OpdiffError("not compared: " + next(iter(run.failed.values())))
    for (r, s), cmp in run.comparisons.items():  # the diagnosis reads the dumps here, as opened by the user
        same = (r, s) == (golden.rank, golden.step)
        cmp.golden, cmp.target = (golden, target) if same else (golden.with_part(r, s), target.with_part(r, s))
    return run.comparisons
