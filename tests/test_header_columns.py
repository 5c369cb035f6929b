"""Shard headers checked as columns (store/headercols.py) give exactly what the entry-by-entry check gives: the
same entries for a sound header, and for any other the same refusal, word for word (the columns step aside)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import opdiff.store.validate as V
from opdiff.errors import DumpError
from opdiff.store.headercols import header_entries
from opdiff.store.writer import safetensors_bytes_header

SOUND = {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}
SIZE_AFTER = 1_000  # bytes of tensor data after the header


def _raw(entries: dict, meta: object = None, *, text: str | None = None) -> bytes:
    head = {} if meta is None else {"__metadata__": meta}
    return (text if text is not None else json.dumps({**head, **entries}, separators=(",", ":"))).encode()


def _outcome(raw: bytes, monkeypatch: pytest.MonkeyPatch | None = None, *, columns: bool = True) -> object:
    """shard_entries' entries, or its one-line refusal."""
    size = 8 + len(raw) + SIZE_AFTER
    if not columns and monkeypatch is not None:
        monkeypatch.setattr(V, "header_entries", lambda raw, base, size: None)
    try:
        return V.shard_entries(Path("s.safetensors"), raw, len(raw), size).entries
    except DumpError as exc:
        return str(exc)
    finally:
        if monkeypatch is not None:
            monkeypatch.undo()


