"""Shared by tests/test_trust_*.py: real captured dumps (once per session) and the CLI run in-process."""

from __future__ import annotations

import io
import shutil
import signal
import sys
import traceback
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from opdiff.cli.main import main

TIME_LIMIT_S = 60  # any one command on a tiny dump; a hang shows as a failure, not a stuck suite


def capture_tiny(path: Path, model: str = "gpt2", mode: str = "tensor", level: str = "module", seed: int = 0) -> Path:
    """A tiny zoo model captured for real (one layer, width 16)."""
    import torch

    import opdiff
    from opdiff.testing import zoo

    m, x = zoo.build(model, seed=seed, layers=1, width=16, heads=2, seq=4, batch=1, vocab=32)
    with opdiff.capture(m, path, mode=mode, level=level), torch.no_grad():
        m(**x)
    return path


@dataclass
class Run:
    code: int
    out: str
    err: str
    tb: str  # a traceback, when the command raised something other than SystemExit

    @property
    def text(self) -> str:
        return self.out + self.err


class Hang(Exception):
    pass


@contextmanager
def time_limit(seconds: int):
    def on_alarm(signum, frame):
        raise Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_cli(*args: str, stdin: str = "") -> Run:
    """`opdiff ARGS` in this process (main() as the console script runs it), under a time limit."""
    out, err = io.StringIO(), io.StringIO()
    code, tb = 0, ""
    old_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with redirect_stdout(out), redirect_stderr(err), time_limit(TIME_LIMIT_S):
            main([str(a) for a in args])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except Hang:
        raise
    except BaseException:
        tb = traceback.format_exc()
        code = -1
    finally:
        sys.stdin = old_stdin
    return Run(code, out.getvalue(), err.getvalue(), tb)


def copy_dump(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` (not following links) with its size and mtime, to see what a command wrote."""
    out = {}
    for p in root.rglob("*"):
        try:
            st = p.lstat()
        except OSError:
            continue
        out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out
