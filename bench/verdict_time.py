"""When `opdiff compare` prints its verdict, and when it returns (the report files are written between).

    .venv/bin/python bench/verdict_time.py GOLDEN TARGET [--workers 1] [--format csv,xlsx,json]

e.g. on bench/compare_bench.py's small pair (bench/out/small_golden, bench/out/small_target).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("golden")
    ap.add_argument("target")
    ap.add_argument("--workers", default="1")
    ap.add_argument("--format", default="csv,xlsx,json")
    a = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="opdiff-verdict-")) / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "opdiff", "compare", a.golden, a.target, "-o", str(out), "--no-progress",
                          "--workers", a.workers, "--format", a.format], stdout=subprocess.PIPE, text=True, env=env)
    verdict = None
    assert p.stdout is not None
    for line in p.stdout:
        if verdict is None and (line.strip() == "PASS" or line.startswith("FAIL")):
            verdict = time.perf_counter() - t0
    p.wait()
    done = time.perf_counter() - t0
    shown = f"{verdict:.2f} s" if verdict is not None else "not seen"
    print(f"verdict at {shown}, command returned at {done:.2f} s (exit {p.returncode}), reports {a.format}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
