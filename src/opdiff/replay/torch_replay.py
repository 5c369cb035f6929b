"""Replay one captured torch op: aten and api calls from their call lines, some leaf modules rebuilt.

The op runs on golden's input data cast to the target's input dtypes (the target's settings),
and its result is compared, with opdiff.metrics, to golden's and to the target's outputs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..base.errors import DumpError
from ..base.pair import Metrics
from ..base.record import Record
from ..base.vocab import ReplayStatus
from ..capture.torch.naming import flatten
from ..capture.torch.preserve import rng_kept
from ..metrics import names as M
from ..metrics import tensor_metrics
from ..metrics.thresholds import SIGNIFICANT, unit
from ..store import Dump
from ..store.names import parameter_record_name, record_name
from .result import ReplayResult


class Unsupported(Exception):
    """The op cannot be replayed from what the dumps hold."""


# leaf modules whose math is known from their class and parameters alone
_ACTIVATIONS = {
    "GELU": F.gelu, "GELUActivation": F.gelu, "NewGELUActivation": lambda x: F.gelu(x, approximate="tanh"),
    "GELUTanh": lambda x: F.gelu(x, approximate="tanh"), "FastGELUActivation": lambda x: F.gelu(x, approximate="tanh"),
    "ReLU": F.relu, "SiLU": F.silu, "SiLUActivation": F.silu, "Tanh": torch.tanh, "Sigmoid": torch.sigmoid,
    "Dropout": lambda x: x, "Identity": lambda x: x,
}
MODULES = sorted(_ACTIVATIONS) + ["Linear", "Conv1D", "Embedding"]


def to_torch(arr: np.ndarray, dtype: str) -> torch.Tensor:
    """A torch tensor of `dtype` from a dump array (bf16/fp8 arrays are reinterpreted bitwise)."""
    arr = np.ascontiguousarray(arr)
    if dtype == "bfloat16":
        return torch.from_numpy(arr.view(np.uint16).copy()).view(torch.bfloat16)
    if dtype.startswith("float8"):
        return torch.from_numpy(arr.view(np.uint8).copy()).view(getattr(torch, dtype))
    return torch.from_numpy(arr.copy())


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        import ml_dtypes

        return t.view(torch.uint8).numpy().view(getattr(ml_dtypes, str(t.dtype).removeprefix("torch.")))
    return t.numpy()


def resolve(op: str, level: str):
    """The callable a captured op name stands for: torch.ops.aten.X.overload, torch.*, torch.Tensor.*."""
    parts = op.split(".")
    if level == "aten" and parts[0] == "aten" and len(parts) == 3:
        try:
            return getattr(getattr(torch.ops.aten, parts[1]), parts[2])
        except AttributeError:
            raise Unsupported(f"no aten op {op} in this torch") from None
    if parts[0] != "torch":
        raise Unsupported(f"cannot resolve {op}")
    obj: Any = torch
    for p in parts[1:]:
        obj = getattr(obj, p, None)
        if obj is None:
            raise Unsupported(f"no {op} in this torch")
    return obj


def decode(obj: Any, tensor, missing=None):
    """A call line's JSON argument back to a Python value (tensors through `tensor(name)`).

    A tensor the capture did not record (an allocation of undefined content) goes to
    `missing(placeholder)`; without it, replay cannot proceed.
    """

    def walk(o: Any) -> Any:
        if isinstance(o, list):
            return [walk(v) for v in o]
        if isinstance(o, str) and o.startswith("torch.") and hasattr(torch, o[6:]):
            return getattr(torch, o[6:])  # layouts and memory formats
        if not isinstance(o, dict):
            return o
        if "tensor" in o:
            if o["tensor"] is not None:
                return tensor(o["tensor"])
            if missing is None:
                raise Unsupported("an input tensor was not recorded")
            return missing(o)
        if "dtype" in o:
            return getattr(torch, o["dtype"])
        if "float" in o:
            return float(o["float"])
        if "slice" in o:
            return slice(*(walk(v) for v in o["slice"]))
        if "ellipsis" in o:
            return Ellipsis
        if "complex" in o:
            return complex(*o["complex"])
        if "tuple" in o:  # indexing tuples: torch reads a list index differently
            return tuple(walk(v) for v in o["tuple"])
        if "dict" in o:
            return {k: walk(v) for k, v in o["dict"].items()}
        raise Unsupported(f"an argument is an object opdiff does not record ({o.get('object', o)})")

    return walk(obj)


def arg_differences(g: Any, t: Any, path: str = "") -> list[dict[str, Any]]:
    """Non-tensor arguments where the golden and target calls differ."""
    if isinstance(g, dict) and isinstance(t, dict):
        if "tensor" in g and "tensor" in t:
            return []
        out = []
        for k in dict.fromkeys(list(g) + list(t)):
            out += arg_differences(g.get(k), t.get(k), f"{path}.{k}" if path else str(k))
        return out
    if isinstance(g, list) and isinstance(t, list) and len(g) == len(t):
        return [d for i, (a, b) in enumerate(zip(g, t)) for d in arg_differences(a, b, f"{path}[{i}]")]
    return [] if g == t else [{"arg": path, "golden": g, "target": t}]


def _error(m: Metrics, g_dtype: str, t_dtype: str) -> float | None:
    terms = [float(x) for x in (m.get(M.RED), m.get(M.NORM_MAX_ABS_ERR)) if x is not None and math.isfinite(float(x))]
    u = unit(g_dtype, t_dtype)
    if not terms:
        return None
    return max(terms) / u if u else (0.0 if max(terms) == 0 else math.inf)


def _summary(m: Metrics, g_dtype: str, t_dtype: str) -> dict[str, Any]:
    """One comparison of the replay as the result's JSON shows it: error units and three metrics under
    their column names (docs/diagnose.md)."""
    return {"error_units": _error(m, g_dtype, t_dtype),
            **{M.column(k): m.get(k) for k in (M.COSINE, M.MAX_ABS_ERR, M.RED)}}


class _Inputs:
    """Golden's data for the target op's inputs, cast to the target's dtypes."""

    def __init__(self, golden: Dump, target: Dump, node: str, g_node: str, names: dict[str, str]):
        self.golden, self.target, self.node, self.g_node, self.names = golden, target, node, g_node, names
        self.dtypes: dict[str, str] = {}

    def golden_record(self, t_rec: Record) -> Record:
        for name in (self.names.get(t_rec.name), t_rec.name, record_name(self.g_node, t_rec.direction, t_rec.role, t_rec.pos)):
            if name and name in self.golden:
                return self.golden[name]
        raise Unsupported(f"golden has no counterpart of {t_rec.name}")

    def __call__(self, name: str) -> torch.Tensor:
        t_rec = self.target[name]
        g_rec = self.golden_record(t_rec)
        if not g_rec.has_data:
            raise Unsupported("golden was captured without tensor data (mode='tensor' needed)")
        self.dtypes[t_rec.pos] = t_rec.dtype
        return to_torch(self.golden.tensor(g_rec), g_rec.dtype).to(getattr(torch, t_rec.dtype))


