"""Pair the records of a golden and a target dump (docs/compare.md, "Alignment")."""

from ..base.vocab import PROVENANCE_KEY
from .align import Pair, align, align_records
from .mapping import Mapping, load_mapping, mapping_from_dict

__all__ = ["PROVENANCE_KEY", "Pair", "align", "align_records", "Mapping", "load_mapping", "mapping_from_dict"]
