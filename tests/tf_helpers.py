"""Shared by the TensorFlow tests: the CLI (in a subprocess, or in-process for `import`) and quiet TF logs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

OPDIFF = str(Path(sys.executable).with_name("opdiff"))


def run_opdiff(*args: object) -> subprocess.CompletedProcess:
    """Run the real `opdiff` command."""
    return subprocess.run([OPDIFF, *map(str, args)], capture_output=True, text=True, timeout=300)


def opdiff_inproc(capsys, *args: object) -> tuple[int, str, str]:
    """Run the CLI in this process (exit code, stdout, stderr); registers `import` until main finds it itself."""
    from opdiff.cli import import_cmd
    from opdiff.cli.main import cli, main

    if "import" not in cli.commands:
        import_cmd.register(cli)
    capsys.readouterr()
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err
