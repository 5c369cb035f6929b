"""Rows of text made from fixed pieces and columns of cell texts, without a Python loop over the rows.

Row i is pieces[0] + columns[0][i] + pieces[1] + ... + columns[-1][i] + pieces[-1]. The rows of a block are
laid out in one list, each piece and column put in place by one slice assignment, and joined once: ~2x
less CPU than joining each row (an XLSX row has ~100 pieces, a JSON pair line ~130).
"""

from __future__ import annotations

from collections.abc import Sequence


def weave(pieces: Sequence[str], columns: Sequence[Sequence[str]], start: int = 0, stop: int | None = None) -> str:
    """Rows start..stop (default: all) of the table, concatenated; len(pieces) == len(columns) + 1."""
    assert len(pieces) == len(columns) + 1
    if stop is None:
        stop = len(columns[0]) if columns else 0
    n, m = stop - start, len(pieces) + len(columns)
    if n <= 0:
        return ""
    flat = [""] * (n * m)
    for j, p in enumerate(pieces):
        if p:
            flat[2 * j::m] = [p] * n
    whole = start == 0
    for j, c in enumerate(columns):
        flat[2 * j + 1::m] = c if whole and len(c) == n else c[start:stop]
    return "".join(flat)
