"""One process of a parallel run for tests/test_parallel.py: `python parallel_workers.py SCENARIO FAULTS RANK WORLD ROOT`.

RANK -1 writes the single-process golden of the scenario (ROOT/golden); a rank writes one target run
ROOT/target_FAULT per fault of the comma-separated FAULTS, in one process (a start-up per run is what
costs the time). Every scenario builds the same seeded model on
every rank (a small Llama-style block, written here), lays it out across the ranks, runs it under
opdiff.capture and writes it. FAULT plants one rank's mistake ("none" for a
clean run). gloo on CPU; rendezvous through a file in ROOT (no ports).
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import opdiff

DIM, HEADS, HIDDEN, SEQ = 16, 4, 32, 6


class RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Attention(nn.Module):
    """Llama-style attention; heads inferred from the projection's width, so it runs on a TP shard too."""

    def __init__(self, linear=nn.Linear, out_linear=nn.Linear):
        super().__init__()
        self.q, self.k, self.v = (linear(DIM, DIM, bias=False) for _ in range(3))
        self.o = out_linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        hd = DIM // HEADS
        q, k, v = (p(x).view(b, s, -1, hd).transpose(1, 2) for p in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, linear=nn.Linear, out_linear=nn.Linear):
        super().__init__()
        self.gate, self.up = linear(DIM, HIDDEN, bias=False), linear(DIM, HIDDEN, bias=False)
        self.down = out_linear(HIDDEN, DIM, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(DIM), Attention(**kw)
        self.mlp_norm, self.mlp = RMSNorm(DIM), MLP(**kw)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Model(nn.Module):
    def __init__(self, layers: int = 2, **kw):
        super().__init__()
        self.layers = nn.ModuleList(Block(**kw) for _ in range(layers))
        self.norm = RMSNorm(DIM)

    def forward(self, x):
        for layer in self.layers:
            if layer is not None:
                x = layer(x)
        return self.norm(x) if self.norm is not None else x


def seeded_model(**kw) -> Model:
    torch.manual_seed(0)
    return Model(**kw)


def inputs() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(2, SEQ, DIM)


# -- hand-written Megatron-style tensor parallelism ------------------------------------------------

class ColumnParallelLinear(nn.Module):
    """This rank's rows of the full weight: output features split across ranks."""

    def __init__(self, fin: int, fout: int, bias: bool = False):
        super().__init__()
        r, w = dist.get_rank(), dist.get_world_size()
        self.weight = nn.Parameter(torch.empty(fout // w, fin))
        self.full = (fout, fin, r, w)

    def forward(self, x):
        return F.linear(x, self.weight)


class RowParallelLinear(nn.Module):
    """This rank's columns of the full weight; the partial products are summed by an all_reduce."""

    REDUCE_OP = dist.ReduceOp.SUM
    SKIP_REDUCE = False

    def __init__(self, fin: int, fout: int, bias: bool = False):
        super().__init__()
        r, w = dist.get_rank(), dist.get_world_size()
        self.weight = nn.Parameter(torch.empty(fout, fin // w))
        self.full = (fout, fin, r, w)

    def forward(self, x):
        y = F.linear(x, self.weight)
        if not self.SKIP_REDUCE:
            dist.all_reduce(y, op=self.REDUCE_OP)
        return y


def load_megatron(tp: Model, full: Model) -> None:
    """Copy each rank's slice of the golden's weights into the hand-written TP model."""
    ref = dict(full.named_parameters())
    with torch.no_grad():
        for name, p in tp.named_parameters():
            m = tp.get_submodule(name.rsplit(".", 1)[0])
            w = ref[name]
            if isinstance(m, ColumnParallelLinear):
                n = w.shape[0] // m.full[3]
                p.copy_(w[m.full[2] * n:(m.full[2] + 1) * n])
            elif isinstance(m, RowParallelLinear):
                n = w.shape[1] // m.full[3]
                p.copy_(w[:, m.full[2] * n:(m.full[2] + 1) * n])
            else:
                p.copy_(w)


MEGATRON_LAYOUT = """\
rules:
  - {match: '\\.(q|k|v|gate|up)/parameter#0/forward/parameter/weight$', shard: 0}
  - {match: '\\.(q|k|v|gate|up)/ColumnParallelLinear#\\d+/forward/output', shard: -1}
  - {match: '\\.(o|down)/parameter#0/forward/parameter/weight$', shard: 1}
  - {match: '\\.(o|down)/RowParallelLinear#\\d+/forward/input', shard: -1}
  - {match: '\\.mlp/MLP#\\d+/forward/input', replicate: true}
  - {match: '^layers\\.\\d+\\.attn/Attention#\\d+/forward/input', replicate: true}
"""


def run_megatron(rank: int, root: str, fault: str) -> None:
    full = seeded_model()
    if rank < 0:
        return capture_run(full, f"{root}/golden")
    RowParallelLinear.SKIP_REDUCE, RowParallelLinear.REDUCE_OP = False, dist.ReduceOp.SUM
    tp = Model(linear=ColumnParallelLinear, out_linear=RowParallelLinear)
    load_megatron(tp, full)
    if fault == "slice" and rank == 1:  # rank 1 loaded rank 0's rows of mlp.up
        with torch.no_grad():
            w = full.layers[0].mlp.up.weight
            tp.layers[0].mlp.up.weight.copy_(w[:w.shape[0] // 2])
    if fault == "noreduce":
        RowParallelLinear.SKIP_REDUCE = True
    if fault == "maxop":
        RowParallelLinear.REDUCE_OP = dist.ReduceOp.MAX
    if fault == "stale" and rank == 1:  # a replicated norm weight rank 1 never received
        with torch.no_grad():
            tp.layers[1].mlp_norm.weight.mul_(1.01)
    with open(f"{root}/layout{rank}.yaml", "w") as f:
        f.write(MEGATRON_LAYOUT)
    capture_run(tp, f"{root}/target_{fault}", layout=f"{root}/layout{rank}.yaml")


def run_dtensor(rank: int, root: str, fault: str) -> None:
    model = seeded_model()
    if rank < 0:
        return capture_run(model, f"{root}/golden")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model.layers:
        plan = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
                "attn.o": RowwiseParallel(output_layouts=Shard(1)), "mlp.gate": ColwiseParallel(),
                "mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel(output_layouts=Shard(1)),
                "attn_norm": SequenceParallel(), "mlp_norm": SequenceParallel(),
                "attn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))}
        parallelize_module(block, mesh, plan)
    parallelize_module(model, mesh, {"layers.0": PrepareModuleInput(input_layouts=(Replicate(),),
                                                                     desired_input_layouts=(Shard(1),),
                                                                     use_local_output=True),
                                     "norm": SequenceParallel()})
    if fault == "slice" and rank == 1:  # rank 1's shard of mlp.up holds the wrong rows
        with torch.no_grad():
            local = model.layers[0].mlp.up.weight._local_tensor
            local.copy_(local.roll(1, dims=0))
    with open(f"{root}/layout{rank}.yaml", "w") as f:
        f.write(SEQUENCE_LAYOUT)
    capture_run(model, f"{root}/target_{fault}", layout=f"{root}/layout{rank}.yaml")


# the local tensors between the sequence-parallel regions are the ranks' slices of the sequence (dim 1);
# everything the plan hands over as a DTensor carries its own layout
SEQUENCE_LAYOUT = """\
rules:
  - {match: '^layers\\.\\d+/Block#\\d+/forward/(input|output)', shard: 1}
  - {match: '^layers\\.\\d+\\.(attn|mlp)/(Attention|MLP)#\\d+/forward/output', shard: 1}
  - {match: '^layers\\.\\d+\\.(attn_norm|mlp_norm)/RMSNorm#\\d+/forward/input', shard: 1}
  - {match: '^norm/RMSNorm#\\d+/forward/input', shard: 1}
"""


def capture_run(model: nn.Module, path: str, **kw) -> None:
    with torch.no_grad(), opdiff.capture(model, path, mode="tensor", **kw):
        model(inputs())


def run_pipeline(rank: int, root: str, fault: str) -> None:
    model = seeded_model(layers=4)
    if rank < 0:
        return capture_run(model, f"{root}/golden")
    x = inputs()
    if rank == 0:  # stage 0: layers 0-1, sends its activation on
        model.layers[2] = model.layers[3] = None
        model.norm = None
        if fault == "slice":
            with torch.no_grad():
                model.layers[1].mlp.down.weight.mul_(1.05)
        with torch.no_grad(), opdiff.capture(model, f"{root}/target_{fault}", mode="tensor", pipeline=(0, 2)):
            y = model(x)
        dist.send(y.contiguous(), dst=1)
    else:
        model.layers[0] = model.layers[1] = None
        y = torch.empty_like(x)
        dist.recv(y, src=0)
        with torch.no_grad(), opdiff.capture(model, f"{root}/target_{fault}", mode="tensor", pipeline=(1, 2)):
            model(y)


# data parallel: each rank's activations (and their gradients) are its slice of the global batch
FSDP_LAYOUT = """\
rules:
  - {match: '/(forward|backward)/(input|output)/', shard: 0}
"""


def run_fsdp(rank: int, root: str, fault: str) -> None:
    """One training step (forward, backward, SGD update) of the global batch; FSDP2 shards it over the ranks."""
    model = seeded_model()
    torch.manual_seed(2)
    x = torch.randn(4, SEQ, DIM)
    if rank < 0:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        return train_step(model, opt, x, f"{root}/golden", x.numel())
    from torch.distributed.fsdp import fully_shard

    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    # each rank's loss is its share of the global batch's loss (normalised by the global element count, as
    # TorchTitan normalises by the global token count), so gradients must be summed over the ranks, not
    # averaged: FSDP is told so, as such a run tells it (gloo needs the plain-sum path: no PREMUL_SUM)
    # fault "localmean": the other common recipe, each rank's loss a mean over its own slice, FSDP's default average
    for m in (*model.layers, model) if fault != "localmean" else ():
        m.set_gradient_divide_factor(1.0)
        m.set_force_sum_reduction_for_comms(True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if fault == "slice" and rank == 1:  # rank 1's shard of a weight is off before the step
        with torch.no_grad():
            model.layers[1].mlp.up.weight._local_tensor.mul_(1.01)
    with open(f"{root}/layout{rank}.yaml", "w") as f:
        f.write(FSDP_LAYOUT)
    n = x.shape[0] // dist.get_world_size()
    train_step(model, opt, x[rank * n:(rank + 1) * n], f"{root}/target_{fault}",
               x.numel() // dist.get_world_size() if fault == "localmean" else x.numel(),
               layout=f"{root}/layout{rank}.yaml")


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, path: str, total: int, **kw) -> None:
    with opdiff.capture(model, path, mode="tensor", backward=True, optimizer=opt, **kw):
        (model(x).pow(2).sum() / total).backward()
        opt.step()


SCENARIOS = {"fsdp": run_fsdp, "megatron": run_megatron, "dtensor": run_dtensor, "pipeline": run_pipeline}


def main() -> None:
    scenario, faults, rank, world, root = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    torch.set_num_threads(1)
    if rank < 0:
        return SCENARIOS[scenario](rank, root, "none")
    dist.init_process_group("gloo", init_method=f"file://{root}/rendezvous", rank=rank, world_size=world)
    for fault in faults.split(","):
        SCENARIOS[scenario](rank, root, fault)
        dist.barrier()  # every rank's part is in place before the next run starts
    if rank >= 0:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
