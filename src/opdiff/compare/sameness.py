"""Before comparing: are these two runs of the same model at all? And is there anything to compare?

Two unrelated models (a GPT-2 run against a Llama run) pair by sequence into confident nonsense;
opdiff says so first and blames no op. The evidence is what both dumps record: the model class
(meta.json), the parameters (names and shapes) and the record structure (op calls by module and type).
"""

from __future__ import annotations

import re
from collections import Counter

from ..base.errors import OpdiffError
from ..store import Dump

MIN_OVERLAP = 0.5  # with a different model class, less than this share in common: different models
NEAR_NONE = 0.2  # whatever the class says, less than this share of parameters and op calls in common


def _overlap(a: Counter[tuple[object, ...]], b: Counter[tuple[object, ...]]) -> float:
    """Share of the smaller side's items that the other side also has (multiset intersection)."""
    small = min(sum(a.values()), sum(b.values()))
    return sum((a & b).values()) / small if small else 1.0


def _tail(module: str) -> str:
    """The last two parts of a module path: insensitive to a wrapper's prefix ("module." of DDP)."""
    return ".".join(module.split(".")[-2:])


def _tails(raw: Counter[tuple[object, ...]]) -> Counter[tuple[object, ...]]:
    """(module, ...) counts with each module path cut to its _tail, added up: each path is cut once."""
    out: Counter[tuple[object, ...]] = Counter()
    for (module, *rest), n in raw.items():
        out[(_tail(str(module)), *rest)] += n
    return out


def _params(d: Dump) -> Counter[tuple[object, ...]]:
    return _tails(Counter((r.module, r.pos, tuple(r.shape)) for r in d.records if r.role == "parameter"))


def _structure(d: Dump) -> Counter[tuple[object, ...]]:
    return _tails(Counter((r.module, r.op) for r in d.records if r.role != "parameter"))


# what a capture records as "model" when it wraps the user's model: says nothing about which model ran
_WRAPPERS = {"OptimizedModule", "DistributedDataParallel", "DataParallel", "FullyShardedDataParallel", "Module",
             "GraphModule", "RecursiveScriptModule"}
_CLASS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _model_class(d: Dump) -> str | None:
    """The model class meta.json records, where it is one: a PyTorch capture's `type(model).__name__`.
    Other captures record a path (ONNX) or a user-chosen name (Keras: "model", "model_1"), foreign readers
    nothing; wrappers (torch.compile, DDP) hide the class. None when unknown: missing is never evidence."""
    cls = d.meta.get("model")
    if d.meta.get("framework") != "torch" or not isinstance(cls, str) or not _CLASS_NAME.match(cls):
        return None
    return None if cls in _WRAPPERS else cls


def model_mismatch(golden: Dump, target: Dump) -> str | None:
    """Why the two dumps are not runs of the same model, or None when they may be.

    Only positive evidence counts, never missing metadata: a different model class (both PyTorch
    captures recording it) with half the parameters or op calls missing, or, with parameters on both
    sides, almost none of them and almost no op calls in common. A class rename alone, a refactor,
    a precision (fp16, bf16, autocast), a fused or compiled variant, a foreign reader's dump without
    parameters and a port between frameworks (whose parameter names differ by nature) are not refused."""
    g_cls, t_cls = _model_class(golden), _model_class(target)
    g_fw, t_fw = golden.meta.get("framework"), target.meta.get("framework")
    cross_framework = isinstance(g_fw, str) and isinstance(t_fw, str) and bool(g_fw) and bool(t_fw) and g_fw != t_fw
    gp, tp = _params(golden), _params(target)
    has_params = bool(gp) and bool(tp) and not cross_framework
    params = _overlap(gp, tp) if has_params else 1.0
    cls_differs = g_cls is not None and t_cls is not None and g_cls != t_cls
    if not (cls_differs or has_params and params < NEAR_NONE):
        return None  # neither rule can refuse, whatever the op calls in common: not counted (a walk per record)
    structure = _overlap(_structure(golden), _structure(target))
    if not ((cls_differs and min(params, structure) < MIN_OVERLAP)
            or (has_params and params < NEAR_NONE and structure < NEAR_NONE)):
        return None
    evidence = [f"model class {g_cls} vs {t_cls}"] if cls_differs else []
    if has_params:
        evidence.append(f"{params:.0%} of parameters in common by name and shape")
    evidence.append(f"{structure:.0%} of op calls in common by module and type")
    return ", ".join(evidence)


def check_comparable(golden: Dump, target: Dump, *, mapping: object = None) -> None:
    """OpdiffError (one line, before any work) when there is nothing to compare, or when the dumps are
    not runs of the same model. A mapping file says how the runs correspond, so it skips the model check."""
    for d, side in ((golden, "golden"), (target, "target")):
        if not d.records:
            raise OpdiffError(f"{d.root}: the {side} dump holds no records: nothing to compare")
    if mapping is not None:
        return
    why = model_mismatch(golden, target)
    if why:
        raise OpdiffError(f"{golden.root} and {target.root} are not runs of the same model ({why}); "
                          "no op is blamed. Compare runs of one model, or give --map to say how they correspond")
