"""Run many sweep cases in parallel worker processes, resumable: a case whose JSON exists is not run again.

Each worker process runs cases one after another (imports and warm-up paid once), each bounded by an alarm;
a case that overruns is recorded as `timeout`. Results go to OUT/cases/<id>.json as each case ends.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from . import grade
from .case import LEVELS, PRECISIONS, Case, result_path


def cases(archs: Iterable[str], klasses: Iterable[str], levels: Iterable[str] = LEVELS,
          precisions: Iterable[str] = PRECISIONS) -> list[Case]:
    """The cross product, without the pairs that make no sense (a dtype change of a bf16 target)."""
    from .catalog import CLASSES

    out = []
    for a in archs:
        for k in klasses:
            for lv in levels:
                for p in precisions:
                    if p != "fp32" and CLASSES[k].kind == "benign" and k not in ("identical", "threads", "sdpa"):
                        continue  # dtype-changing benign classes are defined against an fp32 target only
                    if CLASSES[k].name == "compiled" and lv != "module":
                        continue
                    if CLASSES[k].kind == "training" and p != "fp32":
                        continue  # training classes run in fp32
                    out.append(Case(a, k, lv, p))
    return out


class _Overrun(Exception):
    pass


def _alarm(signum, frame):
    raise _Overrun()


def _run_one(case: Case, out: str, timeout: int) -> dict[str, Any]:
    """Worker side: run one case under an alarm, write and return its record."""
    import logging
    import shutil
    import traceback

    from . import case as case_mod

    logging.getLogger("transformers").setLevel(logging.ERROR)
    work = Path(out) / "work" / case.id
    shutil.rmtree(work, ignore_errors=True)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    t0 = time.perf_counter()
    try:
        rec = case_mod.run(case, work)
    except _Overrun:
        rec = {"id": case.id, "arch": case.arch, "klass": case.klass, "level": case.level, "precision": case.precision,
               "grade": grade.TIMEOUT, "reason": f"over {timeout} s"}
    except Exception as exc:  # a crash is a result, recorded with its trace
        rec = {"id": case.id, "arch": case.arch, "klass": case.klass, "level": case.level, "precision": case.precision,
               "grade": grade.ERROR, "reason": f"{type(exc).__name__}: {exc}"[:300], "trace": traceback.format_exc()[-2000:]}
    finally:
        signal.alarm(0)
        if not os.environ.get("OPDIFF_SWEEP_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    rec.setdefault("seconds", time.perf_counter() - t0)
    rec["command"] = case.command(out)
    path = result_path(out, case)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=1, default=str))
    tmp.replace(path)
    return rec


def _run_star(job: tuple[Case, str, int]) -> dict[str, Any]:
    """Pool side: run one case; a crash of the case is its record, never the pool's."""
    c, out, timeout = job
    try:
        return _run_one(c, out, timeout)
    except BaseException as exc:  # even SystemExit from a model's code: the sweep goes on
        return {"id": c.id, "arch": c.arch, "klass": c.klass, "level": c.level, "precision": c.precision,
                "grade": grade.ERROR, "reason": f"{type(exc).__name__}: {exc}"[:300], "command": c.command(out)}


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    try:
        os.nice(5)
    except OSError:
        pass


def run(todo: list[Case], out: str, *, workers: int = 1, timeout: int = 300,
        progress: Callable[[dict[str, Any], int, int], None] | None = None) -> list[dict[str, Any]]:
    """Run the cases not yet done (resumable) on `workers` processes; return every case's record."""
    done, pending = [], []
    for c in todo:
        p = result_path(out, c)
        if p.exists():
            done.append(json.loads(p.read_text()))
        else:
            pending.append(c)
    if pending:
        # multiprocessing.Pool, not ProcessPoolExecutor: the latter hangs once a worker retires after
        # max_tasks_per_child tasks (seen with Python 3.11); a fresh worker every 40 cases bounds leaks
        with mp.get_context("spawn").Pool(workers, initializer=_init_worker, initargs=(1,), maxtasksperchild=40) as pool:
            for i, rec in enumerate(pool.imap_unordered(_run_star, [(c, out, timeout) for c in pending]), 1):
                done.append(rec)
                if progress:
                    progress(rec, i, len(pending))
    return done
