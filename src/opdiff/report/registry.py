"""The one way a result becomes output: a writer per (result type, format), each file written atomically.

Results are keyed by their class's qualified name ("opdiff.compare.run.Comparison"), so that results of the
layers above report (hunting, fusion) are registered here without report importing them. Lookup walks the
result's class hierarchy: a subclass is written as its base is.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from ..base.errors import OpdiffError
from ..base.jsonsafe import dumps
from ..base.outdir import write_atomic
from .console import print_summary
from .csv import write_csv
from .json import write_json
from .tables import SINKS as _SINKS
from .tables import write_tables
from .xlsx import write_xlsx

TABLE_FORMATS = frozenset(_SINKS)  # a comparison's formats written together by write_many

COMPARISON = "opdiff.compare.run.Comparison"
DIAGNOSIS = "opdiff.diagnose.verdict.Diagnosis"
REPLAY = "opdiff.replay.result.ReplayResult"
HUNT = "opdiff.hunting.run.HuntResult"
FUSION = "opdiff.fusion.ort.FusionResult"
GE_FUSION = "opdiff.fusion.ge.GeFusionResult"
CONSOLE = "console"
FOLDERS = frozenset({"model-explorer"})  # formats written as a folder of files

Writer = Callable[..., object]  # (result, path, **options): writes one file (or folder) at path


class HasJson(Protocol):
    """A result with one JSON form (every result type of docs/architecture.md has one)."""

    def to_json(self) -> dict[str, Any]: ...


def write_result_json(result: HasJson, path: str | os.PathLike[str]) -> None:
    """A result's to_json() as JSON text (non-finite numbers become null: base/jsonsafe.py)."""
    Path(path).write_text(text(result) + "\n", encoding="utf-8")


class Deferred:
    """A writer named by its module and function here, imported on its first call: `opdiff compare` loads the
    table writers it uses (CSV, XLSX, JSON, console), not the HTML, Model Explorer, msprobe or other results'
    writers (tests/test_startup.py)."""

    __slots__ = ("module", "name", "_fn")

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name
        self._fn: Writer | None = None

    def load(self) -> Writer:
        """The writer function itself (its module imported once)."""
        if self._fn is None:
            self._fn = getattr(import_module(f"{__package__}.{self.module}"), self.name)
        return self._fn

    def __call__(self, *args: Any, **options: Any) -> object:
        return self.load()(*args, **options)

    def __repr__(self) -> str:
        return f"Deferred({self.module}.{self.name})"


WRITERS: dict[tuple[str, str], Writer] = {
    (COMPARISON, "csv"): write_csv,
    (COMPARISON, "xlsx"): write_xlsx,
    (COMPARISON, "json"): write_json,
    (COMPARISON, "html"): Deferred("html", "write_html"),
    (COMPARISON, "model-explorer"): Deferred("explorer", "write_overlays"),
    (COMPARISON, CONSOLE): print_summary,
    (COMPARISON, "msprobe-csv"): Deferred("msprobe", "write_msprobe_csv"),  # msprobe compare's own result files (docs/compare.md)
    (COMPARISON, "msprobe-xlsx"): Deferred("msprobe", "write_msprobe_xlsx"),
    (DIAGNOSIS, "json"): write_result_json,
    (DIAGNOSIS, "html"): Deferred("diagnosis", "write_html_page"),
    (DIAGNOSIS, CONSOLE): Deferred("diagnosis", "render"),
    (REPLAY, "json"): write_result_json,
    (REPLAY, CONSOLE): Deferred("replay", "print_replay"),
    (HUNT, "json"): write_result_json,
    (HUNT, CONSOLE): Deferred("hunt", "render"),
    (FUSION, "json"): write_result_json,
    (FUSION, CONSOLE): Deferred("fusion", "render"),
    (GE_FUSION, "json"): write_result_json,
    (GE_FUSION, CONSOLE): Deferred("fusion", "render_ge"),
}


def _names(result: object) -> list[str]:
    return [f"{c.__module__}.{c.__qualname__}" for c in type(result).__mro__]


def formats(result: object) -> list[str]:
    """The formats a result can be written in (console included)."""
    names = _names(result)
    return sorted({fmt for (kind, fmt) in WRITERS if kind in names})


def writer(result: object, fmt: str) -> Writer:
    """The writer of `fmt` for this result; OpdiffError naming what is offered when there is none."""
    for name in _names(result):
        w = WRITERS.get((name, fmt))
        if w is not None:
            return w
    offered = ", ".join(formats(result)) or "none"
    raise OpdiffError(f"no {fmt!r} output for a {type(result).__name__} (offered: {offered})")


def write(result: object, fmt: str, path: str | os.PathLike[str], **options: Any) -> Path:
    """Write `result` as `fmt` to `path` through a temporary file (or folder) renamed into place."""
    w = writer(result, fmt)
    if fmt == CONSOLE:
        raise OpdiffError("the console is not a file: use report.render")
    out = Path(path)
    write_atomic(out, lambda tmp: w(result, tmp, **options), directory=fmt in FOLDERS)
    return out


def write_many(result: object, outputs: list[tuple[str, Path]]) -> None:
    """Write each (format, path) as `write` does; a comparison's CSV, XLSX and JSON in one pass over its rows
    (report/tables.py: the rows are gathered and formatted once for all of them)."""
    table = [(f, Path(p)) for f, p in outputs if f in TABLE_FORMATS] if COMPARISON in _names(result) else []
    if len(table) > 1:
        write_tables(result, table)  # type: ignore[arg-type]
    for f, p in outputs:
        if len(table) <= 1 or f not in TABLE_FORMATS:
            write(result, f, p)


def output_path(out: Path, fmt: str, stem: str) -> Path:
    """Where a report of `fmt` goes in the output directory `out`: `<stem>.<fmt>` (`msprobe-csv`:
    `<stem>.msprobe.csv`), a folder format under its name."""
    return out / (fmt if fmt in FOLDERS else f"{stem}.{fmt.replace('-', '.')}")


def render(result: object, console: Console | None = None, **options: Any) -> None:
    """Print `result` on the console (rich): the summary each command shows. Without `console`, each writer
    picks its own (the comparison summary: 160 columns when stdout is not a terminal, so CI logs do not wrap)."""
    writer(result, CONSOLE)(result, console, **options)


def text(result: HasJson) -> str:
    """A result's JSON text, for `--json` on stdout."""
    return dumps(result.to_json(), indent=2)


__all__ = ["CONSOLE", "FOLDERS", "WRITERS", "formats", "output_path", "render", "text", "write", "write_many", "write_result_json",
           "writer"]
