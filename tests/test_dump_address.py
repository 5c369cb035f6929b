"""Any part of a dump, addressed any way: a root, a step folder, a rank folder, an index file — each means
that part, in every command, for every format; two parts of one dump compare like two dumps."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from opdiff.compare import compare
from opdiff.errors import DumpError
from opdiff.store import list_parts, load
from opdiff.testing.synthetic import Tensor, write_run

REPO = Path(__file__).resolve().parent.parent


def published() -> Path:
    """msprobe's published dumps (../shared/fixtures beside the repository; /work/shared for a worktree)."""
    for base in (REPO.parent / "shared", Path("/work/shared")):
        p = base / "fixtures" / "msprobe-published"
        if p.is_dir():
            return p
    pytest.skip("msprobe's published fixtures are absent")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opdiff", *args], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin", "COLUMNS": "200"})


def _tensors(scale: float, step: int) -> list[Tensor]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    y = np.tanh(x) * (scale if step == 1 else 1.0)
    return [Tensor("blk", "Linear", "input", "0", x), Tensor("blk", "Linear", "output", "0", y),
            Tensor("act", "GELU", "input", "0", y), Tensor("act", "GELU", "output", "0", y * 0.5)]


@pytest.fixture(scope="module")
def run4(tmp_path_factory) -> Path:
    """An opdiff run of 2 ranks x 2 steps; step 1 differs from step 0 from blk's output on."""
    p = tmp_path_factory.mktemp("addr") / "run"
    write_run(p, {(r, s): _tensors(1.5, s) for r in (0, 1) for s in (0, 1)})
    return p


def test_opdiff_sub_folders_name_their_parts(run4):
    """Root: every part; rank folder: that rank's steps; step folder: one part; index file: its part."""
    assert load(run4).parts == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert load(run4 / "rank1").parts == [(1, 0), (1, 1)]
    assert list_parts(run4 / "rank1") == [(1, 0), (1, 1)]
    d = load(run4 / "rank1" / "step1")
    assert (d.rank, d.step, d.parts, d.where) == (1, 1, [(1, 1)], run4 / "rank1" / "step1")
    d = load(run4 / "rank1" / "step1" / "index.jsonl")
    assert (d.rank, d.step, d.parts) == (1, 1, [(1, 1)])
    assert load(run4 / "meta.json").parts == load(run4).parts
    with pytest.raises(DumpError, match="is step 1 of its dump, not step 0"):
        load(run4 / "rank1" / "step1", step=0)
    with pytest.raises(DumpError, match="no part rank 0 step 0 here"):
        load(run4 / "rank1").with_part(0, 0)


def test_two_steps_of_one_run_diagnose_like_two_runs(run4):
    """diagnose rank0/step0 vs rank0/step1 compares those parts (a fault at blk), never the root against itself."""
    r = cli("diagnose", str(run4 / "rank0" / "step0"), str(run4 / "rank0" / "step1"), "--no-replay", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    assert '"verdict": "pass"' not in r.stdout
    assert "blk" in r.stdout
    # two rank folders: steps pair with steps; equal data passes
    r = cli("diagnose", str(run4 / "rank0"), str(run4 / "rank1"), "--no-replay")
    assert r.returncode == 0, r.stdout + r.stderr
    # the same folder twice still agrees, and compare of two step folders fails the changed pairs
    cmp = compare(load(run4 / "rank0" / "step0"), load(run4 / "rank0" / "step1"))
    assert cmp.counts().get("FAIL", 0) >= 1 and cmp.golden.step == 0 and cmp.target.step == 1


def test_sub_folders_in_info_ls_convert(run4, tmp_path):
    r = cli("info", str(run4 / "rank1"))
    assert r.returncode == 0 and "rank 1 step 0" in r.stdout and "rank 0 step" not in r.stdout, r.stdout
    r = cli("ls", str(run4 / "rank0" / "step1" / "index.jsonl"))
    assert r.returncode == 0 and "blk" in r.stdout, r.stderr
    r = cli("convert", str(run4 / "rank1"), str(tmp_path / "conv"))
    assert r.returncode == 0, r.stderr
    assert load(tmp_path / "conv").parts == [(1, 0), (1, 1)]


def test_published_msprobe_steps_are_two_parts():
    """msprobe's own ResNet-50 training dump: step0 vs step1 sees different batches (never pass); a
    dump.json path is accepted; step 1's gradients (`parameters_grad.1`) pair by name with step 0's."""
    root = published() / "quick_start_gpu_dump"
    s0, s1 = root / "step0", root / "step1"
    assert load(s0).parts == [(0, 0)] and load(s1).parts == [(0, 1)] and load(root).parts == [(0, 0), (0, 1)]
    assert load(s1 / "proc2016" / "dump.json").step == 1
    cmp = compare(load(s0), load(s1))
    assert not cmp.unmatched("golden") and not cmp.unmatched("target")
    grads = [p for p in cmp.results if p.record.role == "gradient"]
    assert len(grads) == 161 and all(p.match == "name" for p in grads)
    r = cli("diagnose", str(s0), str(s1), "--no-replay", "--json")
    assert r.returncode == 1 and '"verdict": "inputs-differ"' in r.stdout, r.stdout[-2000:] + r.stderr
    r = cli("ls", str(s0), "--step", "1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "is step 0 of its dump" in r.stderr
