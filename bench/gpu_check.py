"""CUDA capture check: on a GPU, capture changes nothing, its records agree with the data, and
compare and diagnose work on what it wrote.

    python bench/gpu_check.py --out DIR            # needs a CUDA device; writes DIR/gpu_check.json

Checks, each printed as ok/FAILED (exit 1 when any fails):
1. bitwise: a GPT-2 training step (logits, loss, every gradient) under capture at each level x mode
   equals the plain run bit for bit (deterministic algorithms on, so two plain runs agree);
2. device statistics: the statistics a stats-mode capture computes on the GPU agree with numpy's
   statistics of the same tensors written by a tensor-mode capture;
3. compare: two captured runs compare with every pair bitwise equal;
4. diagnose: faults injected into the target on the GPU are blamed on the module they were put in;
   CPU fp32 against the same model on CUDA, and CUDA bf16 autocast against CUDA fp32, are not faults;
5. torch.compile: Inductor (Triton kernels) regions captured at module level still run compiled,
   with output bitwise equal to the compiled model without capture.
What capture costs on the GPU: `python bench/capture_bench.py --device cuda --passes fwdbwd`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS (before CUDA starts)

import numpy as np
import torch

import opdiff
from opdiff.base.vocab import TORCH_LEVELS
from opdiff.compare import compare
from opdiff.diagnose import diagnose
from opdiff.store.stats import tensor_stats
from opdiff.testing import faults, zoo

LEVELS, MODES = TORCH_LEVELS, ("stats", "hash", "tensor")
CHECKS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> bool:
    CHECKS.append((name, bool(ok), detail))
    print(f"{'ok    ' if ok else 'FAILED'} {name}{'  ' + detail if detail else ''}", flush=True)
    return bool(ok)


def to(inputs: dict[str, Any], device: str) -> dict[str, Any]:
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in inputs.items()}


def step(model: torch.nn.Module, inputs: dict[str, Any]) -> list[torch.Tensor]:
    """One training step's results: logits, loss and every gradient (copied, grads then cleared)."""
    out = model(**inputs, labels=inputs["input_ids"])
    out.loss.backward()
    res = [out.logits.detach().clone(), out.loss.detach().clone()]
    res += [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return res


def equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def check_bitwise(out: Path) -> None:
    """Checks 1-3 on a small GPT-2."""
    torch.manual_seed(0)
    model, inputs = zoo.gpt2(layers=4, width=256, heads=4, seq=128, batch=2, vocab=1024)
    model.config.use_cache = False
    model, inputs = model.cuda(), to(inputs, "cuda")
    plain = step(model, inputs)
    check("two plain CUDA steps are bitwise equal (deterministic)", equal(plain, step(model, inputs)))
    for level in LEVELS:
        for mode in MODES:
            path = out / f"small-{level}-{mode}"
            with opdiff.capture(model, path, level=level, mode=mode, backward=True):
                got = step(model, inputs)
            dump = opdiff.load(path)
            check(f"capture {level}/{mode} leaves the step bitwise equal", equal(plain, got),
                  f"{len(dump.records)} records, device {dump.meta.get('device')}")
    # device statistics (stats mode: computed on the GPU) against numpy on the written tensors
    for level in LEVELS:
        stats_d, tensor_d = opdiff.load(out / f"small-{level}-stats"), opdiff.load(out / f"small-{level}-tensor")
        by_name = {r.name: r for r in tensor_d.records}
        worst, n = 0.0, 0
        for r in stats_d.records:
            t = by_name.get(r.name)
            if t is None or r.stats is None or r.stats.max is None or not t.has_data:
                continue
            ref = tensor_stats(tensor_d.tensor(t))
            for a, b in ((r.stats.max, ref.max), (r.stats.min, ref.min), (r.stats.mean, ref.mean), (r.stats.norm, ref.norm)):
                if a is not None and b is not None and np.isfinite(b):
                    worst = max(worst, abs(a - b) / max(abs(b), 1e-12))
            n += 1
        check(f"{level}: GPU statistics agree with numpy's on the written tensors", n > 0 and worst < 1e-6,
              f"{n} records, worst relative difference {worst:.1e}")
    path2 = out / "small-module-tensor-again"
    with opdiff.capture(model, path2, level="module", mode="tensor", backward=True):
        step(model, inputs)
    c = compare(out / "small-module-tensor", path2)
    n_eq = sum(1 for p in c.results if p.bitwise_equal)
    check("two captured CUDA runs compare bitwise equal", c.passed() and n_eq == len(c.results),
          f"{n_eq}/{len(c.results)} pairs bitwise equal")
    shutil.rmtree(path2)


def check_diagnose(out: Path) -> None:
    """Check 4: faults on the GPU, and the benign device / precision changes."""
    for fault in ("weight_row", "activation", "norm_eps", "attention_scale"):
        golden, inputs, target, inj = faults.build_pair("gpt2", fault, width=128, seq=32)
        golden.cuda(), target.cuda()
        g, t = out / f"{fault}-golden", out / f"{fault}-target"
        with opdiff.capture(golden, g, level="module", mode="tensor"):
            faults.run(golden, to(inputs, "cuda"))
        with opdiff.capture(target, t, level="module", mode="tensor"):
            faults.run(target, to(inj.inputs, "cuda"), inj)
        d = diagnose(g, t)
        module = d.culprit.module if d.culprit is not None else None
        check(f"diagnose {fault} on CUDA", d.verdict in inj.verdicts and (inj.module is None or module == inj.module),
              f"verdict {d.verdict}, culprit {module}, injected {inj.module}")
    torch.manual_seed(0)
    model, inputs = zoo.gpt2(width=128, seq=32)
    cpu_p, cuda_p, bf16_p = out / "dev-cpu", out / "dev-cuda", out / "dev-cuda-bf16"
    with opdiff.capture(model, cpu_p, level="module", mode="tensor"), torch.no_grad():
        model(**inputs)
    model.cuda()
    cuda_inputs = to(inputs, "cuda")
    with opdiff.capture(model, cuda_p, level="module", mode="tensor"), torch.no_grad():
        model(**cuda_inputs)
    with opdiff.capture(model, bf16_p, level="module", mode="tensor"), torch.no_grad():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            model(**cuda_inputs)
    for name, a, b in (("CPU fp32 vs CUDA fp32", cpu_p, cuda_p), ("CUDA fp32 vs CUDA bf16 autocast", cuda_p, bf16_p)):
        d = diagnose(a, b)
        check(f"diagnose {name} is not a fault", d.verdict in faults.EXPECTED["benign"],
              f"verdict {d.verdict}: {d.summary}")


def check_compiled(out: Path) -> None:
    """Check 5: Inductor on CUDA, captured at module level, still runs compiled and bitwise equal."""
    torch.manual_seed(0)
    model, inputs = zoo.gpt2(width=128, seq=32)
    model.config.use_cache = False
    model = model.cuda().eval()
    inputs = to(inputs, "cuda")
    path = out / "compiled"
    with opdiff.capture(model, path, compile="children"), torch.no_grad():
        got = model(**inputs).logits.clone()
    meta = opdiff.load(path).meta
    observed = meta.get("observed", meta)
    from opdiff.capture.torch.compiled import CompiledRegions, region_paths

    with CompiledRegions(model, region_paths(model, "children")), torch.no_grad():
        ref = model(**inputs).logits.clone()
    check("torch.compile regions on CUDA ran compiled under capture", bool(observed.get("compiled_code_ran")),
          f"graph breaks {observed.get('graph_breaks')}")
    check("compiled output with capture is bitwise equal to without", torch.equal(got, ref))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--skip", default="", help="comma list of bitwise,diagnose,compiled")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    info = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "cuda": torch.version.cuda}
    print(json.dumps(info), flush=True)
    skip = set(args.skip.split(","))
    stages: list[tuple[str, Callable[[], Any]]] = [
        ("bitwise", lambda: check_bitwise(out / "dumps")),
        ("diagnose", lambda: check_diagnose(out / "dumps")),
        ("compiled", lambda: check_compiled(out / "dumps")),
    ]
    for name, fn in stages:
        if name in skip:
            continue
        try:
            fn()
        except Exception as e:  # a stage that breaks is a failed check; the others still run
            import traceback

            traceback.print_exc()
            check(f"{name} stage ran", False, f"{type(e).__name__}: {e}")
    shutil.rmtree(out / "dumps", ignore_errors=True)
    doc = {"info": info, "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in CHECKS]}
    (out / "gpu_check.json").write_text(json.dumps(doc, indent=1))
    failed = [n for n, ok, _ in CHECKS if not ok]
    print(f"\n{len(CHECKS) - len(failed)}/{len(CHECKS)} checks ok" + (f"; FAILED: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
