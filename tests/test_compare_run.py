"""compare() on real dumps written with DumpWriter: modes, mismatches, corrupt data, parallelism, cut-off runs."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

import opdiff
from opdiff.compare import compare
from opdiff.errors import DumpError
from opdiff.metrics import names as M
from opdiff.metrics import tensor_metrics
from opdiff.testing.synthetic import Tensor, write_dump

RNG = np.random.default_rng(0)
BASE = [
    Tensor("", "Embedding", "input", "0", RNG.integers(0, 50, (2, 8)).astype(np.int64)),
    Tensor("h.0.fc", "Linear", "output", "0", RNG.standard_normal((2, 8, 16)).astype(np.float32)),
    Tensor("h.0.act", "GELU", "output", "0", RNG.standard_normal((2, 8, 16)).astype(np.float32)),
    Tensor("h.1.fc", "Linear", "output", "0", RNG.standard_normal((2, 8, 16)).astype(np.float32)),
    Tensor("h.1.act", "GELU", "output", "0", RNG.standard_normal((2, 8, 16)).astype(np.float32)),
    Tensor("", "LMHead", "output", "logits", RNG.standard_normal((2, 8, 50)).astype(np.float32)),
]


def variant(**changes) -> list[Tensor]:
    """BASE with some arrays replaced (by module name)."""
    out = []
    for t in BASE:
        arr = changes.get(t.module.replace(".", "_") or t.op, t.array)
        out.append(Tensor(t.module, t.op, t.role, t.pos, np.array(arr, copy=True), t.call))
    return out


@pytest.fixture
def golden(tmp_path):
    write_dump(tmp_path / "golden", BASE)
    return tmp_path / "golden"


def test_identical_dumps_pass_bitwise(golden, tmp_path):
    write_dump(tmp_path / "t", variant())
    c = compare(golden, tmp_path / "t")
    assert c.mode == "tensor" and c.counts() == {"PASS": 6, "WARNING": 0, "FAIL": 0, "N/A": 0}
    assert all(r.bitwise_equal and r.match == "name" for r in c.results)
    assert c.passed() and c.first_fail() is None and c.worst() == []


def test_fault_is_first_fail_and_downstream_fails_too(golden, tmp_path):
    a = BASE[2].array * 1.02
    write_dump(tmp_path / "t", variant(h_0_act=a, h_1_fc=BASE[3].array * 1.05))
    c = compare(golden, tmp_path / "t", workers=2)
    assert c.first_fail().name == "h.0.act/GELU#0/forward/output/0"
    assert [r.name for r in c.worst(2)] == ["h.1.fc/Linear#0/forward/output/0", "h.0.act/GELU#0/forward/output/0"]
    assert c.counts()["FAIL"] == 2 and not c.passed()
    r = c.results[2]
    assert r.metrics[M.RED] == pytest.approx(0.02, rel=1e-5) and r.bitwise_equal is False


def test_bf16_target_keeps_both_dtypes_and_passes(golden, tmp_path):
    write_dump(tmp_path / "t", variant(h_0_fc=BASE[1].array.astype(ml_dtypes.bfloat16)))
    c = compare(golden, tmp_path / "t")
    r = c.results[1]
    assert (r.golden.dtype, r.target.dtype, r.result, r.bitwise_equal) == ("float32", "bfloat16", "PASS", False)
    assert r.metrics[M.RED] == pytest.approx(tensor_metrics(BASE[1].array, BASE[1].array.astype(ml_dtypes.bfloat16))[M.RED])


def test_shape_mismatch_gets_its_own_status(golden, tmp_path):
    write_dump(tmp_path / "t", variant(h_1_act=BASE[4].array.reshape(2, 16, 8)))
    c = compare(golden, tmp_path / "t")
    r = c.results[4]
    assert (r.status, r.result) == ("shape-mismatch", "N/A") and "[2, 8, 16]" in r.err_message
    assert c.counts()["PASS"] == 5 and not c.passed()


def test_stats_and_hash_modes(tmp_path):
    write_dump(tmp_path / "gs", BASE, mode="stats")
    write_dump(tmp_path / "ts", variant(h_0_fc=BASE[1].array * 1.1), mode="stats")
    c = compare(tmp_path / "gs", tmp_path / "ts")
    assert c.mode == "stats" and {r.mode for r in c.results} == {"stats"}
    assert c.results[1].result == "FAIL" and c.results[1].metrics[M.NORM_REL_DIFF] == pytest.approx(0.1, rel=1e-5)
    assert c.results[2].result == "PASS"
    write_dump(tmp_path / "gh", BASE, mode="hash")
    write_dump(tmp_path / "th", variant(h_0_fc=BASE[1].array * 1.1), mode="hash")
    c = compare(tmp_path / "gh", tmp_path / "th")  # auto prefers stats (hash mode keeps stats too)
    assert c.mode == "stats"
    h = compare(tmp_path / "gh", tmp_path / "th", mode="hash")
    assert [r.result for r in h.results] == ["PASS", "FAIL", "PASS", "PASS", "PASS", "PASS"]
    assert h.results[1].metrics[M.HASH_EQUAL] is False and h.results[0].bitwise_equal is True


def test_hash_mode_dtype_mismatch(tmp_path):
    write_dump(tmp_path / "g", BASE[1:2], mode="hash")
    write_dump(tmp_path / "t", [Tensor("h.0.fc", "Linear", "output", "0", BASE[1].array.astype(np.float16))], mode="hash")
    r = compare(tmp_path / "g", tmp_path / "t", mode="hash").results[0]
    assert (r.status, r.result) == ("dtype-mismatch", "N/A")


def test_auto_uses_what_both_sides_have(golden, tmp_path):
    write_dump(tmp_path / "ts", variant(), mode="stats")
    c = compare(golden, tmp_path / "ts")
    assert {r.mode for r in c.results} == {"stats"} and c.passed()
    forced = compare(golden, tmp_path / "ts", mode="tensor")
    assert {r.status for r in forced.results} == {"error"}
    assert "target record has no tensor data" in forced.results[0].err_message


def shard_of(dump_dir):
    return next((dump_dir / "rank0" / "step0" / "shards").glob("*.safetensors"))


def test_corrupt_tensor_makes_only_its_pair_na(golden, tmp_path):
    write_dump(tmp_path / "t", variant())
    d = opdiff.load(tmp_path / "t")
    rec = d.records[3]
    start = d.header(rec.data["file"]).entries[rec.data["key"]][2]
    path = shard_of(tmp_path / "t")
    raw = bytearray(path.read_bytes())
    raw[start + 10] ^= 0xFF
    path.write_bytes(bytes(raw))
    c = compare(golden, tmp_path / "t", workers=2)
    bad = c.results[3]
    assert (bad.status, bad.result) == ("error", "N/A") and "does not match its recorded hash" in bad.err_message
    assert [r.result for i, r in enumerate(c.results) if i != 3] == ["PASS"] * 5
    assert not c.passed()


def test_index_disagreeing_with_shard_is_a_pair_error(golden, tmp_path):
    write_dump(tmp_path / "t", variant())
    idx = tmp_path / "t" / "rank0" / "step0" / "index.jsonl"
    lines = idx.read_text().splitlines()
    obj = json.loads(lines[2])
    obj["data"]["key"] = "no-such-key"
    lines[2] = json.dumps(obj)
    idx.write_text("\n".join(lines) + "\n")
    c = compare(golden, tmp_path / "t")
    assert c.results[2].status == "error" and "no tensor 'no-such-key'" in c.results[2].err_message
    assert c.counts()["PASS"] == 5


def test_truncated_shard_is_a_dump_error(golden, tmp_path):
    write_dump(tmp_path / "t", variant())
    path = shard_of(tmp_path / "t")
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DumpError, match="truncated shard"):
        compare(golden, tmp_path / "t")


def test_parallel_and_serial_agree_and_chunked_reads_match_memory(tmp_path):
    rng = np.random.default_rng(1)
    big = [Tensor(f"b{i}", "Linear", "output", "0", rng.standard_normal(n).astype(np.float32))
           for i, n in enumerate((300_001, 5, 131_072, 70_000))]
    tgt = [Tensor(t.module, t.op, t.role, t.pos, (t.array * (1 + 1e-6 * i)).astype(np.float32))
           for i, t in enumerate(big)]
    write_dump(tmp_path / "g", big, shard_bytes=1 << 20)
    write_dump(tmp_path / "t", tgt, shard_bytes=1 << 20)
    serial = compare(tmp_path / "g", tmp_path / "t", workers=1)
    calls = []
    parallel = compare(tmp_path / "g", tmp_path / "t", workers=2, progress=lambda done, total: calls.append((done, total)))
    assert [r.metrics for r in serial.results] == [r.metrics for r in parallel.results]
    for r, g, t in zip(serial.results, big, tgt):
        ref = tensor_metrics(g.array, t.array)
        ref.pop(M.ERR_MESSAGE)
        # the shift differs (stats mean vs first element): float32 block sums around either agree to 1e-6, means
        # to 1e-6 of the std (docs/metrics.md, "Precision")
        got = dict(r.metrics)
        for k, s in ((M.GOLDEN_MEAN, M.GOLDEN_STD), (M.TARGET_MEAN, M.TARGET_STD)):
            assert got.pop(k) == pytest.approx(ref.pop(k), abs=1e-6 * ref[s])
        assert got == pytest.approx(ref, rel=1e-6)
    total = 2 * sum(t.array.nbytes for t in big)
    assert calls[-1] == (total, total) and serial.tensor_bytes == total


def test_cut_off_target_compares_what_exists(golden, tmp_path):
    write_dump(tmp_path / "t", variant()[:4], complete=False)
    t = opdiff.load(tmp_path / "t")
    assert not t.complete
    c = compare(golden, t)
    assert c.counts()["PASS"] == 4 and c.status_counts()["unmatched"] == 2
    assert all("cut-off target dump" in r.note for r in c.results[4:])
    assert c.unmatched("golden") == [] and c.passed()


def test_unmatched_records_fail_unless_allowed(golden, tmp_path):
    tensors = variant()
    tensors.insert(2, Tensor("h.0.drop", "Dropout", "output", "0", BASE[2].array))
    write_dump(tmp_path / "t", tensors)
    c = compare(golden, tmp_path / "t")
    assert [r.name for r in c.unmatched("target")] == ["h.0.drop/Dropout#0/forward/output/0"]
    assert c.counts()["FAIL"] == 0 and not c.passed() and c.passed(allow_unmatched=True)


def test_thresholds_by_preset_name_and_file(golden, tmp_path):
    write_dump(tmp_path / "t", variant(h_0_fc=BASE[1].array * 1.005))
    assert compare(golden, tmp_path / "t", thresholds="msprobe-torchair").passed()
    f = tmp_path / "th.json"
    f.write_text(json.dumps({"preset": "msprobe-torchair", "tensor": {"*": {"pass": {"MaxRelativeErr": "<0.001"}}}}))
    c = compare(golden, tmp_path / "t", thresholds=str(f))
    assert c.results[1].result == "FAIL" and c.thresholds.name == "msprobe-torchair+custom"


def test_fusion_pairs_through_compare(tmp_path):
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    h = (x @ RNG.standard_normal((4, 8))).astype(np.float32)
    y = np.tanh(h).astype(np.float32)
    write_dump(tmp_path / "g", [Tensor("mlp.fc", "Linear", "input", "0", x), Tensor("mlp.fc", "Linear", "output", "0", h),
                                Tensor("mlp.act", "Tanh", "input", "0", h), Tensor("mlp.act", "Tanh", "output", "0", y)])
    write_dump(tmp_path / "t", [Tensor("mlp", "FusedLinearTanh", "input", "0", x),
                                Tensor("mlp", "FusedLinearTanh", "output", "0", y)])
    m = tmp_path / "map.yaml"
    m.write_text("fusion:\n  - {target: 'mlp/FusedLinearTanh#0', golden: ['mlp.fc/Linear#0', 'mlp.act/Tanh#0']}\n")
    c = compare(tmp_path / "g", tmp_path / "t", mapping=m)
    assert c.passed() and c.counts()["PASS"] == 2
    assert [len(r.golden_group) for r in c.results if r.target is not None] == [4, 4]
    assert sum(1 for r in c.results if r.match == "fusion" and r.target is None) == 2


def test_precision_is_carried_forward_in_execution_order(tmp_path):
    x = RNG.standard_normal((4, 64)).astype(np.float32)
    noisy = (x.astype(ml_dtypes.bfloat16).astype(np.float32) + x) / 2  # fp32 tensor with bf16-sized error
    write_dump(tmp_path / "g", [Tensor("a", "Linear", "output", "0", noisy), Tensor("b", "Linear", "output", "0", x),
                                Tensor("c", "Add", "output", "0", x)])
    write_dump(tmp_path / "t", [Tensor("a", "Linear", "output", "0", x),
                                Tensor("b", "Linear", "output", "0", x.astype(ml_dtypes.bfloat16)),
                                Tensor("c", "Add", "output", "0", noisy)])
    c = compare(tmp_path / "g", tmp_path / "t")
    assert [(r.precision, r.result) for r in c.results] == [
        ("float32", "FAIL"),  # nothing ran in bf16 before it: held to fp32
        ("bfloat16", "PASS"),
        ("bfloat16", "PASS"),  # fp32 on both sides, but downstream of a bf16 op
    ]
    assert "at float32" in c.results[0].err_message


def test_locate_agrees_with_span_and_fails_alike(golden):
    """OpdiffDump.locate (compare's per-record lookup, no TensorSpan built) gives span's file and offset, and
    every mismatch between index and shard is the same DumpError from both; compare names it on the pair."""
    import dataclasses

    d = opdiff.load(golden)
    for rec in d.records:
        sp = d.span(rec)
        assert d.locate(rec) == (sp.path, sp.offset) and sp.dtype == rec.dtype and sp.shape == tuple(rec.shape)
    rec = d.records[1]
    bad = [dataclasses.replace(rec, data={**rec.data, "key": "no-such-tensor"}),
           dataclasses.replace(rec, dtype="float16"), dataclasses.replace(rec, shape=(3, 8, 16)),
           dataclasses.replace(rec, data=None)]
    for b in bad:
        with pytest.raises(DumpError) as by_span:
            d.span(b)
        with pytest.raises(DumpError) as by_locate:
            d.locate(b)
        assert str(by_span.value) == str(by_locate.value)
    wider = dataclasses.replace(rec, shape=(1, *rec.shape))  # size-1 dimensions aside: the same layout
    assert d.locate(wider) == d.locate(rec) == (d.span(wider).path, d.span(wider).offset)
    from opdiff.compare.run import _source

    with pytest.raises(DumpError, match="in the shard but float16"):
        _source(d, bad[1])


def test_console_lists_the_mismatched_pairs_only_when_there_are_some(golden, tmp_path):
    """The summary names each shape-mismatch pair and counts it in the FAIL line; a run without one lists none."""
    from rich.console import Console

    from opdiff.report.console import print_summary

    write_dump(tmp_path / "t", variant(h_1_act=BASE[4].array.reshape(2, 16, 8)))
    con = Console(record=True, width=200)
    print_summary(compare(golden, tmp_path / "t"), con)
    text = con.export_text()
    assert "shape-mismatch #4" in text and "1 mismatched or unreadable" in text
    con = Console(record=True, width=200)
    print_summary(compare(golden, golden), con)
    assert "mismatch #" not in con.export_text() and "mismatched or unreadable" not in con.export_text()
