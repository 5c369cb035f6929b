"""A capture killed with SIGKILL part-way stays readable up to its last complete record, and compare and
diagnose with --allow-partial still find a fault that ran before the cut (issue 8)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import opdiff
from trust_helpers import run_cli

PART = "rank0/step0"
MODEL = dict(layers=3, width=16, heads=2, seq=4, batch=1, vocab=32)
# the child: golden and target models, the fault in layer 0; the target's capture dies by SIGKILL
# right after its Nth record is handed to the writer (records are flushed every 4, as a long run's are
# every 512), the golden one finishes
CHILD = textwrap.dedent("""
    import functools, os, signal, sys
    import torch
    import opdiff
    from opdiff.capture.torch import session
    from opdiff.store.writer import DumpWriter
    from opdiff.testing import faults

    which, path, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    session.DumpWriter = functools.partial(DumpWriter, flush_records=4)
    golden, inputs, target, inj = faults.build_pair("gpt2", "weight_row", layer=0, **{model})
    model = golden if which == "golden" else target
    if kill_at >= 0:
        added = 0
        add = DumpWriter.add
        def add_then_die(self, *a, **k):
            global added
            rec = add(self, *a, **k)
            added += 1
            if added == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return rec
        DumpWriter.add = add_then_die
    with opdiff.capture(model, path):
        faults.run(model, inputs, None if which == "golden" else inj)
""").replace("{model}", repr(MODEL))


def _capture(which: str, path: Path, kill_at: int = -1) -> int:
    proc = subprocess.run([sys.executable, "-c", CHILD, which, str(path), str(kill_at)], capture_output=True,
                          text=True, timeout=300)
    return proc.returncode


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    path = tmp_path_factory.mktemp("kill") / "golden"
    assert _capture("golden", path) == 0
    return path


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_killed_capture_reads_up_to_its_last_record_and_the_fault_is_still_found(golden, tmp_path, seed):
    total = len(opdiff.load(golden).records)
    g = opdiff.load(golden)
    culprit = max(i for i, r in enumerate(g.records) if r.module.startswith("transformer.h.0.mlp"))
    kill_at = random.Random(seed).randint(culprit + 8, total - 2)  # after the faulty op ran, before the end
    target = tmp_path / "target"
    assert _capture("target", target, kill_at) == -signal.SIGKILL
    d = opdiff.load(target)
    assert not d.complete and d.problems
    lines = (target / PART / "index.jsonl").read_text().splitlines()
    assert 0 < len(d.records) <= kill_at and len(lines) >= len(d.records)
    for rec in d.records:  # every record read is whole and its data matches its hash
        if rec.data is not None:
            d.tensor(rec)
    assert run_cli("compare", golden, target, "-o", tmp_path / "o").code == 2  # incomplete: refused without the flag
    r = run_cli("compare", golden, target, "-o", tmp_path / "o", "--allow-partial", "--format", "json", "--no-progress")
    assert r.code == 1 and "FAIL" in r.out, r.text
    diag = run_cli("diagnose", golden, target, "--allow-partial", "--no-replay", "--json")
    assert diag.code == 1, diag.text
    res = json.loads(diag.out)
    assert res["verdict"] == "fault" and res["culprit"]["module"].startswith("transformer.h.0"), res["summary"]
