"""The msprobe reader on real msprobe dumps of a seeded GPT-2 (made by mindstudio-probe in its own venv)."""

from __future__ import annotations

import ast
import csv
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from msprobe_fixtures import run_msprobe_compare, session_dumps
from opdiff.errors import DumpError
from opdiff.metrics.tensor import tensor_metrics
from opdiff.store.readers.msprobe_records import read_part
from opdiff.store.readers.torch_pt import PtError, read_pt
from opdiff.testing.msprobe_dumps import build_model, run_step

NAMES = ["l1_golden", "l1_target", "l0_stats", "mix_bf16", "mix_bf16_again", "l1_md5", "l1_xor", "ranks"]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[str, Path]:
    return session_dumps(tmp_path_factory, NAMES)


def part_dir(root: Path, step: int = 0) -> Path:
    return next(p for p in sorted((root / f"step{step}").iterdir()) if (p / "dump.json").exists())


def test_pt_reader_equals_torch_load(dumps):
    """Every .pt msprobe wrote (fp32, bf16, int64) reads bitwise as torch.load(weights_only=True) gives it."""
    files = sorted((part_dir(dumps["mix_bf16"]) / "dump_tensor_data").glob("*.pt"))
    files += sorted((part_dir(dumps["l1_golden"]) / "dump_tensor_data").glob("*.pt"))[:50]
    assert len(files) > 100
    dtypes = set()
    for f in files:
        ours = read_pt(f)
        ref = torch.load(f, weights_only=True)
        dtypes.add(ours.dtype)
        assert ours.dtype == str(ref.dtype).removeprefix("torch.") and ours.shape == tuple(ref.shape), f
        assert ours.array().tobytes() == ref.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes(), f
    assert {"float32", "bfloat16", "int64"} <= dtypes


def test_pickled_payload_never_runs(tmp_path):
    """A .pt whose pickle would create a marker file is refused with one line; the marker never appears."""
    marker = tmp_path / "MARKER"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    evil = tmp_path / "evil.pt"
    torch.save({"x": Payload()}, evil)
    assert not marker.exists()
    with pytest.raises(PtError) as exc:
        read_pt(evil)
    assert not marker.exists()
    msg = str(exc.value)
    assert "\n" not in msg and str(evil) in msg and "refused" in msg


def test_not_a_pt_file(tmp_path):
    bad = tmp_path / "x.pt"
    bad.write_bytes(b"not a zip")
    with pytest.raises(DumpError, match="not a zip archive"):
        read_pt(bad)


@pytest.mark.parametrize("name,kinds", [("l1_golden", {"api"}), ("l0_stats", {"module", "param"}),
                                        ("mix_bf16", {"module", "api", "param"})])
def test_records_of_each_level(dumps, name, kinds):
    recs, header, problems = read_part(part_dir(dumps[name]))
    assert not problems
    assert {r.level for r in recs} == kinds
    assert len({r.name for r in recs}) == len(recs)
    assert {r.direction for r in recs} == {"forward", "backward"}
    if name == "l0_stats":
        assert all(r.data is None and r.stats is not None for r in recs)
    else:
        assert all(r.data is not None for r in recs)


def test_names_pair_with_opdiff_capture(dumps, tmp_path):
    """msprobe L0 names are opdiff's module-level names: the same run gives the same statistics."""
    import opdiff

    model, inputs = build_model()
    with opdiff.capture(model, tmp_path / "cap", level="module", mode="stats", backward=True):
        run_step(model, inputs, True)
    ours = {r.name: r for r in opdiff.load(tmp_path / "cap").records}
    theirs = {r.name: r for r in read_part(part_dir(dumps["l0_stats"]))[0]}
    common = ours.keys() & theirs.keys()
    assert len(common) >= 0.9 * len(theirs)
    for name in common:
        a, b = ours[name].stats, theirs[name].stats
        if a.max is not None and b.norm is not None:
            assert math.isclose(a.max, b.max, rel_tol=1e-6, abs_tol=1e-9), name
            assert math.isclose(a.norm, b.norm, rel_tol=1e-5, abs_tol=1e-9), name


def test_hash_modes(dumps):
    md5 = read_part(part_dir(dumps["l1_md5"]))[0]
    xor = read_part(part_dir(dumps["l1_xor"]))[0]
    assert all(r.hash and r.hash.startswith("crc32:") for r in md5)
    assert all(r.hash and r.hash.startswith("xor64:") for r in xor)


def test_ranks_and_steps(dumps):
    root = dumps["ranks"]
    for step in (0, 1):
        for rank in (0, 1):
            recs, _, problems = read_part(root / f"step{step}" / f"rank{rank}")
            assert recs and not problems
            assert any(r.op == "torch.distributed.all_reduce" for r in recs)


# -- checked against the peer -------------------------------------------------------------

MSPROBE_TO_OPDIFF = {"Cosine": "Cosine", "EucDist": "EucDist", "MaxAbsErr": "MaxAbsErr", "MaxRelativeErr": "MaxRelativeErr",
                     "One Thousandth Err Ratio": "One Thousandth Err Ratio",
                     "Five Thousandths Err Ratio": "Five Thousandth Err Ratio"}


def test_metrics_equal_msprobe_compare(dumps, tmp_path):
    """For every tensor pair msprobe compare reports, opdiff's metrics equal msprobe's within 1e-6 relative."""
    g, t = dumps["l1_golden"], dumps["l1_target"]
    proc = run_msprobe_compare(g / "step0", t / "step0", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = list(csv.DictReader(open(next((tmp_path / "out").glob("compare_result_*.csv")))))
    gdir, tdir = part_dir(g) / "dump_tensor_data", part_dir(t) / "dump_tensor_data"
    checked = 0
    for row in rows:
        t_name, g_name = ast.literal_eval(row["Data_name"])
        if not (t_name.endswith(".pt") and g_name.endswith(".pt")):
            continue
        ours = tensor_metrics(read_pt(gdir / g_name).array(), read_pt(tdir / t_name).array())
        for col, key in MSPROBE_TO_OPDIFF.items():
            try:
                theirs = float(row[col])
            except ValueError:
                continue  # N/A / unsupported (integer tensors)
            mine = ours[key]
            assert mine is not None, (row["NPU Name"], col)
            assert math.isclose(mine, theirs, rel_tol=1e-6, abs_tol=1e-12), (row["NPU Name"], col, mine, theirs)
            checked += 1
    assert checked > 400
    gelu = [r for r in rows if r["NPU Name"] == "Functional.gelu.1.forward.output.0"]
    assert gelu and float(gelu[0]["MaxAbsErr"]) > 0
