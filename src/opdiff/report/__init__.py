"""Reports of a comparison: CSV, XLSX, JSON and a console summary (docs/compare.md, "Outputs")."""

from .console import print_summary
from .csv import write_csv
from .html import write_html
from .json import SCHEMA, SCHEMA_VERSION, comparison_json, write_json
from .xlsx import write_xlsx

WRITERS = {"csv": write_csv, "xlsx": write_xlsx, "json": write_json, "html": write_html}

__all__ = ["SCHEMA", "SCHEMA_VERSION", "WRITERS", "comparison_json", "print_summary", "write_csv", "write_html", "write_json",
           "write_xlsx"]
