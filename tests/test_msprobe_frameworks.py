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
