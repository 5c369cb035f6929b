"""msprobe dumps of other frameworks as msprobe's own repository publishes them: MindSpore (Cell, Primitive,
Mint, Functional, Tensor, Distributed names; MindSpore dtype spellings) beside PyTorch's of the same layer."""

from __future__ import annotations

import pytest

from opdiff.compare import compare
from opdiff.store import load
from opdiff.store.readers.msprobe_names import dtype_of, parse_key
from test_dump_address import cli, published


@pytest.mark.parametrize("spelling,name", [
    ("Float32", "float32"), ("BFloat16", "bfloat16"), ("Int64", "int64"), ("Bool", "bool"), ("UInt8", "uint8"),
    ("Float16", "float16"), ("mindspore.float32", "float32"), ("torch.bfloat16", "bfloat16"), ("Long", "int64"),
    ("Half", "float16"), ("Float", "float32"), ("Byte", "uint8"), ("Int32", "int32"),
])
def test_every_dtype_spelling(spelling, name):
    assert dtype_of(spelling) == name


def test_framework_names_are_mapped_with_the_original_kept():
    assert parse_key("Mint.cos.0.forward", "mindspore").op == "mindspore.mint.cos"
    assert parse_key("Functional.flash_attention_score.0.forward", "mindspore").op == "mindspore.ops.flash_attention_score"
    assert parse_key("Functional.gelu.0.forward", "mindtorch").op == "torch.nn.functional.gelu"  # msadapter
    assert parse_key("Functional.gelu.0.forward").op == "torch.nn.functional.gelu"


def test_published_mindspore_dump_reads_every_tensor():
    """msprobe's MindSpore fixture: every tensor is a record (none skipped for its dtype), names mapped."""
    d = load(published() / "mindspore_vs_pytorch_layer" / "mindspore_data")
    assert d.meta["framework"] == "mindspore" and not d.problems and len(d) == 31
    assert {r.dtype for r in d} >= {"bfloat16", "float32", "int64", "int32", "bool", "uint8"}
    ops = {r.op for r in d}
    assert {"mindspore.mint.logical_or", "mindspore.ops.flash_attention_score", "mindspore.communication.all_reduce",
            "mindspore.mint.cos", "VocabParallelEmbedding"} <= ops
    assert any(o.startswith("mindspore.ops.Primitive.") for o in ops)
    rec = next(r for r in d if r.op == "mindspore.mint.cos" and r.role == "output")
    assert rec.extra["msprobe_tensor"] == "Mint.cos.0.forward.output.0" and rec.extra["msprobe_dtype"] == "Float32"
    r = cli("info", str(published() / "layer_mapping" / "mindspore" / "dump.json"))
    assert r.returncode == 0 and "records" in r.stdout, r.stderr


def test_pytorch_golden_against_mindspore_target_compares(tmp_path):
    """The same layer under PyTorch and MindSpore: statistics compare where the sequence pairs them."""
    base = published() / "mindspore_vs_pytorch_layer"
    cmp = compare(load(base / "pytorch_data"), load(base / "mindspore_data"))
    done = [p for p in cmp.results if p.status == "compared"]
    assert done and all(p.mode == "stats" for p in done)
    r = cli("compare", str(base / "pytorch_data"), str(base / "mindspore_data" / "dump.json"), "-o", str(tmp_path / "o"))
    assert r.returncode in (0, 1) and (tmp_path / "o" / "compare.csv").exists(), r.stderr


def test_msprobe_layer_mapping_pairs_mindspore_cells_with_pytorch_modules(tmp_path):
    """msprobe's own layer_mapping.yaml (`--map`): the MindSpore target's Cells take the PyTorch golden's
    module paths (TopLayer network_with_loss -> module, attention -> self_attention), so more pairs compare."""
    from opdiff.match.mapping import load_mapping

    base = published() / "mindspore_vs_pytorch_layer"
    g, t = load(base / "pytorch_data"), load(base / "mindspore_data")
    mapping = load_mapping(base / "layer_mapping.yaml")
    assert mapping.layers["ParallelTransformerLayer"] == {"attention": "self_attention"}
    plain = [p for p in compare(g, t).results if p.status == "compared"]
    mapped = compare(g, t, mapping=mapping)
    done = {(p.golden.name, p.target.name) for p in mapped.results if p.status == "compared"}
    assert len(done) > len(plain)
    emb = "language_model.embedding.word_embeddings/VocabParallelEmbedding#0/forward/output/0"
    assert (f"module.module.{emb}", f"network_with_loss.module.{emb}") in done
    att = "language_model.encoder.layers.0.{}/ParallelAttention#0/forward/output/0"
    assert (f"module.module.{att.format('self_attention')}", f"network_with_loss.module.{att.format('attention')}") in done
    r = cli("compare", str(base / "pytorch_data"), str(base / "mindspore_data"), "--map", str(base / "layer_mapping.yaml"),
            "-o", str(tmp_path / "o"))
    assert r.returncode in (0, 1), r.stderr


