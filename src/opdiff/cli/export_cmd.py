"""`opdiff export-onnx ENTRY -o OUT`: a PyTorch model to ONNX, its inputs, and its PyTorch golden (docs/fusion.md)."""

from __future__ import annotations

import click


@click.command("export-onnx")
@click.argument("entry")
@click.option("-o", "--out", "out", required=True, type=click.Path(), help="Output directory.")
@click.option("--opset", default=17, show_default=True, type=int, help="ONNX opset.")
@click.option("--golden/--no-golden", default=True, show_default=True,
              help="Also capture the PyTorch run at module level (OUT/golden).")
@click.option("--force", is_flag=True, help="Write into an existing non-empty output directory.")
def export_onnx_cmd(entry, out, opset, golden, force):
    """Export the model that ENTRY (MODULE:FUNCTION or SCRIPT.py:FUNCTION, returning (model, inputs)) builds."""
    from ..capture.entry import load_entry
    from ..capture.onnxruntime.export import export_pair
    from .fusion_cmd import _need_onnxruntime

    _need_onnxruntime()
    model, inputs = load_entry(entry)
    paths = export_pair(model, inputs, out, opset=opset, golden=golden, force=force)
    for what, p in paths.items():
        click.echo(f"{what}: {p}")
    click.echo(f"next: opdiff capture-onnx {paths['model']} --inputs {paths['inputs']} --level module -o TARGET")
    return 0


def register(cli: click.Group) -> None:
    cli.add_command(export_onnx_cmd)
