"""Whether two dumps hold the same records: index lines, call lines, statistics, hashes and every tensor's bytes.

    PYTHONPATH=src .venv/bin/python bench/dump_same.py DUMP_A DUMP_B

For checking that a change to capture's writing paths leaves what a capture writes unchanged (capture the same
seeded model with the old and the new tree, then compare). meta.json is compared without the fields that say
when, where and by which command a dump was made. Each part's index lines must be equal as JSON, in order; each
record's data must read back with the same dtype, shape and bytes (records pointing at stored bytes included:
the way a record points may differ only where it reads the same elements). Exit 0 when equal, 1 otherwise,
naming the first differences.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from opdiff.store.readers.opdiff_format import list_parts, open_dump

VOLATILE = {"created", "finished", "host", "platform", "python", "command", "opdiff_version"}


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def compare(a: Path, b: Path, limit: int = 10) -> list[str]:
    """The differences between dumps `a` and `b` (at most `limit` named); empty when they are the same."""
    out: list[str] = []
    meta_a, meta_b = (json.loads((p / "meta.json").read_text()) for p in (a, b))
    for k in sorted((meta_a.keys() | meta_b.keys()) - VOLATILE):
        if meta_a.get(k) != meta_b.get(k):
            out.append(f"meta.json {k}: {meta_a.get(k)!r} != {meta_b.get(k)!r}")
    parts_a = sorted(p.relative_to(a) for p in a.rglob("index.jsonl"))
    parts_b = sorted(p.relative_to(b) for p in b.rglob("index.jsonl"))
    if parts_a != parts_b:
        out.append(f"parts differ: {parts_a} != {parts_b}")
    for rel in parts_a:
        la, lb = lines(a / rel), lines(b / rel)
        if len(la) != len(lb):
            out.append(f"{rel}: {len(la)} != {len(lb)} lines")
        for i, (x, y) in enumerate(zip(la, lb)):
            if x != y:
                out.append(f"{rel} line {i}: {json.dumps(x)[:300]} != {json.dumps(y)[:300]}")
                if len(out) >= limit:
                    return out
    for rank, step in list_parts(a):
        pa, pb = open_dump(a, rank, step), open_dump(b, rank, step)
        for ra in pa.records:
            if ra.data is None:
                continue
            xa, xb = pa.tensor(ra), pb.tensor(ra.name)
            if xa.dtype != xb.dtype or xa.shape != xb.shape or not np.array_equal(
                    xa.reshape(-1).view(np.uint8), xb.reshape(-1).view(np.uint8)):
                out.append(f"part {rank}/{step} {ra.name}: bytes differ")
                if len(out) >= limit:
                    return out
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__)
        return 2
    diffs = compare(Path(args[0]), Path(args[1]))
    for d in diffs:
        print(d)
    print("same" if not diffs else f"{len(diffs)} difference(s) shown")
    return 0 if not diffs else 1


if __name__ == "__main__":
    sys.exit(main())
