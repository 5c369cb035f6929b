"""`--preset msprobe` against real `msprobe compare` results made from the same msprobe dumps: same header,
same rows, the same values within float tolerance and the same Result column, in tensor, summary and md5 modes."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import openpyxl
import pytest

from msprobe_fixtures import make_dumps, run_msprobe_compare
from tf_helpers import run_opdiff

PAIRS = {"tensor": ("l1_golden", "l1_target"), "summary": ("l1_stats", "l1_stats_target"),
         "md5": ("l1_md5_bf16", "l1_md5_target")}
SKIP = {"NPU_Stack_Info"}  # msprobe's whole Python stack; opdiff keeps the user's file:line


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    return make_dumps(tmp_path_factory.getbasetemp() / "msprobe-dumps", sorted({n for p in PAIRS.values() for n in p}))


def _part(root: Path) -> Path:
    return next(p for p in sorted((root / "step0").iterdir()) if (p / "dump.json").exists())


def _table(path: Path) -> tuple[list[str], dict[str, dict[str, str]]]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return rows[0], {r[0]: dict(zip(rows[0], r)) for r in rows[1:]}


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        x, y = float(a.rstrip("%")), float(b.rstrip("%"))
    except ValueError:
        return False
    return a.endswith("%") == b.endswith("%") and (math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-7)
                                                   or (math.isnan(x) and math.isnan(y)))


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(PAIRS))
def test_same_table_as_msprobe_compare(dumps, tmp_path, mode):
    g, t = (_part(dumps[n]) for n in PAIRS[mode])
    ms = run_msprobe_compare(g / "dump.json", t / "dump.json", tmp_path / "ms")
    assert ms.returncode == 0, ms.stderr[-2000:]
    r = run_opdiff("compare", g, t, "-o", tmp_path / "op", "--preset", "msprobe")
    assert r.returncode in (0, 1), r.stderr
    ms_head, ms_rows = _table(next((tmp_path / "ms").glob("compare_result_*.csv")))
    op_head, op_rows = _table(tmp_path / "op" / "compare.msprobe.csv")
    assert op_head == ms_head
    assert set(op_rows) == set(ms_rows) and len(op_rows) > 100
    bad = [(name, c, ms_rows[name][c], row[c]) for name, row in op_rows.items() for c in ms_head
           if c not in SKIP and not _same(ms_rows[name][c], row[c])]
    assert not bad, bad[:5]
    # the planted fault (GELU tanh in layer 1) is an msprobe "error" row in every mode, as msprobe says
    assert op_rows["Functional.gelu.1.forward.input.approximate"]["Result"] == "error"
    wb = openpyxl.load_workbook(tmp_path / "op" / "compare.msprobe.xlsx", read_only=True)
    head = [c.value for c in next(wb.active.iter_rows(max_row=1))]
    assert head == ms_head
