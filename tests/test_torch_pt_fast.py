"""The .pt reader's two-read fast path gives what the zipfile path gives, and leaves every odd or
damaged archive to the zipfile path (which names the problem)."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
import torch

from opdiff.errors import DumpError
from opdiff.store.readers import torch_pt
from opdiff.store.readers.torch_pt import PtError, read_pt


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    big = torch.randn(300, 257, generator=g)  # storage far beyond the head window
    return {
        "small": torch.randn(7, generator=g),
        "big": big,
        "view": big[10:20, 3:9],  # a non-contiguous view into a bigger storage
        "offset": big[5],  # contiguous with a storage offset
        "bf16": torch.randn(33, 5, generator=g).to(torch.bfloat16),
        "int": torch.arange(1000, dtype=torch.int64),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
        "param": torch.nn.Parameter(torch.ones(3, 3)),
    }


@pytest.mark.parametrize("name", list(_tensors()))
def test_fast_path_equals_zipfile_path(tmp_path, name):
    t = _tensors()[name]
    path = tmp_path / f"{name}.pt"
    torch.save(t, path)
    assert torch_pt._read_fast(path) is not None  # torch.save's layout takes the fast path
    fast = read_pt(path)
    obj, offset = torch_pt._read_zipfile(path)
    assert (fast.data_offset, fast.storage_offset, fast.shape, fast.stride) == (offset, obj[2], obj[3], obj[4])
    ref = t.detach().contiguous().reshape(-1)
    ref_bytes = (ref.view(torch.int16) if t.dtype == torch.bfloat16 else ref).numpy().tobytes()
    assert fast.array().tobytes() == ref_bytes


def _rezip(src, dst, compression=zipfile.ZIP_STORED, comment=b""):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression=compression) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
        zout.comment = comment


def test_other_layouts_go_to_zipfile_and_read_the_same(tmp_path):
    """An archive re-zipped by Python (another layout, a comment) still reads, bitwise the same."""
    t = torch.randn(100, 3)
    src = tmp_path / "t.pt"
    torch.save(t, src)
    for i, comment in enumerate((b"", b"a comment")):
        dst = tmp_path / f"re{i}.pt"
        _rezip(src, dst, comment=comment)
        assert np.array_equal(read_pt(dst).array(), t.numpy())
    assert torch_pt._read_fast(tmp_path / "re1.pt") is None  # a comment: not torch.save's layout


def test_compressed_archive_is_refused_with_one_line(tmp_path):
    src, dst = tmp_path / "t.pt", tmp_path / "z.pt"
    torch.save(torch.randn(500), src)
    _rezip(src, dst, compression=zipfile.ZIP_DEFLATED)
    assert torch_pt._read_fast(dst) is None
    with pytest.raises(PtError, match="compressed") as exc:
        read_pt(dst)
    assert "\n" not in str(exc.value) and str(dst) in str(exc.value)


def test_damaged_archives_fail_with_one_line(tmp_path):
    """A flipped pickle byte (CRC), a cut-off file, an emptied file: the fast path declines and the
    error names the file, whichever part is damaged."""
    src = tmp_path / "t.pt"
    torch.save(torch.randn(2000), src)
    raw = src.read_bytes()
    pkl_at = raw.index(b"\x80\x02")  # the pickle's protocol opcode
    cases = {
        "flip": raw[:pkl_at + 20] + bytes([raw[pkl_at + 20] ^ 0xFF]) + raw[pkl_at + 21:],
        "cut": raw[: len(raw) // 2],
        "tail": raw[:-10],
        "empty": b"",
    }
    for name, data in cases.items():
        bad = tmp_path / f"{name}.pt"
        bad.write_bytes(data)
        assert torch_pt._read_fast(bad) is None, name
        with pytest.raises(DumpError) as exc:
            read_pt(bad)
        assert "\n" not in str(exc.value) and str(bad) in str(exc.value), name


def test_refused_pickle_is_refused_on_the_fast_path(tmp_path):
    """The fast path unpickles with the same restricted unpickler: a payload is refused, never run."""
    marker = tmp_path / "MARKER"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    evil = tmp_path / "evil.pt"
    torch.save(Payload(), evil)
    with pytest.raises(PtError, match="refused"):
        torch_pt._read_fast(evil)
    assert not marker.exists()


def test_pickle_memo_unpickles_each_layout_once_and_reads_the_same(tmp_path):
    """Files that share torch.save's pickle (same dtype, shape, stride) reuse one unpickled result;
    a different layout is its own entry; with or without the memo the tensors read bitwise the same."""
    g = torch.Generator().manual_seed(5)
    tensors = [torch.randn(64, generator=g) for _ in range(3)] + [torch.randn(8, 8, generator=g),
                                                                 torch.randn(64, generator=g).to(torch.float16)]
    memo = torch_pt.PickleMemo()
    for i, t in enumerate(tensors):
        path = tmp_path / f"t{i}.pt"
        torch.save(t, path)
        got, plain = read_pt(path, memo), read_pt(path)
        assert got == plain and got.path == path
        assert got.array().tobytes() == t.numpy().tobytes()
    assert len(memo._got) == 3  # 3 x fp32[64] share one pickle; fp32[8,8] and fp16[64] differ


def test_pickle_memo_never_keeps_a_refusal_or_grows_past_its_limit(tmp_path):
    """A refused pickle is refused again on each file, naming that file; nothing is run or kept."""
    marker = tmp_path / "MARKER"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    memo = torch_pt.PickleMemo(limit=1)
    for name in ("evil1.pt", "evil2.pt"):
        evil = tmp_path / name
        torch.save(Payload(), evil)
        with pytest.raises(PtError, match="refused to load") as exc:
            read_pt(evil, memo)
        assert str(evil) in str(exc.value) and "\n" not in str(exc.value)
    assert not marker.exists() and not memo._got
    for i, n in enumerate((5, 6)):
        torch.save(torch.ones(n), tmp_path / f"ok{i}.pt")
        assert read_pt(tmp_path / f"ok{i}.pt", memo).shape == (n,)
    assert len(memo._got) == 1  # the limit holds; the second layout still reads
