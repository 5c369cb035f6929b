"""Benchmark of `opdiff compare`: throughput, peak memory, numba start-up and alignment speed.

    .venv/bin/python bench/compare_bench.py [--out bench/out] [--gb 2] [--records 4096] [--workers 1,2]

Builds (with opdiff's DumpWriter) a synthetic golden/target pair with GB gigabytes of fp32 tensor
data PER SIDE in RECORDS records of mixed sizes (256 elements up, log-uniform), each record with
its statistics and xxh3 content hash like a tensor-mode capture (compare verifies every tensor
against its hash in the same pass), and a small pair of 40,000 small records. Every measurement runs in a fresh child process, so its wall time
includes Python start-up and its peak RSS (VmHWM) is that of the comparison alone.
Throughput counts the tensor bytes of BOTH sides (golden + target) read and compared, with all
metrics. "warm cache": shards in the OS page cache (just written); "cold cache": evicted first
with posix_fadvise(DONTNEED), so they come from disk. Results: a table on stdout and
OUT/compare_bench.json. Targets (issue 3): >= 1 GB/s per worker, peak RSS < 1 GB, alignment of
100,000 records per side < 5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MB = 1e6


# ---------------------------------------------------------------------------------------------
# dumps
def build_big(out: Path, gb: float, records: int, seed: int = 0) -> dict:
    """Golden and target dumps with `gb` GB of fp32 per side; target = golden with 1e-6 relative noise."""
    from opdiff.store.writer import DumpWriter
    from opdiff.testing.synthetic import Tensor, make_record

    rng = np.random.default_rng(seed)
    sizes = np.exp(rng.uniform(np.log(256), np.log(16 << 20), records))
    sizes = np.maximum(256, (sizes * (gb * 2**30 / 4 / sizes.sum()))).astype(np.int64)
    noise = rng.standard_normal(int(sizes.max()), dtype=np.float32)
    wg = DumpWriter(out / "big_golden", {"framework": "numpy", "mode": "tensor"}, overwrite=True)
    wt = DumpWriter(out / "big_target", {"framework": "numpy", "mode": "tensor"}, overwrite=True)
    wg.begin(0, 0)
    wt.begin(0, 0)
    t0 = time.perf_counter()
    for i, n in enumerate(sizes):
        g = rng.standard_normal(int(n), dtype=np.float32)
        t = g + g * np.float32(1e-6) * noise[:n]
        tensor = Tensor(f"layers.{i // 8}.m{i % 8}", "Linear", "output", "0", g)
        rg = make_record(tensor)  # with its content hash, as a tensor-mode capture writes: compare verifies it
        rt = make_record(Tensor(tensor.module, tensor.op, tensor.role, tensor.pos, t))
        wg.add(rg, g)
        wt.add(rt, t)
    wg.close()
    wt.close()
    return {"records": records, "bytes_per_side": int(sizes.sum() * 4), "min_elements": int(sizes.min()),
            "max_elements": int(sizes.max()), "build_s": time.perf_counter() - t0}


def build_small(out: Path, records: int = 40_000, seed: int = 1) -> dict:
    """40,000 small records (16 to 4,096 fp32 elements), the shape of a real module-level dump."""
    from opdiff.testing.synthetic import Tensor, write_dump

    rng = np.random.default_rng(seed)
    sizes = rng.integers(16, 4096, records)
    gold = [Tensor(f"layers.{i // 16}.m{i % 16}", "Linear", "output", "0", rng.standard_normal(int(n), dtype=np.float32))
            for i, n in enumerate(sizes)]
    targ = [Tensor(x.module, x.op, x.role, x.pos, x.array * np.float32(1 + 1e-7)) for x in gold]
    write_dump(out / "small_golden", gold, overwrite=True)
    write_dump(out / "small_target", targ, overwrite=True)
    return {"records": records, "bytes_per_side": int(sizes.sum() * 4)}


def evict(path: Path) -> None:
    """Drop a dump's files from the page cache so the next read comes from disk."""
    for f in path.rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


# ---------------------------------------------------------------------------------------------
# child processes
def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM). Not getrusage: its ru_maxrss survives fork+exec and
    would report the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / MB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB


def child_compare(golden: str, target: str, workers: int, reports: str) -> dict:
    """Run in a fresh process: compare (and optionally write reports), report times and peak RSS."""
    t_start = time.perf_counter()
    from opdiff.compare import compare

    t_import = time.perf_counter()
    cmp = compare(golden, target, workers=workers)
    t_cmp = time.perf_counter()
    if reports:
        from opdiff import report

        out = Path(tempfile.mkdtemp(prefix="opdiff-bench-"))
        for f in reports.split(","):
            report.write(cmp, f, report.output_path(out, f, "compare"))
    t_end = time.perf_counter()
    return {
        "import_s": t_import - t_start, "compare_s": t_cmp - t_import, "reports_s": t_end - t_cmp,
        "pairs": len(cmp.results), "passed": cmp.passed(), "counts": cmp.counts(), "tensor_bytes": cmp.tensor_bytes,
        "peak_rss_mb": peak_rss_mb(),
    }


