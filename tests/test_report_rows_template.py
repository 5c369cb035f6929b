"""The third pass over the report rows (issue 23): JSON pair lines woven from one template per block
(report/json_rows.py, weave.py) with every pair the template does not cover encoded alone, the block's
columns shared by the CSV, XLSX and JSON of one pass, ISA-L's deflate for the XLSX sheets, numbers in
1e-5..1e-4 laid out as Python lays them out, and the cyclic collector given back by `opdiff compare`."""

from __future__ import annotations

import gc
import json
import random
import zipfile
from dataclasses import replace

import numpy as np
import openpyxl
import pytest

from opdiff import report
from opdiff.base.jsonsafe import compact
from opdiff.cli.main import main
from opdiff.compare import compare
from opdiff.metrics import names as M
from opdiff.report import json_rows, numtext, xlsx
from opdiff.report.blocks import blocks
from opdiff.report.json import pair_json
from opdiff.report.weave import constant, fold, weave
from opdiff.testing.synthetic import Tensor, write_dump

RNG = np.random.default_rng(11)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Eight ordinary pairs (one off by 2 %, one in float16 on the target side) after an extra target record."""
    root = tmp_path_factory.mktemp("tmpl")
    g = [Tensor(f"blk.{i}", "Linear", "output", "0", RNG.standard_normal((3, 5)).astype(np.float32)) for i in range(8)]
    t = [Tensor(x.module, x.op, x.role, x.pos, x.array * (1.02 if i == 5 else 1.0)) for i, x in enumerate(g)]
    t[2].array = t[2].array.astype(np.float16)  # sides differ: dtype here, every record's index below
    t.insert(0, Tensor("extra", "Dropout", "output", "0", g[0].array))
    write_dump(root / "g", g)
    write_dump(root / "t", t)
    return compare(root / "g", root / "t", progress=False)


def _odd(k: int, r):
    """Pair r changed in the k-th of the ways the template does not cover, or in its texts."""
    m = dict(r.metrics)
    ways = [
        lambda: replace(r, golden=None),
        lambda: replace(r, target=None, golden=r.golden or r.target),
        lambda: replace(r, golden_group=[r.golden] if r.golden else []),
        lambda: replace(r, metrics={**m, M.COSINE: float("nan")}),
        lambda: replace(r, metrics={**m, M.MAX_ABS_ERR: None}),
        lambda: replace(r, metrics={**m, M.RMSE: np.float64(0.25)}),
        lambda: replace(r, metrics={**m, M.NUMEL: 2 ** 70}),
        lambda: replace(r, metrics={M.HASH_EQUAL: True}),
        lambda: replace(r, metrics={}),
        lambda: replace(r, metrics={k2: m[k2] for k2 in reversed(list(m))}),  # the same keys in another order
        lambda: replace(r, metrics={**m, "own_metric": 1.5}),
        lambda: replace(r, note='say "x" \\ back', err_message="line\nbreak"),
        lambda: replace(r, note="ü 中文 \x7f", precision=""),
        lambda: replace(r, bitwise_equal=None),
        lambda: replace(r, bitwise_equal=np.bool_(True)),
        lambda: replace(r, note="lone \ud800 surrogate"),
        lambda: replace(r, metrics={**m, M.COSINE: 1.5e-05, M.RED: -9.5e-05, M.EUC_DIST: 10.00001}),
    ]
    return ways[k % len(ways)]()


@pytest.fixture(scope="module")
def mixed(base):
    """3,000 rows: runs of ordinary pairs with every odd kind of pair between them, spanning blocks."""
    both = [r for r in base.results if r.golden and r.target]
    rows = [_odd(k // 7, both[k % 8]) if k % 7 == 3 else replace(both[k % 8], index=k) for k in range(3000)]
    return replace(base, results=rows)


def _parsed_lines(path) -> list[dict]:
    text = path.read_text(encoding="utf-8", errors="surrogatepass")
    head, _, body = text.partition('"pairs":[\n')
    assert body.endswith("]}\n")
    lines = body[:-3].split("\n")
    assert lines[-1] == "" and not lines[0].startswith(",") and all(x.startswith(",{") for x in lines[1:-1])
    return [json.loads(x.lstrip(",")) for x in lines[:-1]]


def test_every_line_is_the_pairs_own_json(mixed, tmp_path):
    """Template lines and lines encoded alone alike: each line is pair_json's object of its pair, one per line."""
    report.write_json(mixed, tmp_path / "c.json")
    got = _parsed_lines(tmp_path / "c.json")
    want = [json.loads(compact(pair_json(r))) for r in mixed.results]
    assert len(got) == 3000
    for i, (a, b) in enumerate(zip(got, want)):
        assert a == b, (i, a, b)
    whole = json.loads((tmp_path / "c.json").read_text(encoding="utf-8", errors="surrogatepass"))
    assert [p["index"] for p in whole["pairs"]] == [r.index for r in mixed.results]


