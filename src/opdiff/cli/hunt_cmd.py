"""`opdiff hunt SCRIPT:golden SCRIPT:target -o OUT`: tiered capture of two entry points (docs/scale.md).

Exit status: 0 the runs agree, 1 a culprit or other verdict, 2 bad input or a run that does not
reproduce itself when re-run.
"""

from __future__ import annotations

import click

from ..base.vocab import TORCH_LEVELS as LEVELS


@click.command("hunt")
@click.argument("golden")
@click.argument("target")
@click.option("-o", "--out", "out", required=True, type=click.Path(), help="Output directory (dumps of both passes, reports).")
@click.option("--level", type=click.Choice(LEVELS), default="module", show_default=True, help="Capture level of pass 1.")
@click.option("--detail-level", type=click.Choice(LEVELS), default=None, help="Capture level of pass 2 (default: --level).")
@click.option("--stats-mode", type=click.Choice(["stats", "hash"]), default="stats", show_default=True,
              help="What pass 1 keeps of every tensor.")
@click.option("--widen", "widen_by", type=click.IntRange(min=0), default=0, show_default=True,
              help="Capture this many parent modules up from the suspect in pass 2.")
@click.option("--replay/--no-replay", default=True, show_default=True, help="Confirm the culprit by replay.")
@click.option("--patch/--no-patch", default=True, show_default=True,
              help="Confirm the verdict by re-running both functions with module and op outputs exchanged.")
@click.option("--seed", type=int, default=0, show_default=True, help="RNG seed each patched re-run starts from.")
@click.option("--force", is_flag=True, help="Replace hunt's outputs in an existing OUT.")
@click.option("--json", "as_json", is_flag=True, help="Print the hunt report as JSON.")
def hunt_cmd(golden, target, out, level, detail_level, stats_mode, widen_by, replay, patch, seed, force, as_json):
    """Run GOLDEN and TARGET (SCRIPT.py:FUNCTION or MODULE:FUNCTION, each called as fn(capture)) twice:
    statistics of the whole model, then tensors of the suspect region only; diagnose; then confirm the
    verdict by patching (re-running both with the culprit's outputs exchanged; --no-patch skips it).

    Exits 0 when the runs agree, 1 on any other verdict, 2 on bad input or a run that does not repeat.
    """
    from rich.console import Console

    from .. import report
    from ..capture.entry import load_function
    from ..hunting import hunt

    g, t = load_function(golden), load_function(target)
    res = hunt(g, t, out, level=level, detail_level=detail_level, stats_mode=stats_mode, widen_by=widen_by,
               replay=replay, patch=patch, force=force, seed=seed)
    if as_json:
        click.echo(report.text(res))
    else:
        report.render(res, Console(width=160))
    return res.exit_code


def register(cli: click.Group) -> None:
    cli.add_command(hunt_cmd)
