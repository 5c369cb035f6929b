"""`opdiff replicas RUN`: copies that should be bitwise equal across ranks, checked without a golden.

Data-parallel parameters and gradients, and every record a DTensor layout or a layout file declares
replicated (docs/parallel.md). Exit status: 0 every copy agrees, 1 a rank's copy differs, 2 bad input.
"""

from __future__ import annotations

import click

from ..base.jsonsafe import dumps
from ..base.termsafe import safe
from .common import open_dump


@click.command("replicas")
@click.argument("run", type=click.Path())
@click.option("--layout", "layout_file", type=click.Path(), help="Layout file (YAML/JSON) declaring replicated records.")
@click.option("--match", "pattern", default=None, help="Regex on record names to check where nothing is declared "
                                                        "(default: parameters and their gradients).")
@click.option("--step", type=int, default=None, help="Step to check (default: the first).")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.option("--allow-partial", is_flag=True, help="Check an incomplete (cut-off) dump up to where it stops.")
def replicas_cmd(run, layout_file, pattern, step, as_json, allow_partial):
    """Check that every rank of RUN holds the same copy of what should be replicated."""
    import re

    from ..base.errors import OpdiffError
    from ..compare.shards import check_replicas
    from ..store.layout import load_rules
    from ..store.logical import merge_ranks

    if pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OpdiffError(f"--match: bad regex {pattern!r} ({exc})") from None
    rules = load_rules(layout_file) if layout_file else None
    dump = merge_ranks(open_dump(run, None, step, allow_partial, "check"), rules)
    chk = check_replicas(dump, pattern)
    if as_json:
        click.echo(dumps(chk.to_json(), indent=2))
    else:
        click.echo(f"replicas: ranks {dump.ranks}, {chk.checked_replicas} replicated record(s) checked, "
                   f"{len(chk.findings)} disagree")
        for f in chk.findings[:20]:
            click.echo(f"  {safe(f.line())}")
    return 1 if chk.findings else 0


def register(cli: click.Group) -> None:
    cli.add_command(replicas_cmd)
