"""Make real msprobe dumps of a small seeded GPT-2, for the tests and the bench of the msprobe reader.

Run as a script with an interpreter that has `mindstudio-probe` installed (the `.venv-msprobe`
of the Makefile), never imported next to the test process's torch: msprobe wraps torch's APIs
when it is imported. `build_model` is also imported by the tests (without msprobe) so that
opdiff's own capture runs the very same model.

    python msprobe_dumps.py OUT --task tensor --level L1 [--dtype bfloat16] [--fault-layer 1]
                                [--backward] [--steps 2] [--ranks 2] [--summary md5]
    python msprobe_dumps.py OUT --model chain --ops 2000 --elements 65536 [--fault-layer 700]
                                (many small ops: N torch.tanh calls on one fp32 tensor, for the bench of
                                per-record cost; --fault-layer nudges the tensor before that call)
    python msprobe_dumps.py --jobs JOBS.json     (a list of such argument lists, one process)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

LAYERS, WIDTH, HEADS, SEQ, BATCH, VOCAB = 2, 64, 4, 16, 2, 128


def _zoo():
    """opdiff's zoo module, loaded by path so that this script needs no installed opdiff."""
    path = Path(__file__).resolve().parent / "zoo.py"
    spec = importlib.util.spec_from_file_location("_opdiff_zoo", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build_model(dtype: str = "float32", fault_layer: int | None = None, seed: int = 0, **sizes: int):
    """GPT-2 with exact GELU (nn.GELU) in every block; `fault_layer`'s GELU uses the tanh approximation.

    Returns (model, inputs); the same arguments give bitwise the same model and inputs.
    """
    import torch

    kw = dict(layers=LAYERS, width=WIDTH, heads=HEADS, seq=SEQ, batch=BATCH, vocab=VOCAB)
    kw.update(sizes)
    model, inputs = _zoo().gpt2(seed=seed, **kw)
    for i, block in enumerate(model.transformer.h):
        # nn.GELU looks F.gelu up at call time, so msprobe's wrapper (and opdiff's API capture) see it
        block.mlp.act = torch.nn.GELU(approximate="tanh" if i == fault_layer else "none")
    model = model.to(getattr(torch, dtype))
    return model, inputs


def build_chain(ops: int, elements: int, fault_layer: int | None = None, seed: int = 0):
    """A module of `ops` torch.tanh calls on one fp32 tensor of `elements` (each call: one input, one
    output, so 2 * ops small tensors per dump); before call `fault_layer` the first 1,000 elements are
    nudged by 0.01 through numpy (which no dumper sees), so that call and every later one differ."""
    import torch

    class Chain(torch.nn.Module):
        def forward(self, x):
            for i in range(ops):
                if i == fault_layer:
                    x.numpy()[:1000] += 0.01
                x = torch.tanh(x)
            return x

    gen = torch.Generator().manual_seed(seed)
    return Chain(), {"x": torch.randn(elements, generator=gen)}


def run_step(model, inputs: dict[str, Any], backward: bool):
    """One forward (and backward of the LM loss) of the model."""
    import torch

    if not hasattr(model, "transformer"):  # the chain: forward only
        with torch.no_grad():
            return model(**inputs)
    if backward:
        out = model(**inputs, labels=inputs["input_ids"])
        out.loss.backward()
        return out.loss.detach()
    with torch.no_grad():
        return model(**inputs).logits


def write_config(out: Path, task: str, level: str, summary: str | None) -> Path:
    """The msprobe config.json of one dump (all ranks, all steps, all data)."""
    section: dict[str, Any] = {"scope": [], "list": [], "data_mode": ["all"]}
    if task == "statistics" or summary:  # the tensor task takes a summary mode too (its md5/xor beside the data)
        section["summary_mode"] = summary or "statistics"
    cfg = {"task": task, "dump_path": str(out), "rank": [], "step": [], "level": level, task: section}
    path = out.parent / f".{out.name}.config.json"
    path.write_text(json.dumps(cfg))
    return path


def dump(args: argparse.Namespace, rank: int | None = None) -> None:
    """Run the model under msprobe's PrecisionDebugger for `args.steps` steps."""
    import torch
    from msprobe.pytorch import PrecisionDebugger

    torch.manual_seed(0)
    if args.model == "chain":
        model, inputs = build_chain(args.ops, args.elements, args.fault_layer, seed=args.seed + (rank or 0))
    else:
        model, inputs = build_model(args.dtype, args.fault_layer, seed=args.seed + (rank or 0), width=args.width,
                                    layers=args.layers, seq=args.seq, batch=args.batch, heads=args.heads)
    debugger = PrecisionDebugger(config_path=str(args.config))
    for _ in range(args.steps):
        debugger.start(model)
        loss = run_step(model, inputs, args.backward)
        if rank is not None:
            torch.distributed.all_reduce(loss)
        debugger.stop()
        debugger.step()
        model.zero_grad(set_to_none=True)


def _rank_main(rank: int, args: argparse.Namespace) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    try:
        dump(args, rank)
    finally:
        dist.destroy_process_group()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--model", choices=("gpt2", "chain"), default="gpt2")
    p.add_argument("--ops", type=int, default=2000, help="chain: torch.tanh calls")
    p.add_argument("--elements", type=int, default=1 << 16, help="chain: fp32 elements per tensor")
    p.add_argument("--task", choices=("tensor", "statistics"), default="tensor")
    p.add_argument("--summary", choices=("statistics", "md5", "xor"), default=None)
    p.add_argument("--level", choices=("L0", "L1", "mix"), default="L1")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--fault-layer", type=int, default=None)
    p.add_argument("--backward", action="store_true")
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--ranks", type=int, default=0, help="run N gloo ranks (0: no torch.distributed)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=0, help="gloo rendezvous port (0: a free one)")
    p.add_argument("--width", type=int, default=WIDTH)
    p.add_argument("--layers", type=int, default=LAYERS)
    p.add_argument("--seq", type=int, default=SEQ)
    p.add_argument("--batch", type=int, default=BATCH)
    p.add_argument("--heads", type=int, default=HEADS)
    return p


