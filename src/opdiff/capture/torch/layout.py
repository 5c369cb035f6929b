"""DTensors as records: the local shard is what a rank holds, its placements and mesh say where it belongs.

A DTensor (tensor parallel, sequence parallel, FSDP2's sharded parameters and gradients) is recorded
as its local tensor, with `extra["layout"]` = mesh ranks, mesh shape and placements (store/layout.py),
so that merging the ranks (store/logical.py) can rebuild the logical tensor. Nothing here changes the
DTensor: the local tensor is read, not redistributed.
"""

from __future__ import annotations

from typing import Any

import torch


def _dtensor_type() -> type | None:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a build without distributed support
        return None
    return DTensor


_DTENSOR = _dtensor_type()


def placement_text(p: Any) -> str:
    """S(d), R or P(op): DTensor's own short form, normalised (negative shard dims kept as given)."""
    if p.is_shard():
        return f"S({p.dim})"
    if p.is_replicate():
        return "R"
    return f"P({getattr(p, 'reduce_op', 'sum')})"


def unwrap(t: Any) -> tuple[torch.Tensor, dict[str, Any] | None]:
    """(the tensor a rank holds, its layout) for a DTensor; (t, None) for any other tensor."""
    if _DTENSOR is None or not isinstance(t, _DTENSOR):
        return t, None
    dt: Any = t
    mesh = dt.device_mesh
    local = dt._local_tensor  # the rank's own storage, without redistribution or an autograd node
    layout = {"mesh": [int(r) for r in mesh.mesh.flatten().tolist()], "mesh_shape": list(mesh.mesh.shape),
              "placements": [placement_text(p) for p in dt.placements], "source": "dtensor",
              "global_shape": list(dt.shape)}
    names = getattr(mesh, "mesh_dim_names", None)
    if names:
        layout["mesh_dim_names"] = list(names)
    return local, layout


def planned_inputs(m: torch.nn.Module) -> bool:
    """Whether torch.distributed's parallel plan rewrites this module's inputs (parallelize_module's and
    distribute_module's pre-hooks): opdiff's pre-hook then runs after them, so the inputs are recorded as the
    plan lays them out (DTensors with their placements), not as the caller's local shard."""
    for hook in m._forward_pre_hooks.values():
        fn = getattr(hook, "func", hook)
        if str(getattr(fn, "__module__", "") or "").startswith("torch.distributed"):
            return True
    return False


def holds_dtensor(m: torch.nn.Module) -> bool:
    """Whether a module's own parameters are DTensors (tensor parallel): its output is recorded before the
    parallel plan's output hook turns it into a local tensor, so that it keeps its layout."""
    return _DTENSOR is not None and any(isinstance(p, _DTENSOR) for p in m._parameters.values())