def test_the_template_covers_ordinary_pairs_only(mixed):
    """Ordinary pairs (both sides, the block's metric keys, finite numbers, plain or escaped texts) come from the
    template; each odd kind the template cannot write is marked slow, nothing else is."""
    slow_kinds = {0, 1, 2, 3, 4, 5, 7, 8, 10, 15}  # `_odd` ways the template leaves to the per-pair encoder
    seen, start = set(), 0
    for b in blocks(mixed, []):
        tm = json_rows.template(b, None)
        for i, s in enumerate(tm.slow):
            k = start + i
            kind = (k // 7) % 17 if k % 7 == 3 else None
            assert bool(s) == (kind in slow_kinds), (k, kind)
            seen.add(kind)
        start += len(b.results)
    assert slow_kinds | {None} <= seen


def test_a_multi_step_comparisons_lines_lead_with_rank_and_step(mixed, tmp_path):
    two = replace(mixed, other_steps={(0, 1): replace(mixed, results=mixed.results[:500])})
    report.write_json(two, tmp_path / "s.json")
    got = _parsed_lines(tmp_path / "s.json")
    assert len(got) == 3500 and list(got[0])[:3] == ["rank", "step", "index"]
    assert [(p["rank"], p["step"]) for p in got[::500]] == [(0, 0)] * 6 + [(0, 1)]
    assert got[3100] == {"rank": 0, "step": 1, **json.loads(compact(pair_json(mixed.results[100])))}


def test_write_many_shares_columns_and_writes_what_each_writer_writes_alone(mixed, tmp_path):
    mixed = replace(mixed, results=[r for r in mixed.results if "\ud800" not in r.note])  # not for a UTF-8 CSV
    one, alone = tmp_path / "one", tmp_path / "alone"
    one.mkdir()
    alone.mkdir()
    report.write_many(mixed, [(f, one / f"c.{f}") for f in ("json", "csv", "xlsx")])
    for f in ("csv", "json"):
        report.write(mixed, f, alone / f"c.{f}")
        assert (one / f"c.{f}").read_bytes() == (alone / f"c.{f}").read_bytes(), f
    report.write(mixed, "xlsx", alone / "c.xlsx")  # the zip's times differ: its members are compared
    with zipfile.ZipFile(one / "c.xlsx") as a, zipfile.ZipFile(alone / "c.xlsx") as b:
        assert a.namelist() == b.namelist()
        assert all(a.read(m) == b.read(m) for m in a.namelist())


def test_weave_is_the_rows_joined_one_by_one():
    rnd = random.Random(2)
    for n, k in ((0, 3), (1, 1), (7, 4), (300, 9)):
        cols = [[str(rnd.random()) for _ in range(n)] for _ in range(k)]
        pieces = ["<r>", *(rnd.choice(["", ",", "</a><b>"]) for _ in range(k - 1)), "</r>\n"]
        rows = ["".join(p + c for p, c in zip(pieces, [*row, ""])) for row in zip(*cols)]
        assert weave(pieces, cols) == "".join(rows)
        if n >= 5:
            assert weave(pieces, cols, 2, 5) == "".join(rows[2:5])


def test_constant_columns_are_folded_into_the_pieces():
    cols = [["a"] * 4, ["1", "2", "1", "1"], ["x", "x", "x", "y"], ["z"] * 4]
    pieces, left = fold(["<", ",", ",", ",", ">"], cols)
    assert pieces == ["<a,", ",", ",z>"] and left == [cols[1], cols[2]]
    assert weave(pieces, left, 0, 4) == weave(["<", ",", ",", ",", ">"], cols) == "<a,1,x,z><a,2,x,z><a,1,x,z><a,1,y,z>"
    assert weave(*fold(["[", "]"], [["q"] * 3]), 0, 3) == "[q][q][q]"  # every column folded
    assert not constant([]) and constant(["0"]) and not constant(["1", "1", "2", "1", "1"])


def test_a_column_of_one_number_is_that_text_n_times():
    for vals in ([0] * 2048, [1.5] * 7, [-2.5e-07] * 3, [10, 20, 10], [1.0, 1.0, 2.0], [5], [0.1, 0.1]):
        assert numtext.number_texts(vals) == [str(v) for v in vals]


def test_numbers_near_1e_5_are_laid_out_as_python_does():
    rnd = random.Random(4)
    vals = [rnd.uniform(1e-5, 1e-4) * rnd.choice((1, -1)) for _ in range(3000)]
    vals += [1e-5, 1.5e-5, -9.999e-05, 10.00001, 100.000012, 0.000100001, 1.00001, -10.00001, 1e-4, 0.0001]
    assert numtext.number_texts(vals) == [str(v) for v in vals]


def test_xlsx_sheet_deflated_by_isal_reads_back_as_zlibs(base, tmp_path, monkeypatch):
    """The sheet ISA-L deflates is a sound zip member (CRC checked) with the very XML zlib's deflate holds."""
    assert xlsx._isal is not None  # a dependency: the fast path is the one tested
    rows = replace(base, results=[replace(r, index=i) for i in range(600) for r in base.results[:5]])
    made = []  # ISA-L's compressors deflate the sheet (zipfile's own would hold the same bytes)
    isal_compressobj = xlsx._isal.compressobj
    monkeypatch.setattr(xlsx._isal, "compressobj", lambda *a: made.append(a) or isal_compressobj(*a))
    crcs = []  # ...and ISA-L's CRC-32 checks them (zipfile's zlib one gives the same checksum)
    isal_crc = xlsx._isal.crc32
    monkeypatch.setattr(xlsx._isal, "crc32", lambda *a: crcs.append(1) or isal_crc(*a))
    report.write(rows, "xlsx", tmp_path / "isal.xlsx")
    assert made and crcs
    monkeypatch.setattr(xlsx, "_isal", None)
    report.write(rows, "xlsx", tmp_path / "zlib.xlsx")
    with zipfile.ZipFile(tmp_path / "isal.xlsx") as a, zipfile.ZipFile(tmp_path / "zlib.xlsx") as b:
        assert a.testzip() is None and b.testzip() is None
        sheet = "xl/worksheets/sheet1.xml"
        assert a.getinfo(sheet).compress_type == zipfile.ZIP_DEFLATED
        assert a.read(sheet) == b.read(sheet) and a.getinfo(sheet).CRC == b.getinfo(sheet).CRC
        assert a.getinfo(sheet).compress_size < a.getinfo(sheet).file_size / 10
    ws = openpyxl.load_workbook(tmp_path / "isal.xlsx", read_only=True).active
    assert ws.max_row == 3001


def test_compare_gives_the_collector_back(base, tmp_path):
    """The command pauses the cyclic collector while it works and restores it, on success, on a failing run
    and on bad input found after the pause began."""
    g, t = base.golden.where, base.target.where
    assert gc.isenabled()
    with pytest.raises(SystemExit) as ok:
        main(["compare", str(g), str(g), "-o", str(tmp_path / "a"), "--no-progress", "--format", "csv"])
    assert ok.value.code == 0 and gc.isenabled()
    with pytest.raises(SystemExit) as fail:
        main(["compare", str(g), str(t), "-o", str(tmp_path / "b"), "--no-progress", "--format", "json"])
    assert fail.value.code == 1 and gc.isenabled()
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "mine.txt").write_text("a user's file")
    with pytest.raises(SystemExit) as bad:
        main(["compare", str(g), str(t), "-o", str(tmp_path / "c"), "--no-progress"])
    assert bad.value.code == 2 and gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(SystemExit):
            main(["compare", str(g), str(g), "-o", str(tmp_path / "d"), "--no-progress", "--format", "csv"])
        assert not gc.isenabled()  # a caller's paused collector stays paused
    finally:
        gc.enable()


