"""What checking tfdbg's TFRecord CRC-32C costs: opening a FULL_TENSOR-sized event file with and without the
check, against a plain read of the same bytes (ratios; the machine may be shared: run it twice).

    PYTHONPATH=src .venv/bin/python bench/crc_bench.py [--mb 256] [--records 64]
"""

from __future__ import annotations

import argparse
import os
import struct
import tempfile
import time
from pathlib import Path

from opdiff.store.readers.tfdbg_proto import masked_crc, open_records


def write_file(path: Path, mb: int, records: int) -> None:
    """A TFRecord file of `records` random payloads totalling `mb` MiB, with correct checksums."""
    size = (mb << 20) // records
    with open(path, "wb") as f:
        for _ in range(records):
            payload = os.urandom(size)
            head = struct.pack("<Q", size)
            f.write(head + struct.pack("<I", masked_crc(head)) + payload + struct.pack("<I", masked_crc(payload)))


def best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=256)
    p.add_argument("--records", type=int, default=64)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.graph_execution_traces"
        write_file(path, a.mb, a.records)
        plain = best(lambda: path.read_bytes())
        checked = best(lambda: open_records(path))
        rf = open_records(path)
        assert not rf.damaged and rf.bad_length is None and len(rf.spans) == a.records
    print(f"{a.mb} MiB in {a.records} records: open with both CRC-32C checks {checked / plain:.2f}x "
          f"a plain read of the file ({checked:.3f} s against {plain:.3f} s)")


if __name__ == "__main__":
    main()
