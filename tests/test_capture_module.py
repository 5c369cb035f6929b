"""level="module" capture of real transformers models, checked against plain forward/backward hooks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import opdiff
from capture_helpers import MODELS, build, no_capture_left, outputs_equal, same_bits, to_np, watch_modules
from opdiff.store.stats import content_hash, tensor_stats


@pytest.mark.parametrize("name", MODELS)
def test_module_records_equal_what_plain_hooks_see(name, tmp_path):
    model, inputs = build(name)
    plain_out, expected, counts = watch_modules(model, inputs)
    with torch.no_grad(), opdiff.capture(model, tmp_path / "d", level="module", mode="tensor"):
        out = model(**inputs)
    assert outputs_equal(out, plain_out), "capture changed the model's output"
    assert no_capture_left(model)

    dump = opdiff.load(tmp_path / "d")
    assert dump.complete and not dump.problems
    mod = [r for r in dump if r.level == "module"]
    assert {r.name for r in mod} == set(expected)
    assert len({r.node for r in mod}) == sum(counts.values())  # one record set per module call
    for r in mod:
        want = expected[r.name]
        assert r.shape == want.shape and r.dtype == str(want.dtype).replace("bool", "bool")
        assert same_bits(dump.tensor(r), want), r.name
        assert r.module == r.node.rsplit("/", 1)[0] if r.module else "/" not in r.node
    # records in execution order: each call's inputs before its outputs
    first = {}
    for r in mod:
        first.setdefault((r.node, r.role), r.index)
    for (node, role), i in first.items():
        if role == "output" and (node, "input") in first:
            assert first[(node, "input")] < i
    # parameters once, bitwise, under their owning module
    params = {(r.module, r.pos): r for r in dump if r.level == "param"}
    seen = set()
    for mpath, m in model.named_modules():
        for pname, p in m.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            r = params.pop((mpath, pname))
            assert r.role == "parameter" and r.op == "parameter" and same_bits(dump.tensor(r), to_np(p))
    assert not params


def test_nested_outputs_and_a_module_called_twice(tmp_path):
    model, inputs = build("t5")
    with torch.no_grad(), opdiff.capture(model, tmp_path / "d", level="module", mode="stats"):
        model(**inputs)
    dump = opdiff.load(tmp_path / "d")
    root_out = {r.pos for r in dump if r.node == "T5ForConditionalGeneration#0" and r.role == "output"}
    assert {"loss", "logits", "encoder_last_hidden_state"} <= root_out
    # the encoder's one dropout module runs twice (after the embedding, and at the end): one record set per call
    first, second = dump["encoder.dropout/Dropout#0/forward/output/0"], dump["encoder.dropout/Dropout#1/forward/output/0"]
    assert first.index < second.index and first.stats != second.stats
    assert "encoder.dropout/Dropout#2/forward/output/0" not in dump
    assert "T5ForConditionalGeneration#0/forward/input/kwargs.labels" in dump


class _Nested(torch.nn.Module):
    """Returns nested tuples, lists and dicts around a real GPT-2."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, pair, input_ids):
        out = self.inner(input_ids=input_ids)
        return out.logits, [pair[0] * 2, {"h": pair[1] + 1}]


def test_positions_inside_nested_inputs_and_outputs(tmp_path):
    inner, inputs = build("gpt2")
    model = _Nested(inner)
    pair = (torch.ones(2, 3), torch.zeros(4))
    with torch.no_grad(), opdiff.capture(model, tmp_path / "d", mode="tensor"):
        model((pair[0], pair[1]), input_ids=inputs["input_ids"])
    dump = opdiff.load(tmp_path / "d")
    names = {r.name for r in dump if r.node == "_Nested#0"}
    assert names == {"_Nested#0/forward/input/0.0", "_Nested#0/forward/input/0.1", "_Nested#0/forward/input/kwargs.input_ids",
                     "_Nested#0/forward/output/0", "_Nested#0/forward/output/1.0", "_Nested#0/forward/output/1.1.h"}
    assert np.all(dump.tensor("_Nested#0/forward/output/1.1.h") == 1)
    # the root's output is the very tensor GPT-2's lm_head produced: linked, and its data stored once
    rec = dump["_Nested#0/forward/output/0"]
    assert rec.src == "inner/GPT2LMHeadModel#0/forward/output/logits" or rec.src.startswith("inner.lm_head/")
    assert rec.data["key"] != rec.name


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_backward_gradients_equal_plain_hooks_and_are_unchanged(name, tmp_path):
    model, inputs = build(name)
    model.train(False)

    def loss_of(out):
        return out.loss if getattr(out, "loss", None) is not None else out.last_hidden_state.pow(2).mean()

    # plain run with full backward hooks on the leaf modules
    grads: dict[str, tuple] = {}
    handles = []
    for path, m in model.named_modules():
        if not list(m.children()):
            handles.append(m.register_full_backward_hook(
                lambda mod, gin, gout, path=path: grads.__setitem__(path, (gin, gout))))
    kw = dict(inputs, labels=inputs["input_ids"]) if name == "gpt2" else inputs
    loss_of(model(**kw)).backward()
    for h in handles:
        h.remove()
    plain_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)

    with opdiff.capture(model, tmp_path / "d", level="module", mode="tensor", backward=True):
        loss_of(model(**kw)).backward()
    assert no_capture_left(model)
    for n, p in model.named_parameters():
        if n in plain_grads:
            assert torch.equal(p.grad, plain_grads[n]), f"capture changed the gradient of {n}"

    dump = opdiff.load(tmp_path / "d")
    checked = 0
    for path, (gin, gout) in grads.items():
        node = next((r.node for r in dump if r.module == path and r.level == "module"), None)
        if node is None or node.endswith("#1"):
            continue
        r = dump.get(f"{node}/backward/output/0")
        if gout[0] is not None:
            assert r is not None and same_bits(dump.tensor(r), to_np(gout[0])), path
            checked += 1
        r = dump.get(f"{node}/backward/input/0")
        if gin and gin[0] is not None:
            assert r is not None and np.allclose(dump.tensor(r), to_np(gin[0]), rtol=1e-6, atol=1e-7), path
    assert checked >= 10
    # parameter gradients, once, under the owning module
    pg = {(r.module, r.pos): r for r in dump if r.level == "param" and r.role == "gradient"}
    for n, g in plain_grads.items():
        mpath, _, pname = n.rpartition(".")
        if (mpath, pname) in pg:
            assert same_bits(dump.tensor(pg[(mpath, pname)]), to_np(g))
    assert len(pg) >= len(plain_grads) - 1  # tied weights are recorded once


