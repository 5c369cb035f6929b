"""Cost of `opdiff fusion torch`: a model of N MLP blocks, Inductor on CPU, a wrong custom post-grad pass
that scales the erf of one GELU block; prints the bisection runs and seconds (regions, then switches).

    .venv/bin/python bench/fusion_bench.py [--blocks 4] [--width 32]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from opdiff.fusion.inductor import fusion_torch


class ScaleErf(CustomGraphPass):
    """Wrong on purpose: the first erf's result times 1.01."""

    def __call__(self, g: torch.fx.Graph) -> None:
        for n in list(g.nodes):
            if n.op == "call_function" and n.target == torch.ops.aten.erf.default:
                with g.inserting_after(n):
                    m = g.call_function(torch.ops.aten.mul.Tensor, (n, 1.01))
                n.replace_all_uses_with(m, delete_user_cb=lambda u: u is not m)
                return

    def uuid(self) -> str:
        return "opdiff-bench-scale-erf-1.01"


def block(width: int, act: torch.nn.Module) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(width, width), act, torch.nn.Linear(width, width), torch.nn.LayerNorm(width))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--width", type=int, default=32)
    a = ap.parse_args()
    torch.manual_seed(0)
    acts = [torch.nn.ReLU() for _ in range(a.blocks)]
    acts[a.blocks // 2] = torch.nn.GELU()  # the one block the wrong pass touches
    model = torch.nn.Sequential(*[block(a.width, act) for act in acts]).eval()
    x = torch.randn(4, a.width)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = fusion_torch(model, (x,), tmp, options={"post_grad_custom_post_pass": ScaleErf()}, force=True)
        total = time.perf_counter() - t0
    rb, sb = res.extra["region_bisection"], res.bisection
    print(f"blocks {a.blocks}: culprit region {res.extra['culprit_regions']}, switch {res.culprits}, kernels {list(res.fused_nodes)}")
    print(f"region bisection: {len(rb['switches'])} regions, {rb['runs']} runs, {rb['seconds']:.1f} s")
    if sb is not None:
        print(f"switch bisection: {len(sb.switches)} switches, {len(sb.runs)} runs, {sb.seconds:.1f} s")
    print(f"total fusion_torch: {total:.1f} s (golden, target, bisections, fixed run, two provenance compiles)")


if __name__ == "__main__":
    main()
