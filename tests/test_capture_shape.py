"""The one shape of capture backends: option schema, session skeleton, lazy backends, the entry-point loader."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from opdiff.base.errors import OpdiffError
from opdiff.capture import BACKENDS
from opdiff.capture.backend import LazyBackend
from opdiff.capture.entry import load_entry, load_function
from opdiff.capture.options import LEVELS, Options
from opdiff.capture.session import Session
from opdiff.store import load
from opdiff.store.writer import DumpWriter
from opdiff.testing.synthetic import Tensor, make_record


@pytest.mark.parametrize("backend,who", [("torch", "opdiff.capture"), ("tensorflow", "opdiff.tf.capture"),
                                         ("onnxruntime", "capture-onnx")])
def test_options_checked_alike_for_every_backend(backend, who):
    good = Options.parse(who, backend, level=LEVELS[backend][0], mode="stats", include=r"^a", exclude="b$")
    assert good.wanted("a.x", "op") and not good.wanted("a.b", "op") and not good.wanted("x", "op")
    for kw, what in (({"level": "nope", "mode": "tensor"}, "level must be one of"),
                     ({"level": LEVELS[backend][0], "mode": "raw"}, "mode must be one of"),
                     ({"level": LEVELS[backend][0], "mode": "tensor", "include": "("}, "bad include regex")):
        with pytest.raises(OpdiffError) as err:
            Options.parse(who, backend, **kw)
        assert str(err.value).startswith(f"{who}: {what}") and "\n" not in str(err.value)


def test_every_backend_is_lazy_and_dispatches_without_its_framework(tmp_path):
    """All three are LazyBackends; an .onnx path picks ORT's without importing onnx or onnxruntime."""
    assert all(isinstance(b, LazyBackend) for b in BACKENDS)
    assert [b.framework for b in BACKENDS] == ["torch", "tensorflow", "onnxruntime"]
    ort = next(b for b in BACKENDS if b.handles(tmp_path / "m.onnx"))
    assert ort.framework == "onnxruntime" and not any(b.handles(object()) for b in BACKENDS)
    before = set(sys.modules)
    cap = ort.capture(tmp_path / "m.onnx", tmp_path / "d")
    assert callable(cap) and hasattr(cap, "run")
    assert not {m for m in set(sys.modules) - before if m.split(".")[0] in ("onnx", "onnxruntime")}


class _Arrays(Session):
    """A backend of this test: 'observes' a list of numpy arrays; fails where told."""

    who = "arrays.capture"

    def __init__(self, path, fail_install=False):
        self.path, self.fail_install, self.installed, self.steps = path, fail_install, False, 0

    def _open(self):
        w = DumpWriter(self.path, {"framework": "numpy", "mode": "tensor"})
        w.begin(0, 0)
        return w

    def _install(self):
        self.installed = True
        if self.fail_install:
            raise RuntimeError("install failed")

    def _uninstall(self):
        self.installed = False

    def _next_step(self):
        self.steps += 1
        self.writer.begin(0, self.steps)

    def add(self, i):
        a = np.full((2, 3), i, np.float32)
        self.writer.add(make_record(Tensor(f"m{i}", "Op", "output", "0", a)), a)


def test_session_skeleton_closes_complete_only_after_a_clean_run(tmp_path):
    with _Arrays(tmp_path / "ok") as s:
        s.add(0)
        s.step()
        s.add(1)
    assert not s.installed and load(tmp_path / "ok").complete and load(tmp_path / "ok").parts == [(0, 0), (0, 1)]
    with pytest.raises(OpdiffError, match="entered only once"):
        s.__enter__()

    with pytest.raises(ValueError), _Arrays(tmp_path / "raised") as s2:
        s2.add(0)
        raise ValueError("the model's own error")
    assert not s2.installed and not load(tmp_path / "raised").complete

    s3 = _Arrays(tmp_path / "bad", fail_install=True)
    with pytest.raises(RuntimeError, match="install failed"):
        s3.__enter__()
    assert not s3.installed and not load(tmp_path / "bad").complete
    with pytest.raises(OpdiffError, match="outside the `with` block"):
        _Arrays(tmp_path / "never").step()


def test_one_loader_for_entry_points(tmp_path, monkeypatch):
    script = tmp_path / "entries.py"
    script.write_text("import numpy as np\nLOADS = globals().get('LOADS', 0) + 1\n"
                      "def golden(): return 'model', {'x': 1}\ndef target(): return 'model'\nVALUE = 3\n")
    g = load_function(f"{script}:golden")
    t = load_function(f"{script}:target")
    assert g.__globals__ is t.__globals__ and g.__globals__["LOADS"] == 1  # one script, executed once
    assert load_entry(f"{script}:golden") == ("model", {"x": 1})
    with pytest.raises(OpdiffError, match="must return \\(model, inputs\\)"):
        load_entry(f"{script}:target")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_function("entries:golden")() == ("model", {"x": 1})  # the same file as an importable module
    for bad, msg in ((f"{script}:VALUE", "has no function 'VALUE'"), (f"{script}:nope", "has no function 'nope'"),
                     (f"{tmp_path}/missing.py:f", "script not found"), ("no_such_module_x:f", "cannot import module"),
                     ("entries", "expected MODULE:FUNCTION"), ("entries:1x", "expected MODULE:FUNCTION")):
        with pytest.raises(OpdiffError, match=msg):
            load_function(bad)
