"""Export a PyTorch model to ONNX so that its ORT run compares with a PyTorch golden capture.

The TorchScript exporter names every node "/<module path with / for .>/<Op>", which capture reads
back as the node's module (graph.scope_of); inputs are named after the keyword arguments. The model
is called through a wrapper holding it as `WRAPPED`, a prefix the exported node names lose again.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

WRAPPED = "wrapped_model"


def export_onnx(model: Any, inputs: dict[str, Any], path: str | os.PathLike, *, opset: int = 17) -> dict[str, np.ndarray]:
    """Write `model` called with keyword `inputs` as ONNX at `path`; returns the inputs as numpy (for .npz)."""
    import onnx
    import torch

    names = list(inputs)

    class KeywordCall(torch.nn.Module):
        """Calls the model with keyword arguments from positional ones; returns a flat tuple."""

        def __init__(self) -> None:
            super().__init__()
            setattr(self, WRAPPED, model)

        def forward(self, *args):
            out = getattr(self, WRAPPED)(**dict(zip(names, args)))
            return tuple(out.values()) if hasattr(out, "values") else out

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(KeywordCall(), tuple(inputs[n] for n in names), str(Path(path)), input_names=names,
                          opset_version=opset, dynamo=False, do_constant_folding=False)
    proto = onnx.load(str(Path(path)))
    prefix = f"/{WRAPPED}/"
    for node in proto.graph.node:
        if node.name.startswith(prefix):
            node.name = "/" + node.name[len(prefix):]
    onnx.save(proto, str(Path(path)))
    return {k: v.detach().cpu().numpy() for k, v in inputs.items()}