API_MAPPING = """\
- ms_api: Functional.flash_attention_score
  pt_api: NPU.npu_fusion_attention
  ms_args: [0, 1, 2, attn_mask]
  pt_args: [0, 1, 2, atten_mask]
  ms_output: [0]
  pt_output: [0]
- ms_api: Mint.logical_or
  pt_api: Tensor.__or__
  ms_args: [1, 0]
  pt_args: [0, 1]
- ms_api: Primitive.norm.RmsNorm
  pt_api: NPU.npu_rms_norm
"""


def test_msprobe_api_mapping_pairs_apis_in_mapped_modules_by_name(tmp_path):
    """msprobe's api_mapping.yaml (a second `--map`, beside the layer mapping): API records inside layer-mapped
    modules pair by the mapped API name, with its argument positions (a swap and a renamed kwarg) and
    msprobe's own Mint -> Torch rule (`Mint.cos` is `Torch.cos` without an entry)."""
    from opdiff.match.mapping import load_mapping, merge

    base = published() / "mindspore_vs_pytorch_layer"
    (tmp_path / "api.yaml").write_text(API_MAPPING)
    g, t = load(base / "pytorch_data"), load(base / "mindspore_data")
    layers = load_mapping(base / "layer_mapping.yaml")
    apis = load_mapping(tmp_path / "api.yaml")
    # the MindSpore dump holds no record of the ParallelTransformerLayer Cell, so its layer entry cannot apply
    (tmp_path / "own.yaml").write_text("rename:\n  - {target: '(?<=layers\\.0\\.)attention(?=[./])', golden: self_attention}\n")
    own = load_mapping(tmp_path / "own.yaml")
    assert [a.target for a in apis.apis] == ["Functional.flash_attention_score", "Mint.logical_or",
                                             "Primitive.norm.RmsNorm"]
    kinds = {(p.golden.name, p.target.name): p for p in compare(g, t, mapping=merge([layers, apis, own])).results
             if p.golden is not None and p.target is not None}
    before = {(p.golden.name, p.target.name) for p in compare(g, t, mapping=merge([layers, own])).results
              if p.golden is not None and p.target is not None}
    pre = "module.module.language_model.", "network_with_loss.module.language_model."
    att = "encoder.layers.0.{}/{}#0/forward/{}"
    fa = "self_attention.core_attention_flash", "attention"
    want = [
        (att.format(fa[0], "torch_npu.npu_fusion_attention", "input/kwargs.atten_mask"),
         att.format(fa[1], "mindspore.ops.flash_attention_score", "input/kwargs.attn_mask")),
        (att.format(fa[0], "torch_npu.npu_fusion_attention", "output/0"),
         att.format(fa[1], "mindspore.ops.flash_attention_score", "output/0")),
        ("embedding.word_embeddings/torch.Tensor.__or__#0/forward/input/0",
         "embedding.word_embeddings/mindspore.mint.logical_or#0/forward/input/1"),  # ms_args [1, 0] -> pt_args [0, 1]
        ("embedding.word_embeddings/torch.Tensor.__or__#0/forward/input/1",
         "embedding.word_embeddings/mindspore.mint.logical_or#0/forward/input/0"),
        (att.format("self_attention", "torch.cos", "output/0"), att.format("attention", "mindspore.mint.cos", "output/0")),
        ("encoder.layers.0.input_norm/torch_npu.npu_rms_norm#0/forward/output/1",
         "encoder.layers.0.input_norm/mindspore.ops.Primitive.norm.RmsNorm#0/forward/output/1"),
    ]
    for gname, tname in want:
        key = (pre[0] + gname, pre[1] + tname)
        assert key in kinds, key
        assert kinds[key].status == "compared" and kinds[key].match == "mapping", (key, kinds[key].match)
    assert (pre[0] + want[2][0], pre[1] + want[2][1]) not in before  # position alone pairs input 0 with input 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {ms_api: Mint.cos, pt_api: Torch.cos, ms_args: [0, 1], pt_args: [0]}\n")
    r = cli("compare", str(base / "pytorch_data"), str(base / "mindspore_data"), "--map", str(bad), "-o", str(tmp_path / "x"))
    assert r.returncode == 2 and "ms_args and pt_args" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = cli("compare", str(base / "pytorch_data"), str(base / "mindspore_data"), "--map", str(base / "layer_mapping.yaml"),
            "--map", str(tmp_path / "api.yaml"), "--map", str(tmp_path / "own.yaml"), "-o", str(tmp_path / "o"), "--format", "csv")
    assert r.returncode in (0, 1), r.stderr
    assert "mindspore.mint.logical_or#0/forward/input/1" in (tmp_path / "o" / "compare.csv").read_text()


