"""`opdiff ls` / `opdiff info` on real captured dumps, one-line errors for bad ones, and torch-free imports."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import opdiff
from capture_helpers import build


@pytest.fixture(scope="module")
def dump_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "golden"
    model, inputs = build("gpt2")
    with torch.no_grad(), opdiff.capture(model, path, level="module", mode="tensor"):
        model(**inputs)
    return path


def test_ls_lists_and_filters_records(dump_dir, opdiff_cli):
    res = opdiff_cli("ls", str(dump_dir), "--names-only")
    assert res.returncode == 0, res.stderr
    names = res.stdout.split()
    assert names == [r.name for r in opdiff.load(dump_dir)]
    res = opdiff_cli("ls", str(dump_dir), "--names-only", "--op", "LayerNorm", "--module", r"h\.1\.")
    got = res.stdout.split()
    assert got and all("/LayerNorm#" in n and ".h.1." in n for n in got)
    assert len(got) == 4  # ln_1 and ln_2 of block 1: one input, one output each
    res = opdiff_cli("ls", str(dump_dir), "--names-only", "--name", "output/logits$")
    assert res.stdout.split() == ["GPT2LMHeadModel#0/forward/output/logits"]
    res = opdiff_cli("ls", str(dump_dir), "--module", r"^lm_head$")
    assert res.returncode == 0 and "lm_head/Linear#0/forward/output/0" in res.stdout and "float32" in res.stdout


def test_info_prints_meta_and_totals(dump_dir, opdiff_cli):
    res = opdiff_cli("info", str(dump_dir))
    assert res.returncode == 0, res.stderr
    for text in ("framework: torch", "level: module", "mode: tensor", "model: GPT2LMHeadModel", "complete: True",
                 f"{len(opdiff.load(dump_dir))} records"):
        assert text in res.stdout, text


def _one_error_line(res: subprocess.CompletedProcess, *needles: str) -> None:
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opdiff: error: "), res.stderr
    assert "Traceback" not in res.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_missing_foreign_and_cut_dumps_are_one_line_errors(dump_dir, tmp_path, opdiff_cli):
    _one_error_line(opdiff_cli("info", str(tmp_path / "nowhere")), str(tmp_path / "nowhere"), "no such dump directory")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "index.jsonl").write_text("{}\n")
    _one_error_line(opdiff_cli("info", str(foreign)), str(foreign), "no meta.json")
    _one_error_line(opdiff_cli("ls", str(foreign)), "no meta.json")
    (foreign / "meta.json").write_text(json.dumps({"format": "msprobe"}))
    _one_error_line(opdiff_cli("ls", str(foreign)), "meta.json", "not an opdiff dump")

    cut = tmp_path / "cut"
    shutil.copytree(dump_dir, cut)
    index = cut / "rank0" / "step0" / "index.jsonl"
    size = index.stat().st_size
    with open(index, "r+b") as f:
        f.truncate(size - 40)  # the last line loses its end, as when a run is killed mid-write
    for cmd in ("info", "ls"):
        res = opdiff_cli(cmd, str(cut))
        _one_error_line(res, str(index), "cut off")
        assert "records" in res.stdout or "GPT2" in res.stdout  # what is readable is still shown
    d = opdiff.load(cut)
    assert len(d) == len(opdiff.load(dump_dir)) - 1 and not d.complete


def test_importing_the_core_and_reading_a_dump_does_not_import_torch(tmp_path):
    model, inputs = build("resnet")
    with torch.no_grad(), opdiff.capture(model, tmp_path / "d", mode="tensor"):
        model(**inputs)
    code = ("import sys, importlib\n"
            "for m in ['opdiff', 'opdiff.store', 'opdiff.compare', 'opdiff.match', 'opdiff.metrics', 'opdiff.diagnose',\n"
            "          'opdiff.report', 'opdiff.capture', 'opdiff.cli.main']:\n"
            "    importlib.import_module(m)\n"
            "d = sys.modules['opdiff'].load(sys.argv[1]); d.tensor(d.records[-1])\n"
            "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'tensorflow'))))\n")
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path / "d")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "", f"the core imported {res.stdout.strip()}"
