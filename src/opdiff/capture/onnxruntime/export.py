"""Export a PyTorch model to ONNX so that its ORT run compares with a PyTorch golden capture.

The TorchScript exporter names every node "/<module path with / for .>/<Op>", which capture reads
back as the node's module (graph.scope_of); inputs are named after the keyword arguments. The model
is called through a wrapper holding it as `WRAPPED`, a prefix the exported node names lose again.
Before exporting, one eager run with forward hooks notes each module's class and the positions,
shapes and dtypes of its inputs and outputs (as opdiff's torch capture names them); they go into the
model's metadata (`MODULES_KEY`), from which `capture_onnx(..., level="module")` writes module
records named like the torch capture's (modules.py).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

WRAPPED = "wrapped_model"
MODULES_KEY = "opdiff.modules"  # model metadata: {path: {"op", "calls", "scope", "inputs", "outputs"}} (docs/fusion.md)
PARAMS_KEY = "opdiff.parameters"  # model metadata: parameter names in the torch capture's order (params.py)


def _specs(flat: list) -> list[list]:
    """[[pos, shape, dtype, fingerprint], ...] of (pos, tensor) pairs; the fingerprint (sum, sum of |x|, or
    null) tells apart two tensors of one shape and dtype (a residual and the branch added to it)."""
    return [[pos, [int(s) for s in t.shape], str(t.dtype).removeprefix("torch."), _fingerprint(t)] for pos, t in flat]


def _fingerprint(t: Any) -> list[float] | None:
    if not t.is_floating_point() or t.numel() == 0:
        return None
    x = t.detach().double()
    a, b = float(x.sum()), float(x.abs().sum())
    return [a, b] if math.isfinite(a) and math.isfinite(b) else None


def unqualified(path: str) -> str:
    """The name the TorchScript exporter gives a module's scope: its path from the last non-numeric atom
    on ("encoder.layer.0" -> "layer.0"), the path taken under the export wrapper as the exporter sees it."""
    atoms = f"{WRAPPED}.{path}".split(".")
    k = max(i for i, a in enumerate(atoms) if not a.isnumeric())
    return ".".join(atoms[k:])


def module_signatures(model: Any, inputs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One eager run with forward hooks: per module path its class, call count, input and output specs, and
    `scope`: the exporter's scope of its first call, the unqualified names of the modules calling it joined
    by "." (a module called by an ancestor other than its parent, or a Sequential's child, has a scope that
    is not its path: OPT's decoder is called by the root, not by `model`: scope "decoder")."""
    import torch

    from ..torch.naming import flatten, flatten_call
    from ..torch.preserve import preserved

    found: dict[str, dict[str, Any]] = {}
    stack: list[str] = []  # scopes of the module calls under way

    def enter(path: str, module) -> None:
        scope = "" if not path else ".".join(s for s in (stack[-1] if stack else "", unqualified(path)) if s)
        entry = found.setdefault(path, {"op": type(module).__name__, "calls": 0, "scope": scope})
        stack.append(entry["scope"] if entry["calls"] == 0 else scope)

    def hook(path: str, module, args, kwargs, output) -> None:
        if stack:
            stack.pop()
        entry = found[path]
        entry["calls"] += 1
        if entry["calls"] == 1:
            entry["inputs"] = _specs(flatten_call(args, kwargs))
            entry["outputs"] = _specs(flatten(output))

    named = list(model.named_modules())
    handles = [m.register_forward_pre_hook(lambda mod, a, p=path: enter(p, mod)) for path, m in named]
    handles += [m.register_forward_hook(lambda mod, a, k, o, p=path: hook(p, mod, a, k, o), with_kwargs=True)
                for path, m in named]
    try:
        with preserved(model, rng=True), torch.no_grad():
            model(**inputs)
    finally:
        for h in handles:
            h.remove()
    return found


def parameter_names(model: Any) -> list[str]:
    """Each parameter's dotted name once, under its first owner, in the torch capture's order (tied weights
    the exporter keeps once under that name)."""
    seen: set[int] = set()
    out = []
    for path, m in model.named_modules():
        for pname, p in m.named_parameters(recurse=False):
            if id(p) not in seen:
                seen.add(id(p))
                out.append(f"{path}.{pname}" if path else pname)
    return out


def export_onnx(model: Any, inputs: dict[str, Any], path: str | os.PathLike, *, opset: int = 17) -> dict[str, np.ndarray]:
    """Write `model` called with keyword `inputs` as ONNX at `path`; returns the inputs as numpy (for .npz)."""
    from ..torch.preserve import preserved

    with preserved(model, rng=True):  # the exporter leaves the model in train mode: put it back as found
        return _export_onnx(model, inputs, path, opset)


def _export_onnx(model: Any, inputs: dict[str, Any], path: str | os.PathLike, opset: int) -> dict[str, np.ndarray]:
    import onnx
    import torch

    names = list(inputs)
    signatures = module_signatures(model, inputs)

    class KeywordCall(torch.nn.Module):
        """Calls the model with keyword arguments from positional ones; returns a flat tuple."""

        def __init__(self) -> None:
            super().__init__()
            setattr(self, WRAPPED, model)

        def forward(self, *args):
            out = getattr(self, WRAPPED)(**dict(zip(names, args)))
            return tuple(out.values()) if isinstance(out, dict) else out

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(KeywordCall(), tuple(inputs[n] for n in names), str(Path(path)), input_names=names,
                          opset_version=opset, dynamo=False, do_constant_folding=False)
    proto = onnx.load(str(Path(path)))
    prefix = f"/{WRAPPED}/"
    for node in proto.graph.node:
        if node.name.startswith(prefix):
            node.name = "/" + node.name[len(prefix):]
    proto.metadata_props.add(key=MODULES_KEY, value=json.dumps(signatures))
    proto.metadata_props.add(key=PARAMS_KEY, value=json.dumps(parameter_names(model)))
    onnx.save(proto, str(Path(path)))
    return {k: v.detach().cpu().numpy() for k, v in inputs.items()}


MODEL_FILE, INPUTS_FILE, GOLDEN_DIR = "model.onnx", "inputs.npz", "golden"


def export_pair(model: Any, inputs: dict[str, Any], out: str | os.PathLike, *, opset: int = 17,
                golden: bool = True, force: bool = False) -> dict[str, Path]:
    """Export `model` into `out`: model.onnx, inputs.npz and (with `golden`) its PyTorch module-level
    capture golden/, ready for `capture_onnx(out/model.onnx, out/inputs.npz, ..., level="module")`."""
    from ...base.errors import OpdiffError
    from ...base.outdir import claim_dir

    if not isinstance(inputs, dict):
        raise OpdiffError(f"export-onnx: inputs must be a dict of keyword arguments, not {type(inputs).__name__}")
    from ..torch.preserve import preserved

    root = Path(out)
    claim_dir(root, force)
    root.mkdir(parents=True, exist_ok=True)
    paths = {"model": root / MODEL_FILE, "inputs": root / INPUTS_FILE}
    arrays = export_onnx(model, inputs, paths["model"], opset=opset)
    np.savez(paths["inputs"], **arrays)  # type: ignore[arg-type]  # numpy's stub checks **kwds against allow_pickle
    if golden:
        from ..torch import capture

        paths["golden"] = root / GOLDEN_DIR
        with preserved(model, rng=True), capture(model, paths["golden"], level="module", overwrite=force):
            import torch

            with torch.no_grad():
                model(**inputs)
    return paths