def test_modes_agree_stats_hash_and_data(tmp_path):
    model, inputs = build("gpt2")
    dumps = {}
    for mode in ("tensor", "stats", "hash"):
        with torch.no_grad(), opdiff.capture(model, tmp_path / mode, mode=mode):
            model(**inputs)
        dumps[mode] = opdiff.load(tmp_path / mode)
    t, s, h = dumps["tensor"], dumps["stats"], dumps["hash"]
    assert [r.name for r in t] == [r.name for r in s] == [r.name for r in h]
    assert not list((tmp_path / "stats" / "rank0" / "step0" / "shards").iterdir())
    for rt, rs, rh in zip(t, s, h):
        data = t.tensor(rt)
        ref = tensor_stats(np.asarray(data))
        assert rs.data is None and rs.hash is None and rh.data is None
        assert rh.hash == rt.hash == content_hash(np.asarray(data), rt.dtype, rt.shape)
        for st in (rs.stats, rh.stats, rt.stats):
            assert (st.numel, st.min, st.max, st.nan, st.posinf, st.neginf, st.zeros) == \
                   (ref.numel, ref.min, ref.max, ref.nan, ref.posinf, ref.neginf, ref.zeros)
            for k in ("mean", "std", "norm"):
                assert getattr(st, k) == pytest.approx(getattr(ref, k), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_tensors_round_trip(dtype, tmp_path):
    model, inputs = build("gpt2")
    model.to(dtype)
    plain_out, expected, _ = watch_modules(model, inputs)
    with torch.no_grad(), opdiff.capture(model, tmp_path / "d", mode="tensor"):
        out = model(**inputs)
    assert outputs_equal(out, plain_out)
    dump = opdiff.load(tmp_path / "d")
    name = str(dtype).removeprefix("torch.")
    low = [r for r in dump if r.dtype == name]
    assert len(low) > 50
    for r in low:
        data = dump.tensor(r)
        if r.level == "module":
            assert same_bits(data, expected[r.name])
        ref = tensor_stats(np.asarray(data))
        assert (r.stats.min, r.stats.max, r.stats.zeros) == (ref.min, ref.max, ref.zeros)
        assert r.stats.norm == pytest.approx(ref.norm, rel=1e-12)


def test_inference_mode_tensors_are_linked_and_measured_each_time(tmp_path):
    model, inputs = build("llama")
    plain_out, expected, _ = watch_modules(model, inputs)
    with torch.inference_mode(), opdiff.capture(model, tmp_path / "d", mode="tensor"):
        out = model(**inputs)
    assert outputs_equal(out, plain_out)
    dump = opdiff.load(tmp_path / "d")
    mod = [r for r in dump if r.level == "module"]
    assert all(same_bits(dump.tensor(r), expected[r.name]) for r in mod)
    # no version counter: never "the same tensor unchanged" (measured and hashed again: bytes found in the
    # run by their content point at the stored copy), but still linked to its producer
    linked = [r for r in mod if r.src]
    assert linked and all(dump[r.data["key"]].hash == r.hash for r in linked)
    assert dump["model.layers.1/LlamaDecoderLayer#0/forward/input/0"].src == \
        "model.layers.0/LlamaDecoderLayer#0/forward/output/0"
