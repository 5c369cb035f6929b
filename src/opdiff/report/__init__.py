"""Every output of a result: CSV, XLSX, JSON, HTML, Model Explorer overlays and the console, through one
registry keyed by (result type, format): `report.write(result, fmt, path)`, `report.render(result, console)`
(docs/architecture.md "Results and outputs"; docs/compare.md "Outputs", docs/report.md)."""

from typing import TYPE_CHECKING, Any

from .console import print_summary
from .csv import write_csv
from .json import SCHEMA, SCHEMA_VERSION, comparison_json, write_json
from .registry import CONSOLE, FOLDERS, WRITERS, formats, output_path, render, text, write, write_many, writer
from .xlsx import write_xlsx

if TYPE_CHECKING:
    from .explorer import write_overlays
    from .html import write_html

_DEFERRED = {"write_html": "html", "write_overlays": "explorer"}  # modules `opdiff compare` does not need by default

__all__ = ["CONSOLE", "FOLDERS", "SCHEMA", "SCHEMA_VERSION", "WRITERS", "comparison_json", "formats", "output_path", "print_summary",
           "render", "text", "write", "write_csv", "write_many", "write_html", "write_json", "write_overlays", "write_xlsx", "writer"]


def __getattr__(name: str) -> Any:
    """`report.write_html`, `report.write_overlays`: their modules imported when first asked for."""
    if name in _DEFERRED:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_DEFERRED[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
