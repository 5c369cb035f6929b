"""MsprobeDump.locate: a contiguous `.pt` tensor's (file, offset) without a TensorSpan, checked as span() checks it.

compare asks locate first for every record (docs/architecture.md, "Plug-in 1"); what locate cannot answer (a strided
tensor, a checksum to verify) goes to span. Dumps here are laid out as msprobe writes them (dump.json and one
torch.save file per tensor), made with torch itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from opdiff import load
from opdiff.compare import compare
from opdiff.store import TensorSpan


def _entry(x: torch.Tensor, file: str) -> dict:
    return {"type": "torch.Tensor", "dtype": str(x.dtype), "shape": list(x.shape), "Max": float(x.max()),
            "Min": float(x.min()), "Mean": float(x.float().mean()), "Norm": float(x.float().norm()),
            "requires_grad": False, "data_name": file}


def make_dump(root: Path, xs: list[torch.Tensor], nudge: float = 0.0) -> Path:
    """An msprobe L1 tensor dump of tanh over each of `xs` (the output scaled by 1 + nudge): step0/proc1."""
    data = root / "step0" / "proc1" / "dump_tensor_data"
    data.mkdir(parents=True)
    entries = {}
    for i, x in enumerate(xs):
        api = f"Torch.tanh.{i}.forward"
        y = torch.tanh(x) * (1 + nudge)
        torch.save(x, data / f"{api}.input.0.pt")
        torch.save(y, data / f"{api}.output.0.pt")
        entries[api] = {"input_args": [_entry(x, f"{api}.input.0.pt")], "input_kwargs": {},
                        "output": [_entry(y, f"{api}.output.0.pt")]}
    doc = {"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": str(data), "data": entries}
    (data.parent / "dump.json").write_text(json.dumps(doc))
    return root


def _xs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    square = torch.randn(6, 6, generator=g)
    return [torch.randn(64, generator=g), square.t(), torch.randn(3, 5, generator=g, dtype=torch.float64),
            torch.randn(2, 8, generator=g).to(torch.bfloat16)]


def test_locate_is_span_where_it_answers(tmp_path):
    dump = load(make_dump(tmp_path / "g", _xs()))
    answered = 0
    for rec in dump.records:
        loc, span = dump.locate(rec), dump.span(rec)
        if isinstance(span, TensorSpan):
            assert loc == (span.path, span.offset), rec.name
            answered += 1
        else:  # the transposed input and tanh's output of it (same strides): strided in the file, read as arrays
            assert loc is None and span.shape == tuple(rec.shape) and "#1/" in rec.name, rec.name
    assert answered == 2 * len(_xs()) - 2


def test_compare_through_locate_equals_the_values(tmp_path):
    """Every pair compared (the strided one through span), metrics those of the values themselves."""
    xs = _xs()
    c = compare(load(make_dump(tmp_path / "g", xs)), load(make_dump(tmp_path / "t", xs, nudge=1e-3)))
    assert all(r.status == "compared" for r in c.results)
    by = {r.golden.name: r for r in c.results}
    for i, x in enumerate(xs):
        r = by[f"torch.tanh#{i}/forward/output/0"]
        y = torch.tanh(x)
        want = np.abs((y * (1 + 1e-3)).double().numpy() - y.double().numpy()).max()  # the values as saved
        assert r.metrics["max_abs_err"] == pytest.approx(want, rel=1e-12)
        assert by[f"torch.tanh#{i}/forward/input/0"].metrics["max_abs_err"] == 0


def test_a_file_that_disagrees_with_dump_json_is_an_error_pair(tmp_path):
    """Both dump.json files say one shape, the .pt files hold another: that pair is an error naming a file, never
    agreement; every other pair is still compared."""
    xs = _xs()
    sides = [make_dump(tmp_path / s, xs) for s in ("g", "t")]
    for root in sides:
        doc_path = root / "step0" / "proc1" / "dump.json"
        doc = json.loads(doc_path.read_text())
        doc["data"]["Torch.tanh.0.forward"]["output"][0]["shape"] = [8, 8]
        doc_path.write_text(json.dumps(doc))
    golden, target = (load(s) for s in sides)
    bad = next(r for r in target.records if r.name == "torch.tanh#0/forward/output/0")
    with pytest.raises(Exception, match=r"Torch\.tanh\.0\.forward\.output\.0\.pt: holds float32\[64\] but dump.json "
                                        r"says float32\[8, 8\]"):
        target.locate(bad)
    c = compare(golden, target)
    res = {r.target.name: r for r in c.results if r.target is not None}
    assert res[bad.name].status == "error" and "dump.json says float32[8, 8]" in res[bad.name].err_message
    assert all(r.status == "compared" for name, r in res.items() if name != bad.name)
