"""ReplayResult: what replaying one op showed, the one type `opdiff replay` prints and a Diagnosis keeps."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..base.vocab import ReplayStatus


@dataclass
class ReplayResult:
    """What replaying one op showed (status ok | unsupported | error), or why diagnose did not replay (skipped).

    A result without a node (diagnose skipped before picking an op) writes only its status and reason.
    """

    status: ReplayStatus
    node: str | None = None
    op: str = ""
    module: str = ""
    level: str = ""
    reason: str = ""  # why it could not run (status != ok)
    conclusion: str = ""
    confirmed: bool | None = None  # the op's own computation explains the target's difference
    input_dtypes: dict[str, str] = field(default_factory=dict)  # position -> dtype the inputs were cast to
    arg_differences: list[dict[str, Any]] = field(default_factory=list)  # non-tensor arguments golden vs target
    outputs: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def skipped(cls, reason: str) -> ReplayResult:
        """Diagnose did not replay: no culprit, no tensors, or the culprit's op cannot be named."""
        return cls("skipped", reason=reason)

    def to_json(self) -> dict[str, Any]:
        if self.node is None:
            return {"status": self.status, "reason": self.reason}
        return asdict(self)


__all__ = ["ReplayResult"]