def _both(raw: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    return _outcome(raw), _outcome(raw, monkeypatch, columns=False)


def _cases() -> list[bytes]:
    """Sound headers and headers damaged in each field, each way the entry check tells apart."""
    bad_values = {
        "dtype": ["F31", None, 3, ["F32"], {"a": 1}, "f32", ""],
        "shape": [[2, True], [2, -3], [2, 3.0], [2, "3"], "23", None, [[2], 3], {"2": 3}, [], [1 << 70], [2, 3, 0]],
        "data_offsets": [[0, 23], [24, 0], [0, 24, 48], [0], [-24, 0], [0, 1 << 70], [False, 24], [0.0, 24],
                         [0, 24.0], "0,24", None, [[0], 24], [0, 10_000], [1 << 64, 1 << 64]],
    }
    out = [_raw({}), _raw({}, {"format": "opdiff-dump"}), _raw({"k": SOUND}, {"format": "pt"})]
    for field, values in bad_values.items():
        for v in values:
            for where in (0, 2):  # the first entry or a later one
                entries = {f"t{i}": {"dtype": "F32", "shape": [2, 3], "data_offsets": [24 * i, 24 * i + 24]}
                           for i in range(3)}
                entries[f"t{where}"] = {**entries[f"t{where}"], field: v}
                out.append(_raw(entries, {"format": "opdiff-dump"}))
    three = {f"t{i}": {"dtype": "F32", "shape": [2, 3], "data_offsets": [24 * i, 24 * i + 24]} for i in range(3)}
    out += [
        _raw({k: {kk: vv for kk, vv in v.items() if kk != "shape"} if k == "t1" else v for k, v in three.items()}),
        _raw({"t1": {**SOUND, "extra": 1}, "t2": {**SOUND, "data_offsets": [24, 48]}}),  # a fourth field
        _raw({"b": {**SOUND, "data_offsets": [24, 48]}, "a": SOUND}),  # not in order, no overlap
        _raw({"a": {**SOUND, "data_offsets": [0, 24]}, "b": {**SOUND, "data_offsets": [12, 36]}}),  # overlap
        _raw({"a": {**SOUND, "data_offsets": [24, 48]}, "b": {**SOUND, "data_offsets": [0, 36],
                                                             "shape": [9]}}),  # overlap, out of order
        _raw({"a": {**SOUND, "shape": [0], "data_offsets": [8, 8]}, "b": SOUND}),  # empty inside another: fine
        _raw({"a": {**SOUND, "shape": [], "data_offsets": [0, 4]}, "b": {**SOUND, "data_offsets": [4, 28]}}),
        _raw({"a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
              "b": {"dtype": "BOOL", "shape": [2], "data_offsets": [6, 8]},
              "c": {"dtype": "F64", "shape": [1, 1], "data_offsets": [8, 16]}}),
        _raw({"a": SOUND}, {"n": 1, "m": {"deep": 1}}),  # nested metadata: the strict parse
        _raw({"a": SOUND}, ["not", "an", "object"]),
        _raw({"a": SOUND}, "text"),
        _raw({"a": SOUND}, {"note": "a:b"}),  # a colon in a value: the strict parse
        _raw({}, text='{"a":' + json.dumps(SOUND) + ',"__metadata__":{"x":"1"}}'),  # metadata last
        _raw({}, text='{"__metadata__":null,"a":' + json.dumps(SOUND) + '}'),
        _raw({}, text='{"a":' + json.dumps(SOUND) + ',"a":' + json.dumps(SOUND) + '}'),  # repeated key
        _raw({}, text='{"a":{"dtype":"F32","dtype":"F16","shape":[2,3],"data_offsets":[0,24]}}'),
        _raw({}, text='{"a:":' + json.dumps(SOUND) + ',"a:":' + json.dumps(SOUND) + '}'),
        _raw({}, text='{"__metadata__":{},"__metadata__":{},"a":' + json.dumps(SOUND) + '}'),
        _raw({}, text='{"a":' + json.dumps(SOUND) + '}  '),  # padding, as the writer pads
        _raw({}, text='{"\\u00fcn":' + json.dumps(SOUND) + '}'),  # an escape: the strict parse
        _raw({}, text='{"ün:x":' + json.dumps(SOUND) + '}'),
        _raw({}, text='[1, 2]'), _raw({}, text='{"a": NaN}'), _raw({}, text='{"a": 1'), _raw({}, text='nul'),
        safetensors_bytes_header([(f"layers.{i}/op#{i}/forward/output/0", "float32", (4,), 16) for i in range(40)])[8:],
        safetensors_bytes_header([("a", "bfloat16", (2, 2), 8), ("b", "int64", (), 8), ("c", "bool", (0,), 0),
                                  ("d", "uint8", (3,), 3)])[8:],
    ]
    return out


CASES = _cases()


@pytest.mark.parametrize("k", range(len(CASES)))
def test_columns_give_what_the_entry_check_gives(k, monkeypatch):
    raw = CASES[k]
    fast, slow = _both(raw, monkeypatch)
    assert fast == slow
    if isinstance(fast, dict):  # the entries hold the same objects' values and the same key order
        assert list(fast) == list(slow)


def test_the_writers_headers_take_the_columns():
    """A DumpWriter shard's header is checked as columns, and refused ones never are."""
    raw = safetensors_bytes_header([(f"t{i}", "float32", (2, 3), 24) for i in range(100)])[8:]
    got = header_entries(raw, 8 + len(raw), 8 + len(raw) + 2400)
    assert got is not None and len(got) == 100
    assert got["t7"] == ("float32", (2, 3), 8 + len(raw) + 168, 8 + len(raw) + 192)
    assert len({id(e[1]) for e in got.values()}) == 1  # entries of one shape share one tuple
    assert header_entries(raw, 8 + len(raw), 8 + len(raw) + 2399) is None  # the last tensor passes the end


@pytest.mark.parametrize("dims", [[2, True], [True, 2], [2.0, 3], [2, 3.0]])
def test_a_shape_equal_to_a_sound_one_but_not_of_ints_is_refused(dims, monkeypatch):
    """(2, 3) == (2.0, 3) == (True * 2, 3) as tuples: the columns type every entry's dims before merging shapes."""
    entries = {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
               "b": {"dtype": "F32", "shape": dims, "data_offsets": [24, 48]}}
    raw = _raw(entries)
    assert header_entries(raw, 8 + len(raw), 8 + len(raw) + 48) is None
    fast, slow = _both(raw, monkeypatch)
    assert fast == slow and isinstance(fast, str) and "bad shape" in fast


# -- a header that is exactly what DumpWriter wrote for the index's records needs no parse ------------------------

def _run(path: Path, n: int = 40, *, same: bool = False, multi: bool = False) -> None:
    """A DumpWriter run of n tensors of a few dtypes and ranks, a few shards (small shard_bytes); `same`: every
    fifth record shares the bytes of the one before (stored once); `multi`: two steps, the second reading
    the first's bytes (format version 2)."""
    import numpy as np

    from opdiff.store.writer import DumpWriter
    from opdiff.testing.synthetic import Tensor, make_record

    rng = np.random.default_rng(3)
    w = DumpWriter(path, {"framework": "numpy", "mode": "tensor"}, shard_bytes=256)
    first: dict[int, object] = {}
    for step in (0, 1) if multi else (0,):
        w.begin(0, step)
        last, arr = None, None
        for i in range(n):
            shares = same and i % 5 == 4  # the bytes of the record before, stored once
            if not shares:
                arr = rng.standard_normal([(3,), (2, 3), (), (1, 4, 2)][i % 4]).astype([np.float32, np.float16][i % 2])
            rec = make_record(Tensor(f"m.{i}", "aten.mul.Tensor", "output", "0", arr, call=i))
            if shares or (multi and step == 1):
                w.add(rec, same_data_as=last if not multi else first[i])
            else:
                w.add(rec, arr)
            last = rec
            if multi and step == 0:
                first[i] = rec
    w.close()


@pytest.mark.parametrize("kind", ["plain", "same", "multi"])
def test_a_header_as_written_is_the_parsed_header(tmp_path, monkeypatch, kind):
    """check() takes each of this part's shards whose header is the writer's text for the records stored there
    without parsing it, and gets the parsed header's very entries; shards it cannot vouch for (bytes stored once
    under another record's name, another part's shards) are parsed."""
    import opdiff
    import opdiff.store.readers.opdiff_format as F

    _run(tmp_path / "d", same=kind == "same", multi=kind == "multi")
    seen = {"as written": 0, "parsed": 0}
    real = F.as_written

    def spy(*args):
        got = real(*args)
        seen["as written" if got is not None else "parsed"] += 1
        return got

    monkeypatch.setattr(F, "as_written", spy)
    for step in (0, 1) if kind == "multi" else (0,):
        d = opdiff.load(tmp_path / "d" / f"rank0/step{step}")
        d.check()
        assert d._headers
        for h in d._headers.values():
            parsed = V.shard_entries(h.path, *F._header_bytes(h.path)).entries
            assert h.entries == parsed and list(h.entries) == list(parsed)
        for r in d.records:  # every record located as span locates it
            sp = d.span(r)
            assert d.locate(r) == (sp.path, sp.offset)
    shards = len(list((tmp_path / "d/rank0/step0/shards").iterdir()))
    assert shards >= 2 and seen["as written"] == shards  # records that share stored bytes change nothing
    assert seen["parsed"] == 0  # another part's shards (multi): read through header(), parsed, never compared


@pytest.mark.parametrize("damage", ["digit", "key", "length", "cut"])
def test_a_damaged_shard_or_index_is_refused_as_before(tmp_path, monkeypatch, damage):
    """A header that is not the writer's text for the index's records is parsed and checked: the refusal (or its
    absence, and the record's error later) is the same as with the text comparison taken out."""
    import opdiff
    import opdiff.store.readers.opdiff_format as F

    _run(tmp_path / "d")
    shard = sorted((tmp_path / "d/rank0/step0/shards").iterdir())[1]
    raw = bytearray(shard.read_bytes())
    n = int.from_bytes(raw[:8], "little")
    text = raw[8:8 + n]
    if damage == "digit":  # an offset one byte off: sizes no longer match
        at = text.rindex(b"]}") - 1
        text[at] = ord("0") + (text[at] - ord("0") + 1) % 10
    elif damage == "key":  # a key renamed, same length: the record's tensor is missing
        at = text.index(b'"m.') + 1
        text[at] = ord("x")
    raw[8:8 + n] = text
    if damage == "length":
        raw[:8] = (n + 10**9).to_bytes(8, "little")
    if damage == "cut":
        raw = raw[:-3]
    shard.write_bytes(bytes(raw))

    def outcome() -> str:
        d = opdiff.load(tmp_path / "d")
        try:
            d.check()
            for r in d.records:
                d.locate(r)
        except DumpError as exc:
            return str(exc)
        return "no refusal"

    got = outcome()
    monkeypatch.setattr(F, "as_written", lambda *a: None)
    assert got == outcome() and got != "no refusal"


def _as_text(keys: list[str], dtype: str = "F32", shape: str = "2", nbytes: int = 8) -> bytes:
    """A header in the writer's layout for these keys, written by hand (keys as they stand, no escaping)."""
    body = ",".join(f'"{k}":{{"dtype":"{dtype}","shape":[{shape}],"data_offsets":[{i * nbytes},{(i + 1) * nbytes}]}}'
                    for i, k in enumerate(keys))
    text = '{"__metadata__":{"format":"opdiff-dump"},' + body + "}"
    return (text + " " * (-len(text) % 8)).encode()


@pytest.mark.parametrize("keys, taken", [
    (["a", "b", "c"], True),
    (["ünï", "b"], True),  # raw UTF-8 in a key parses to that key
    (['a"', "b"], False),  # a quote: not one JSON string
    (["a\\u0041", "b"], False),  # an escape: another key once parsed
    (["a\x01", "b"], False),  # a raw control character: JSON refuses it
    (["a\ud800", "b"], False),  # a lone surrogate: no UTF-8 for it
    (["__metadata__", "b"], False),  # a second metadata key
])
def test_a_key_is_taken_as_written_only_when_its_text_is_itself(keys, taken):
    """as_written compares bytes; a key that would not parse to itself never passes, whatever the bytes."""
    from opdiff.store.headercols import as_written

    try:
        raw = _as_text(keys)
    except UnicodeEncodeError:
        raw = _as_text(["a?", "b"])
    base = 8 + len(raw)
    got = as_written(raw, base, base + 8 * len(keys), keys, ["float32"] * len(keys), [(2,)] * len(keys))
    assert (got is not None) == taken
    if taken:
        assert got == V.shard_entries(Path("s"), raw, len(raw), base + 8 * len(keys)).entries


@pytest.mark.parametrize("shape, nbytes", [("4", 16), ("0", 0), ("2,0", 0), ("1", 4)])
def test_one_kind_of_tensor_laid_end_to_end(shape, nbytes):
    """A shard of one dtype and shape (offsets in one arithmetic run), empty tensors included, reads as parsed;
    a file too short for its last tensor is parsed (and refused there)."""
    from opdiff.store.headercols import as_written

    keys = [f"t{i}" for i in range(5)]
    raw = _as_text(keys, shape=shape, nbytes=nbytes)
    dims = tuple(int(d) for d in shape.split(","))
    base, size = 8 + len(raw), 8 + len(raw) + 5 * nbytes
    got = as_written(raw, base, size, keys, ["float32"] * 5, [dims] * 5)
    assert got is not None and got == V.shard_entries(Path("s"), raw, len(raw), size).entries
    if nbytes:
        assert as_written(raw, base, size - 1, keys, ["float32"] * 5, [dims] * 5) is None
    assert as_written(raw, base, size, keys, ["float16"] * 5, [dims] * 5) is None  # other records: parsed
