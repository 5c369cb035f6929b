"""Compare on a real two-worker local Dask cluster: the single-process result exactly, pinned tasks,
a worker killed mid-run, and a re-run that redoes only the missing tasks."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("distributed")

from distributed import Client, LocalCluster

from opdiff.compare.distributed import TASK_DIR, compare_distributed
from opdiff.compare.run import compare
from opdiff.store import load
from opdiff.testing.synthetic import Tensor, write_run

RANKS = 3


def _parts(fault: bool, width: int = 256, layers: int = 8) -> dict:
    rng = np.random.default_rng(0)
    out = {}
    for r in range(RANKS):
        ts = []
        for layer in range(layers):
            a = rng.standard_normal((64, width)).astype(np.float32)
            if fault and r == 1 and layer == 5:
                a = a * np.float32(1.01)
            if fault and r == 2 and layer == 2:
                a[0, 0] = np.nan
            ts.append(Tensor(f"layers.{layer}", "Linear", "output", "0", a))
            ts.append(Tensor(f"layers.{layer}", "Linear", "input", "0", a.astype(np.float16)))
        out[(r, 0)] = ts
    return out


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("dumps")
    write_run(root / "g", _parts(False), shard_bytes=200_000)
    write_run(root / "t", _parts(True), shard_bytes=200_000)
    return root / "g", root / "t"


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as lc, Client(lc) as c:
        yield lc, c


def _same_value(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is not bool or a is b


def assert_same(dist, ref) -> None:
    """Same pairs, records, statuses, verdicts and metric values (NaN equal to NaN)."""
    assert dist.mode == ref.mode and len(dist.results) == len(ref.results)
    for d, r in zip(dist.results, ref.results):
        for f in ("index", "golden", "target", "match", "status", "mode", "result", "bitwise_equal", "err_message",
                  "note", "golden_group", "precision"):
            assert getattr(d, f) == getattr(r, f), (r.name, f)
        assert d.metrics.keys() == r.metrics.keys(), r.name
        for k in r.metrics:
            assert _same_value(float(d.metrics[k]) if isinstance(d.metrics[k], float) else d.metrics[k],
                               float(r.metrics[k]) if isinstance(r.metrics[k], float) else r.metrics[k]), (r.name, k)


def _reference(g: Path, t: Path, part) -> object:
    return compare(load(g, rank=part[0], step=part[1]), load(t, rank=part[0], step=part[1]), workers=1)


def test_two_workers_give_the_single_process_result(dumps, cluster, tmp_path):
    g, t = dumps
    lc, client = cluster
    addrs = sorted(client.scheduler_info()["workers"])
    placement = {0: addrs[0], 1: addrs[1], 2: addrs[1]}
    run = compare_distributed(g, t, tmp_path / "out", client=client, placement=placement, shard_bytes=150_000)
    assert not run.failed and sorted(run.comparisons) == [(r, 0) for r in range(RANKS)]
    for part, cmp in run.comparisons.items():
        assert_same(cmp, _reference(g, t, part))
    # tasks ran on the worker holding their rank's files
    for name, worker in run.where.items():
        assert worker == placement[int(name[4:name.index("-")])], name
    assert sum(1 for n in run.computed if "shard" in n) > RANKS  # several shards per part
    assert run.comparisons[(1, 0)].first_fail().name == "layers.5/Linear#0/forward/output/0"


def test_worker_killed_mid_run_loses_nothing(dumps, cluster, tmp_path):
    g, t = dumps
    lc, client = cluster
    out = tmp_path / "out"
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("run", compare_distributed(
        g, t, out, client=client, shard_bytes=20_000)))
    th.start()
    tasks = out / TASK_DIR
    deadline = time.time() + 60
    while time.time() < deadline and not list(tasks.rglob("*shard*.json")):
        time.sleep(0.01)
    done_at_kill = len(list(tasks.rglob("*shard*.json")))
    victim, pid = sorted(client.run(os.getpid).items())[0]
    os.kill(pid, signal.SIGKILL)
    th.join(120)
    run = box["run"]
    assert not run.failed
    assert done_at_kill < sum(1 for n in run.computed if "shard" in n)  # killed while tasks were still to do
    for part, cmp in run.comparisons.items():
        assert_same(cmp, _reference(g, t, part))


def test_rerun_redoes_only_missing_tasks(dumps, cluster, tmp_path):
    g, t = dumps
    lc, client = cluster
    out = tmp_path / "out"
    first = compare_distributed(g, t, out, client=client, shard_bytes=60_000)
    files = sorted((out / TASK_DIR).rglob("*shard*.json"))
    lost = [files[1], files[-1]]
    for f in lost:  # as if the run had stopped before these landed; a half-written temp file stays behind
        f.with_name(f.name + ".123.tmp").write_text("{\"rows\": [")
        f.unlink()
    second = compare_distributed(g, t, out, client=client, shard_bytes=60_000)
    assert sorted(second.computed) == sorted(f.stem for f in lost)
    assert len(second.reused) == len(first.computed) - len(lost)
    for part in first.comparisons:
        assert_same(second.comparisons[part], first.comparisons[part])


def test_cli_local_cluster_and_unreadable_rank(dumps, tmp_path):
    g, t = dumps
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    cmd = [sys.executable, "-m", "opdiff", "compare", str(g), str(t), "-o", str(tmp_path / "o"), "--scheduler",
           "local:2", "--format", "json", "--shard-mb", "1", "--rank", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 1, p.stderr  # rank 1 carries a FAIL
    assert (tmp_path / "o" / "compare.json").exists() and "1 parts compared on 2 workers" in p.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("ranks: {0: [1]}\n")
    p = subprocess.run(cmd[:-2] + ["--placement", str(bad), "--force"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 2 and p.stderr.strip().startswith("opdiff: error:") and "bad placement" in p.stderr


def _cli(*args: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    return subprocess.run([sys.executable, "-m", "opdiff", *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=300)


def test_rank_no_live_worker_can_read_is_not_a_pass(tmp_path):
    """Ranks 0-2 agree; rank 1's shard files are gone (its index stays) and rank 2's files are on a host
    without workers: both are reported as not compared and the run fails, though every pair read passes."""
    import shutil

    g, t = tmp_path / "g", tmp_path / "t"
    write_run(g, _parts(False), shard_bytes=200_000)
    write_run(t, _parts(False), shard_bytes=200_000)
    for d in (g, t):
        for shard in (d / "rank1" / "step0").rglob("*.safetensors"):
            shard.unlink()
        shutil.rmtree(d / "rank2")
    placement = tmp_path / "placement.yaml"
    placement.write_text('ranks: {"0-1": 127.0.0.1, 2: 10.255.255.1}\n')
    p = _cli("compare", g, t, "-o", tmp_path / "o", "--scheduler", "local:2", "--placement", placement, "--format", "json")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "opdiff: not compared: rank 1 step 0: could not be read:" in p.stderr and "missing" in p.stderr
    assert "opdiff: not compared: rank 2: no live worker can read its files (placement: 10.255.255.1)" in p.stderr
    assert (tmp_path / "o" / "rank0-step0" / "compare.json").exists()
    assert "1 parts compared on 2 workers" in p.stdout


def test_diagnose_on_dask_gives_the_same_verdict(tmp_path):
    """diagnose --scheduler local:2 names the culprit the single-process diagnose names (GPT-2, aten level)."""
    pytest.importorskip("transformers")
    from opdiff.capture import capture
    from opdiff.testing import faults, zoo

    model, inputs = zoo.build("gpt2", layers=2)
    with capture(model, tmp_path / "g", level="aten", mode="tensor"):
        faults.run(model, inputs)
    bad = zoo.build("gpt2", layers=2)[0]
    inj = faults.inject("attention_scale", bad, inputs)
    with capture(bad, tmp_path / "t", level="aten", mode="tensor"):
        faults.run(bad, inj.inputs, inj)
    docs = []
    for extra in ((), ("--scheduler", "local:2", "--shard-mb", "1")):
        p = _cli("diagnose", tmp_path / "g", tmp_path / "t", "--json", "--no-replay", *extra)
        assert p.returncode == 1, p.stderr
        docs.append(json.loads(p.stdout))
    single, dask = docs
    assert single["verdict"] == "fault" and single["culprit"]["module"] == "transformer.h.1.attn"
    for key in ("verdict", "culprit", "first_divergence", "candidates"):
        assert dask[key] == single[key], key


def test_any_reader_format_on_dask(cluster, tmp_path):
    """Tasks read through the reader interface: two NumPy-directory dumps compare on Dask exactly as here."""
    rng = np.random.default_rng(1)
    for side in ("g", "t"):
        (tmp_path / side / "layer").mkdir(parents=True)
    for i in range(6):
        a = rng.standard_normal((32, 64)).astype(np.float32)
        np.save(tmp_path / "g" / "layer" / f"fc{i}.output.npy", a)
        np.save(tmp_path / "t" / "layer" / f"fc{i}.output.npy", a * np.float32(1.05) if i == 4 else a)
    lc, client = cluster
    run = compare_distributed(tmp_path / "g", tmp_path / "t", tmp_path / "out", client=client, shard_bytes=20_000)
    assert not run.failed and list(run.comparisons) == [(0, 0)]
    cmp = run.comparisons[(0, 0)]
    assert cmp.golden.meta.get("source_format") == "npy" and sum(1 for n in run.computed if "shard" in n) > 1
    assert_same(cmp, compare(tmp_path / "g", tmp_path / "t", workers=1))
    assert cmp.first_fail() is not None and "fc4" in cmp.first_fail().name


def test_pinned_worker_killed_its_tasks_run_elsewhere(dumps, tmp_path):
    """Ranks pinned to one worker's address; that worker is SIGKILLed mid-run (its nanny restarts it at a new
    address): the pinned tasks time out waiting for it, run unpinned elsewhere, and the result is unchanged."""
    import dask

    from opdiff.compare.cluster import LOCAL_CONFIG

    g, t = dumps
    with dask.config.set({**LOCAL_CONFIG, "distributed.scheduler.no-workers-timeout": "2s"}), \
            LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as lc, \
            Client(lc) as client:
        pids = client.run(os.getpid)
        victim, keep = sorted(pids)
        placement = {0: victim, 1: victim, 2: keep}
        out = tmp_path / "out"
        box: dict = {}
        th = threading.Thread(target=lambda: box.setdefault("run", compare_distributed(
            g, t, out, client=client, placement=placement, shard_bytes=20_000)))
        th.start()
        deadline = time.time() + 60
        while time.time() < deadline and not list((out / TASK_DIR).rglob("rank0*shard*.json")):
            time.sleep(0.01)
        os.kill(pids[victim], signal.SIGKILL)
        th.join(180)
    run = box["run"]
    assert not run.failed, run.failed
    assert any(w != victim for n, w in run.where.items() if n.startswith(("rank0", "rank1")))  # moved off the victim
    for part, cmp in run.comparisons.items():
        assert_same(cmp, _reference(g, t, part))


def test_local_cluster_leaves_the_callers_environment():
    """`--scheduler local:N` starts nannies that set OMP_NUM_THREADS=1 (and MKL_, OPENBLAS_) for their workers
    in the process starting them: the workers keep them, the caller's environment is put back (a torch
    imported later, or a subprocess, would otherwise run on one thread)."""
    from opdiff.compare.cluster import connect

    before = dict(os.environ)
    client, cluster = connect("local:1")
    try:
        assert dict(os.environ) == before
        assert set(client.run(lambda: os.environ.get("OMP_NUM_THREADS")).values()) == {"1"}
    finally:
        client.close()
        cluster.close()
    assert dict(os.environ) == before
