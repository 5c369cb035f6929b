"""PyTorch capture: `capture(model, path, level=..., mode=...)`, a context manager (docs/capture.md)."""

from .session import CaptureSession, capture, parse_steps

__all__ = ["capture", "CaptureSession", "parse_steps"]
