"""Replay of single ops (opdiff.replay) on real captures: aten and api call lines, rebuilt leaf modules,
golden inputs cast to the target's dtypes, and what cannot be replayed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from opdiff import load
from opdiff.capture import capture
from opdiff.errors import OpdiffError
from opdiff.replay import find_node, replay
from opdiff.replay.torch_replay import arg_differences, decode, to_numpy, to_torch
from opdiff.testing import faults


def _pair(tmp_path, model_name: str, fault: str, level: str, **kw):
    golden, inputs, target, inj = faults.build_pair(model_name, fault, **kw)
    with capture(golden, tmp_path / "golden", level=level, mode="tensor"):
        faults.run(golden, inputs)
    with capture(target, tmp_path / "target", level=level, mode="tensor"):
        faults.run(target, inj.inputs, inj)
    return load(tmp_path / "golden"), load(tmp_path / "target")


def test_api_layer_norm_with_other_eps(tmp_path):
    g, t = _pair(tmp_path, "bert", "norm_eps", "api", layers=3)
    node = find_node(t, r"layer\.1\.attention\.output\.LayerNorm/torch\.nn\.functional\.layer_norm")
    res = replay(g, t, node)
    assert res.status == "ok" and res.confirmed is True
    assert res.arg_differences == [{"arg": "kwargs.eps", "golden": 1e-12, "target": 1e-4}]
    out = res.outputs[0]
    assert out["replay_vs_target"]["error_units"] == 0  # same op, same inputs, same arguments: bitwise
    assert out["replay_vs_golden"]["error_units"] > 100
    assert out["golden_call_vs_golden"]["error_units"] == 0  # golden's own call replays golden exactly


def test_module_level_linear_rebuilt_from_parameters(tmp_path):
    g, t = _pair(tmp_path, "llama", "linear_bf16_input", "module", layers=3)
    res = replay(g, t, "model.layers.1.mlp.gate_proj/Linear#0")
    assert res.status == "ok" and res.confirmed is True
    out = res.outputs[0]
    assert out["replay_vs_golden"]["error_units"] <= 32  # the reference Linear on golden's input gives golden
    assert out["target_vs_golden"]["error_units"] > 1000
    assert "computes something else" in res.conclusion


def test_target_dtype_is_applied(tmp_path):
    g, t = _pair(tmp_path, "gpt2", "bf16_autocast", "aten", layers=2)
    node = find_node(t, r"h\.0\.attn\.c_attn/aten\.addmm")
    res = replay(g, t, node)
    assert res.status == "ok"
    assert set(res.input_dtypes.values()) == {"bfloat16"}
    assert res.outputs[0]["dtype"] == "bfloat16"
    assert res.outputs[0]["replay_vs_target"]["error_units"] <= 1  # bf16 kernel on bf16-cast golden inputs


def test_unsupported_module_says_why(tmp_path):
    g, t = _pair(tmp_path, "gpt2", "norm_eps", "module", layers=2)
    res = replay(g, t, "transformer.h.1.ln_1/LayerNorm#0")
    assert res.status == "unsupported" and "cannot be rebuilt" in res.reason


def test_find_node_errors(tmp_path):
    g, t = _pair(tmp_path, "gpt2", "identical", "aten", layers=2)
    with pytest.raises(OpdiffError, match="matches"):
        find_node(t, "aten.addmm")
    with pytest.raises(OpdiffError, match="no op matches"):
        find_node(t, "nothing-like-this")
    rec = t.records[-1]
    assert find_node(t, rec.name) == rec.node


def test_call_line_decoding_and_tensor_round_trip():
    x = torch.randn(3, 4).to(torch.bfloat16)
    assert torch.equal(to_torch(to_numpy(x), "bfloat16"), x)
    args = decode([{"tensor": "a"}, {"dtype": "float16"}, {"float": "inf"}, {"slice": [None, 2, None]}, "torch.strided",
                   {"dict": {"k": [1, 2]}}], lambda name: name.upper())
    assert args == ["A", torch.float16, float("inf"), slice(None, 2, None), torch.strided, {"k": [1, 2]}]
    with pytest.raises(Exception, match="object"):
        decode({"object": "transformers.cache_utils.DynamicCache"}, lambda n: n)
    diffs = arg_differences({"args": [{"tensor": "g"}, 1e-5]}, {"args": [{"tensor": "t"}, 1e-4]})
    assert diffs == [{"arg": "args[1]", "golden": 1e-5, "target": 1e-4}]


def test_replay_of_an_indexing_op_with_a_tuple_index(tmp_path):
    """Call lines keep indexing tuples as {"tuple": [...]}: replay must rebuild them as tuples."""
    import torch

    class Slice(torch.nn.Module):
        def forward(self, x):
            return x[:, 1:3] * 2

    m, x = Slice(), torch.randn(4, 5)
    for name in ("g", "t"):
        with capture(m, tmp_path / name, level="api", mode="tensor"):
            m(x)
    t = load(tmp_path / "t")
    node = next(c["node"] for c in t.calls if c["op"] == "torch.Tensor.__getitem__")
    r = replay(load(tmp_path / "g"), t, node)
    assert r.status == "ok", r.reason
    assert r.outputs[0]["shape"] == [4, 2]
    assert r.outputs[0]["replay_vs_golden"]["MaxAbsErr"] == 0.0
