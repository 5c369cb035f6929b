"""Hash mode: two records agree iff their content hashes (dtype + shape + raw bytes) are equal."""

from __future__ import annotations

from ..base.pair import Metrics
from ..base.record import Record
from . import names as M
from .names import ERR_MESSAGE


def hash_equal(g: Record, t: Record) -> bool | None:
    """True/False when both records carry a hash of the same kind, None when they cannot be compared."""
    if not g.hash or not t.hash or g.hash.split(":", 1)[0] != t.hash.split(":", 1)[0]:
        return None
    return g.hash == t.hash


def hash_metrics(g: Record, t: Record) -> Metrics:
    """hash_equal (bool | None) and the reason when it is None."""
    eq = hash_equal(g, t)
    msg = "" if eq is not None else "hash N/A: a side has no content hash (captured without mode='hash')"
    return {M.HASH_EQUAL: eq, ERR_MESSAGE: msg}
