"""The ORT-port benign class: the target is the model exported to ONNX and run under onnxruntime.

As the documented recipe (docs/fusion.md, "From PyTorch"): `export_onnx` writes the model with its module
signatures, `capture_onnx(..., level="module")` writes module records named like the torch capture's, and
the torch model is the golden. The oracle runs the .onnx in a plain onnxruntime session (no opdiff code)
and holds its output to the benign bound. An architecture the exporter or onnxruntime cannot handle is
`n/a` with the reason (ValueError).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import archs


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def export(model, inputs: dict[str, Any], work: Path) -> tuple[Path, dict[str, Any]]:
    """The model as ONNX under `work` and its inputs as numpy; ValueError when the exporter fails."""
    from ...capture.onnxruntime.export import export_onnx

    work.mkdir(parents=True, exist_ok=True)
    path = work / "model.onnx"
    try:
        feeds = export_onnx(model, inputs, path)
    except Exception as exc:  # the exporter's many failure types: the class does not apply here
        raise ValueError(f"ONNX export fails: {type(exc).__name__}: {_first_line(exc)}") from None
    return path, feeds


def plain_output(model, inputs: dict[str, Any], path: Path, feeds: dict[str, Any]) -> Any:
    """The ORT output a user looks at (the one archs.output_tensor picks in torch), from a plain session."""
    import onnxruntime as ort
    import torch

    with torch.no_grad():
        out = model(**inputs)
    flat = tuple(out.values()) if isinstance(out, dict) else tuple(out) if isinstance(out, (tuple, list)) else (out,)
    picked = archs.output_tensor(out)
    index = next(i for i, v in enumerate(flat) if v is picked)
    try:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = {i.name for i in sess.get_inputs()}
        got = sess.run(None, {k: v for k, v in feeds.items() if k in names})
    except Exception as exc:  # onnxruntime cannot load or run the export
        raise ValueError(f"onnxruntime cannot run the export: {type(exc).__name__}: {_first_line(exc)}") from None
    return torch.from_numpy(got[index])


def capture(path: Path, feeds: dict[str, Any], out: Path) -> None:
    """The target's module-level capture of its ORT run (the recipe's `opdiff capture-onnx --level module`)."""
    from ...capture.onnxruntime import capture_onnx

    capture_onnx(path, feeds, out, level="module", mode="tensor")
