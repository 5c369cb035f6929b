"""A deliberately wrong Inductor pass, for the tests and benches of `opdiff fusion torch`. Needs torch."""

from __future__ import annotations

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass


class ScaleErf(CustomGraphPass):
    """Wrong on purpose: the first erf's result (exact GELU's) times 1.01."""

    def __call__(self, g: torch.fx.Graph) -> None:
        for n in list(g.nodes):
            if n.op == "call_function" and n.target == torch.ops.aten.erf.default:
                with g.inserting_after(n):
                    m = g.call_function(torch.ops.aten.mul.Tensor, (n, 1.01))
                n.replace_all_uses_with(m, delete_user_cb=lambda u, m=m: u is not m)
                return

    def uuid(self) -> str:
        return "opdiff-testing-scale-erf-1.01"
