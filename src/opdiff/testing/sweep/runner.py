"""Run many sweep cases in parallel worker processes or on a Dask cluster, resumable: a case whose JSON exists
is not run again.

Each worker process runs cases one after another (imports and warm-up paid once), each bounded by an alarm;
a case that overruns is recorded as `timeout`. Results go to OUT/cases/<id>.json as each case ends. On Dask
(`scheduler`: an address, or local:N as `opdiff compare --scheduler`), each task runs its case in a fresh
process (`python -m opdiff.testing.sweep.case`, bounded by `timeout`: a worker thread cannot take an alarm)
and returns the record, which the driver writes too (a remote worker's disk need not be this one's).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
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
                    if CLASSES[k].name == "ort" and (lv != "module" or p != "fp32"):
                        continue  # an ORT port is observed at module boundaries, of the fp32 export
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
    _write(out, case, rec)
    return rec


def _write(out: str, case: Case, rec: dict[str, Any]) -> None:
    """OUT/cases/<id>.json, atomically (a cut-off write never looks like a finished case)."""
    path = result_path(out, case)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(rec, indent=1, default=str))
    tmp.replace(path)


def _stub(c: Case, grade_: str, reason: str) -> dict[str, Any]:
    return {"id": c.id, "arch": c.arch, "klass": c.klass, "level": c.level, "precision": c.precision,
            "grade": grade_, "reason": reason[:300]}


def _run_process(job: tuple[Case, str, int]) -> dict[str, Any]:
    """Dask side: one case in a fresh process, bounded by the timeout; its record (written by the case too)."""
    c, out, timeout = job
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "opdiff.testing.sweep.case", c.arch, c.klass, c.level, c.precision, out]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        path = result_path(out, c)
        rec = json.loads(path.read_text()) if path.exists() else \
            _stub(c, grade.ERROR, f"the case process exited {done.returncode}: {done.stderr.strip()[-250:]}")
    except subprocess.TimeoutExpired:
        rec = _stub(c, grade.TIMEOUT, f"over {timeout} s")
        shutil.rmtree(Path(out) / "work" / c.id, ignore_errors=True)
    rec.setdefault("seconds", time.perf_counter() - t0)
    rec["command"] = c.command(out)
    _write(out, c, rec)
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
        progress: Callable[[dict[str, Any], int, int], None] | None = None,
        scheduler: str | None = None) -> list[dict[str, Any]]:
    """Run the cases not yet done (resumable) on `workers` processes, or on the Dask `scheduler`; return every
    case's record."""
    done, pending = [], []
    for c in todo:
        p = result_path(out, c)
        if p.exists():
            done.append(json.loads(p.read_text()))
        else:
            pending.append(c)
    if pending and scheduler is not None:
        done.extend(_run_dask(pending, out, scheduler, timeout, progress))
    elif pending:
        # multiprocessing.Pool, not ProcessPoolExecutor: the latter hangs once a worker retires after
        # max_tasks_per_child tasks (seen with Python 3.11); a fresh worker every 40 cases bounds leaks
        with mp.get_context("spawn").Pool(workers, initializer=_init_worker, initargs=(1,), maxtasksperchild=40) as pool:
            for i, rec in enumerate(pool.imap_unordered(_run_star, [(c, out, timeout) for c in pending]), 1):
                done.append(rec)
                if progress:
                    progress(rec, i, len(pending))
    return done


def _run_dask(pending: list[Case], out: str, scheduler: str, timeout: int,
              progress: Callable[[dict[str, Any], int, int], None] | None) -> list[dict[str, Any]]:
    """The pending cases as Dask tasks (one fresh process each), records in the order they finish."""
    from distributed import as_completed

    from ...compare.cluster import connect

    out = str(Path(out).resolve())  # the workers' working directory is not ours
    client, cluster = connect(scheduler)
    recs: list[dict[str, Any]] = []
    try:
        futures = client.map(_run_process, [(c, out, timeout) for c in pending], pure=False)
        by_key = {f.key: c for f, c in zip(futures, pending)}
        for i, (fut, rec) in enumerate(as_completed(futures, with_results=True), 1):
            _write(out, by_key[fut.key], rec)  # the driver keeps it too: resumable wherever the task ran
            recs.append(rec)
            if progress:
                progress(rec, i, len(pending))
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return recs
