"""Typed parts of a Diagnosis: Culprit, Candidate, Evidence (schema: docs/diagnose.md).

The JSON writer derives from these types (`to_json`); optional fields are left out of the JSON while unset.
Read them as attributes (`culprit.module`, `evidence.inputs`); the replay's result is replay.ReplayResult.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from typing import Any, ClassVar

TensorInfo = dict[str, Any]  # one tensor pair as the reports show it (docs/diagnose.md, TensorInfo)


class _JsonForm:
    """The JSON form of a dataclass of the diagnosis (docs/diagnose.md): fields are read as attributes."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]  # each subclass is a dataclass
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()  # fields written only when set
    DROP_EMPTY: ClassVar[bool] = True  # whether an empty list or dict counts as unset

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in self.OPTIONAL and (v is None or (self.DROP_EMPTY and (v == [] or v == {}))):
                continue
            out[f.name] = v.to_json() if isinstance(v, _JsonForm) else v
        return out


@dataclass
class Culprit(_JsonForm):
    """The op (or module, or optimizer update) to blame, where and why."""

    module: str
    op: str
    node: str
    level: str
    golden_node: str | None = None
    golden: str | None = None  # golden record name of the culprit's output
    target: str | None = None  # target record name of the culprit's output
    reason: str = ""
    how: str = ""  # output | parameter | inserted | input-changed | parent | input | overflow | update
    step: int | None = None  # training step where it first goes wrong
    direction: str = "forward"  # forward | backward | update
    rank: int | None = None  # process rank (torch.distributed)
    evidence_record: str | None = None  # (fault) the tensor where the error entered
    score: float | None = None  # (fault) error / threshold
    golden_overflows: bool | None = None  # (overflow) golden has inf/nan there too
    golden_only_calls: list[str] = field(default_factory=list)
    fused_from: list[str] = field(default_factory=list)  # the golden ops a fused target op stands for (graph dumps)
    parameters: list[str] = field(default_factory=list)  # (update) parameters the update makes differ
    optimizer_ops: list[str] = field(default_factory=list)  # (update) the optimizer's ops that disagree
    hyperparameters: dict[str, Any] = field(default_factory=dict)  # (update) optimizer settings that differ

    OPTIONAL = frozenset({"evidence_record", "score", "golden_overflows", "golden_only_calls", "fused_from", "parameters",
                          "optimizer_ops", "hyperparameters"})


@dataclass
class Candidate(_JsonForm):
    """One ranked suspect (`rank` is its place in the list, 1 = the culprit)."""

    rank: int
    node: str
    module: str
    op: str
    level: str
    golden_node: str | None = None
    golden: str | None = None
    target: str | None = None
    score: float | None = None
    how: str | None = None
    record: str | None = None
    error_units: float | None = None
    inherited_units: float | None = None
    reason: str | None = None
    gain: float | None = None  # (drift) how much it multiplies the error it receives

    OPTIONAL = frozenset({"golden", "target", "how", "record", "error_units", "inherited_units", "gain"})


@dataclass
class OpCandidate(Candidate):
    """A candidate op of a fault or overflow verdict: says every field but `gain`, null or not."""

    OPTIONAL = frozenset({"gain"})


@dataclass
class Evidence(_JsonForm):
    """The tensors and settings a verdict rests on; each list left out of the JSON while empty."""

    inputs: list[TensorInfo] = field(default_factory=list)
    parameters: list[TensorInfo] = field(default_factory=list)
    outputs: list[TensorInfo] = field(default_factory=list)
    diverging: list[TensorInfo] = field(default_factory=list)
    output: list[TensorInfo] = field(default_factory=list)
    top_contributors: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    gradients: list[TensorInfo] = field(default_factory=list)  # (update) the gradients, which agree
    arrived_from: dict[str, Any] = field(default_factory=dict)  # (ranks) the rank a collective brought it from
    parts: list[dict[str, Any]] = field(default_factory=list)  # (steps, ranks) the verdict of each pass diagnosed

    OPTIONAL = frozenset({"inputs", "parameters", "outputs", "diverging", "output", "top_contributors", "settings",
                          "gradients", "arrived_from", "parts"})


__all__ = ["Culprit", "Candidate", "OpCandidate", "Evidence", "TensorInfo"]
