"""Capture overhead of opdiff and of msprobe side by side, in one run, each against its own plain run.

    /work/main/.venv/bin/python bench/vs_msprobe.py [--seqs 128,512] [--repeat 3] [--skip-compare]
        [--msprobe-python /work/main/.venv-msprobe/bin/python] [--device cuda]

GPT-2 12 x 768 (transformers, seeded weights from opdiff's zoo, nothing downloaded), batch 1,
forward, on the CPU or (--device cuda) a GPU, where each timing ends with torch.cuda.synchronize(). Every configuration runs in its own child process: it builds the model, runs it plain and
captured (one warm-up of each, then --repeat interleaved pairs, best of each kept), so each ratio
compares a tool with a plain run of the same process. A captured run includes entering and leaving
the capture block (opdiff: the whole `with opdiff.capture(...)`, the writer finishing its files;
msprobe: `start()`, forward, `stop()`, `step()`, the PrecisionDebugger made once per process as
its documentation shows). msprobe comes from a bench-only interpreter (`mindstudio-probe`
installed there, never in opdiff's environment); this script installs nothing.

Pairs compared: opdiff module/stats vs msprobe L0 statistics, api/stats vs L1 statistics, aten/stats
(msprobe has no aten level: shown against L1 statistics), module/tensor vs L0 tensor, api/tensor
vs L1 tensor. Targets (issue 13): module/stats <= 1.2x, api/stats <= 1.5x, aten/stats <= 2x, tensor
<= 3x, and each opdiff overhead (ratio - 1) at most a third of msprobe's on the same pair.
If bench/vs_msprobe_compare.py exists it is run afterwards (compare speed against `msprobe compare`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MSPROBE_PY = os.environ.get("OPDIFF_MSPROBE_PYTHON", "/work/main/.venv-msprobe/bin/python")
OPDIFF_RUNS = [("module", "stats"), ("api", "stats"), ("aten", "stats"), ("module", "tensor"), ("api", "tensor")]
MSPROBE_RUNS = [("L0", "statistics"), ("L1", "statistics"), ("L0", "tensor"), ("L1", "tensor")]
PAIRS = {("module", "stats"): ("L0", "statistics"), ("api", "stats"): ("L1", "statistics"),
         ("aten", "stats"): ("L1", "statistics"), ("module", "tensor"): ("L0", "tensor"),
         ("api", "tensor"): ("L1", "tensor")}
TARGETS = {("module", "stats"): 1.2, ("api", "stats"): 1.5, ("aten", "stats"): 2.0, ("module", "tensor"): 3.0,
           ("api", "tensor"): 3.0}


# ---------------------------------------------------------------------------------------------- child
def _zoo():
    """opdiff's zoo module loaded by path: the msprobe interpreter has no opdiff installed."""
    for p in (ROOT / "src/opdiff/testing/zoo.py",):
        if p.exists():
            spec = importlib.util.spec_from_file_location("_bench_zoo", p)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)  # type: ignore[union-attr]
            return mod
    raise SystemExit("opdiff zoo.py not found")


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _opdiff_capture(model, inputs, level: str, mode: str, out: Path):
    import torch

    import opdiff
    from opdiff.capture.stats_kernel import warm_up

    warm_up()  # numba kernels loaded once per process (compiled at install: python -m opdiff.warm)

    def run(k: int) -> Path:
        path = out / f"run{k}"
        with opdiff.capture(model, path, level=level, mode=mode):
            with torch.no_grad():
                model(**inputs)
        return path

    return run


def _msprobe_capture(model, inputs, level: str, task: str, out: Path):
    import torch
    from msprobe.pytorch import PrecisionDebugger

    section = {"scope": [], "list": [], "data_mode": ["all"]}
    if task == "statistics":
        section["summary_mode"] = "statistics"
    cfg = {"task": task, "dump_path": str(out / "dump"), "rank": [], "step": [], "level": level, task: section}
    cfg_path = out / "config.json"
    cfg_path.write_text(json.dumps(cfg))
    debugger = PrecisionDebugger(config_path=str(cfg_path))
    steps = [0]

    def run(k: int) -> Path:
        debugger.start(model)
        with torch.no_grad():
            model(**inputs)
        debugger.stop()
        debugger.step()
        steps[0] += 1
        return out / "dump" / f"step{steps[0] - 1}"

    return run


