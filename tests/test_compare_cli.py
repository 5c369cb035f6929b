"""`opdiff compare` through the real console script: exit codes 0 / 1 / 2 and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from opdiff.testing.synthetic import Tensor, write_dump

OPDIFF = str(Path(sys.executable).with_name("opdiff"))
RNG = np.random.default_rng(0)
BASE = [Tensor(f"h.{i}", "Linear", "output", "0", RNG.standard_normal((4, 32)).astype(np.float32)) for i in range(4)]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([OPDIFF, "compare", *map(str, args), "--no-progress"], capture_output=True, text=True,
                          timeout=120)


def scaled(i: int, factor: float) -> list[Tensor]:
    return [Tensor(t.module, t.op, t.role, t.pos, t.array * (factor if k == i else 1)) for k, t in enumerate(BASE)]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    write_dump(root / "golden", BASE)
    write_dump(root / "same", scaled(0, 1.0))
    write_dump(root / "off", scaled(2, 1.005))  # 0.5% off: FAIL by default, PASS under msprobe-torchair
    write_dump(root / "extra", BASE + [Tensor("head", "Linear", "output", "0", BASE[0].array)])
    return root


def error_line(p: subprocess.CompletedProcess) -> str:
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opdiff: error: "), p.stderr
    assert "Traceback" not in p.stderr
    return lines[0]


def test_all_pass_exits_0_and_writes_three_reports(dumps, tmp_path):
    p = run(dumps / "golden", dumps / "same", "-o", tmp_path / "out")
    assert p.returncode == 0, p.stderr
    assert sorted(f.name for f in (tmp_path / "out").iterdir()) == ["compare.csv", "compare.json", "compare.xlsx"]
    assert "PASS 4" in p.stdout and p.stdout.strip().endswith("PASS")
    assert json.loads((tmp_path / "out" / "compare.json").read_text())["summary"]["passed"] is True


def test_fail_exits_1_and_names_the_first_fail(dumps, tmp_path):
    p = run(dumps / "golden", dumps / "off", "-o", tmp_path / "out", "--format", "json")
    assert p.returncode == 1, p.stderr
    assert "first FAIL #2 h.2/Linear#0/forward/output/0" in " ".join(p.stdout.split())
    assert [f.name for f in (tmp_path / "out").iterdir()] == ["compare.json"]


def test_preset_and_flags_change_the_verdict(dumps, tmp_path):
    assert run(dumps / "golden", dumps / "off", "-o", tmp_path / "a", "--preset", "msprobe-torchair",
               "--format", "csv").returncode == 0
    assert run(dumps / "golden", dumps / "off", "-o", tmp_path / "b", "--pass-if", "Cosine>=0.99",
               "--pass-if", "MaxRelativeErr<0.001", "--format", "csv").returncode == 1


def test_unmatched_records_exit_1_unless_allowed(dumps, tmp_path):
    assert run(dumps / "golden", dumps / "extra", "-o", tmp_path / "a", "--format", "csv").returncode == 1
    p = run(dumps / "golden", dumps / "extra", "-o", tmp_path / "b", "--format", "csv", "--allow-unmatched")
    assert p.returncode == 0 and "unmatched target records: 1" in p.stdout


def test_existing_output_is_refused_unless_force(dumps, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    p = run(dumps / "golden", dumps / "same", "-o", out)
    assert p.returncode == 2 and "use --force" in error_line(p)
    p = run(dumps / "golden", dumps / "same", "-o", out, "--force", "--format", "json")
    assert p.returncode == 0 and (out / "keep.txt").read_text() == "mine" and (out / "compare.json").exists()


def corrupt(dumps: Path, tmp_path: Path, how: str) -> Path:
    d = tmp_path / "bad"
    write_dump(d, BASE)
    idx = d / "rank0" / "step0" / "index.jsonl"
    shard = next((d / "rank0" / "step0" / "shards").glob("*.safetensors"))
    if how == "missing":
        return tmp_path / "nope"
    if how == "not-a-dump":
        (tmp_path / "plain").mkdir()
        return tmp_path / "plain"
    if how == "cut-index":
        idx.write_bytes(idx.read_bytes()[:-40])
    if how == "garbled-index":
        lines = idx.read_text().splitlines()
        lines[1] = lines[1][:20] + "}"
        idx.write_text("\n".join(lines) + "\n")
    if how == "shard-header":
        raw = bytearray(shard.read_bytes())
        raw[8:12] = b"@@@@"
        shard.write_bytes(bytes(raw))
    if how == "truncated-shard":
        shard.write_bytes(shard.read_bytes()[:-64])
    if how == "version":
        meta = json.loads((d / "meta.json").read_text())
        meta["format_version"] = 99
        (d / "meta.json").write_text(json.dumps(meta))
    return d


@pytest.mark.parametrize("how,expect", [
    ("missing", "no such dump directory"),
    ("not-a-dump", "not an opdiff dump"),
    ("cut-index", "cut off"),
    ("garbled-index", "index.jsonl:2: corrupt index record"),
    ("shard-header", "corrupt safetensors header"),
    ("truncated-shard", "truncated shard"),
    ("version", "format version 99 is not supported"),
])
def test_bad_input_exits_2_with_one_line_naming_the_file(dumps, tmp_path, how, expect):
    bad = corrupt(dumps, tmp_path, how)
    p = run(dumps / "golden", bad, "-o", tmp_path / "out")
    line = error_line(p)
    assert p.returncode == 2 and expect in line and str(bad) in line


def test_cut_off_dump_compares_with_allow_partial(dumps, tmp_path):
    bad = corrupt(dumps, tmp_path, "cut-index")
    p = run(dumps / "golden", bad, "-o", tmp_path / "out", "--allow-partial", "--format", "json")
    assert p.returncode == 0, p.stdout + p.stderr
    rep = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert rep["target"]["complete"] is False and rep["summary"]["results"]["PASS"] == 3
    assert "cut-off target dump" in rep["pairs"][3]["note"]


@pytest.mark.parametrize("opt,content,expect", [
    ("--map", "rename: [{target: '(', golden: x}]", "bad mapping file"),
    ("--thresholds", "tensor: {float32: {pass: {Cosine: high}}}", "bad thresholds file"),
])
def test_bad_settings_files_exit_2(dumps, tmp_path, opt, content, expect):
    f = tmp_path / "settings.yaml"
    f.write_text(content)
    p = run(dumps / "golden", dumps / "same", "-o", tmp_path / "out", opt, f)
    assert p.returncode == 2 and expect in error_line(p) and str(f) in error_line(p)
    assert not (tmp_path / "out").exists()


def test_the_program_leaves_its_results_to_the_os_main_argv_does_not(dumps, tmp_path):
    """`opdiff compare` run as the program freezes its results out of the collector once every report is
    written (the process ends: nothing is freed one by one); main(argv) called from Python, a process that
    goes on, freezes nothing."""
    import gc

    from opdiff.cli.main import main

    before = gc.get_freeze_count()
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(dumps / "golden"), str(dumps / "off"), "-o", str(tmp_path / "a"), "--no-progress"])
    assert exc.value.code == 1 and gc.get_freeze_count() == before
    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
            f"sys.argv = ['opdiff', 'compare', {str(dumps / 'golden')!r}, {str(dumps / 'off')!r}, '-o', "
            f"{str(tmp_path / 'b')!r}, '--no-progress']\n"
            "from opdiff.cli.main import main\n"
            "main()\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "frozen True" in p.stdout, p.stderr
    assert (tmp_path / "b" / "compare.csv").read_bytes() == (tmp_path / "a" / "compare.csv").read_bytes()
    a, b = (json.loads((tmp_path / d / "compare.json").read_text()) for d in "ab")
    assert a["pairs"] == b["pairs"] and a["summary"]["pairs"] == b["summary"]["pairs"] == 4
