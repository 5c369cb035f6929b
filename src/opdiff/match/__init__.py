"""Pair the records of a golden and a target dump (docs/compare.md, "Alignment").

Names load lazily, so reading a mapping file does not load the alignment kernels.
"""

from importlib import import_module

_WHERE = {
    "PROVENANCE_KEY": "align", "Pair": "align", "align": "align", "align_records": "align",
    "Mapping": "mapping", "load_mapping": "mapping", "mapping_from_dict": "mapping",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
