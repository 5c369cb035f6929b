"""The HTML report: one self-contained page whose table holds every pair, coloured by result."""

from __future__ import annotations

import subprocess
import sys
from html.parser import HTMLParser

import numpy as np

from opdiff import load
from opdiff.compare import compare
from opdiff.diagnose import diagnose
from opdiff.report import write_html
from opdiff.store import DumpWriter, Record
from opdiff.store.format import node_name, record_name
from opdiff.store.stats import tensor_stats


def _dump(path, bad_layer: int | None) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    with DumpWriter(path, {"framework": "numpy"}) as w:
        w.begin(0, 0)
        for i in range(5):
            node = node_name(f"blocks.{i}", "Tanh", 0)
            for role, arr in (("input", x), ("output", np.tanh(x) * np.float32(1.01 if i == bad_layer else 1.0))):
                w.add(Record(index=0, name=record_name(node, "forward", role, "0"), node=node, module=f"blocks.{i}",
                             op="Tanh", level="module", call=0, direction="forward", role=role, pos="0",
                             dtype="float32", shape=arr.shape, stats=tensor_stats(arr)), arr)
            x = np.tanh(x) * np.float32(1.01 if i == bad_layer else 1.0)


class _Rows(HTMLParser):
    def __init__(self):
        super().__init__()
        self.classes: list[str] = []
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "class" in a:
            self.classes.append(a["class"])
        if tag in ("script", "link", "img") and (a.get("src") or a.get("href")):
            self.external.append(a.get("src") or a.get("href"))


def test_html_table_has_every_pair_and_the_diagnosis(tmp_path):
    _dump(tmp_path / "g", None)
    _dump(tmp_path / "t", 2)
    g, t = load(tmp_path / "g"), load(tmp_path / "t")
    cmp = compare(g, t)
    diag = diagnose(g, t, comparison=cmp, replay=False)
    out = tmp_path / "report.html"
    write_html(cmp, out, diagnosis=diag)
    text = out.read_text()
    parser = _Rows()
    parser.feed(text)
    assert len(parser.classes) == len(cmp.results) == 10
    assert parser.classes.count("FAIL") == sum(r.result == "FAIL" for r in cmp.results) > 0
    assert parser.external == []  # self-contained
    assert "Diagnosis: FAULT" in text and "blocks.2" in text
    assert "First FAIL" in text


def test_compare_cli_writes_html(tmp_path):
    _dump(tmp_path / "g", None)
    _dump(tmp_path / "t", None)
    p = subprocess.run([sys.executable, "-m", "opdiff", "compare", str(tmp_path / "g"), str(tmp_path / "t"),
                        "-o", str(tmp_path / "out"), "--format", "html"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    files = sorted(f.name for f in (tmp_path / "out").iterdir())
    assert any(f.endswith(".html") for f in files), files
