"""`opdiff convert SRC DST`: a real msprobe dump and a NumPy directory written as opdiff dumps, checked by compare."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from msprobe_fixtures import session_dumps
from opdiff.testing import npy_dumps

SRC = Path(__file__).resolve().parents[1] / "src"


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "opdiff", *args], capture_output=True, text=True, env=env, timeout=300)


def metrics_by_name(golden, target) -> dict[str, tuple]:
    from opdiff.compare import compare

    c = compare(golden, target, workers=1)
    return {r.name: (r.result, tuple(sorted((k, v) for k, v in (r.metrics or {}).items()
                                            if isinstance(v, (int, float))))) for r in c.results}


def check_converted(src: Path, other: Path, out: Path) -> None:
    """convert exits 0; the converted dump equals its source bitwise; against a third dump it gives the same metrics."""
    import opdiff

    proc = cli("convert", str(src), str(out))
    assert proc.returncode == 0, proc.stderr
    same = cli("compare", str(src), str(out), "-o", str(out.parent / f"{out.name}-cmp"), "--no-progress",
               "--format", "json")
    assert same.returncode == 0, same.stdout[-2000:] + same.stderr
    report = json.loads((out.parent / f"{out.name}-cmp" / "compare.json").read_text())
    assert report["pairs"] and all(p["bitwise_equal"] or p["mode"] != "tensor" for p in report["pairs"])
    conv, orig = opdiff.load(out), opdiff.load(src)
    assert conv.format == "opdiff" and [r.name for r in conv] == [r.name for r in orig]
    assert metrics_by_name(conv, opdiff.load(other)) == metrics_by_name(orig, opdiff.load(other))
    meta = json.loads((out / "meta.json").read_text())
    assert meta["source_format"] == orig.format and meta["source_path"] == str(src.resolve())
    assert meta["source_meta"]["source_format"] == orig.format


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[str, Path]:
    return session_dumps(tmp_path_factory)


def test_convert_msprobe(dumps, tmp_path):
    check_converted(dumps["l1_golden"], dumps["l1_target"], tmp_path / "conv")
    again = cli("convert", str(tmp_path / "conv"), str(tmp_path / "again"))  # an opdiff dump converts too
    assert again.returncode == 0, again.stderr
    meta = json.loads((tmp_path / "again" / "meta.json").read_text())
    assert meta["source_format"] == "opdiff" and meta["source_meta"]["source_format"] == "msprobe"


def test_convert_keeps_every_rank_and_step(dumps, tmp_path):
    import opdiff

    proc = cli("convert", str(dumps["ranks"]), str(tmp_path / "conv"))
    assert proc.returncode == 0 and "4 parts" in proc.stdout, proc.stdout + proc.stderr
    conv = opdiff.load(tmp_path / "conv")
    assert conv.parts == [(0, 0), (0, 1), (1, 0), (1, 1)]
    orig = opdiff.load(dumps["ranks"]).with_part(1, 1)
    assert [(r.name, r.stats) for r in conv.with_part(1, 1)] == [(r.name, r.stats) for r in orig]


def test_convert_npy_dir(tmp_path):
    npy_dumps.write_msaccucmp(tmp_path / "g", npy_dumps.run_model())
    npy_dumps.write_msaccucmp(tmp_path / "t", npy_dumps.run_model(tanh_gelu=True), t0=1_700_000_003_000_000)
    check_converted(tmp_path / "g", tmp_path / "t", tmp_path / "conv")


def test_convert_refuses_bad_outputs(tmp_path):
    npy_dumps.write_msaccucmp(tmp_path / "g", npy_dumps.run_model())
    inside = cli("convert", str(tmp_path / "g"), str(tmp_path / "g" / "conv"))
    assert inside.returncode == 2 and inside.stderr.count("\n") == 1 and "outside the source" in inside.stderr
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    busy = cli("convert", str(tmp_path / "g"), str(tmp_path / "busy"))
    assert busy.returncode == 2 and "--force" in busy.stderr
    forced = cli("convert", str(tmp_path / "g"), str(tmp_path / "busy"), "--force")
    assert forced.returncode == 2 and (tmp_path / "busy" / "notes.txt").exists()  # never replaces a non-dump
    missing = cli("convert", str(tmp_path / "nope"), str(tmp_path / "out"))
    assert missing.returncode == 2 and "nope" in missing.stderr and not (tmp_path / "out").exists()
