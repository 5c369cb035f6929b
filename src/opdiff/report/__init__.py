"""Reports of a comparison: CSV, XLSX, JSON, HTML, Model Explorer overlays and a console summary
(docs/compare.md "Outputs", docs/report.md)."""

from .console import print_summary
from .csv import write_csv
from .explorer import write_overlays
from .html import write_html
from .json import SCHEMA, SCHEMA_VERSION, comparison_json, write_json
from .msprobe import write_msprobe_csv, write_msprobe_xlsx
from .xlsx import write_xlsx

WRITERS = {"csv": write_csv, "xlsx": write_xlsx, "json": write_json, "html": write_html,
           "model-explorer": write_overlays, "msprobe-csv": write_msprobe_csv, "msprobe-xlsx": write_msprobe_xlsx}

__all__ = ["SCHEMA", "SCHEMA_VERSION", "WRITERS", "comparison_json", "print_summary", "write_csv", "write_html", "write_json", "write_overlays",
           "write_xlsx"]