def test_a_text_utf8_cannot_hold_is_escaped_in_every_report(tmp_path):
    """A record named with a lone surrogate (JSON indexes can carry one): every report is written, the text
    escaped (CSV `\\ud800`, XLSX Excel's `_xD800_`, JSON `\\ud800`) instead of a traceback."""
    a = np.ones((2, 3), np.float32)
    for side in ("g", "t"):
        write_dump(tmp_path / side, [Tensor("m\ud800x", "Linear", "output", "0", a), Tensor("n", "Linear", "output", "0", a)])
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as done:
        main(["compare", str(tmp_path / "g"), str(tmp_path / "t"), "-o", str(out), "--no-progress",
              "--format", "csv,xlsx,json,msprobe-csv"])
    assert done.value.code == 0
    assert "m\\ud800x/Linear#0" in (out / "compare.csv").read_text(encoding="utf-8")
    with zipfile.ZipFile(out / "compare.xlsx") as z:
        assert "m_xD800_x/Linear#0" in z.read("xl/worksheets/sheet1.xml").decode("utf-8")
    pairs = json.loads((out / "compare.json").read_text(encoding="utf-8"))["pairs"]
    assert pairs[0]["golden"]["module"] == "m\ud800x" and pairs[1]["golden"]["module"] == "n"
    (out / "compare.msprobe.csv").read_text(encoding="utf-8")  # valid UTF-8
