"""Parallel runs against a single-process golden (docs/parallel.md).

Synthetic shards check the assembly rules (Shard, Replicate, Partial, 2-D meshes, uneven shards, missing
ranks, bad layout files) without a framework. Real runs (tests/parallel_workers.py: gloo on CPU, two
processes) check a hand-written Megatron TP=2 block with a layout file, DTensor tensor + sequence
parallel, and two pipeline stages, each clean and with a fault planted on one rank.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import opdiff
from opdiff.compare import compare
from opdiff.compare.shards import MAX_SPLIT, MISREDUCED, REPLICAS, SHARD, check_parallel, first_per_module
from opdiff.errors import DumpError
from opdiff.store.logical import merge_ranks
from opdiff.testing.synthetic import Tensor, write_dump, write_run

WORKERS = Path(__file__).with_name("parallel_workers.py")
RNG = np.random.default_rng(0)


def lay(placements, mesh=(0, 1), shape=None):
    return {"layout": {"mesh": list(mesh), "mesh_shape": list(shape or [len(mesh)]), "placements": placements}}


# -- assembly on synthetic shards ----------------------------------------------------------------------

W = RNG.standard_normal((6, 4)).astype(np.float32)
X = RNG.standard_normal((3, 4)).astype(np.float32)
Y = X @ W.T  # [3, 6]
PARTS = [X[:, :2] @ W[:, :2].T, X[:, 2:] @ W[:, 2:].T]  # row-parallel partial products


def golden_tensors():
    return [Tensor("fc", "parameter", "parameter", "weight", W), Tensor("fc", "Linear", "input", "0", X),
            Tensor("fc", "Linear", "output", "0", Y), Tensor("row", "Linear", "output", "0", Y)]


def rank_tensors(rank: int, w_rows=None, x=X):
    rows = [slice(0, 4), slice(4, 6)][rank]  # uneven shards: 4 and 2 rows
    return [Tensor("fc", "parameter", "parameter", "weight", W[rows] if w_rows is None else w_rows, extra=lay(["S(0)"])),
            Tensor("fc", "Linear", "input", "0", x, extra=lay(["R"])),
            Tensor("fc", "Linear", "output", "0", (x @ W[rows].T), extra=lay(["S(1)"])),
            Tensor("row", "Linear", "output", "0", PARTS[rank], extra=lay(["P(sum)"]))]


def test_shards_replicas_and_partials_reassemble_and_pass(tmp_path):
    write_dump(tmp_path / "g", golden_tensors())
    write_run(tmp_path / "t", {(0, 0): rank_tensors(0), (1, 0): rank_tensors(1)})
    t = merge_ranks(opdiff.load(tmp_path / "t"))
    assert [r.shape for r in t.records] == [(6, 4), (3, 4), (3, 6), (3, 6)]
    np.testing.assert_array_equal(t.tensor("fc/parameter#0/forward/parameter/weight"), W)
    np.testing.assert_allclose(t.tensor("row/Linear#0/forward/output/0"), Y, rtol=1e-6)
    assert t.records[0].stats.numel == 24 and t.records[0].stats.max == pytest.approx(float(W.max()))
    cmp = compare(opdiff.load(tmp_path / "g"), t, progress=False)
    assert cmp.passed() and len(cmp.results) == 4
    assert not check_parallel(t, opdiff.load(tmp_path / "g"), cmp.results).findings


def test_wrong_shard_and_stale_replica_are_named_with_rank_and_region(tmp_path):
    write_dump(tmp_path / "g", golden_tensors())
    bad = W[4:6][::-1].copy()  # rank 1 holds its rows in the wrong order
    stale = X + np.float32(1e-3)
    write_run(tmp_path / "t", {(0, 0): rank_tensors(0), (1, 0): rank_tensors(1, w_rows=bad, x=stale)})
    g, t = opdiff.load(tmp_path / "g"), merge_ranks(opdiff.load(tmp_path / "t"))
    cmp = compare(g, t, progress=False)
    chk = check_parallel(t, g, cmp.results)
    first = chk.origin()
    assert (first.kind, first.ranks, first.region) == (SHARD, (1,), "dim 0 [4:6]")
    assert first.record == "fc/parameter#0/forward/parameter/weight"
    rep = [f for f in chk.findings if f.kind == REPLICAS]
    assert rep and rep[0].ranks == (1,) and rep[0].record == "fc/Linear#0/forward/input/0" and chk.failed()


def test_every_failing_module_is_named_up_to_the_cap(tmp_path):
    """Not only the first few failing tensors: the first failing tensor of each module gets its rank named."""
    n = 12  # more modules than the old limit of 8
    ws = [RNG.standard_normal((4, 4)).astype(np.float32) for _ in range(n)]
    write_dump(tmp_path / "g", [Tensor(f"m{i}", "parameter", "parameter", "weight", w) for i, w in enumerate(ws)])
    wrong = [w.copy() for w in ws]
    for i, w in enumerate(wrong):
        w[2 + i % 2] += 1.0  # rank 1 (rows 2:4) holds a wrong row
    write_run(tmp_path / "t", {(r, 0): [Tensor(f"m{i}", "parameter", "parameter", "weight", w[2 * r:2 * r + 2],
                                               extra=lay(["S(0)"])) for i, w in enumerate(wrong)] for r in (0, 1)})
    g, t = opdiff.load(tmp_path / "g"), merge_ranks(opdiff.load(tmp_path / "t"))
    cmp = compare(g, t, progress=False)
    found = [(f.record.split("/")[0], f.ranks, f.region) for f in check_parallel(t, g, cmp.results).findings]
    assert found == [(f"m{i}", (1,), "dim 0 [2:4]") for i in range(n)]
    fails = [r for r in cmp.results if r.result == "FAIL"]
    assert len(first_per_module(fails, cap=5)) == 5 and MAX_SPLIT >= 64


def test_partial_contribution_of_one_rank_named_against_a_parallel_golden(tmp_path):
    """A row-parallel output (P(sum)) whose rank-1 contribution is wrong: a golden laid out the same way names rank 1;
    a whole golden cannot tell the contributions apart, so nothing is claimed about a rank."""
    def part(p):
        return [Tensor("row", "Linear", "output", "0", p, extra=lay(["P(sum)"]))]

    write_run(tmp_path / "g2", {(0, 0): part(PARTS[0]), (1, 0): part(PARTS[1])})
    write_dump(tmp_path / "g1", [Tensor("row", "Linear", "output", "0", Y)])
    for bad_rank in (0, 1):
        bad = [p + np.float32(0.5) if r == bad_rank else p for r, p in enumerate(PARTS)]
        write_run(tmp_path / f"t{bad_rank}", {(r, 0): part(bad[r]) for r in (0, 1)})
        t = merge_ranks(opdiff.load(tmp_path / f"t{bad_rank}"))
        g2 = merge_ranks(opdiff.load(tmp_path / "g2"))
        cmp = compare(g2, t, progress=False)
        assert not cmp.passed()
        o = check_parallel(t, g2, cmp.results).origin()
        assert o is not None and (o.kind, o.ranks, o.region) == (SHARD, (bad_rank,), "partial contribution")
        g1 = opdiff.load(tmp_path / "g1")
        cmp = compare(g1, t, progress=False)
        assert not cmp.passed() and not check_parallel(t, g1, cmp.results).findings


def test_two_dimensional_mesh_and_missing_rank(tmp_path):
    full = RNG.standard_normal((4, 8)).astype(np.float32)
    mesh, shape = (0, 1, 2, 3), (2, 2)  # dp x tp: S(1) over tp, replicated over dp
    parts = {(r, 0): [Tensor("m", "Linear", "output", "0", full[:, (r % 2) * 4:(r % 2 + 1) * 4],
                             extra=lay(["R", "S(1)"], mesh, shape))] for r in range(4)}
    write_run(tmp_path / "t", parts)
    t = merge_ranks(opdiff.load(tmp_path / "t"))
    np.testing.assert_array_equal(t.tensor("m/Linear#0/forward/output/0"), full)
    del parts[(3, 0)]
    write_run(tmp_path / "t3", {k: v for k, v in parts.items()})
    t3 = merge_ranks(opdiff.load(tmp_path / "t3"))
    with pytest.raises(DumpError, match="lacks shards"):
        t3.tensor("m/Linear#0/forward/output/0")
    write_dump(tmp_path / "g", [Tensor("m", "Linear", "output", "0", full)])
    cmp = compare(opdiff.load(tmp_path / "g"), t3, progress=False)  # unreadable never counts as agreement
    assert not cmp.passed() and cmp.results[0].status in ("error", "shape-mismatch")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opdiff", *map(str, args)], capture_output=True, text=True, timeout=300)


def test_cli_merges_ranks_and_rejects_bad_layout_files(tmp_path):
    write_dump(tmp_path / "g", golden_tensors())
    write_run(tmp_path / "t", {(0, 0): rank_tensors(0), (1, 0): rank_tensors(1)})
    p = cli("compare", tmp_path / "g", tmp_path / "t", "-o", tmp_path / "out", "--no-progress", "--format", "csv")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "logical tensors from ranks [0, 1]" in p.stdout
    assert json.loads((tmp_path / "out" / "parallel.json").read_text())["findings"] == []
    p = cli("compare", tmp_path / "g", tmp_path / "t", "-o", tmp_path / "o2", "--per-rank", "--no-progress")
    assert p.returncode == 1  # rank 0 alone holds a part of each sharded tensor
    for text, why in (("rules: [{match: '(', shard: 0}]", "bad regex"), ("rules: [{match: 'a', shard: x}]", "shard"),
                      ("rules: [{match: 'a', placements: [Q]}]", "bad placement"), ("[1]", "expected a mapping")):
        (tmp_path / "bad.yaml").write_text(text)
        p = cli("compare", tmp_path / "g", tmp_path / "t", "-o", tmp_path / "o3", "--layout", tmp_path / "bad.yaml")
        assert p.returncode == 2 and why in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "bad.yaml" in p.stderr and not (tmp_path / "o3").exists()


def test_scheduler_refuses_merged_ranks_in_one_line(tmp_path):
    """Dask compares rank i with rank i: with ranks to merge it refuses before starting a cluster or writing."""
    write_dump(tmp_path / "g", golden_tensors())
    write_run(tmp_path / "t", {(0, 0): rank_tensors(0), (1, 0): rank_tensors(1)})
    for args in (("diagnose", tmp_path / "g", tmp_path / "t", "--scheduler", "local:1", "-o", tmp_path / "d.json"),
                 ("compare", tmp_path / "g", tmp_path / "t", "-o", tmp_path / "o", "--scheduler", "local:1",
                  "--merge-ranks")):
        p = cli(*args)
        assert p.returncode == 2 and "cannot merge ranks" in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert not (tmp_path / "d.json").exists() and not (tmp_path / "o").exists()


# -- real parallel runs ----------------------------------------------------------------------------------

def run_scenario(root: Path, scenario: str, faults: str) -> Path:
    """The scenario's golden (one process) and its target runs ROOT/target_FAULT (two gloo processes) under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, str(WORKERS), scenario, faults]
    golden = subprocess.Popen([*base, "-1", "2", str(root)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    _, err = golden.communicate(timeout=300)
    assert golden.returncode == 0, err[-3000:]
    procs = [subprocess.Popen([*base, str(r), "2", str(root)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              text=True) for r in (0, 1)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(f"rank {r}: {e[-2500:]}" for r, e in enumerate(errs))
    return root


def verdict(root: Path, fault: str):
    g, t = opdiff.load(root / "golden"), merge_ranks(opdiff.load(root / f"target_{fault}"))
    cmp = compare(g, t, progress=False, workers=1)
    return cmp, check_parallel(t, g, cmp.results)


@pytest.fixture(scope="module")
def megatron(tmp_path_factory):
    return run_scenario(tmp_path_factory.mktemp("megatron"), "megatron", "none,slice,noreduce,maxop,stale")


def test_megatron_tp2_with_layout_file_clean(megatron):
    cmp, chk = verdict(megatron, "none")
    assert cmp.passed() and not chk.findings and chk.checked_collectives == 4
    meta = opdiff.load(megatron / "target_none").meta
    assert meta["layout_sources"] == ["dtensor", "layout-file"] and meta["layout_rules"]["rules"]


@pytest.mark.parametrize("fault, kind, ranks, record", [
    ("slice", SHARD, (1,), "layers.0.mlp.up/parameter#0/forward/parameter/weight"),
    ("noreduce", REPLICAS, (0, 1), "layers.0.attn.o/RowParallelLinear#0/forward/output/0"),
    ("maxop", MISREDUCED, (0, 1), "layers.0.attn.o/torch.distributed.all_reduce#0"),
    ("stale", REPLICAS, (1,), "layers.1.mlp_norm/parameter#0/forward/parameter/weight"),
])
def test_megatron_faults_named_with_rank_shard_and_op(megatron, fault, kind, ranks, record):
    cmp, chk = verdict(megatron, fault)
    o = chk.origin()
    assert (o.kind, o.ranks, o.record) == (kind, ranks, record), o
    assert chk.failed() or not cmp.passed()
    detail = {"slice": "", "noreduce": "missing all_reduce", "maxop": "(max) does not", "stale": "differs from rank 0"}
    assert detail[fault] in o.detail
    if fault == "slice":
        assert o.region == "dim 0 [16:32]"


@pytest.mark.slow
def test_dtensor_tensor_and_sequence_parallel_clean_and_wrong_shard(tmp_path):
    root = run_scenario(tmp_path, "dtensor", "none,slice")
    cmp, chk = verdict(root, "none")
    assert cmp.passed() and not chk.findings
    kinds = {r.extra["layout"]["source"] for r in merge_ranks(opdiff.load(root / "target_none")).records}
    assert {"dtensor", "layout-file"} <= kinds
    p = cli("diagnose", root / "golden", root / "target_slice", "--no-replay", "--json")
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert doc["verdict"] == "fault" and doc["culprit"]["module"] == "layers.0.mlp.up"
    o = doc["parallel"]["origin"]
    assert (o["kind"], o["ranks"], o["region"]) == (SHARD, [1], "dim 0 [16:32]")


@pytest.mark.slow
def test_pipeline_two_stages_against_one_process(tmp_path):
    root = run_scenario(tmp_path, "pipeline", "none,slice")
    cmp, chk = verdict(root, "none")
    assert cmp.passed() and len(cmp.results) == len(opdiff.load(root / "golden").records)
    cmp, chk = verdict(root, "slice")
    first = cmp.first_fail()
    assert first.target.module == "layers.1.mlp.down"
    o = chk.origin()
    assert o.ranks == (0,) and o.record == first.target.name


def test_replicas_command_without_golden(tmp_path):
    w = RNG.standard_normal((3, 3)).astype(np.float32)
    act = [RNG.standard_normal(4).astype(np.float32) for _ in range(3)]  # data parallel: each rank its own batch

    def part(r, weight):
        return [Tensor("fc", "parameter", "parameter", "weight", weight),
                Tensor("fc", "Linear", "output", "0", act[r]),
                Tensor("fc", "Linear", "input", "0", act[0], extra=lay(["R"], (0, 1, 2)))]
    write_run(tmp_path / "same", {(r, 0): part(r, w) for r in range(3)})
    p = cli("replicas", tmp_path / "same", "--match", "parameter")
    assert p.returncode == 0 and "2 replicated record(s) checked, 0 disagree" in p.stdout, p.stdout + p.stderr
    stale = {(r, 0): part(r, w if r != 2 else w * np.float32(1.0001)) for r in range(3)}
    write_run(tmp_path / "stale", stale)
    p = cli("replicas", tmp_path / "stale", "--match", "parameter", "--json")
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert [(f["kind"], f["ranks"], f["record"]) for f in doc["findings"]] == [
        (REPLICAS, [2], "fc/parameter#0/forward/parameter/weight")]
    p = cli("replicas", tmp_path / "stale", "--match", "(")
    assert p.returncode == 2 and "bad regex" in p.stderr


@pytest.mark.slow
def test_fsdp2_training_step_against_one_process(tmp_path):
    """Forward, backward and SGD update of FSDP2 (fully_shard) on two ranks, each with half the batch."""
    root = run_scenario(tmp_path, "fsdp", "none,slice,localmean")
    cmp, chk = verdict(root, "none")
    # the gradients as FSDP leaves them (sharded, reduced over the ranks) equal the golden's: nothing special-cased
    assert cmp.passed() and not chk.findings, [r.target.name for r in cmp.results if r.result != "PASS"][:5]
    names = {r.target.name for r in cmp.results}
    assert any("/update/output/" in n for n in names) and any("/backward/input/" in n for n in names)
    grads = [r for r in cmp.results if "/backward/gradient/" in r.target.name]
    assert grads and all(r.target.name.split("/")[1].startswith("parameter#") for r in grads)
    t = merge_ranks(opdiff.load(root / "target_none"))
    assert any(r.extra["layout"]["placements"] == ["S(0)"] and r.extra["layout"]["source"] == "dtensor"
               for r in t.records)
    # recorded after FSDP's reduce-scatter: each rank's gradient is its shard (S(0)) of the reduced gradient
    assert all(r.extra["layout"]["placements"] == ["S(0)"] for r in t.records if "/backward/gradient/" in r.name)
    cmp, chk = verdict(root, "slice")
    o = chk.origin()
    assert (o.kind, o.ranks, o.region, o.record) == (SHARD, (1,), "dim 0 [16:32]",
                                                     "layers.1.mlp.up/parameter#0/forward/parameter/weight")
    # a local-mean loss per rank with FSDP's average: parameter gradients and the update still equal the golden's,
    # each rank's activation gradients are world (2) times the golden's slice, and are reported
    cmp, _ = verdict(root, "localmean")
    fails = [r.target.name for r in cmp.results if r.result == "FAIL"]
    assert fails and all("/backward/" in n and "/backward/gradient/" not in n for n in fails)
    assert not [r for r in cmp.results if r.result == "FAIL" and ("/update/" in r.target.name or "parameter#" in
                                                                   r.target.name)]
    g, t = opdiff.load(root / "golden"), merge_ranks(opdiff.load(root / "target_localmean"))
    a, b = g.tensor(fails[0]).ravel(), t.tensor(fails[0]).ravel()
    assert (a @ b) / (a @ a) == pytest.approx(2.0, rel=1e-5)


def test_capture_leaves_storages_resizable(tmp_path):
    """FSDP2 frees unsharded parameters by resizing their storage: capture must not pin storages."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    x = torch.randn(2, 4)
    plain = model(x)
    with opdiff.capture(model, tmp_path / "d", mode="tensor", backward=True):
        out = model(x)
        out.sum().backward()
    assert torch.equal(out, plain)
    assert all(p.untyped_storage().resizable() for p in model.parameters())
    assert x.untyped_storage().resizable() and out.untyped_storage().resizable()
