"""The shell forgives mistakes, completes names, keeps its history, shows cosines near 1 and call arguments."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from opdiff import load
from opdiff.shell import Session, Shell, complete_names
from opdiff.store.format import node_name, record_name
from opdiff.testing.synthetic import OpRun

OPDIFF = [sys.executable, "-m", "opdiff"]


def _write(path: Path, tweak: float) -> None:
    """Two LayerNorm-like calls; the call line of the second records its eps, as capture does."""
    rng = np.random.default_rng(0)
    run = OpRun(path, level="aten")
    op = "aten.native_layer_norm.default"
    for i in range(2):
        x = rng.standard_normal((4, 64)).astype(np.float32)
        y = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
        y = (y + np.float32(tweak) * (i == 1)).astype(np.float32)
        run.op(f"blocks.{i}.ln", op, [(x, None)], [y])
        node = node_name(f"blocks.{i}.ln", op, 0)
        run.w.add_call({"node": node, "op": op, "module": f"blocks.{i}.ln", "level": "aten", "call": 0,
                        "direction": "forward", "kwargs": {},
                        "args": [{"tensor": record_name(node, "forward", "input", "0")}, [64], None, None, 1e-5 * (1 + i)]})
    run.close()


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("shellu")
    _write(root / "g", 0.0)
    _write(root / "t", 3e-7)  # about 3 rounding units off: the cosine is 1 - 1e-13-ish
    return root / "g", root / "t"


def run(*args: str, stdin: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*OPDIFF, *args], capture_output=True, text=True, input=stdin, timeout=120, env=env)


def test_mistakes_print_one_line_and_the_shell_goes_on(dumps):
    g, t = dumps
    p = run("shell", str(g), str(t), stdin="ls [\nls --limit x\nni (\npt #99\nnosuch\nls --op layer_norm\n")
    assert p.returncode == 0 and "Traceback" not in p.stdout + p.stderr
    errors = [ln for ln in p.stdout.splitlines() if ln.startswith(("error:", "unknown command:"))]
    assert len(errors) == 5, p.stdout
    assert "bad" in errors[0] and "[" in errors[0] and "--limit takes a number" in errors[1]
    assert "blocks.1.ln/aten.native_layer_norm.default#0/forward/output/0" in p.stdout  # the last command ran


def test_help_lists_commands_without_eof(dumps):
    g, _ = dumps
    p = run("shell", str(g), "-c", "help")
    assert "ls" in p.stdout and "ni" in p.stdout and "EOF" not in p.stdout


def test_ni_shows_the_calls_non_tensor_arguments(dumps):
    g, _ = dumps
    p = run("shell", str(g), "-c", "ni blocks.1.ln/.*output")
    line = next(ln for ln in p.stdout.splitlines() if ln.strip().startswith("arguments:"))
    assert "<tensor input/0>" in line and "[64]" in line and "2e-05" in line


def test_cosine_near_one_has_enough_digits(dumps):
    g, t = dumps
    p = run("shell", str(g), str(t), "-c", "cmp blocks.1.ln/.*output")
    cos = next(ln for ln in p.stdout.splitlines() if "Cosine" in ln).split("│")[2].strip()
    assert cos.startswith("0.99999") and len(cos) >= 12 and float(cos) < 1.0  # not rounded to "1"


def test_tab_completion_of_record_and_node_names(dumps):
    g, _ = dumps
    dump = load(g)
    sh = Shell(Session(golden=dump))
    got = sh.completedefault("blocks.1", "ni blocks.1", 3, 11)
    assert got[0] == "blocks.1.ln/aten.native_layer_norm.default#0"  # the node first
    assert "blocks.1.ln/aten.native_layer_norm.default#0/forward/output/0" in got
    assert complete_names(dump, "nothing") == []
    assert "ls" in sh.completenames("l") and "EOF" not in sh.completenames("")


def test_history_is_kept_across_sessions(dumps, tmp_path, monkeypatch):
    readline = pytest.importorskip("readline")
    hist = tmp_path / "state" / "hist"
    monkeypatch.setenv("OPDIFF_HISTORY", str(hist))
    g, _ = dumps
    sh = Shell(Session(golden=load(g)))
    sh.preloop()
    readline.clear_history()
    readline.add_history("ls --op layer_norm")
    sh.postloop()
    assert "ls --op layer_norm" in hist.read_text()
    readline.clear_history()
    Shell(Session(golden=load(g))).preloop()
    assert readline.get_history_item(readline.get_current_history_length()) == "ls --op layer_norm"
    assert not any(p.name.endswith("history") for p in Path(g).rglob("*"))  # never inside a dump
