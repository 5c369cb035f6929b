"""A safetensors header's entries checked as columns: one pass of C-level maps and a few numpy tests per
header instead of one Python call per entry (a shard of 500 small tensors is 500 entries).

`header_entries` gives exactly the entries validate._entry gives for a header that passes every check, and
None for anything else (a doubtful parse, a bad field, a size or an offset out of place, an overlap): the
caller then checks entry by entry, which names the problem. It never raises.
"""

from __future__ import annotations

import math
from itertools import accumulate, chain
from operator import itemgetter, sub
from typing import Any, cast

import numpy as np
import orjson

from .format import DTYPES, FORMAT_NAME, SAFETENSORS_TO_NAME

Entry = tuple[str, tuple[int, ...], int, int]  # dtype name, shape, absolute start, end
META = "__metadata__"
_FIELDS = itemgetter("dtype", "shape", "data_offsets")
_DICT, _INT, _LIST, _TWO = frozenset({dict}), frozenset({int}), frozenset({list}), frozenset({2})
_ITEMSIZE = {name: np_dtype.itemsize for name, (np_dtype, _) in DTYPES.items()}


def header_entries(raw: bytes, base: int, size: int) -> dict[str, Entry] | None:
    """key -> (dtype, shape, start, end) of every entry of the header text `raw` whose tensors start at byte
    `base` of a file of `size` bytes, when the fast parse provably is the strict parse and every entry is
    sound; else None."""
    header = plain_object(raw)
    if header is None:
        return None
    keys, infos = list(header), list(header.values())
    meta = header.pop(META, None) if META in header else None
    if len(infos) != len(header):  # the metadata is no entry
        where = keys.index(META)
        del keys[where], infos[where]
        if type(meta) is not dict:
            return None
    if not infos:
        return {} if _no_key_dropped(raw, keys, meta, 0) else None
    try:
        if not _DICT.issuperset(map(type, infos)) or sum(map(len, infos)) != 3 * len(infos):
            return None
        if not _no_key_dropped(raw, keys, meta, 3 * len(infos)):
            return None
        return _checked(keys, infos, base, size)
    except (TypeError, KeyError, OverflowError, ValueError):  # a field missing, of an unexpected type or size
        return None


def plain_object(raw: bytes) -> dict[str, Any] | None:
    """The JSON object orjson parses from a text holding no escape, else None (the strict parse then)."""
    if b"\\" in raw:
        return None
    try:
        header = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return header if type(header) is dict else None


def _no_key_dropped(raw: bytes, keys: list[str], meta: dict[str, Any] | None, fields: int) -> bool:
    """orjson keeps the last of two equal keys silently: every colon outside a string separates one key from
    its value, so the colons of the text less those inside the keys equal the pairs parsed only when none was
    dropped (validate._header_fast's proof). `fields`: the entries' pairs, each entry exactly dtype, shape and
    data_offsets (no colon in those keys); the metadata's values must hold no pairs of their own."""
    pairs = len(keys) + fields
    in_keys = "".join(keys).count(":")
    if meta is not None:
        pairs += 1 + len(meta)
        in_keys += "".join(meta).count(":")
    return pairs == raw.count(b":") - in_keys


def _checked(keys: list[str], infos: list[dict[str, Any]], base: int, size: int) -> dict[str, Entry] | None:
    """The entries when every field has its exact type (bool is no int here) and every check holds; KeyError
    when an entry lacks a field (each has three: then exactly these)."""
    codes, shapes, offsets = zip(*map(_FIELDS, infos))
    named = list(map(SAFETENSORS_TO_NAME.get, codes))  # TypeError: an unhashable code
    if None in named or not _LIST.issuperset(map(type, shapes)) or not _LIST.issuperset(map(type, offsets)) \
            or not _TWO.issuperset(map(len, offsets)):
        return None
    dtypes = cast("list[str]", named)
    ends = list(chain.from_iterable(offsets))
    if not _INT.issuperset(map(type, ends)) or not _INT.issuperset(map(type, chain.from_iterable(shapes))):
        return None  # every entry's dims typed before equal shapes merge below: (2,) == (2.0,)
    made = list(map(tuple, shapes))
    one = dict(zip(made, made))  # entries of one shape share one tuple
    kinds = list(zip(dtypes, made))
    nbytes = {k: math.prod(k[1]) * _ITEMSIZE[k[0]] for k in set(kinds)}
    lo, hi = ends[0::2], ends[1::2]
    if min(lo) < 0 or max(hi) > size - base or any(d < 0 for s in one for d in s) \
            or list(map(sub, hi, lo)) != list(map(nbytes.__getitem__, kinds)):
        return None  # hi >= lo: each holds its shape's bytes, never a negative count
    if hi[:-1] != lo[1:] and _overlap(lo, hi):  # the writer lays tensors end to end
        return None
    return dict(zip(keys, zip(dtypes, map(one.__getitem__, made), map(base.__add__, lo), map(base.__add__, hi))))


