"""Capture overhead on a GPT-2 of realistic width: ratio to the plain run, dump size, write speed.

    .venv/bin/python bench/capture_bench.py                      # 12 x 768, seq 512, batch 1
    .venv/bin/python bench/capture_bench.py --layers 4 --seq 128 --levels module --modes stats,hash
    python bench/capture_bench.py --device cuda --passes fwdbwd --repeat 3  # on a GPU (timings synchronised)

For each level (module/api/aten) and mode (stats/hash/tensor), forward only and forward+backward:
wall time of the `with opdiff.capture(...)` block (including the writer finishing its files) over
the plain run's time (best of --repeat each, plain runs interleaved to follow the machine's load),
the dump size on disk, and the tensor data written per second of capture. The CPU-time ratio
(all threads of the process) is printed too: on a machine shared with other jobs it moves less than
the wall-time ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import torch

import opdiff
from opdiff.capture.stats_kernel import warm_up
from opdiff.testing import zoo


def dir_size(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def run(model, inputs, backward: bool) -> None:
    if backward:
        out = model(**inputs, labels=inputs["input_ids"])
        out.loss.backward()
        model.zero_grad(set_to_none=True)
    else:
        with torch.no_grad():
            model(**inputs)


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of all this process's threads) of one call, GPU work included."""
    sync = torch.cuda.synchronize if torch.cuda.is_initialized() else (lambda: None)
    sync()
    t, c = time.perf_counter(), time.process_time()
    fn()
    sync()
    return time.perf_counter() - t, time.process_time() - c


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--levels", default="module,api,aten")
    ap.add_argument("--modes", default="stats,hash,tensor")
    ap.add_argument("--passes", default="fwd,fwdbwd", help="fwd and/or fwdbwd")
    ap.add_argument("--repeat", type=int, default=2, help="best of this many runs per configuration")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda: model and inputs on the GPU")
    ap.add_argument("--dir", default=None, help="where dumps are written (default: a temporary directory)")
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    model, inputs = zoo.gpt2(layers=args.layers, width=args.width, heads=args.heads, seq=args.seq, batch=args.batch,
                             vocab=args.vocab)
    model.config.use_cache = False
    model = model.to(args.device)
    inputs = {k: v.to(args.device) for k, v in inputs.items()}
    nparams = sum(p.numel() for p in model.parameters())
    print(f"GPT-2 {args.layers} layers x {args.width}, {args.heads} heads, seq {args.seq}, batch {args.batch}, "
          f"vocab {args.vocab} ({nparams / 1e6:.0f}M parameters) on {args.device}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {os.cpu_count()} cpus", flush=True)
    t = time.perf_counter()
    warm_up()  # a process's first capture loads the compiled kernels: not part of the per-run overhead
    print(f"stats kernels loaded in {time.perf_counter() - t:.1f}s", flush=True)
    base = args.dir or tempfile.mkdtemp(prefix="opdiff-bench-")
    os.makedirs(base, exist_ok=True)
    rows = []
    for pas in args.passes.split(","):
        backward = pas == "fwdbwd"
        run(model, inputs, backward)  # warm-up
        plain_times = [timed(lambda: run(model, inputs, backward)) for _ in range(args.repeat)]
        pass_rows: list[list] = []
        for level in args.levels.split(","):
            for mode in args.modes.split(","):
                best = None
                path = os.path.join(base, f"{pas}-{level}-{mode}")
                for _ in range(args.repeat):
                    shutil.rmtree(path, ignore_errors=True)
                    holder = {}

                    def captured():
                        with opdiff.capture(model, path, level=level, mode=mode, backward=backward) as cap:
                            run(model, inputs, backward)
                        holder["cap"] = cap

                    wall, cpu = timed(captured)
                    plain_times.append(timed(lambda: run(model, inputs, backward)))
                    if best is None or wall < best[0]:
                        w = holder["cap"].writer
                        best = (wall, cpu, w.records_written, w.bytes_written, dir_size(path))
                wall, cpu, nrec, data_bytes, size = best
                mbs = data_bytes / 1e6 / wall if data_bytes else 0.0
                pass_rows.append([pas, level, mode, wall, cpu, nrec, size / 1e6, mbs])
                print(f"{pas:7s} {level:7s} {mode:7s} capture {wall:6.2f}s (best plain so far "
                      f"{min(t for t, _ in plain_times):.2f}s)  {nrec:6d} records  {size / 1e6:8.1f} MB  {mbs:5.0f} MB/s",
                      flush=True)
                shutil.rmtree(path, ignore_errors=True)
        # ratios against the best plain run of the whole pass (plain runs were interleaved with the captures)
        plain, plain_cpu = min(t for t, _ in plain_times), min(c for _, c in plain_times)
        for pas_, level, mode, wall, cpu, nrec, size, mbs in pass_rows:
            rows.append((pas_, level, mode, plain, wall, wall / plain, cpu / plain_cpu, nrec, size, mbs))
    print()
    print("| pass | level | mode | plain s | capture s | ratio | CPU ratio | records | dump MB | data MB/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for pas, level, mode, plain, wall, ratio, cpu_ratio, nrec, size, mbs in rows:
        print(f"| {pas} | {level} | {mode} | {plain:.2f} | {wall:.2f} | {ratio:.2f}x | {cpu_ratio:.2f}x | {nrec} | "
              f"{size:.1f} | {f'{mbs:.0f}' if mbs else '-'} |")
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
