"""Tensor bytes stored once per dump (format version 2): parameters unchanged from step to step and the same
bytes reached twice point at the stored copy (`data.part` for another part); readers keep reading version 1."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import opdiff
from capture_helpers import build, same_bits, to_np
from opdiff.base.errors import DumpError
from opdiff.base.record import Record
from opdiff.compare import compare
from opdiff.store.format import FORMAT_VERSION
from opdiff.store.stats import content_hash, tensor_stats
from opdiff.store.writer import DumpWriter


def _params(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """Parameter record name -> value; a tied parameter under its first owner (as capture names it)."""
    out, seen = {}, set()
    for m, mod in model.named_modules():
        for n, p in mod.named_parameters(recurse=False):
            if id(p) not in seen:
                seen.add(id(p))
                out[f"{m}/parameter#0/forward/parameter/{n}"] = to_np(p)
    return out


def _data_bytes(path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.safetensors"))


def test_unchanged_parameters_are_written_once_per_dump(tmp_path):
    model, inputs = build("gpt2")
    model.eval()
    expected = _params(model)
    plain = [model(**inputs).logits.detach().clone() for _ in range(3)]
    with torch.no_grad(), opdiff.capture(model, tmp_path / "d", level="module", mode="tensor") as cap:
        outs = []
        for _ in range(3):
            outs.append(model(**inputs).logits.clone())
            cap.step()
    assert all(torch.equal(a, b) for a, b in zip(outs, plain))
    assert cap.writer.bytes_shared > 2 * sum(a.nbytes for a in expected.values())  # steps 1 and 2 share step 0's
    for step in (0, 1, 2):
        d = opdiff.load(tmp_path / "d", step=step)
        params = [r for r in d if r.role == "parameter" and r.name in expected]
        assert len(params) == len(expected) > 0
        for r in params:
            assert same_bits(d.tensor(r), expected[r.name])
            assert r.data.get("part") == (None if step == 0 else "rank0/step0")
    # on disk: step 1's parameter lines name step 0's part; its own shards hold no parameter
    lines = [json.loads(x) for x in (tmp_path / "d/rank0/step1/index.jsonl").read_text().splitlines()]
    refs = [x for x in lines if x.get("role") == "parameter"]
    assert refs and all(x["data"]["part"] == "rank0/step0" for x in refs)
    assert _data_bytes(tmp_path / "d/rank0/step1") < _data_bytes(tmp_path / "d/rank0/step0") / 4
    assert json.loads((tmp_path / "d/meta.json").read_text())["format_version"] == FORMAT_VERSION == 3


def test_changed_parameters_are_written_again(tmp_path):
    model, inputs = build("llama")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = dict(inputs, labels=inputs["input_ids"])
    seen = []
    with opdiff.capture(model, tmp_path / "d", level="module", mode="tensor") as cap:
        for _ in range(2):
            seen.append(_params(model))
            model(**batch).loss.backward()
            opt.step()
            opt.zero_grad()
            cap.step()
    changed = [k for k in seen[0] if not same_bits(seen[0][k], seen[1][k])]
    assert changed  # the update changed the weights
    d1 = opdiff.load(tmp_path / "d", step=1)
    for name, value in seen[1].items():
        r = d1[name]
        assert same_bits(d1.tensor(r), value)
        assert (r.data.get("part") is None) == (name in changed)  # changed: stored in step 1; else shared


def test_same_bytes_in_another_tensor_are_stored_once(tmp_path):
    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Identity(), torch.nn.Identity()

        def forward(self, x):
            return self.b(self.a(x).clone()) * 2  # b's input: a copy (another tensor) of a's output

    x, model = torch.randn(64, 64), Twice()
    with opdiff.capture(model, tmp_path / "d", level="module", mode="tensor") as cap:
        out = model(x)
    assert torch.equal(out, x * 2)
    d = opdiff.load(tmp_path / "d")
    r = d["b/Identity#0/forward/input/0"]
    assert r.src is None and r.data["key"] != r.name  # not the same tensor, found by its content
    assert same_bits(d.tensor(r), x.numpy()) and cap.writer.bytes_shared >= x.numel() * 4


class _Flatten(torch.nn.Module):
    def forward(self, x):
        return x


class _Reshaped(torch.nn.Module):
    """a's output [1, n, d] is b's input seen as [n, d] (the same memory); with `scale`, those bytes are first
    doubled through `.data`, an alias whose version counter is its own."""

    def __init__(self, scale: bool):
        super().__init__()
        self.a, self.b, self.scale = torch.nn.Identity(), _Flatten(), scale

    def forward(self, x):
        y = self.a(x.clone())
        if self.scale:
            y.data.mul_(2)
        return self.b(y.view(-1, y.shape[-1])) + 1


@pytest.mark.parametrize("scale", [False, True])
def test_bytes_seen_again_under_size_one_dimensions_are_stored_once(tmp_path, scale):
    """The same memory recorded again as [n, d] after [1, n, d] points at the stored copy (readers take a shape
    that differs only in size-1 dimensions); bytes changed meanwhile behind the version counter's back fail the
    content check and are stored anew: each record reads back what it held when it was recorded."""
    x, model = torch.randn(1, 32, 48), _Reshaped(scale)
    with torch.no_grad(), opdiff.capture(model, tmp_path / "d", level="module", mode="tensor"):
        out = model(x)
    assert torch.equal(out, (x * (2 if scale else 1)).view(32, 48) + 1)
    d = opdiff.load(tmp_path / "d")
    a_out, b_in = d["a/Identity#0/forward/output/0"], d["b/_Flatten#0/forward/input/0"]
    assert a_out.shape == (1, 32, 48) and b_in.shape == (32, 48)
    assert same_bits(d.tensor(a_out), x.numpy())
    want = (x * (2 if scale else 1)).view(32, 48).numpy()
    assert same_bits(d.tensor(b_in), want) and d.tensor(b_in).shape == (32, 48)
    ref = tensor_stats(want)
    assert b_in.hash == content_hash(want, "float32", (32, 48)) and (b_in.stats.min, b_in.stats.max) == (ref.min, ref.max)
    assert b_in.stats.std == pytest.approx(ref.std, rel=1e-12)
    assert b_in.data["key"] == (a_out.data["key"] if not scale else b_in.name)  # a's output is a's input


def test_bytes_at_a_reused_address_are_not_taken_for_the_old_ones(tmp_path):
    """Two tensors at one address in turn (the first freed, its memory reused with other values): the second is
    stored with its own bytes, not pointed at the first's."""
    class Reuse(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Identity(), _Flatten()

        def forward(self, x):
            buf = torch.empty(1, 16, 16)
            buf.copy_(x)
            self.a(buf)
            buf.view(16, 16).neg_()  # in place through a view: the shared version counter moves, memory the same
            return self.b(buf.view(16, 16)).sum()

    x, model = torch.randn(1, 16, 16), Reuse()
    with torch.no_grad(), opdiff.capture(model, tmp_path / "d", level="module", mode="tensor"):
        model(x)
    d = opdiff.load(tmp_path / "d")
    assert same_bits(d.tensor(d["a/Identity#0/forward/output/0"]), x.numpy())
    b_in = d["b/_Flatten#0/forward/input/0"]
    assert same_bits(d.tensor(b_in), (-x).view(16, 16).numpy()) and b_in.data["key"] == b_in.name


def _one_record_dump(path, data_line=None, version=None):
    with DumpWriter(path, {"model": "m"}) as w:
        w.begin(0, 0)
        arr = np.arange(6, dtype=np.float32).reshape(2, 3)
        rec = Record(index=0, name="a/op#0/forward/output/0", node="a/op#0", module="a", op="op", level="module",
                     call=0, direction="forward", role="output", pos="0", dtype="float32", shape=(2, 3),
                     stats=tensor_stats(arr), hash=content_hash(arr, "float32", (2, 3)))
        w.add(rec, arr)
    index = path / "rank0/step0/index.jsonl"
    if data_line is not None:
        line = json.loads(index.read_text())
        line["data"] = data_line
        index.write_text(json.dumps(line) + "\n")
    if version is not None:
        meta = json.loads((path / "meta.json").read_text())
        meta["format_version"] = version
        (path / "meta.json").write_text(json.dumps(meta))
    return arr


def test_version_1_reads_and_unknown_versions_are_refused(tmp_path):
    arr = _one_record_dump(tmp_path / "v1", version=1)
    d = opdiff.load(tmp_path / "v1")
    assert d.meta["format_version"] == 1 and same_bits(d.tensor(d.records[0]), arr)
    _one_record_dump(tmp_path / "v4", version=4)
    with pytest.raises(DumpError, match="format version 4 is not supported"):
        opdiff.load(tmp_path / "v4")


@pytest.mark.parametrize("part, problem", [("../x", "not a part of the run"), ("rank0/step7", "missing"),
                                           ("rank0/../../x", "not a part of the run")])
def test_a_bad_data_part_is_one_line_naming_the_file(tmp_path, part, problem):
    _one_record_dump(tmp_path / "d", {"file": "shards/000000.safetensors", "key": "a/op#0/forward/output/0",
                                      "part": part})
    with pytest.raises(DumpError, match=problem) as err:
        d = opdiff.load(tmp_path / "d")
        d.tensor(d.records[0])
    assert "\n" not in str(err.value) and str(tmp_path / "d") in str(err.value)


def test_compare_reads_data_stored_in_an_earlier_step(tmp_path):
    model, inputs = build("gpt2")
    model.eval()
    for name in ("g", "t"):
        with torch.no_grad(), opdiff.capture(model, tmp_path / name, level="module", mode="tensor") as cap:
            model(**inputs)
            cap.step()
            model(**inputs)
    cmp = compare(opdiff.load(tmp_path / "g", step=1), opdiff.load(tmp_path / "t", step=1))
    params = [p for p in cmp.results if "/parameter#0/" in p.name]
    assert len(params) > 10 and cmp.tensor_bytes > 0
    assert all(p.result == "PASS" for p in cmp.results)