class _GoldenInputs:
    """Golden's own call line's tensors, cast to the dtypes the target's op got at the same positions."""

    def __init__(self, golden: Dump, target_inputs: _Inputs):
        self.golden, self.t = golden, target_inputs

    def __call__(self, name: str) -> torch.Tensor:
        g_rec = self.golden[name]
        dtype = self.t.dtypes.get(g_rec.pos, g_rec.dtype)
        return to_torch(self.golden.tensor(g_rec), g_rec.dtype).to(getattr(torch, dtype))


def _module_fn(golden: Dump, target: Dump, op: str, module: str):
    """A leaf module rebuilt from its class name and golden's parameters (cast to the target's dtypes)."""
    if op in _ACTIVATIONS:
        return _ACTIVATIONS[op]
    if op not in MODULES:
        raise Unsupported(f"module {op} cannot be rebuilt from the dump (replay supports {', '.join(MODULES)} "
                          "at module level; capture at api or aten level to replay any op)")

    def param(name: str) -> torch.Tensor | None:
        key = parameter_record_name(module, name)
        if key not in golden:
            return None
        g = golden[key]
        if not g.has_data:
            raise Unsupported("golden parameters were captured without data")
        t = target.get(key)
        return to_torch(golden.tensor(g), g.dtype).to(getattr(torch, t.dtype if t else g.dtype))

    w, b = param("weight"), param("bias")
    if w is None:
        raise Unsupported(f"{op} {module}: its parameters are not in golden's dump")
    if op == "Linear":
        return lambda x: F.linear(x, w, b)
    if op == "Conv1D":
        return lambda x: (torch.addmm(b, x.reshape(-1, x.shape[-1]), w) if b is not None else x.reshape(-1, x.shape[-1]) @ w).view(*x.shape[:-1], w.shape[1])
    return lambda ids: F.embedding(ids, w)  # Embedding


def _run(fn, call: dict[str, Any], inputs: _Inputs | _GoldenInputs):
    args = decode(call.get("args", []), inputs)
    kwargs = decode({"dict": call.get("kwargs", {})}, inputs) if call.get("kwargs") else {}
    with torch.no_grad():
        return fn(*args, **kwargs)


def _execute(res: ReplayResult, golden: Dump, inputs: _Inputs, r0: Record, t_call: dict[str, Any],
             g_call: dict[str, Any] | None) -> tuple[Any, Any]:
    """Run the target's op on golden's inputs (and golden's own call, when its arguments differ)."""
    fn = _module_fn(golden, inputs.target, r0.op, r0.module) if r0.level == "module" else resolve(r0.op, r0.level)
    out = _run(fn, t_call, inputs)
    g_out = None
    if g_call is not None and g_call.get("op") == r0.op:
        res.arg_differences = arg_differences({"args": g_call.get("args"), "kwargs": g_call.get("kwargs")},
                                              {"args": t_call.get("args"), "kwargs": t_call.get("kwargs")})
        if res.arg_differences and r0.level != "module":
            g_out = _run(resolve(g_call["op"], g_call.get("level", r0.level)), g_call, _GoldenInputs(golden, inputs))
    return out, g_out


