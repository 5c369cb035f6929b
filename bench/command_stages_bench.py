"""CPU seconds per stage of one `opdiff compare` run in this process (issue 23): each stage function wrapped by a
timer (time.process_time), the command run as the program runs it, one line of totals per run.

    PYTHONPATH=<tree> .venv/bin/python bench/command_stages_bench.py GOLDEN TARGET [--out DIR] [--label main]

Run it once per source tree, alternately, on the same pair (bench/many_records_bench.py --keep writes one):
the stages are the store's (opening both dumps, the shard headers' check), the plan, the small pairs, the
gate's diagnosis and the reports. Wrapping costs nothing measurable (a few hundred calls in all); a stage that a
tree lacks is left out of its line.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import time
from collections.abc import Callable
from typing import Any

STAGES = [  # (module, attribute, label): a class attribute as "Class.method"
    ("opdiff.cli.compare_cmd", "open_sides", "open_sides"),
    ("opdiff.store.readers.opdiff_format", "OpdiffDump.check", "check"),
    ("opdiff.compare.run", "plan_pairs", "plan_pairs"),
    ("opdiff.compare.run", "align", "align"),
    ("opdiff.compare.run", "_small_items", "_small_items"),
    ("opdiff.compare.run", "small_pair_results", "small_pair_results"),
    ("opdiff.compare.run", "compare", "compare"),
    ("opdiff.diagnose.gate", "judge", "judge"),
    ("opdiff.report", "write_many", "write_many"),
]


def _wrap(owner: Any, name: str, label: str, spent: dict[str, float]) -> None:
    fn: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.process_time() - t0

    setattr(owner, name, timed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("golden")
    ap.add_argument("target")
    ap.add_argument("--out", default="/tmp/opdiff-command-stages")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    start = time.process_time()
    spent: dict[str, float] = {}
    for module, attr, label in STAGES:
        try:
            owner: Any = importlib.import_module(module)
        except ImportError:
            continue
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        if hasattr(owner, name):
            _wrap(owner, name, label, spent)
    from opdiff.cli.main import main as opdiff_main

    imports = time.process_time() - start
    try:
        opdiff_main(["compare", args.golden, args.target, "-o", args.out, "--force", "--no-progress", "--workers", "1",
                     "--format", "csv,xlsx,json"])
    except SystemExit:
        pass
    total = time.process_time() - start
    print(f"{args.label} CPU s: total {total:.2f}, imports {imports:.2f}, "
          + ", ".join(f"{k} {v:.3f}" for k, v in spent.items()))


if __name__ == "__main__":
    main()
