"""`opdiff convert SRC DST`: any readable dump (msprobe, NumPy directory, tfdbg, opdiff) as an opdiff dump."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("convert")
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("dst", type=click.Path(path_type=Path))
@click.option("--format", "fmt", default=None, help="Source format (default: recognised from SRC).")
@click.option("--force", is_flag=True, help="Replace DST if it is an opdiff dump already.")
def convert_cmd(src: Path, dst: Path, fmt: str | None, force: bool) -> None:
    """Write every rank and step of the dump SRC as an opdiff dump at DST, keeping its provenance in meta."""
    from ..store.convert import convert

    dump, n = convert(src, dst, force=force, format=fmt)
    parts = len(dump.parts)
    click.echo(f"{src} ({dump.format}) -> {dst}: {n} records in {parts} "
               f"part{'s' if parts != 1 else ''}")


def register(cli: click.Group) -> None:
    cli.add_command(convert_cmd)
