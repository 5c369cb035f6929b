"""Capture a run into a dump. Each framework lives in its own module, imported only when used."""

from __future__ import annotations


def capture(model, path, **options):
    """Pick the capture for `model`'s framework (today: PyTorch nn.Module)."""
    mod = type(model).__module__ or ""
    for cls in type(model).__mro__:
        if (cls.__module__ or "").startswith("torch"):
            from .torch import capture as torch_capture

            return torch_capture(model, path, **options)
    raise TypeError(f"opdiff.capture: no capture for a model of type {type(model).__name__} (from {mod})")
