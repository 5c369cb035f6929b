"""`opdiff shell`: the interactive shell over one dump or a golden/target pair."""

from __future__ import annotations

import click

from ..store import load


@click.command("shell")
@click.argument("golden", type=click.Path())
@click.argument("target", type=click.Path(), required=False)
@click.option("--map", "map_file", type=click.Path(), help="Mapping file (renames, fusions), as for compare.")
@click.option("--rank", type=int, default=None, help="Rank to open (default: the first).")
@click.option("--step", type=int, default=None, help="Step to open (default: the first).")
@click.option("-c", "--command", "commands", multiple=True,
              help="Run this shell command and exit (repeatable), e.g. -c 'ls --op Linear' -c 'pt #3'.")
def shell_cmd(golden, target, map_file, rank, step, commands):
    """Explore GOLDEN (and TARGET): ls, ni (node info), pt (print tensor), cmp, compare, fails, diag."""
    from ..shell import run_shell

    g = load(golden, rank=rank, step=step)
    t = load(target, rank=rank, step=step) if target else None
    mapping = None
    if map_file:
        from ..match import load_mapping

        mapping = load_mapping(map_file)
    run_shell(g, t, mapping=mapping, commands=list(commands) or None)


def register(cli: click.Group) -> None:
    cli.add_command(shell_cmd)
