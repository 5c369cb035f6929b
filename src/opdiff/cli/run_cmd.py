"""`opdiff run [options] -o DUMP -- COMMAND ...`: capture an unmodified training script.

The command runs with the OPDIFF_RUN_* environment and opdiff's bootstrap on PYTHONPATH, so every
Python process it starts (torchrun's ranks too) captures its model into DUMP (docs/capture.md,
"Capturing an unmodified script"). The command's exit code is passed through.

`opdiff run` holds one run, and only as a command it launches: it cannot re-execute golden and target
side by side, so a diagnosis of its dumps rests on their statistics (and replay). Patch confirmation
needs both runs as code: `opdiff hunt` or `opdiff.diagnose_models` (docs/diagnose.md).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import click

from ..base.errors import OpdiffError
from ..base.vocab import TORCH_LEVELS as LEVELS
from ..capture import runenv

MODES = ("tensor", "stats", "hash")
NO_PATCH = ("one run, launched as a command: a diagnosis of this dump is confirmed by statistics (and replay) only; "
            "to confirm it by patching, give both runs as code to `opdiff hunt` or opdiff.diagnose_models")


def _wait(proc: subprocess.Popen[bytes]) -> int:
    """Wait for the command; Ctrl-C reaches it directly, so keep waiting while it shuts down and closes its dump."""
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--out", "out", required=True, type=click.Path(path_type=Path), help="The dump directory to write.")
@click.option("--level", type=click.Choice(LEVELS), default="module", show_default=True, help="Capture level.")
@click.option("--mode", type=click.Choice(MODES), default="tensor", show_default=True, help="What each record keeps.")
@click.option("--steps", default=None, help='Steps to capture ("0,2", "0-3,8"); default: every step (or OPDIFF_STEPS).')
@click.option("--backward", is_flag=True, help="Also capture the backward pass.")
@click.option("--include", default=None, help="Regex: only modules/ops whose path or name matches.")
@click.option("--exclude", default=None, help="Regex: leave out modules/ops whose path or name matches.")
@click.option("--model", "model", default=None,
              help="Regex on the class name of the model to capture (default: the first root module with parameters).")
@click.option("--when-loss-above", "loss_above", type=float, default=None,
              help="Capture a step only when the loss of the step before was above this (or not finite).")
@click.option("--force", is_flag=True, help="Replace DUMP if it is an opdiff dump already.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run_cmd(out: Path, level: str, mode: str, steps: str | None, backward: bool, include: str | None,
            exclude: str | None, model: str | None, loss_above: float | None, force: bool, command: tuple[str, ...]) -> int:
    """Run COMMAND (e.g. `python train.py ARGS`) and capture the model it trains into DUMP, unmodified.

    Steps follow the optimizer's step() calls, ranks follow torch.distributed. Exits with COMMAND's exit code.
    """
    runenv.check_steps(steps)
    for value, what in ((include, "--include"), (exclude, "--exclude"), (model, "--model")):
        runenv.check_regex(value, what)
    existed = out.exists()
    runenv.prepare_dump(out, force)
    options = {runenv.ENV_LEVEL: level, runenv.ENV_MODE: mode, runenv.ENV_STEPS: steps,
               runenv.ENV_BACKWARD: "1" if backward else "0", runenv.ENV_INCLUDE: include,
               runenv.ENV_EXCLUDE: exclude, runenv.ENV_MODEL: model,
               runenv.ENV_WHEN_LOSS_ABOVE: None if loss_above is None else repr(loss_above)}
    try:
        proc = subprocess.Popen(list(command), env=runenv.child_env(out, options))
    except OSError as exc:
        if not existed:
            out.rmdir()
        raise OpdiffError(f"cannot start {command[0]!r}: {exc.strerror or exc}") from None
    rc = _wait(proc)
    rc = 128 - rc if rc < 0 else rc  # killed by signal N: the shell's 128 + N
    meta = runenv.assemble(out, list(command), rc)
    if meta is None:
        click.echo(f"opdiff run: no model was captured (no module with parameters was called); {out} is empty", err=True)
    else:
        state = "complete" if meta.get("complete") else "incomplete"
        click.echo(f"opdiff run: {out}: {meta.get('model', '?')}, steps {meta.get('steps_captured', [])}, "
                   f"{meta.get('records', 0)} records ({state}); command exited {rc}", err=True)
        click.echo(f"opdiff run: {NO_PATCH}", err=True)
    return rc


def register(cli: click.Group) -> None:
    cli.add_command(run_cmd)