def _mindspore_tensor_dump(root, relu_shift=0.0):
    """A tensor-task dump laid out as msprobe's MindSpore dumper writes it (MindSpore itself is not installable
    here, so numpy writes the files): dump.json with `data_name`s, `dump_tensor_data/{api}.{forward}.{role}.{i}.npy`,
    bfloat16 saved widened to float32 as msprobe's save_tensor_as_npy does."""
    import json

    import ml_dtypes
    import numpy as np

    part = root / "step0" / "rank0"
    (part / "dump_tensor_data").mkdir(parents=True)
    rng = np.random.RandomState(0)
    x = rng.randn(2, 3).astype(np.float32)
    w = rng.randn(3, 4).astype(ml_dtypes.bfloat16)
    y = (x @ w.astype(np.float32)).astype(np.float32)
    z = np.maximum(y + relu_shift, 0).astype(np.float32)
    tensors = {"Mint.matmul.0.forward": {"input_args": [("x", x), ("w", w)], "output": [("y", y)]},
               "MintFunctional.relu.0.forward": {"input_args": [("y", y)], "output": [("z", z)]}}
    data = {}
    for api, roles in tensors.items():
        data[api] = {"input_kwargs": {}}
        for role, items in roles.items():
            entries = []
            for i, (_, a) in enumerate(items):
                name = f"{api}.{role.split('_')[0]}.{i}.npy"
                np.save(part / "dump_tensor_data" / name, a.astype(np.float32) if a.dtype == ml_dtypes.bfloat16 else a)
                f = a.astype(np.float32)
                entries.append({"type": "mindspore.Tensor", "dtype": "BFloat16" if a.dtype == ml_dtypes.bfloat16 else "Float32",
                                "shape": list(a.shape), "Max": float(f.max()), "Min": float(f.min()), "Mean": float(f.mean()),
                                "Norm": float(np.linalg.norm(f)), "data_name": name})
            data[api][role] = entries
    doc = {"task": "tensor", "level": "L1", "framework": "mindspore", "dump_data_dir": str(part / "dump_tensor_data"),
           "data": data}
    (part / "dump.json").write_text(json.dumps(doc))
    return part


def test_mindspore_tensor_task_npy_data_is_read_and_compared(tmp_path):
    """MindSpore tensor-task data (.npy): every tensor reads with its values (bfloat16 narrowed back exactly), a
    changed tensor fails where it changed and only there, and a file that disagrees with dump.json is an error."""
    import ml_dtypes
    import numpy as np

    golden = _mindspore_tensor_dump(tmp_path / "g")
    _mindspore_tensor_dump(tmp_path / "t", relu_shift=0.75)
    g, t = load(tmp_path / "g"), load(tmp_path / "t")
    assert not g.problems and len(g) == 5 and g.meta["mode"] == "tensor"
    w = next(r for r in g if r.op == "mindspore.mint.matmul" and r.pos == "1")
    assert w.dtype == "bfloat16" and w.extra["msprobe_tensor"] == "Mint.matmul.0.forward.input.1"
    arr = np.asarray(g.tensor(w))
    rng = np.random.RandomState(0)
    rng.randn(2, 3)
    want = rng.randn(3, 4).astype(ml_dtypes.bfloat16)
    assert arr.dtype == ml_dtypes.bfloat16 and arr.tobytes() == want.tobytes()  # the bfloat16 tensor's own bits
    cmp = compare(g, t)
    res = {p.target.name: p for p in cmp.results}
    assert all(p.mode == "tensor" and p.status == "compared" for p in cmp.results)
    failed = sorted(n for n, p in res.items() if p.result == "FAIL")
    assert failed == ["mindspore.mint.nn.functional.relu#0/forward/output/0"], failed
    np.save(golden / "dump_tensor_data" / "MintFunctional.relu.0.forward.output.0.npy", np.zeros((3, 2), np.float32))
    bad = compare(load(tmp_path / "g"), t)
    err = [p for p in bad.results if p.status == "error"]
    assert len(err) == 1 and "relu.0.forward.output.0.npy" in err[0].err_message and "dump.json says" in err[0].err_message
    assert not bad.passed()
