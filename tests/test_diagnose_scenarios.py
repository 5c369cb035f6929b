"""Diagnose on real transformers (opdiff.zoo) with faults injected into a middle block, benign
changes and input mismatches: the verdict and the culprit's module path, at module and aten level
(and api level on a third of the cases).

Golden dumps are captured once per (model, level) and shared; each case captures its target.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from opdiff import load
from opdiff.capture import capture
from opdiff.diagnose import diagnose
from opdiff.testing import faults, zoo

MODELS = ("gpt2", "llama", "bert", "vit", "t5", "resnet")


def _cases() -> list[tuple[str, str]]:
    """Every fault of opdiff.faults (the issue's list and opdiff's own) on every architecture it applies to."""
    out = []
    for m in MODELS:
        model, _ = zoo.build(m)
        out += [(f, m) for f in faults.FAULTS if faults.applicable(f, model)]
    return out


CASES = _cases()
LEVELS = ("module", "aten")


@pytest.fixture(scope="module")
def goldens(tmp_path_factory):
    """Golden dump paths by (model, level, prepared), captured on first use and shared."""
    root = tmp_path_factory.mktemp("goldens")
    cache: dict[tuple[str, str, bool], str] = {}

    def get(model_name: str, level: str, fault: str) -> str:
        hot = faults.FAULTS[fault].prepare is not None  # the overflow case heats one attention layer in both runs
        key = (model_name, level, hot)
        if key not in cache:
            model, inputs = zoo.build(model_name)
            faults.prepare(fault, model)
            path = root / f"{model_name}-{level}-{'hot' if hot else 'plain'}"
            with capture(model, path, level=level, mode="tensor"):
                faults.run(model, inputs)
            cache[key] = str(path)
        return cache[key]

    return get


# the api level (TorchFunctionMode) on every third case, to keep the suite's time in budget
PARAMS = [(f, m, level) for f, m in CASES for level in LEVELS] + [(f, m, "api") for f, m in CASES[::3]]


@pytest.mark.parametrize("fault,model_name,level", PARAMS, ids=[f"{f}-{m}-{lv}" for f, m, lv in PARAMS])
def test_scenario(fault, model_name, level, goldens, tmp_path):
    golden_path = goldens(model_name, level, fault)
    _, _, target, inj = faults.build_pair(model_name, fault)
    with capture(target, tmp_path / "target", level=level, mode="tensor"):
        faults.run(target, inj.inputs, inj)
    d = diagnose(load(golden_path), load(tmp_path / "target"), replay=False)
    assert d.verdict in inj.verdicts, d.summary
    if inj.kind in ("fault", "overflow"):
        assert d.culprit is not None
        assert d.culprit.module == inj.module, d.summary
        assert d.culprit.golden or d.culprit.target
        assert d.path_of_divergence and d.path_of_divergence[0]["module"].startswith(inj.module.rsplit(".", 1)[0])
        assert d.candidates[0].module == inj.module
    else:
        assert d.culprit is None, d.summary
    if inj.kind == "inputs":
        assert d.evidence.inputs, "the differing model inputs are shown"
        assert all(e["module"] == "" for e in d.evidence.inputs)
    if inj.kind == "overflow":
        assert d.culprit.golden_overflows is False
