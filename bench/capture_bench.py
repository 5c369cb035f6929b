"""Capture overhead on a GPT-2 of realistic width: ratio to the plain run, per capture block and per step.

    .venv/bin/python bench/capture_bench.py                      # 12 x 768, seq 128, batch 1, forward
    .venv/bin/python bench/capture_bench.py --steps 4            # also per step inside one 4-step block
    .venv/bin/python bench/capture_bench.py --seq 512 --passes fwd,fwdbwd --repeat 3
    python bench/capture_bench.py --device cuda --passes fwdbwd --repeat 3  # on a GPU (timings synchronised)

For each level (module/api/aten) and mode (stats/hash/tensor): the wall time of a whole
`with opdiff.capture(...)` block (set-up, the run, the writer finishing its files: what a user running one
inference pays) over the plain run's, each block against the plain runs just before and after it, the
median of --repeat blocks quoted (a machine shared with other jobs moves single runs by tens of per cent);
the CPU-time ratio (all threads of the process) beside it. With --steps N, also each step inside one block
of N steps against the plain step: step 0 writes the parameters, later steps find them unchanged.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
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


def ratio_row(ratios: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(median wall ratio, median CPU ratio, lowest wall ratio) of (wall, cpu) ratios of paired runs."""
    walls, cpus = [w for w, _ in ratios], [c for _, c in ratios]
    return statistics.median(walls), statistics.median(cpus), min(walls)


def measure_block(model, inputs, args, pas: str, level: str, mode: str, path: str) -> tuple[list, tuple]:
    """Ratios of whole capture blocks (set-up and finish included) each against the plain runs beside it."""
    backward = pas == "fwdbwd"
    ratios, last = [], None
    for _ in range(args.repeat):
        shutil.rmtree(path, ignore_errors=True)
        holder = {}

        def captured():
            with opdiff.capture(model, path, level=level, mode=mode, backward=backward) as cap:
                run(model, inputs, backward)
            holder["cap"] = cap

        before = timed(lambda: run(model, inputs, backward))
        wall, cpu = timed(captured)
        after = timed(lambda: run(model, inputs, backward))
        plain = min(before[0], after[0]), min(before[1], after[1])
        ratios.append((wall / plain[0], cpu / plain[1]))
        w = holder["cap"].writer
        last = (plain[0], wall, w.records_written, w.bytes_written, dir_size(path))
    return ratios, last


def measure_steps(model, inputs, args, pas: str, level: str, mode: str, path: str) -> tuple[list, list]:
    """Per-step ratios inside one block of --steps steps: (ratios of step 0, ratios of the later steps), each
    step against the median plain step measured around the block."""
    backward = pas == "fwdbwd"
    first, later = [], []
    for _ in range(args.repeat):
        shutil.rmtree(path, ignore_errors=True)
        plain = [timed(lambda: run(model, inputs, backward)) for _ in range(2)]
        steps = []
        with opdiff.capture(model, path, level=level, mode=mode, backward=backward) as cap:
            for _ in range(args.steps):
                steps.append(timed(lambda: run(model, inputs, backward)))
                cap.step()
        plain += [timed(lambda: run(model, inputs, backward)) for _ in range(2)]
        pw, pc = statistics.median(w for w, _ in plain), statistics.median(c for _, c in plain)
        first.append((steps[0][0] / pw, steps[0][1] / pc))
        later += [(w / pw, c / pc) for w, c in steps[1:]]
    return first, later


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--levels", default="module,api,aten")
    ap.add_argument("--modes", default="stats,hash,tensor")
    ap.add_argument("--passes", default="fwd", help="fwd and/or fwdbwd")
    ap.add_argument("--repeat", type=int, default=5, help="capture blocks per configuration (medians are quoted)")
    ap.add_argument("--steps", type=int, default=0, help="also time each step inside one block of this many steps")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda: model and inputs on the GPU")
    ap.add_argument("--dir", default=None, help="where dumps are written (default: a temporary directory)")
    args = ap.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, inputs = zoo.gpt2(layers=args.layers, width=args.width, heads=args.heads, seq=args.seq, batch=args.batch,
                             vocab=args.vocab)
    model.config.use_cache = False
    model = model.to(args.device)
    inputs = {k: v.to(args.device) for k, v in inputs.items()}
    nparams = sum(p.numel() for p in model.parameters())
    print(f"$ python {' '.join(['bench/capture_bench.py', *(argv if argv is not None else sys.argv[1:])])}")
    print(f"GPT-2 {args.layers} layers x {args.width}, {args.heads} heads, seq {args.seq}, batch {args.batch}, "
          f"vocab {args.vocab} ({nparams / 1e6:.0f}M parameters) on {args.device}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}", flush=True)
    t = time.perf_counter()
    warm_up()  # a process's first capture loads the compiled kernels: not part of the per-run overhead
    print(f"stats kernels loaded in {time.perf_counter() - t:.1f}s", flush=True)
    base = args.dir or tempfile.mkdtemp(prefix="opdiff-bench-")
    os.makedirs(base, exist_ok=True)
    rows = []
    for pas in args.passes.split(","):
        run(model, inputs, pas == "fwdbwd")  # warm-up
        for level in args.levels.split(","):
            for mode in args.modes.split(","):
                path = os.path.join(base, f"{pas}-{level}-{mode}")
                shutil.rmtree(path, ignore_errors=True)
                with opdiff.capture(model, path, level=level, mode=mode, backward=pas == "fwdbwd"):
                    run(model, inputs, pas == "fwdbwd")  # warm-up of this configuration
                ratios, (plain, wall, nrec, data_bytes, size) = measure_block(model, inputs, args, pas, level, mode, path)
                row = [pas, level, mode, plain, wall, *ratio_row(ratios), nrec, size / 1e6]
                if args.steps > 1:
                    first, later = measure_steps(model, inputs, args, pas, level, mode, path)
                    row += [ratio_row(first)[0], *ratio_row(later)[:2]]
                rows.append(row)
                print(f"{pas:7s} {level:7s} {mode:7s} block wall ratio median {row[5]:.2f}x (CPU {row[6]:.2f}x, "
                      f"lowest {row[7]:.2f}x)  {nrec:6d} records  {size / 1e6:8.1f} MB"
                      + (f"  per step: first {row[10]:.2f}x, later {row[11]:.2f}x (CPU {row[12]:.2f}x)"
                         if args.steps > 1 else ""), flush=True)
                shutil.rmtree(path, ignore_errors=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f} (ratios: medians of {args.repeat} capture blocks, "
          "each against the plain runs just before and after it)\n")
    steps_head = " | step 0 | later steps | later CPU" if args.steps > 1 else ""
    print(f"| pass | level | mode | plain s | block s | block ratio | CPU ratio | lowest | records | dump MB{steps_head} |")
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if args.steps > 1 else ""))
    for r in rows:
        cells = [r[0], r[1], r[2], f"{r[3]:.2f}", f"{r[4]:.2f}", f"{r[5]:.2f}x", f"{r[6]:.2f}x", f"{r[7]:.2f}x",
                 str(r[8]), f"{r[9]:.1f}"] + ([f"{x:.2f}x" for x in r[10:13]] if args.steps > 1 else [])
        print("| " + " | ".join(cells) + " |")
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
