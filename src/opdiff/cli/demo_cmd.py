"""`opdiff demo`: capture, compare and diagnose a real transformer whose target carries a secret fault."""

from __future__ import annotations

import click

from ..testing.zoo import BUILDERS


@click.command("demo")
@click.option("-o", "--out", "out", default="opdiff-demo", show_default=True, type=click.Path(),
              help="Directory for the dumps and reports.")
@click.option("--force", is_flag=True, help="Replace the demo's earlier outputs in --out.")
@click.option("--model", type=click.Choice(sorted(BUILDERS)), default="gpt2", show_default=True,
              help="Architecture from opdiff.testing.zoo.")
@click.option("--level", type=click.Choice(["module", "api", "aten"]), default="aten", show_default=True,
              help="Capture level.")
@click.option("--fault", default=None, help="Inject this fault instead of a secret random one (see opdiff.testing.faults).")
@click.option("--seed", type=int, default=None, help="Seed of the secret pick (each run prints its own), to repeat a demo.")
@click.option("--benign", is_flag=True, help="Draw a harmless change (bf16 autocast, a correct fused kernel ...) instead of a fault.")
def demo_cmd(out, force, model, level, fault, seed, benign):
    """Run golden and a faulty target of a real model, then capture, compare and diagnose them.

    The fault is picked at random (a harmless change with --benign) and revealed after the
    diagnosis; the seed is printed so the same draw can be repeated with --seed. Exits 0 when the diagnosis
    found it, 1 when it did not, 2 on bad input.
    """
    import shutil

    from rich.console import Console

    from ..demo import run_demo

    console = Console(width=max(120, shutil.get_terminal_size((120, 40)).columns))
    res = run_demo(out, model=model, level=level, force=force, fault=fault, seed=seed, benign=benign,
                   console=console)
    return 0 if res.found else 1


def register(cli: click.Group) -> None:
    cli.add_command(demo_cmd)
