"""Shared by tests/test_capture_*.py: build zoo models small, watch them with plain hooks, re-run call lines."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from opdiff.capture.torch.naming import flatten, flatten_call
from opdiff.replay.torch_replay import decode as replay_decode
from opdiff.store.format import node_name
from opdiff.testing import zoo

MODELS = ("gpt2", "llama", "bert", "vit", "t5", "resnet")


def build(name: str, **kw):
    """A small zoo model (2 layers where the builder has layers) and its inputs."""
    if name != "resnet":
        kw.setdefault("layers", 2)
    return zoo.build(name, **kw)


def to_np(t: torch.Tensor) -> np.ndarray:
    """A numpy copy of a tensor, bf16/fp8 as ml_dtypes, written independently of opdiff's own conversion."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn).copy()
    if t.dtype == torch.float8_e5m2:
        return t.view(torch.uint8).numpy().view(ml_dtypes.float8_e5m2).copy()
    return t.numpy().copy()


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality (nan == nan when their bits agree), with equal dtype and shape."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.view(np.uint8).tobytes() == b.view(np.uint8).tobytes()


def outputs_equal(x, y) -> bool:
    fx, fy = flatten(x), flatten(y)
    return [p for p, _ in fx] == [p for p, _ in fy] and all(same_bits(to_np(a), to_np(b)) for (_, a), (_, b) in zip(fx, fy))


def watch_modules(model: torch.nn.Module, inputs: dict, grad: bool = False):
    """Run `model(**inputs)` under plain forward hooks: (output, {record name: numpy copy}, calls per module).

    The names follow docs/format.md for module-level records, so a capture can be checked against them.
    """
    expected: dict[str, np.ndarray] = {}
    counts: dict[tuple[str, str], int] = {}
    stack: list[str] = []
    handles = []
    for path, m in model.named_modules():
        op = type(m).__name__

        def pre(mod, args, kwargs, path=path, op=op):
            k = counts.get((path, op), 0)
            counts[(path, op)] = k + 1
            node = node_name(path, op, k)
            stack.append(node)
            for pos, t in flatten_call(args, kwargs):
                expected[f"{node}/forward/input/{pos}"] = to_np(t)

        def post(mod, args, kwargs, out):
            node = stack.pop()
            for pos, t in flatten(out):
                expected[f"{node}/forward/output/{pos}"] = to_np(t)

        handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(m.register_forward_hook(post, with_kwargs=True))
    try:
        with torch.set_grad_enabled(grad):
            out = model(**inputs)
    finally:
        for h in handles:
            h.remove()
    return out, expected, counts


def no_capture_left(model: torch.nn.Module) -> bool:
    """No hook of any kind on any module or parameter, no torch function or dispatch mode active."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    for m in model.modules():
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks:
            return False
    for p in model.parameters():
        if getattr(p, "_post_accumulate_grad_hooks", None):
            return False
    return not torch._C._is_torch_function_mode_enabled() and _get_current_dispatch_mode() is None


def scalar_output(out) -> torch.Tensor:
    """A scalar to call backward on: the loss when the model computed one, else a sum of its main output."""
    loss = getattr(out, "loss", None)
    if loss is not None:
        return loss
    main = out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state
    return main.float().pow(2).mean()


def resolve(op: str, level: str):
    """The callable an api/aten op name stands for."""
    parts = op.split(".")
    if level == "aten":
        return getattr(getattr(torch.ops.aten, parts[1]), parts[2])
    obj = torch
    for p in parts[1:]:
        obj = getattr(obj, p)
    return obj


def decode(obj, tensor):
    """A call line's JSON argument back to Python, with replay's decoder (docs/format.md, "Call lines").

    Unrecorded tensors (allocations of undefined content) become zeros of their shape and dtype.
    """
    return replay_decode(obj, tensor, missing=lambda o: torch.zeros(o["shape"], dtype=getattr(torch, o["dtype"])))


def from_dump(dump, name: str) -> torch.Tensor:
    """A record's data as a fresh torch tensor."""
    arr = np.array(dump.tensor(name))
    rec = dump[name]
    if rec.dtype == "bfloat16":
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    if rec.dtype.startswith("float8"):
        return torch.from_numpy(arr.view(np.uint8)).view(getattr(torch, rec.dtype))
    return torch.from_numpy(arr)
