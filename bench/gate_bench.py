"""What the run gate (diagnose/gate.py `judge`, the noise rule) costs over `compare` alone.

Takes case directories holding `golden/` and `target/` dumps, e.g. those a sweep case keeps:
    OPDIFF_SWEEP_KEEP=1 PYTHONPATH=src python -m opdiff.testing.sweep.case llama sdpa api bf16 /tmp/g
    PYTHONPATH=src python bench/gate_bench.py /tmp/g/work/llama.sdpa.api.bf16
and prints, per case, the best of `--repeat` runs of compare() and of judge() on its result, and their ratio.
"""

from __future__ import annotations

import argparse
import time

from opdiff.compare import compare
from opdiff.diagnose.gate import judge


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="+", help="directories holding golden/ and target/")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for d in args.cases:
        cs, js = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            c = compare(f"{d}/golden", f"{d}/target", workers=1)
            t1 = time.perf_counter()
            j = judge(c)
            cs.append(t1 - t0)
            js.append(time.perf_counter() - t1)
        print(f"{d.rstrip('/').split('/')[-1]}: compare {min(cs):.3f} s, gate {min(js):.3f} s "
              f"(ratio {min(js) / min(cs):.2f}); gate {j.rule}: {'pass' if j.passed else 'fail'}")


if __name__ == "__main__":
    main()
