"""`opdiff import FORMAT SRC OUT`: turn a foreign dump into an opdiff dump (today: tfdbg)."""

from __future__ import annotations

from pathlib import Path

import click

from ..base.errors import OpdiffError
from ..store.export import write_as_opdiff


@click.group(name="import")
def import_group() -> None:
    """Convert a dump made by another tool into an opdiff dump."""


@import_group.command(name="tfdbg")
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="replace OUT if it is an opdiff dump already")
def import_tfdbg(src: Path, out: Path, force: bool) -> None:
    """Read the tfdbg v2 dump root SRC (tf.debugging.experimental.enable_dump_debug_info) and write OUT."""
    from ..store.readers import tfdbg

    if not src.exists():
        raise OpdiffError(f"{src}: no such directory")
    if not tfdbg.recognise(src):
        raise OpdiffError(f"{src}: not a tfdbg dump root (no *.execution, *.graphs, ... files)")
    dump = tfdbg.open_dump(src)
    n = write_as_opdiff(dump, out, force=force)
    click.echo(f"{src} -> {out}: {n} records (tfdbg {', '.join(dump.meta['tensor_debug_mode']) or 'no tensors'})")


def register(cli: click.Group) -> None:
    cli.add_command(import_group)
