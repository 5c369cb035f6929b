"""Shard headers: the fast parse (orjson, repeated keys ruled out by counting) gives exactly what the strict
parse gives, and every header it cannot vouch for goes the strict way, which names the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from opdiff.errors import DumpError
from opdiff.store.validate import _header_fast, parse_json, shard_entries
from opdiff.store.writer import safetensors_bytes_header


def _header(names: list[str]) -> bytes:
    raw = safetensors_bytes_header([(n, "float32", (2, 3), 24) for n in names])
    return raw[8:]


def _entries(raw: bytes) -> dict:
    return shard_entries(Path("s.safetensors"), raw, len(raw), 8 + len(raw) + 10_000).entries


NAMES = [f"layers.{i}/aten.mm.default#{i}/forward/output/0" for i in range(50)]


@pytest.mark.parametrize("raw", [
    _header(NAMES),
    _header(["a:b", "x::y", "plain", ":"]),  # colons inside keys are counted out
    _header(["ünï", "code"]),  # non-ASCII names are \u escapes in the writer's JSON: the strict parse
    b'{"__metadata__":{"format":"opdiff","note":"a:b"},"k":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    b'{"k":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"__metadata__":{"n":NaN}}',  # json's NaN: strict
    b'{"k":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":{"x":1}}}  ',
    b'{}',
])
def test_fast_parse_equals_the_strict_parse(raw):
    fast = _header_fast(raw)
    strict = parse_json(raw)
    if fast is not None:
        assert fast == strict and list(fast) == list(strict)
    assert _entries(raw) == _entries_strict(raw)


def _entries_strict(raw: bytes) -> dict:
    import opdiff.store.validate as V

    keep = V._header_fast
    V._header_fast = lambda raw: None  # the strict parse alone
    try:
        return _entries(raw)
    finally:
        V._header_fast = keep


def test_the_writers_headers_take_the_fast_parse():
    assert _header_fast(_header(NAMES)) is not None
    assert _header_fast(_header(["a:b", "x::y"])) is not None


@pytest.mark.parametrize("raw", [
    b'{"k":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"k":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
    b'{"k":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}}',
    b'{"__metadata__":{"a":"1","a":"2"},"k":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    b'{"__metadata__":{"a":{"b":1,"b":2}},"k":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    b'{"k:":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"k:":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
])
def test_a_repeated_key_anywhere_is_refused_by_name(raw):
    """orjson keeps the last of two equal keys; the count proves none was dropped, so these go the strict way."""
    assert _header_fast(raw) is None
    with pytest.raises(DumpError, match="appears twice"):
        _entries(raw)


def test_a_damaged_fast_parsed_header_is_still_named():
    """Entries the fast parse read are checked as before: a size that does not match its shape, an overlap."""
    bad_size = b'{"k":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}'
    overlap = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}'
    assert _header_fast(bad_size) is not None and _header_fast(overlap) is not None
    with pytest.raises(DumpError, match="hold 4 bytes but float32\\[2\\] needs 8"):
        _entries(bad_size)
    with pytest.raises(DumpError, match="overlap"):
        _entries(overlap)
