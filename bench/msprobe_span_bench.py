"""CPU of an msprobe dump per record and per tensor file: opening the dump (dump.json into records), then
`span()` of every record (the .pt read compare does per pair: open, zip head and tail, restricted pickle,
offsets), each best of --repeat.

    PYTHONPATH=src .venv/bin/python bench/msprobe_span_bench.py DUMP [--src OTHER/src] [--repeat 3]

--src puts another checkout's `src` first on sys.path (before/after on the same dump, one process each).
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dump")
    p.add_argument("--src", default=None, help="a checkout's src to import opdiff from")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    if args.src:
        sys.path.insert(0, args.src)
    from opdiff.store.readers import load

    opened = float("inf")
    for _ in range(args.repeat):
        t = time.process_time()
        dump = load(args.dump)
        opened = min(opened, time.process_time() - t)
    recs = [r for r in dump.records if r.data]
    best = float("inf")
    for _ in range(args.repeat):
        t = time.process_time()
        for r in recs:
            dump.span(r)
        best = min(best, time.process_time() - t)
    print(f"open {opened:.3f} s CPU ({len(dump.records)} records, "
          f"{opened / max(1, len(dump.records)) * 1e6:.1f} us each); span of {len(recs)} files "
          f"{best:.3f} s CPU = {best / max(1, len(recs)) * 1e6:.1f} us per file")


if __name__ == "__main__":
    main()
