"""`opdiff explorer GOLDEN TARGET -o OUT`: Model Explorer overlays (cosine, error in units, verdict)."""

from __future__ import annotations

from pathlib import Path

import click

from ..base.errors import OpdiffError
from ..base.outdir import claim_dir
from .common import open_dump


def _keys(graph: str | None, records) -> tuple[dict[str, str] | None, str]:
    """Node-id keys for the overlays and a line saying what they are."""
    if graph is None:
        return None, "keys: the dump's node names (ONNX node names for ONNX Runtime dumps; give --graph for torch)"
    if not graph.endswith(".pt2"):
        raise OpdiffError(f"--graph {graph}: give a torch.export program saved with torch.export.save (.pt2)")
    from ..capture.torch.export_names import fx_keys, load_program

    keys = fx_keys(load_program(graph), records)
    return keys, f"keys: FX node names of {graph} ({len(keys)} graph nodes carry data)"


def _open(graph: str | None, files: list[Path]) -> None:
    """Start Model Explorer with the graph and the overlays (needs the `explorer` extra)."""
    try:
        import model_explorer
    except ImportError:
        raise OpdiffError("--open needs Model Explorer: pip install 'opdiff[explorer]'") from None
    if graph is None:
        raise OpdiffError("--open needs --graph (the model to show)")
    from ..capture.torch.export_names import load_program

    config = model_explorer.config().add_model_from_pytorch(Path(graph).stem, exported_program=load_program(graph))
    for f in files:
        config.add_node_data_from_path(str(f))
    model_explorer.visualize_from_config(config)


@click.command("explorer")
@click.argument("golden", type=click.Path())
@click.argument("target", type=click.Path())
@click.option("-o", "--out", "out", required=True, type=click.Path(), help="Directory for the overlay files.")
@click.option("--graph", type=click.Path(), help="The model's torch.export program (.pt2): keys become its FX node names.")
@click.option("--map", "map_file", type=click.Path(), help="Mapping file (renames, fusions), as for compare.")
@click.option("--rank", type=int, default=None, help="Rank (default: the first).")
@click.option("--step", type=int, default=None, help="Step (default: the first).")
@click.option("--force", is_flag=True, help="Write into an existing non-empty output directory.")
@click.option("--open", "open_", is_flag=True, help="Then open the graph with the overlays in Model Explorer.")
def explorer_cmd(golden, target, out, graph, map_file, rank, step, force, open_):
    """Write Model Explorer node-data overlays (cosine, error_units, verdict) of TARGET against GOLDEN to OUT."""
    from ..compare import compare
    from ..match.mapping import load_mapping
    from ..report.explorer import write_overlays

    out_dir = Path(out)
    claim_dir(out_dir, force, hint="use --force to write into it")
    mapping = load_mapping(map_file) if map_file else None
    g = open_dump(golden, rank, step, False, "explorer")
    t = open_dump(target, rank, step, False, "explorer")
    keys, what = _keys(graph, t.records)
    cmp = compare(g, t, mapping=mapping)
    files = write_overlays(cmp, out_dir, keys)
    click.echo(what)
    click.echo("written: " + "  ".join(str(f) for f in files))
    if open_:
        _open(graph, files)
    return 0


def register(cli: click.Group) -> None:
    cli.add_command(explorer_cmd)
