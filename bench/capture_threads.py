"""CPU of one capture block split by thread: the capturing thread against the others (writer, statistics pool).

    PYTHONPATH=src .venv/bin/python bench/capture_threads.py --level aten --mode tensor --blocks 7

GPT-2 12 x 768, seq 128, batch 1, one torch thread, forward under no_grad. Each block is timed against the
plain forward just before it (process and thread CPU clocks); medians and minima of --blocks are printed. The
bench that quotes ratios is capture_bench.py; this one says which thread a block's CPU goes to.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

import torch

import opdiff
from opdiff.capture.stats_kernel import warm_up
from opdiff.testing import zoo


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--level", default="aten")
    ap.add_argument("--mode", default="tensor")
    ap.add_argument("--blocks", type=int, default=7)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    warm_up()
    model, inputs = zoo.gpt2(layers=12, width=768, heads=12, seq=128, batch=1, vocab=50257)
    model.config.use_cache = False
    path = tempfile.mkdtemp(prefix="opdiff-threads-")

    def plain() -> None:
        with torch.no_grad():
            model(**inputs)

    def block() -> None:
        with torch.no_grad(), opdiff.capture(model, path, level=args.level, mode=args.mode, overwrite=True):
            model(**inputs)

    plain()
    block()  # warm-up of this configuration
    rows = []
    for _ in range(args.blocks):
        c = time.process_time()
        plain()
        p = time.process_time() - c
        shutil.rmtree(path, ignore_errors=True)
        c, t = time.process_time(), time.thread_time()
        block()
        b, bt = time.process_time() - c, time.thread_time() - t
        rows.append((p, b, bt, b - bt, b / p))
    shutil.rmtree(path, ignore_errors=True)
    for k, name in enumerate(("plain forward CPU s", "block CPU s", "  capturing thread", "  other threads", "ratio")):
        print(f"{name:22s} median {statistics.median(r[k] for r in rows):.3f}  min {min(r[k] for r in rows):.3f}")


if __name__ == "__main__":
    main()
