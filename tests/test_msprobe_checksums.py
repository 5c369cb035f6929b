"""msprobe's md5 (CRC-32) and xor checksums checked against the .pt data they describe, on real msprobe dumps."""

from __future__ import annotations

import shutil

import pytest

from msprobe_fixtures import make_dumps
from opdiff.compare import compare
from opdiff.store import load

NAMES = ["l1_md5_tensor_bf16", "l1_xor_tensor"]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    return make_dumps(tmp_path_factory.getbasetemp() / "msprobe-dumps", NAMES)


pytestmark = pytest.mark.slow  # two msprobe runs of their own (about 50 s on 2 cores)


@pytest.mark.parametrize("name,kind", [("l1_md5_tensor_bf16", "crc32:"), ("l1_xor_tensor", "xor64:")])
def test_checksums_match_the_data_msprobe_wrote(dumps, name, kind):
    """Every record with data and a checksum verifies (ours equals msprobe's, bf16 raw bytes included)."""
    d = load(dumps[name])
    both = [r for r in d.records if r.data is not None and r.hash]
    assert len(both) > 20 and all(r.hash.startswith(kind) for r in both)
    cmp = compare(d, load(dumps[name]))
    assert not [r for r in cmp.results if r.status == "error"]
    assert cmp.passed()


def test_a_flipped_byte_is_damage_not_data(dumps, tmp_path):
    """One byte changed in one .pt file: that pair is an error naming the checksum, the rest still compare."""
    bad = tmp_path / "bad"
    shutil.copytree(dumps["l1_md5_tensor_bf16"], bad)
    d = load(bad)
    rec = next(r for r in d.records if r.data is not None and r.hash and r.numel > 16)
    span = d.span(rec)
    raw = bytearray(span.path.read_bytes())
    raw[span.offset + 5] ^= 0x01
    span.path.write_bytes(bytes(raw))
    cmp = compare(load(dumps["l1_md5_tensor_bf16"]), load(bad))
    errors = [r for r in cmp.results if r.status == "error"]
    assert rec.name in {r.name for r in errors} and all("damaged" in r.err_message for r in errors)
    assert sum(r.status == "compared" for r in cmp.results) > len(cmp.results) // 2
    assert not cmp.passed()
