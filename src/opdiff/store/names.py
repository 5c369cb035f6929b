"""The one codec for names in a dump: op-call nodes, record names, and index line kinds (docs/format.md, "Names").

A node is ``{module}/{op}#{call}`` (``{op}#{call}`` at the root); a record is
``{node}/{direction}/{role}/{pos}``. Capture builds names here, readers, replay and the shell
take them apart here: nobody else formats or splits them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KIND_TENSOR = "tensor"  # an index line describing one tensor (the default when "kind" is absent)
KIND_CALL = "call"  # an index line describing one op call, for replay
PARAMETER_OP = "parameter"  # the op name of the pseudo-node that holds a module's parameters


@dataclass(frozen=True)
class RecordName:
    """A record name taken apart."""

    node: str
    direction: str
    role: str
    pos: str

    @property
    def module(self) -> str:
        return split_node(self.node)[0]

    @property
    def op(self) -> str:
        return split_node(self.node)[1]

    @property
    def call(self) -> int:
        return split_node(self.node)[2]


def node_name(module: str, op: str, call: int) -> str:
    """The stable id of one op call: module path, op and per-(module, op) call counter."""
    return f"{module}/{op}#{call}" if module else f"{op}#{call}"


def record_name(node: str, direction: str, role: str, pos: str) -> str:
    """The stable name of one tensor of an op call."""
    return f"{node}/{direction}/{role}/{pos}"


def parameter_record_name(module: str, name: str, call: int = 0) -> str:
    """The name under which capture records parameter `name` of `module` (forward, role parameter)."""
    return record_name(node_name(module, PARAMETER_OP, call), "forward", "parameter", name)


def split_node(node: str) -> tuple[str, str, int]:
    """(module, op, call) of a node name; ValueError when it is not one."""
    head, sep, call = node.rpartition("#")
    if not sep or not call.isdigit():
        raise ValueError(f"not a node name: {node!r}")
    module, _, op = head.rpartition("/")
    return module, op, int(call)


def split_record_name(name: str) -> RecordName:
    """A record name taken apart; ValueError when it is not one."""
    parts = name.rsplit("/", 3)
    if len(parts) != 4:
        raise ValueError(f"not a record name: {name!r}")
    node, direction, role, pos = parts
    split_node(node)
    return RecordName(node, direction, role, pos)


def line_kind(obj: dict[str, Any]) -> str:
    """The kind of one index line (tensor when it says none)."""
    kind = obj.get("kind", KIND_TENSOR)
    return kind if isinstance(kind, str) else ""


def call_line(call: dict[str, Any]) -> dict[str, Any]:
    """The index line that describes one op call."""
    return {"kind": KIND_CALL, **call}
