"""`opdiff compare` on dumps of many small records: time per record and peak memory (issue 23: <= 20 us per
record, 1,000,000 records in < 30 s, peak memory independent of dump size).

    .venv/bin/python bench/many_records_bench.py [--records 100000,1000000] [--out /tmp/opdiff-many] [--reuse]
                                                [--keep] [--elements 64] [--format csv,xlsx,json] [--src DIR,DIR]
                                                [--workers 1] [--repeat 1] [--no-warm]

For each count N (and each --elements E), writes (with opdiff's own DumpWriter, bench/diagnose_bench.py's
aten-like chain of E-element fp32 tensors, 64 by default, a fault in the middle of the target) a golden and a
target of N records per side, then runs `opdiff compare G T -o OUT --force --no-progress --workers W --format F` in a fresh
child under /usr/bin/time: wall seconds, CPU seconds (user + system), peak RSS. The first run of each
source tree is unmeasured (numba loads or compiles its kernels). `--src` names the source trees to
run (PYTHONPATH of the child; default this checkout's src), e.g. the main branch's against this one,
interleaved. The dumps are deleted at the end unless --keep.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from diagnose_bench import write_run


def make(root: Path, n: int, reuse: bool, numel: int = 64) -> tuple[Path, Path]:
    g, t = root / "golden", root / "target"
    if reuse and (g / "meta.json").exists() and (t / "meta.json").exists():
        return g, t
    shutil.rmtree(root, ignore_errors=True)
    ops = (n - 2) // 3
    write_run(g, n, "tensor", None, numel=numel)
    write_run(t, n, "tensor", ops // 2, numel=numel)
    return g, t


def run(src: Path, g: Path, t: Path, out: Path, fmt: str, workers: int) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS MB, exit code) of one `opdiff compare` child."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = ["/usr/bin/time", "-f", "%e %U %S %M", sys.executable, "-m", "opdiff", "compare", str(g), str(t),
           "-o", str(out), "--force", "--no-progress", "--workers", str(workers), "--format", fmt]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall, user, system, rss = p.stderr.strip().splitlines()[-1].split()
    return float(wall), float(user) + float(system), int(rss) / 1024, p.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default="100000,1000000", help="records per side, comma-separated")
    ap.add_argument("--out", type=Path, default=Path("/tmp/opdiff-many"))
    ap.add_argument("--elements", default="64", help="fp32 elements per tensor, comma-separated (one run each)")
    ap.add_argument("--format", default="csv,xlsx,json")
    ap.add_argument("--src", default=str(HERE.parent / "src"), help="source trees to run, comma-separated")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-warm", action="store_true", help="skip the unmeasured first run (kernels already cached)")
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    srcs = [Path(s) for s in args.src.split(",")]
    print(f"load average at start {os.getloadavg()[0]:.1f} (2 cores, shared)")
    try:
        sizes = [(int(n), int(e)) for n in args.records.split(",") for e in args.elements.split(",")]
        for n, numel in sizes:
            g, t = make(args.out / f"n{n}-e{numel}", n, args.reuse, numel)
            mb = sum(f.stat().st_size for f in g.rglob("*.safetensors")) / 1e6
            for src in srcs if not args.no_warm else []:
                run(src, g, t, args.out / "cmp", args.format, args.workers)  # unmeasured: kernels loaded or compiled
            for _ in range(args.repeat):
                for src in srcs:
                    wall, cpu, rss, rc = run(src, g, t, args.out / "cmp", args.format, args.workers)
                    print(f"{n:>9,} records/side of {numel} elements ({mb:,.0f} MB/side)  {src}: wall {wall:7.1f} s ({wall / n * 1e6:5.1f} us/record), CPU "
                          f"{cpu:7.1f} s ({cpu / n * 1e6:5.1f} us/record), peak RSS {rss:6.0f} MB, exit {rc}, "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(args.out, ignore_errors=True)


if __name__ == "__main__":
    main()
