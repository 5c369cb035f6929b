"""ONNX Runtime capture: `capture_onnx(model, inputs, path, ...)` (docs/fusion.md). Needs `opdiff[onnx]`."""

from .capture import GRAPH_VALUE, capture_onnx, load_model
from .session import OPT_LEVELS, Settings, parse_config

__all__ = ["capture_onnx", "load_model", "GRAPH_VALUE", "OPT_LEVELS", "Settings", "parse_config"]