def _overlap(lo: list[int], hi: list[int]) -> bool:
    """Whether two non-empty spans overlap (the entry-by-entry check then names them)."""
    start, end = np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)
    full = end > start
    start, end = start[full], end[full]
    order = np.lexsort((end, start))
    start, end = start[order], end[order]
    return bool((start[1:] < end[:-1]).any())


Written = tuple[list[str], list[str], list[tuple[int, ...]]]  # keys, dtype names, shapes, in the writer's order
_CODE = {name: code for name, (_, code) in DTYPES.items()}
_META_TEXT = '{"__metadata__":{"format":"' + FORMAT_NAME + '"},'
_SCALAR = (1,)
_FIRST, _NBYTES = itemgetter(0), itemgetter(1)
_META_QUOTES, _CONTROL = _META_TEXT.count('"'), bytes(range(0x20))


def as_written(raw: bytes, base: int, size: int, keys: list[str], dtypes: list[str], shapes: list[tuple[int, ...]]
               ) -> dict[str, Entry] | None:
    """The entries of a header that is, byte for byte, what DumpWriter writes for these tensors in this order
    (store/writer.py: its metadata, each tensor after the one before, a scalar as [1], padded with spaces to 8
    bytes), when they lie inside the file: that text parses to exactly these entries and they pass every check,
    so no parse is needed. None for any other header (it is parsed and checked). Never raises."""
    if not keys or META in keys or not _INT.issuperset(map(type, chain.from_iterable(shapes))):
        return None
    kinds = list(zip(dtypes, shapes))
    one = set(kinds)
    if any(not shape for _, shape in one):  # the writer stores a scalar as [1] (np.ascontiguousarray)
        shapes = [s or _SCALAR for s in shapes]
        kinds = list(zip(dtypes, shapes))
        one = set(kinds)
    try:
        text = {k: _entry_text(*k) for k in one}  # per dtype and shape: the text around key and offsets
    except (KeyError, ValueError):
        return None
    n = len(keys)
    if len(text) == 1:  # one kind of tensor, laid end to end
        (entry, nbytes), = text.values()
        starts, ends = (list(range(0, nbytes * n, nbytes)), list(range(nbytes, nbytes * (n + 1), nbytes))) \
            if nbytes else ([0] * n, [0] * n)
        body = ",".join(map(entry.__mod__, zip(keys, starts, ends)))
    else:
        ends = list(accumulate(map(_NBYTES, map(text.__getitem__, kinds))))
        starts = [0, *ends[:-1]]
        body = ",".join(map(str.__mod__, map(_FIRST, map(text.__getitem__, kinds)), zip(keys, starts, ends)))
    if ends[-1] > size - base:
        return None
    head = _META_TEXT + body + "}"
    try:
        if raw != (head + " " * (-len(head) % 8)).encode():
            return None
    except UnicodeEncodeError:  # a lone surrogate in a key
        return None
    if not _keys_as_written(raw, len(keys)):
        return None
    return dict(zip(keys, zip(dtypes, shapes, map(base.__add__, starts), map(base.__add__, ends))))


def _entry_text(dtype: str, shape: tuple[int, ...]) -> tuple[str, int]:
    """(the writer's text of an entry of this dtype and shape, key and offsets left as %s, %d, %d; its bytes)."""
    if any(d < 0 for d in shape):
        raise ValueError("a negative size")
    dims = ",".join(map(str, shape))
    return (f'"%s":{{"dtype":"{_CODE[dtype]}","shape":[{dims}],"data_offsets":[%d,%d]}}',
            math.prod(shape) * _ITEMSIZE[dtype])


def _keys_as_written(raw: bytes, n: int) -> bool:
    """Whether the keys in a header equal to the writer's text are that text's JSON strings as they stand: no
    quote inside one (each of the n entries has its ten quotes), no escape, no raw control character (which
    JSON refuses); a key of any other kind is never what the writer wrote (it escapes them), so this only rules
    out a damaged text that happens to read as the records' names."""
    return b"\\" not in raw and raw.count(b'"') == _META_QUOTES + 10 * n and \
        len(raw.translate(None, _CONTROL)) == len(raw)
