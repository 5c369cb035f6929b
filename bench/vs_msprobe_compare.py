"""opdiff compare against `msprobe compare` on the same real msprobe dump pair, in one run.

    .venv/bin/python bench/vs_msprobe_compare.py [--out bench/out/vs_msprobe] [--layers 6] [--width 1024]
                                                [--seq 1024] [--batch 2] [--keep] [--reuse]
    .venv/bin/python bench/vs_msprobe_compare.py --workload small-ops [--ops 2000] [--elements 65536] ...

Two workloads: `gpt2` (default: few large tensors, bandwidth-bound) and `small-ops` (a chain of
--ops torch.tanh calls on one fp32 tensor of --elements, 256 KB by default: 2 * ops small records
per side, where the per-record cost dominates; the target is nudged before call ops / 3).

Makes a golden/target pair of msprobe L1 tensor dumps (forward) of a seeded GPT-2 with
`msprobe_dumps.py` in the mindstudio-probe venv (`make venv-msprobe`; or $OPDIFF_MSPROBE_PYTHON);
the target's layer-1 GELU is the tanh form, so every later tensor differs. Then times, each in a
fresh child process on the same `step0` folders, with the page cache warm for all three:

- a plain numpy read of every tensor file of both sides (`np.fromfile`): what the disk/cache allows;
- `opdiff compare G T -o OUT` with its default outputs (csv, xlsx, json) and workers, and with
  `--format csv` (msprobe's own output), after one unmeasured run (numba compiles opdiff's kernels on the very first run, then loads them from its cache);
- `msprobe compare -gp G -tp T -o OUT` (its default output: one CSV).

Wall time includes interpreter start-up; peak RSS is the largest sum of RSS over the child's
process tree, sampled every 50 ms. Prints a table and writes OUT/vs_msprobe.json. The dumps are
deleted at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SCRIPT = REPO / "src" / "opdiff" / "testing" / "msprobe_dumps.py"
GB = 1e9


def msprobe_python() -> Path:
    """The interpreter with mindstudio-probe installed."""
    env = os.environ.get("OPDIFF_MSPROBE_PYTHON")
    candidates = [Path(env)] if env else []
    candidates += [REPO / ".venv-msprobe" / "bin" / "python", Path(sys.prefix).parent / ".venv-msprobe" / "bin" / "python"]
    for c in candidates:
        if c.exists():
            return c
    sys.exit("vs_msprobe_compare: no mindstudio-probe venv (make venv-msprobe, or set OPDIFF_MSPROBE_PYTHON)")


def make_dumps(out: Path, sizes: list[str], fault: int) -> float:
    """Golden and target msprobe dumps under `out`, made in one msprobe process; returns seconds taken."""
    jobs = [[str(out / "golden"), "--task", "tensor", "--level", "L1", *sizes],
            [str(out / "target"), "--task", "tensor", "--level", "L1", "--fault-layer", str(fault), *sizes]]
    jobs_file = out / "jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    t0 = time.perf_counter()
    subprocess.run([str(msprobe_python()), str(SCRIPT), "--jobs", str(jobs_file)], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def part(root: Path) -> Path:
    """The step0 folder of a dump."""
    return root / "step0"


def tensor_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.pt"))


def run_measured(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """Run `cmd` as a child; wall seconds, CPU seconds (user + system of the child and the children it
    waited for: the fairer figure on a loaded machine), exit status and peak RSS of its process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = psutil.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    peak = 0
    while proc.poll() is None:
        try:
            tree = [proc, *proc.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"cmd": cmd, "wall_s": wall, "cpu_s": cpu, "peak_rss_mb": peak / 1e6, "rc": proc.returncode,
            "tail": out[-1500:], "load": os.getloadavg()[0]}


