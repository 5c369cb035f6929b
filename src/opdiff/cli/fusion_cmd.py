"""`opdiff capture-onnx` and `opdiff fusion onnx|torch|ge`: graph-engine capture and finding the fusion at fault.

Exit status of `fusion`: 0 the fused run agrees with the unfused one, 1 it diverges (the pass at
fault is named when the bisection finds it), 2 bad input. See docs/fusion.md.
"""

from __future__ import annotations

import click
from rich.console import Console

from ..base.errors import OpdiffError


def _onnx_options(f):
    f = click.option("--session-config", "session_config", multiple=True, metavar="KEY=VALUE",
                     help="ORT session config entry, e.g. optimization.enable_gelu_approximation=1 (repeatable).")(f)
    f = click.option("--disable-optimizer", "disabled", multiple=True, metavar="NAME",
                     help="Graph transformer or rule to switch off by name (repeatable).")(f)
    f = click.option("--opt-level", type=click.Choice(["disable", "basic", "extended", "all"]), default="all",
                     show_default=True, help="ORT graph optimization level.")(f)
    f = click.option("--inputs", required=True, type=click.Path(), help="Model inputs: .npz of arrays by input name.")(f)
    return f


def _need_onnxruntime() -> None:
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        raise OpdiffError("onnx and onnxruntime are needed: pip install 'opdiff[onnx]'") from None


@click.command("capture-onnx")
@click.argument("model", type=click.Path())
@_onnx_options
@click.option("-o", "--out", "out", required=True, type=click.Path(), help="Dump directory to write.")
@click.option("--mode", type=click.Choice(["tensor", "stats"]), default="tensor", show_default=True)
@click.option("--switches", "switch_file", type=click.Path(), help="Switch file from `opdiff fusion`: passes to turn off.")
@click.option("--level", type=click.Choice(["graph", "module"]), default="graph", show_default=True,
              help="graph: every node; module: PyTorch module boundaries of an exported model (vs a torch golden).")
@click.option("--force", is_flag=True, help="Overwrite an existing dump.")
def capture_onnx_cmd(model, inputs, opt_level, disabled, session_config, out, mode, switch_file, level, force):
    """Run MODEL (.onnx) in ONNX Runtime on INPUTS and record every node output of the graph it runs."""
    _need_onnxruntime()
    from ..capture.onnxruntime import capture_onnx, parse_config

    config = parse_config(session_config)
    disabled = list(disabled)
    if switch_file:
        from ..fusion.switchfile import read_switches

        doc = read_switches(switch_file, "onnxruntime")
        disabled += doc.get("disabled_optimizers") or []
        config = {**(doc.get("session_config") or {}), **config}
    meta = capture_onnx(model, inputs, out, opt_level=opt_level, disabled_optimizers=disabled,
                        session_config=config, mode=mode, level=level, overwrite=force)
    obs = meta["observed"]
    click.echo(f"captured {obs['tensors']} tensors of {obs['nodes']} nodes ({meta['graph']['fused_nodes']} fused) "
               f"-> {out}")
    click.echo(f"transformers fired: {', '.join(meta['transformers_fired']) or '(none)'}")
    if level == "module":
        mods = meta["modules"]
        click.echo(f"module boundaries: {mods['modules']} modules, {len(mods['not_observable'])} tensors not observable "
                   "(meta.json modules.not_observable)")
    if not obs["outputs_bitwise_equal"]:
        click.echo(f"warning: observing changed outputs {', '.join(obs['changed_outputs'])}", err=True)
        return 1
    return 0


@click.group("fusion")
def fusion_group() -> None:
    """Find the fusion at fault: fusion off (golden) against on (target), then bisect the engine's passes."""


@fusion_group.command("onnx")
@click.argument("model", type=click.Path())
@_onnx_options
@click.option("-o", "--out", "out", required=True, type=click.Path(), help="Output directory.")
@click.option("--preset", default="default", show_default=True, help="Verdict rule preset.")
@click.option("--force", is_flag=True, help="Write into an existing non-empty output directory.")
def fusion_onnx_cmd(model, inputs, opt_level, disabled, session_config, out, preset, force):
    """ORT: MODEL with optimization off (golden) against OPT_LEVEL (target); bisect the transformers that fired."""
    _need_onnxruntime()
    from .. import report
    from ..capture.onnxruntime import parse_config
    from ..fusion.ort import fusion_onnx

    res = fusion_onnx(model, inputs, out, opt_level=opt_level, disabled=list(disabled),
                      session_config=parse_config(session_config), thresholds=preset, force=force)
    report.render(res, Console(width=160))
    return 0 if res.agrees else 1


@fusion_group.command("torch")
@click.argument("entry")
@click.option("-o", "--out", "out", required=True, type=click.Path(), help="Output directory.")
@click.option("--regions", default="children", show_default=True,
              help="Submodules to compile, comma-separated paths, or 'children' (every direct child).")
@click.option("--preset", default="default", show_default=True, help="Verdict rule preset.")
@click.option("--force", is_flag=True, help="Write into an existing non-empty output directory.")
def fusion_torch_cmd(entry, out, regions, preset, force):
    """Eager (golden) against torch.compile/Inductor (target) of the (model, inputs) ENTRY builds
    (MODULE:FUNCTION or SCRIPT.py:FUNCTION); bisect the regions, then Inductor's switches."""
    from .. import report
    from ..capture.entry import load_entry
    from ..fusion.inductor import fusion_torch

    model, inputs = load_entry(entry)
    paths = regions if regions == "children" else [p.strip() for p in regions.split(",") if p.strip()]
    res = fusion_torch(model, inputs, out, regions=paths, thresholds=preset, force=force)
    report.render(res, Console(width=160))
    return 0 if res.agrees else 1


@fusion_group.command("ge")
@click.argument("golden", type=click.Path())
@click.argument("target", type=click.Path())
@click.option("--preset", default="default", show_default=True, help="Verdict rule preset.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--allow-partial", is_flag=True, help="Accept a dump with damaged or cut-off files.")
def fusion_ge_cmd(golden, target, preset, as_json, allow_partial):
    """Ascend GE: the fused run TARGET (GE dump + graph JSON) against GOLDEN (fusion-off GE dump, or the
    framework's .npy dump); name the first fused op that breaks and the golden ops it replaced."""
    from .. import report
    from ..fusion.ge import fusion_ge
    from .common import open_dump

    res = fusion_ge(open_dump(golden, None, None, allow_partial), open_dump(target, None, None, allow_partial),
                    thresholds=preset)
    if as_json:
        click.echo(report.text(res))
    else:
        report.render(res, Console(width=160))
    return 1 if res.first_broken is not None or res.diagnosis.verdict not in ("pass", "drift") else 0


def register(cli: click.Group) -> None:
    cli.add_command(capture_onnx_cmd)
    cli.add_command(fusion_group)
