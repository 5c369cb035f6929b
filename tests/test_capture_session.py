"""The capture session: steps, include/exclude, rank, source lines, meta, failures, refusing a used directory."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch

import opdiff
from capture_helpers import build, no_capture_left, outputs_equal, same_bits, to_np
from opdiff.errors import DumpError, OpdiffError


def test_training_steps_selected_parameters_once_per_step(tmp_path):
    model, inputs = build("gpt2")
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    snapshots = {}
    modes_seen = []
    probe = model.transformer.h[0].register_forward_hook(
        lambda *a: modes_seen.append(torch._C._is_torch_function_mode_enabled()))
    with opdiff.capture(model, tmp_path / "d", level="api", mode="tensor", backward=True, steps="0,2") as cap:
        for step in range(4):
            snapshots[step] = {n: to_np(p) for n, p in model.named_parameters()}
            model(**inputs, labels=inputs["input_ids"]).loss.backward()
            opt.step()
            opt.zero_grad()
            cap.step()
    probe.remove()
    assert modes_seen == [True, False, True, False]  # unselected steps run without any mode
    dump = opdiff.load(tmp_path / "d")
    assert dump.parts == [(0, 0), (0, 2)] and dump.meta["steps_captured"] == [0, 2]
    n_params = len({id(p) for p in model.parameters()})
    for step in (0, 2):
        part = dump.with_part(0, step)
        params = [r for r in part if r.role == "parameter"]
        assert len(params) == n_params == len({r.name for r in params})
        grads = [r for r in part if r.role == "gradient"]
        assert len(grads) == n_params and all(r.call == 0 for r in grads)
        w = part["transformer.h.0.mlp.c_fc/parameter#0/forward/parameter/weight"]
        assert same_bits(part.tensor(w), snapshots[step]["transformer.h.0.mlp.c_fc.weight"])
    # the same names in both steps: counters restart with each step
    names0 = {r.name for r in dump.with_part(0, 0)}
    assert names0 == {r.name for r in dump.with_part(0, 2)}


def test_include_and_exclude(tmp_path):
    model, inputs = build("gpt2")
    with torch.no_grad():
        with opdiff.capture(model, tmp_path / "inc", include=r"h\.1\.mlp"):
            model(**inputs)
        with opdiff.capture(model, tmp_path / "exc", level="api", mode="stats", exclude=r"Dropout|dropout|torch\.Tensor\."):
            model(**inputs)
    inc = opdiff.load(tmp_path / "inc")
    kept = {r.module for r in inc if r.module}
    assert kept and all(re.search(r"h\.1\.mlp", m) for m in kept)
    assert any(r.node == "GPT2LMHeadModel#0" for r in inc)  # the model's own inputs/outputs always stay
    assert all(r.module.startswith("transformer.h.1.mlp") for r in inc if r.level == "param")
    exc = opdiff.load(tmp_path / "exc")
    assert not any("dropout" in r.op.lower() or r.op.startswith("torch.Tensor.") for r in exc)
    assert any(r.op == "torch.nn.functional.layer_norm" for r in exc)


@pytest.mark.parametrize("level", ["module", "api", "aten"])
def test_model_raising_leaves_no_hooks_and_a_readable_partial_dump(level, tmp_path):
    model, inputs = build("gpt2")
    with torch.no_grad():
        plain = model(**inputs)

    def boom(*_):
        raise RuntimeError("model failed")

    h = model.transformer.h[1].mlp.c_proj.register_forward_pre_hook(boom)
    with pytest.raises(RuntimeError, match="model failed"):
        with torch.no_grad(), opdiff.capture(model, tmp_path / "d", level=level, mode="tensor"):
            model(**inputs)
    h.remove()
    assert no_capture_left(model)
    with torch.no_grad():
        assert outputs_equal(model(**inputs), plain)
    dump = opdiff.load(tmp_path / "d")
    assert not dump.complete and "did not finish" in dump.problems[0]
    ran = {r.module for r in dump if r.level != "param"}
    assert "transformer.h.1.mlp.act" in ran
    # c_proj's call began (opdiff's pre-hook runs before the user's) but raised in the user's pre-hook: no output
    assert not any(r.module == "transformer.h.1.mlp.c_proj" and r.role == "output" for r in dump)
    assert not any(r.module.startswith("transformer.h.2") for r in dump)
    for r in dump:
        if r.data:
            dump.tensor(r)  # every record that made it to disk reads back


def test_existing_directory_refused_unless_overwrite(tmp_path):
    model, inputs = build("gpt2")
    with torch.no_grad(), opdiff.capture(model, tmp_path / "d", mode="stats"):
        model(**inputs)
    with pytest.raises(DumpError, match="not empty"):
        opdiff.capture(model, tmp_path / "d").__enter__()
    with torch.no_grad(), opdiff.capture(model, tmp_path / "d", mode="hash", overwrite=True):
        model(**inputs)
    assert opdiff.load(tmp_path / "d").meta["mode"] == "hash"
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(DumpError, match="not an opdiff dump"):
        opdiff.capture(model, other, overwrite=True).__enter__()
    assert (other / "keep.txt").read_text() == "mine"
    assert no_capture_left(model)


def test_meta_rank_and_source_lines(tmp_path):
    model, inputs = build("bert")
    with torch.no_grad(), opdiff.capture(model, tmp_path / "d", level="module", mode="stats", rank=3, source=True,
                                         include="encoder"):
        model(**inputs)
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    for key, value in {"framework": "torch", "framework_version": torch.__version__, "device": "cpu",
                       "default_dtype": "float32", "seed": torch.initial_seed(), "level": "module", "mode": "stats",
                       "backward": False, "steps": "all", "include": "encoder", "exclude": None, "rank": 3,
                       "world_size": 1, "complete": True, "model": "BertModel"}.items():
        assert meta[key] == value, key
    dump = opdiff.load(tmp_path / "d")
    assert dump.rank == 3 and (tmp_path / "d" / "rank3" / "step0" / "index.jsonl").exists()
    rec = dump["encoder.layer.0.attention/BertAttention#0/forward/input/0"]
    path, line = rec.source.rsplit(":", 1)
    assert path.endswith("modeling_bert.py")
    assert "self.attention(" in open(path).read().splitlines()[int(line) - 1]


def test_bad_options_are_one_line_errors(tmp_path):
    model, _ = build("gpt2")
    with pytest.raises(OpdiffError, match="level must be one of"):
        opdiff.capture(model, tmp_path / "a", level="ops")
    with pytest.raises(OpdiffError, match="mode must be one of"):
        opdiff.capture(model, tmp_path / "a", mode="full")
    with pytest.raises(OpdiffError, match="bad steps"):
        opdiff.capture(model, tmp_path / "a", steps="1,x")
    with pytest.raises(OpdiffError, match="bad include regex"):
        opdiff.capture(model, tmp_path / "a", include="(")
    with pytest.raises(OpdiffError, match="outside the `with` block"):
        opdiff.capture(model, tmp_path / "a").step()
    with pytest.raises(TypeError, match="no capture for a model"):
        opdiff.capture(object(), tmp_path / "a")
    assert not (tmp_path / "a").exists()


_DIST_WORKER = """
import sys, torch, torch.distributed as dist
import opdiff
rank, root = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method=f"file://{root}/rendezvous", rank=rank, world_size=2)
model = torch.nn.Linear(4, 3)  # the rank plumbing needs no big model (and no transformers import)
with torch.no_grad(), opdiff.capture(model, f"{root}/r{rank}", mode="stats"):
    model(torch.ones(2, 4))
dist.barrier()
dist.destroy_process_group()
"""


def test_rank_comes_from_torch_distributed(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", _DIST_WORKER, str(r), str(tmp_path)], stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    for r in (0, 1):
        dump = opdiff.load(tmp_path / f"r{r}")
        assert dump.rank == r and dump.meta["rank"] == r and dump.meta["world_size"] == 2
        assert (tmp_path / f"r{r}" / f"rank{r}" / "step0" / "index.jsonl").exists()
