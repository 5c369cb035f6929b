"""Pair the records of a golden and a target dump (docs/compare.md, "Alignment")."""

from ..base.jitcache import load_lean
from ..base.vocab import PROVENANCE_KEY
from . import lcs
from .align import Pair, align, align_records
from .mapping import Mapping, load_mapping, mapping_from_dict

load_lean(lcs)  # the Myers kernel loads without numba's compiler set-up (base/jitcache.py)

__all__ = ["PROVENANCE_KEY", "Pair", "align", "align_records", "Mapping", "load_mapping", "mapping_from_dict"]