NUMPY_READ = """
import sys, numpy as np
n = 0
for f in open(sys.argv[1]).read().split("\\n"):
    if f:
        n += np.fromfile(f, dtype=np.uint8).nbytes
print(n)
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=HERE / "out" / "vs_msprobe")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--workload", choices=("gpt2", "small-ops"), default="gpt2")
    p.add_argument("--ops", type=int, default=2000, help="small-ops: torch.tanh calls (2 records each)")
    p.add_argument("--elements", type=int, default=1 << 16, help="small-ops: fp32 elements per tensor")
    p.add_argument("--keep", action="store_true", help="keep the dumps (and reuse them next time with --reuse)")
    p.add_argument("--reuse", action="store_true", help="reuse dumps left by an earlier --keep run")
    args = p.parse_args(argv)

    out: Path = args.out
    dumps = out / "dumps"
    if args.workload == "small-ops":
        sizes, fault = ["--model", "chain", "--ops", str(args.ops), "--elements", str(args.elements)], args.ops // 3
    else:
        sizes, fault = ["--layers", str(args.layers), "--width", str(args.width), "--seq", str(args.seq),
                        "--batch", str(args.batch), "--heads", str(args.heads)], 1
    report: dict = {"model": dict(zip(sizes[::2], sizes[1::2])), "cpus": os.cpu_count()}
    free = shutil.disk_usage(out.parent if out.parent.exists() else REPO).free
    if not (args.reuse and (dumps / "golden").exists()):
        if free < 15 * GB:
            sys.exit(f"vs_msprobe_compare: only {free / GB:.1f} GB free; needs about 15 GB")
        shutil.rmtree(dumps, ignore_errors=True)
        dumps.mkdir(parents=True)
        report["dump_s"] = make_dumps(dumps, sizes, fault)
    g, t = part(dumps / "golden"), part(dumps / "target")
    files = tensor_files(g) + tensor_files(t)
    total = sum(f.stat().st_size for f in files)
    report |= {"tensor_files": len(files), "tensor_bytes": total}
    print(f"dump pair: {len(files)} .pt files, {total / GB:.2f} GB (both sides), at {dumps}", flush=True)

    listing = out / "files.txt"
    listing.write_text("\n".join(map(str, files)))
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    msprobe = str(msprobe_python().parent / "msprobe")
    for d in ("opdiff_out", "opdiff_csv_out", "msprobe_out"):
        shutil.rmtree(out / d, ignore_errors=True)
    runs = {}
    runs["numpy read"] = run_measured([py, "-c", NUMPY_READ, str(listing)])  # also warms the page cache
    runs["numpy read"] = run_measured([py, "-c", NUMPY_READ, str(listing)])
    opdiff_cmd = [py, "-m", "opdiff", "compare", str(g), str(t), "--no-progress", "--force", "-o"]
    run_measured([*opdiff_cmd, str(out / "opdiff_out")], env)  # numba compiles its kernels once, into its cache
    runs["opdiff compare"] = run_measured([*opdiff_cmd, str(out / "opdiff_out")], env)
    runs["opdiff --format csv"] = run_measured([*opdiff_cmd, str(out / "opdiff_csv_out"), "--format", "csv"], env)
    runs["msprobe compare"] = run_measured([msprobe, "compare", "-gp", str(g), "-tp", str(t), "-o",
                                           str(out / "msprobe_out")])
    report["runs"] = runs
    failed = runs["msprobe compare"]["rc"] != 0 or any(runs[k]["rc"] not in (0, 1) for k in ("opdiff compare", "opdiff --format csv"))
    print(f"\n{'':20}{'wall s':>9}{'CPU s':>9}{'GB/s':>8}{'peak RSS MB':>13}{'exit':>6}{'load':>6}")
    for name, r in runs.items():
        print(f"{name:20}{r['wall_s']:9.2f}{r['cpu_s']:9.2f}{total / GB / r['wall_s']:8.2f}{r['peak_rss_mb']:13.0f}"
              f"{r['rc']:6}{r['load']:6.1f}")
    if failed:
        print(runs["opdiff compare"]["tail"], runs["msprobe compare"]["tail"], sep="\n", file=sys.stderr)
        print("a comparison failed: no ratio", file=sys.stderr)
    else:
        report["speedup"] = runs["msprobe compare"]["wall_s"] / runs["opdiff compare"]["wall_s"]
        report["speedup_csv"] = runs["msprobe compare"]["wall_s"] / runs["opdiff --format csv"]["wall_s"]
        report["cpu_ratio"] = runs["msprobe compare"]["cpu_s"] / runs["opdiff compare"]["cpu_s"]
        report["cpu_ratio_csv"] = runs["msprobe compare"]["cpu_s"] / runs["opdiff --format csv"]["cpu_s"]
        print(f"\nopdiff compare is {report['speedup']:.1f}x faster than msprobe compare "
              f"(peak RSS {runs['opdiff compare']['peak_rss_mb'] / runs['msprobe compare']['peak_rss_mb']:.2f}x); "
              f"{report['speedup_csv']:.1f}x with --format csv; in CPU time {report['cpu_ratio']:.1f}x and "
              f"{report['cpu_ratio_csv']:.1f}x (load average {os.getloadavg()[0]:.1f})")
    (out / "vs_msprobe.json").write_text(json.dumps(report, indent=1))
    if not args.keep:
        shutil.rmtree(dumps, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