def child(tool: str, level: str, mode: str, seq: int, repeat: int, threads: int, device: str = "cpu") -> dict:
    import torch

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, inputs = _zoo().gpt2(layers=12, width=768, heads=12, seq=seq, batch=1, vocab=50257)
    model.config.use_cache = False
    model = model.to(device)
    inputs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in inputs.items()}
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    out = Path(tempfile.mkdtemp(prefix=f"vs-msprobe-{tool}-"))
    try:
        make = _opdiff_capture if tool == "opdiff" else _msprobe_capture
        captured = make(model, inputs, level, mode, out)

        def plain() -> None:
            with torch.no_grad():
                model(**inputs)

        plain()
        first = captured(0)  # warm-up: first-call costs of either tool are not per-run overhead
        nbytes = dir_size(first)
        plains, caps, plains_cpu, caps_cpu = [], [], [], []
        for k in range(1, repeat + 1):
            for fn, wall, cpu in ((plain, plains, plains_cpu), (lambda: captured(k), caps, caps_cpu)):
                sync()
                t, c = time.perf_counter(), time.process_time()
                fn()
                sync()
                wall.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
        return {"tool": tool, "level": level, "mode": mode, "seq": seq, "plain_s": min(plains),
                "capture_s": min(caps), "ratio": min(caps) / min(plains),
                "cpu_ratio": min(caps_cpu) / min(plains_cpu), "dump_bytes": nbytes,
                "threads": torch.get_num_threads(), "device": device}
    finally:
        shutil.rmtree(out, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- parent
def spawn(python: str, tool: str, level: str, mode: str, seq: int, repeat: int, threads: int,
          device: str) -> dict | None:
    env = dict(os.environ)
    if tool == "opdiff":
        env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([python, __file__, "--child", tool, level, mode, str(seq), str(repeat),
                        str(threads), device],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        print(f"  {tool} {level}/{mode} seq {seq} failed:\n{p.stderr[-2000:]}", flush=True)
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", default="128,512")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads in every child (0: torch's default); 1 steadies figures on a shared machine")
    ap.add_argument("--msprobe-python", default=MSPROBE_PY)
    ap.add_argument("--skip-compare", action="store_true", help="do not run bench/vs_msprobe_compare.py")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--only", default=None, help="run only these tools (opdiff or msprobe)")
    ap.add_argument("--report", default=None, help="print the table of an earlier --json file and stop")
    ap.add_argument("--modes", default="stats,tensor", help="opdiff modes to run (msprobe: statistics, tensor)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda: model and inputs on the GPU")
    ap.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.report:
        report(json.loads(Path(a.report).read_text()))
        return
    if a.child:
        tool, level, mode, seq, repeat, threads, device = a.child
        print(json.dumps(child(tool, level, mode, int(seq), int(repeat), int(threads), device)))
        return
    have_msprobe = Path(a.msprobe_python).exists()
    if not have_msprobe:
        print(f"no msprobe interpreter at {a.msprobe_python}: msprobe columns skipped "
              f"(make one: python3 -m venv DIR && DIR/bin/pip install torch==2.13.0 transformers mindstudio-probe)")
    print(f"GPT-2 12 x 768, batch 1, forward, on {a.device}; {os.cpu_count()} cpus; torch threads "
          f"{a.threads or 'default'}; {load()}", flush=True)
    results: list[dict] = []
    for seq in [int(s) for s in a.seqs.split(",")]:
        modes = a.modes.split(",")
        runs = [("opdiff", lv, md) for lv, md in OPDIFF_RUNS if md in modes]
        if have_msprobe:
            runs += [("msprobe", lv, md) for lv, md in MSPROBE_RUNS if md.replace("statistics", "stats") in modes]
        for tool, level, mode in runs:
            if a.only and tool != a.only:
                continue
            r = spawn(sys.executable if tool == "opdiff" else a.msprobe_python, tool, level, mode, seq, a.repeat, a.threads, a.device)
            if r is not None:
                r["load"] = os.getloadavg()[0]
                results.append(r)
                print(f"  seq {seq} {tool:7s} {level:6s} {mode:10s} plain {r['plain_s']:.3f}s capture "
                      f"{r['capture_s']:.3f}s ratio {r['ratio']:.2f}x (CPU {r['cpu_ratio']:.2f}x)  dump {r['dump_bytes'] / 1e6:.1f} MB  "
                      f"({load()})", flush=True)
    report(results)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    compare_bench = HERE / "vs_msprobe_compare.py"
    if compare_bench.exists() and not a.skip_compare:
        print(f"\n## compare: {compare_bench.name}\n", flush=True)
        subprocess.run([sys.executable, str(compare_bench)], check=False)


def report(results: list[dict]) -> None:
    """One table: each opdiff configuration next to msprobe's on the same pair, and the targets."""
    by = {(r["tool"], r["level"], r["mode"], r["seq"]): r for r in results}
    devices = ", ".join(sorted({r.get("device", "cpu") for r in results}))
    print(f"\n## capture overhead, GPT-2 12 x 768, batch 1, forward, on {devices} ({load()} at the end)\n")
    print("| seq | opdiff | ratio (CPU) | target | MB/s written | msprobe | ratio (CPU) | MB/s written | "
          "overhead opdiff / msprobe, wall (CPU) | <= 1/3 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for seq in sorted({r["seq"] for r in results}):
        for (level, mode), (mlevel, mmode) in PAIRS.items():
            o = by.get(("opdiff", level, mode, seq))
            m = by.get(("msprobe", mlevel, mmode, seq))
            if o is None:
                continue
            o_mbs = o["dump_bytes"] / 1e6 / o["capture_s"]
            met = "met" if o["ratio"] <= TARGETS[(level, mode)] else "not met"
            row = f"| {seq} | {level}/{mode} | {o['ratio']:.2f}x ({o['cpu_ratio']:.2f}x) | <= {TARGETS[(level, mode)]}x ({met}) | {o_mbs:.0f} |"
            if m is None:
                row += " - | - | - | - | - |"
            else:
                m_mbs = m["dump_bytes"] / 1e6 / m["capture_s"]
                share = (o["ratio"] - 1) / (m["ratio"] - 1) if m["ratio"] > 1 else float("inf")
                cpu_share = (o["cpu_ratio"] - 1) / (m["cpu_ratio"] - 1) if m["cpu_ratio"] > 1 else float("inf")
                row += (f" {mlevel} {mmode} | {m['ratio']:.2f}x ({m['cpu_ratio']:.2f}x) | {m_mbs:.0f} | {share:.2f} "
                        f"({cpu_share:.2f}) | {'yes' if share <= 1 / 3 else 'no'} ({'yes' if cpu_share <= 1 / 3 else 'no'}) |")
            print(row)


if __name__ == "__main__":
    main()
