"""The console summary of a hunt: what each pass captured, the volume saved, the culprit."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from rich.console import Console
from rich.table import Table

from ..base.termsafe import safe
from ..diagnose.types import Culprit
from ..diagnose.verdict import Diagnosis
from .diagnosis import confirmation_lines


class PassLike(Protocol):
    """One capture pass of a hunt (opdiff.hunting.volume.PassInfo)."""

    name: str
    mode: str
    level: str
    include: str | None
    records: int
    tensor_bytes: int
    disk_bytes: int


class HuntLike(Protocol):
    """What the console shows of a hunt (opdiff.hunting.HuntResult; report sits below hunting's layer)."""

    out: Path
    verdict: str
    culprit: Culprit | None

    @property
    def passes(self) -> Sequence[PassLike]: ...
    full_tensor_bytes: int
    hunt_tensor_bytes: int
    diagnosis: Diagnosis | None

    @property
    def ratio(self) -> float | None: ...


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.2f} MiB"


def render(res: HuntLike, console: Console | None = None) -> None:
    """Print the passes, the saving against a full tensor dump and the verdict."""
    c = console or Console()
    table = Table("pass", "mode", "level", "region", "records", "tensor data", "on disk")
    p: PassLike
    for p in res.passes:
        table.add_row(safe(p.name), p.mode, p.level, safe(p.include) if p.include else "(whole model)", str(p.records), _mib(p.tensor_bytes),
                      _mib(p.disk_bytes))
    c.print(table)
    c.print(f"a full tensor dump of both runs would hold {_mib(res.full_tensor_bytes)} of tensor data")
    if res.ratio is not None:
        c.print(f"the hunt stored {_mib(res.hunt_tensor_bytes)}: {res.ratio:,.1f}x less")
    else:
        c.print("no pass 2: pass 1 found nothing to narrow down")
    where = f" — culprit {safe(res.culprit.node)} in {safe(res.culprit.module or '<root>')}" if res.culprit else ""
    c.print(f"[bold]verdict: {res.verdict}[/]{where}")
    if res.diagnosis is not None:
        c.print(safe(res.diagnosis.summary))
        for line in confirmation_lines(res.diagnosis):
            c.print(line)
    c.print(f"outputs in {safe(str(res.out))} (hunt.json, diagnosis.json, pass dumps)")