def replay(golden: Dump, target: Dump, node: str, t_call: dict[str, Any] | None, g_call: dict[str, Any] | None,
           names: dict[str, str]) -> ReplayResult:
    """Replay `node` of the target (see opdiff.replay.replay)."""
    recs = [r for r in target.records if r.node == node and r.direction == "forward"]
    if not recs:
        return ReplayResult("unsupported", node, reason=f"{target.root}: no forward records for {node}")
    r0 = recs[0]
    res = ReplayResult("ok", node, op=r0.op, module=r0.module, level=r0.level)
    if t_call is None:
        return _fail(res, "no call line for this op (captured without call descriptions)")
    g_node = (g_call or {}).get("node", node)
    inputs = _Inputs(golden, target, node, g_node, names)
    try:
        with rng_kept():
            out, g_out = _execute(res, golden, inputs, r0, t_call, g_call)
    except Unsupported as exc:
        return _fail(res, str(exc))
    except (DumpError, RuntimeError, TypeError, ValueError) as exc:
        return _fail(res, f"the op raised when replayed: {type(exc).__name__}: {exc}", status="error")
    res.input_dtypes = dict(inputs.dtypes)
    g_outs = dict(flatten(g_out)) if g_out is not None else {}
    for pos, t in flatten(out):
        t_rec = target.get(record_name(node, "forward", "output", pos))
        g_rec = golden.get(names.get(t_rec.name, t_rec.name) if t_rec else "") or golden.get(record_name(g_node, "forward", "output", pos))
        entry: dict[str, Any] = {"pos": pos, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
        rep = to_numpy(t)
        dt = entry["dtype"]
        if g_rec is not None and g_rec.has_data:
            g_arr = golden.tensor(g_rec)
            entry["golden"] = g_rec.name
            entry["replay_vs_golden"] = _summary(tensor_metrics(g_arr, rep), g_rec.dtype, dt)
            if pos in g_outs:
                entry["golden_call_vs_golden"] = _summary(tensor_metrics(g_arr, to_numpy(g_outs[pos])), g_rec.dtype, dt)
        if t_rec is not None and t_rec.has_data:
            t_arr = target.tensor(t_rec)
            entry["target"] = t_rec.name
            entry["replay_vs_target"] = _summary(tensor_metrics(t_arr, rep), t_rec.dtype, dt)
            if g_rec is not None and g_rec.has_data:
                entry["target_vs_golden"] = _summary(tensor_metrics(golden.tensor(g_rec), t_arr), g_rec.dtype, t_rec.dtype)
        res.outputs.append(entry)
    _conclude(res)
    return res


def _fail(res: ReplayResult, reason: str, status: ReplayStatus = "unsupported") -> ReplayResult:
    res.status, res.reason = status, reason
    return res


def _small(entry: dict[str, Any], key: str) -> bool | None:
    u = (entry.get(key) or {}).get("error_units")
    return None if u is None else u <= SIGNIFICANT


def _conclude(res: ReplayResult) -> None:
    """Say whether replay shows the op's own computation, not its inputs, makes the difference."""
    main = next((o for o in res.outputs if o.get("target_vs_golden")), None)
    if main is None:
        only = next((o for o in res.outputs if o.get("replay_vs_target")), None)
        if only is not None and _small(only, "replay_vs_target"):
            res.confirmed = True
            res.conclusion = ("golden does not run this op; replayed on golden's inputs it reproduces the target's "
                              "output: this op is where the target's tensor changes")
        else:
            res.conclusion = "replayed, but golden and target outputs are not both in the dumps to compare with"
        return
    differs = _small(main, "target_vs_golden") is False
    if not differs:
        res.confirmed = False
        res.conclusion = "the target's output of this op agrees with golden's: nothing to confirm here"
        return
    args = ", ".join(f"{d['arg']}: golden {d['golden']!r} vs target {d['target']!r}" for d in res.arg_differences)
    if _small(main, "replay_vs_target"):
        res.confirmed = True
        res.conclusion = ("replaying the op as the target calls it, on golden's inputs, reproduces the target's output: "
                          "the difference is the op's own" + (f" (its arguments differ: {args})" if args else ""))
    elif _small(main, "replay_vs_golden"):
        res.confirmed = True
        res.conclusion = ("the reference op on golden's inputs, under the target's dtypes, gives golden's output, "
                          "so the target's op computes something else (another kernel or patched code), "
                          "not because of its inputs or dtype")
    else:
        res.confirmed = None
        res.conclusion = "replay reproduces neither output: the op depends on something the dump does not hold"