def _free_port() -> int:
    """A TCP port free on the loopback now (a fixed one collides with other gloo runs on the machine)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_job(argv: list[str]) -> None:
    """One dump, in a forked child: msprobe's debugger is a per-process singleton."""
    args = parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    args.config = write_config(args.out, args.task, args.level, args.summary)
    if args.ranks:
        import torch.multiprocessing as mp

        args.port = args.port or _free_port()
        mp.start_processes(_rank_main, args=(args,), nprocs=args.ranks, join=True, start_method="fork")
    else:
        dump(args)


def main(argv: list[str] | None = None) -> int:
    """One dump from the command line, or several (`--jobs FILE`: a JSON list of argument lists).

    Several jobs share one interpreter's imports (torch, transformers, msprobe): each runs in a fork.
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] != ["--jobs"]:
        run_job(argv)
        return 0
    import multiprocessing

    import msprobe.pytorch  # noqa: F401  imported once here, before the forks
    import transformers.loss.loss_utils  # noqa: F401  (transformers loads these lazily: ~4 s in every fork otherwise)
    from transformers import GPT2Config, GPT2LMHeadModel  # noqa: F401

    ctx = multiprocessing.get_context("fork")
    for job in json.loads(Path(argv[1]).read_text()):
        t0 = time.perf_counter()
        proc = ctx.Process(target=run_job, args=(job,))
        proc.start()
        proc.join()
        print(f"msprobe_dumps: {time.perf_counter() - t0:.1f} s {' '.join(job)}", file=sys.stderr)
        if proc.exitcode:
            print(f"msprobe_dumps: job {job} failed (exit {proc.exitcode})", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