def child_npread(golden: str, target: str) -> dict:
    """The physical reference: numpy reads (sums) every tensor's bytes of both dumps, zero-copy from
    the same memory-mapped shards, one thread, as compare's kernel reads them."""
    import mmap

    from opdiff.store.readers import load as load_dump

    t0 = time.perf_counter()
    total = 0
    acc = 0.0
    for root in (golden, target):
        d = load_dump(root)
        for rel in sorted({r.data["file"] for r in d.records if r.data is not None}):
            h = d.header(rel)
            with open(h.path, "rb") as f:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            a = None
            for _dtype, _shape, start, end in h.entries.values():
                a = np.frombuffer(mm, dtype=np.float32, count=(end - start) // 4, offset=start)
                acc += float(a.sum())
                total += end - start
            del a
            mm.close()
    return {"npread_s": time.perf_counter() - t0, "bytes": total, "checksum": acc}


def child_align(n: int, scenario: str) -> dict:
    """Alignment of n records per side (no tensor data needed)."""
    from opdiff.base.record import Record
    from opdiff.match import align_records
    from opdiff.store.format import node_name, record_name

    rng = np.random.default_rng(2)

    def recs(modules: list[str], extra_calls: bool = False) -> list[Record]:
        out = []
        for m in modules:
            calls = 2 if extra_calls else 1
            for c in range(calls):
                for role, pos in (("input", "0"), ("output", "0")):
                    node = node_name(m, "Linear", c)
                    out.append(Record(index=len(out), name=record_name(node, "forward", role, pos), node=node, module=m,
                                      op="Linear", level="module", call=c, direction="forward", role=role, pos=pos,
                                      dtype="float32", shape=(4, 64)))
        return out

    mods = [f"model.layers.{i // 10}.sub{i % 10}" for i in range(n // 2)]
    golden = recs(mods)
    if scenario == "identical":
        target = recs(mods)
    elif scenario == "perturbed":  # 1% of ops removed, 1% inserted, 1% of modules renamed
        tm = [m for m in mods if rng.random() > 0.01]
        tm = [m + ".renamed" if rng.random() < 0.01 else m for m in tm]
        for _ in range(len(mods) // 100):
            tm.insert(int(rng.integers(0, len(tm))), f"new.op{rng.integers(1 << 30)}")
        target = recs(tm)
    elif scenario == "all-renamed":  # every module renamed, no mapping: names never match
        target = recs([m.replace("model.layers", "transformer.h") for m in mods])
    else:
        raise ValueError(scenario)
    t0 = time.perf_counter()
    pairs = align_records(golden, target)
    dt = time.perf_counter() - t0
    paired = sum(1 for p in pairs if p.golden is not None and p.target is not None)
    return {"align_s": dt, "golden": len(golden), "target": len(target), "paired": paired,
            "peak_rss_mb": peak_rss_mb()}


def spawn(args: list[str], env: dict | None = None) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True,
                       env={**os.environ, **(env or {})})
    if p.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{p.stderr}")
    res = json.loads(p.stdout.strip().splitlines()[-1])
    res["process_s"] = time.perf_counter() - t0
    return res


# ---------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(HERE / "out"))
    ap.add_argument("--gb", type=float, default=2.0, help="GB of fp32 tensor data per side in the big pair")
    ap.add_argument("--records", type=int, default=4096)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--align", type=int, default=100_000, help="records per side for the alignment benchmark")
    ap.add_argument("--reuse", action="store_true", help="reuse dumps already in --out")
    ap.add_argument("--repeat", type=int, default=3, help="runs per big-pair measurement (best and median reported)")
    ap.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        kind, *rest = a.child
        if kind == "compare":
            res = child_compare(rest[0], rest[1], int(rest[2]), rest[3] if len(rest) > 3 else "")
        elif kind == "npread":
            res = child_npread(rest[0], rest[1])
        else:
            res = child_align(int(rest[0]), rest[1])
        print(json.dumps(res))
        return

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    env_threads = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")
                   if k in os.environ}
    results["env"] = env_threads
    results["load_before"] = load()
    if not (a.reuse and (out / "big_target" / "meta.json").exists()):
        print(f"building {a.gb:g} GB/side x {a.records} records ...", flush=True)
        results["big"] = build_big(out, a.gb, a.records)
        results["small"] = build_small(out)
    big_g, big_t = str(out / "big_golden"), str(out / "big_target")
    sm_g, sm_t = str(out / "small_golden"), str(out / "small_target")

    # numba start-up: cold (empty cache dir) then warm (same dir)
    cache = tempfile.mkdtemp(prefix="opdiff-numba-cache-")
    results["numba_cold"] = spawn(["compare", sm_g, sm_t, "1"], {"NUMBA_CACHE_DIR": cache})
    results["numba_warm"] = spawn(["compare", sm_g, sm_t, "1"], {"NUMBA_CACHE_DIR": cache})
    results["small_reports"] = spawn(["compare", sm_g, sm_t, "2", "csv,json,xlsx"])

    runs = []
    for w in [int(x) for x in a.workers.split(",")]:
        for cache_state in ("warm", "cold"):
            reps = []
            nps = []
            if cache_state == "warm":
                spawn(["compare", big_g, big_t, str(w)])  # make sure the shards are in the page cache
            for _ in range(a.repeat):
                if cache_state == "cold":
                    evict(out / "big_golden")
                    evict(out / "big_target")
                reps.append(spawn(["compare", big_g, big_t, str(w)]))
                if cache_state == "warm":  # numpy reading the same bytes, interleaved with compare's runs
                    nps.append(spawn(["npread", big_g, big_t]))
            reps.sort(key=lambda x: x["compare_s"])
            r = dict(reps[0], workers=w, cache=cache_state, median_compare_s=reps[len(reps) // 2]["compare_s"],
                     repeats=len(reps), max_peak_rss_mb=max(x["peak_rss_mb"] for x in reps),
                     npread_s=min(x["npread_s"] for x in nps) if nps else None)
            runs.append(r)
    results["big_runs"] = runs
    results["align"] = [dict(spawn(["align", str(a.align // 2 * 2), s]), scenario=s)
                        for s in ("identical", "perturbed", "all-renamed")]
    results["load_after"] = load()
    (out / "compare_bench.json").write_text(json.dumps(results, indent=1))
    report(results)


def load() -> dict:
    """Load average and CPU pressure: the machine may be shared, which slows every figure."""
    cpu = Path("/proc/pressure/cpu")
    return {"loadavg": os.getloadavg(), "cpu_pressure": cpu.read_text().splitlines()[0] if cpu.exists() else None}


def report(r: dict) -> None:
    print("\n## opdiff compare benchmark\n")
    print(f"load before: {r['load_before']}\nload after: {r['load_after']}")
    if "big" in r:
        b = r["big"]
        print(f"big pair: {b['records']} records, {b['bytes_per_side'] / MB:.0f} MB fp32 per side "
              f"({b['min_elements']}..{b['max_elements']} elements), built in {b['build_s']:.1f} s")
    print("\n| run | workers | compare s, best (median) | GB/s both sides | MB/s per worker (both sides) | "
          "MB/s per worker (one side) | numpy read of the same bytes, 1 thread | compare per worker / numpy | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for x in r["big_runs"]:
        rate = x["tensor_bytes"] / x["compare_s"]
        npr = x.get("npread_s")
        np_cols = (f"{x['tensor_bytes'] / npr / 1e9:.2f} GB/s | {rate / x['workers'] * npr / x['tensor_bytes']:.2f}"
                   if npr else "- | -")
        print(f"| big, {x['cache']} cache | {x['workers']} | {x['compare_s']:.2f} ({x['median_compare_s']:.2f}) | "
              f"{rate / 1e9:.2f} | {rate / MB / x['workers']:.0f} | {rate / MB / x['workers'] / 2:.0f} | {np_cols} | "
              f"{x['max_peak_rss_mb']:.0f} |")
    for key, label in (("numba_cold", "small, numba cold cache"), ("numba_warm", "small, numba warm cache")):
        x = r[key]
        print(f"| {label} | 1 | {x['compare_s']:.2f} (import {x['import_s']:.2f}, process {x['process_s']:.2f}) | "
              f"| {x['pairs'] / x['compare_s']:.0f} pairs/s = {1e3 * x['compare_s'] / x['pairs']:.3f} ms/pair | | "
              f"{x['peak_rss_mb']:.0f} |")
    x = r["small_reports"]
    print(f"\nsmall pair ({x['pairs']} records), 2 workers: compare {x['compare_s']:.2f} s, csv+json+xlsx reports "
          f"{x['reports_s']:.2f} s, whole process {x['process_s']:.2f} s, peak RSS {x['peak_rss_mb']:.0f} MB")
    print("\n| alignment scenario | golden | target | paired | align s | peak RSS MB |")
    print("|---|---|---|---|---|---|")
    for x in r["align"]:
        print(f"| {x['scenario']} | {x['golden']} | {x['target']} | {x['paired']} | {x['align_s']:.2f} | "
              f"{x['peak_rss_mb']:.0f} |")


if __name__ == "__main__":
    main()
