"""Compare on Dask distributed: one task per (rank, step, shard), run on the host holding its files.

`compare_distributed(golden, target, out, scheduler=...)` plans every (rank, step) part on a
worker that sees its files, then compares each shard there (compare.tasks). Workers send back
metric rows only; the client keeps each task's rows in OUT/.opdiff-tasks/ (temp file + rename),
so a re-run redoes only what is missing. A killed worker's tasks are retried elsewhere by Dask;
a part no live worker can read is reported, never counted as agreement. Needs `opdiff[dask]`.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.errors import DumpError, OpdiffError
from ..base.pair import PairResult
from ..base.record import Record
from ..match.mapping import Mapping, load_mapping
from ..metrics.thresholds import Thresholds
from ..store import Dump, TensorSpan
from .cluster import LiveHosts, connect, load_placement
from .rows import dumps, records, unrow, write_atomic
from .run import MODES, Comparison, finish, resolve_thresholds
from .tasks import Spec, parts_task, plan_task, shard_task

TASK_DIR = ".opdiff-tasks"
DEFAULT_SHARD_BYTES = 256 << 20
RETRIES = 3
Part = tuple[int, int]


@dataclass
class DistributedRun:
    """Every part's Comparison, the parts that could not be compared, and what this run computed."""

    comparisons: dict[Part, Comparison]
    failed: dict[Part, str]
    computed: list[str] = field(default_factory=list)  # names of the tasks this run computed
    reused: list[str] = field(default_factory=list)  # names of the tasks found done in OUT
    workers: int = 0
    elapsed: float = 0.0
    tensor_bytes: int = 0
    where: dict[str, str] = field(default_factory=dict)  # task name -> worker address that computed it

    def passed(self, allow_unmatched: bool = False) -> bool:
        """True when every part was compared and passes."""
        return not self.failed and all(c.passed(allow_unmatched) for c in self.comparisons.values())


def _task_dir(out: Path, key: str) -> Path:
    d = out / TASK_DIR / key
    d.mkdir(parents=True, exist_ok=True)
    return d


def _read_done(path: Path) -> dict[str, Any] | None:
    """A task file a former run completed (renames make it whole or absent)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _name(part: Part, shard: int | None = None, shards: int | None = None) -> str:
    base = f"rank{part[0]}-step{part[1]}"
    return base + ("-plan" if shard is None else f"-shard{shard}of{shards}")


class RemoteDump(Dump):
    """The Dump a distributed Comparison names: root, meta, problems and records as the worker read
    them. Its tensors stay on the worker's host: span() says so."""

    format = "remote"

    def span(self, rec: Record) -> TensorSpan:
        raise DumpError(f"{self.root}: tensor {rec.name!r} lies on the worker's host (distributed compare)")

    def open_part(self, rank: int, step: int) -> Dump:
        raise DumpError(f"{self.root}: rank {rank} step {step} lies on the workers' hosts (distributed compare)")


def _stand_in(side: dict[str, Any], part: Part, records: list[Record]) -> Dump:
    meta = {"source_format": side.get("format"), **side["meta"]}
    return RemoteDump(root=Path(side["root"]), meta=meta, rank=part[0], step=part[1], records=records,
                      parts=[(int(p[0]), int(p[1])) for p in side["parts"]], problems=list(side["problems"]))


@dataclass
class _Task:
    """One task: its file name in OUT, its part, the function a worker runs and its extra arguments."""

    name: str
    part: Part
    fn: Callable[..., dict[str, Any]]
    args: tuple[Any, ...] = ()
    pin: bool = True  # run on the rank's placement host (while it has a live worker)


class _Runner:
    """Submits the tasks, pinned to the hosts holding the files, and keeps each result as it lands."""

    def __init__(self, client: Any, spec: Spec, out: Path, placement: dict[int, str] | None):
        from distributed import as_completed

        self.client, self.spec, self.placement = client, spec, placement or {}
        self.live = LiveHosts(client)
        self.dir = _task_dir(out, spec.key())
        self.queue = as_completed()  # type: ignore[no-untyped-call]
        self.run = DistributedRun({}, {})
        self.plans: dict[Part, dict[str, Any]] = {}
        self.rows: dict[Part, dict[int, list[Any]]] = {}
        self.what: dict[str, _Task] = {}  # future key -> the task it computes

    def _submit(self, tasks: list[_Task]) -> None:
        """Submit tasks of one part in one message; pinned (strictly: no work stealing) to the rank's host
        while that host has a live worker, else free to run anywhere (shared storage, or the run reports
        the part unreadable)."""
        if not tasks:
            return
        first = tasks[0]
        host = self.placement.get(first.part[0]) if first.pin else None
        pin = bool(host) and host in self.live
        args = [(self.spec, *t.part, *t.args) for t in tasks]
        futs = self.client.map(first.fn, *zip(*args), key=[f"opdiff-{t.name}-{uuid.uuid4().hex[:8]}" for t in tasks],
                               workers=[host] if pin else None, retries=RETRIES, pure=False)
        for t, fut in zip(tasks, futs):
            t.pin = pin
            self.what[fut.key] = t
        self.queue.update(futs)  # type: ignore[no-untyped-call]

    def parts(self, rank: int | None, step: int | None) -> list[Part]:
        """Parts both dumps have (seen from every host of the placement, or from any worker)."""
        hosts: list[str | None] = [*sorted(set(self.placement.values()))] or [None]
        seen: dict[str, set[Part]] = {"golden": set(), "target": set()}
        futs = [self.client.submit(parts_task, self.spec, workers=[h] if h else None,
                                   allow_other_workers=h is not None and h not in self.live, pure=False) for h in hosts]
        for got in self.client.gather(futs):
            for side in seen:
                seen[side].update((int(p[0]), int(p[1])) for p in got[side])

        def want(p: Part) -> bool:
            return (rank is None or p[0] == rank) and (step is None or p[1] == step)

        for side, other in (("golden", "target"), ("target", "golden")):
            for p in sorted(seen[side] - seen[other]):
                if want(p):
                    self.run.failed[p] = f"rank {p[0]} step {p[1]}: only in the {side} dump (or its host's copy of the other is unreadable)"
        both = sorted(p for p in seen["golden"] & seen["target"] if want(p))
        found = {r for r, _ in seen["golden"] | seen["target"]}
        for r in sorted(set(self.placement) - found):
            if rank is None or r == rank:
                self.run.failed[(r, -1 if step is None else step)] = (
                    f"rank {r}: no live worker can read its files (placement: {self.placement[r]})")
        if not both and not self.run.failed:
            raise OpdiffError(f"{self.spec.golden}, {self.spec.target}: no (rank, step) part found in both dumps"
                              + (f" for rank {rank}" if rank is not None else "") + (f" step {step}" if step is not None else ""))
        return both

    def start(self, parts: list[Part]) -> None:
        """Reuse the plans a former run left in OUT; submit the others, one message per placement host."""
        todo: dict[str | None, list[_Task]] = {}
        for part in parts:
            done = _read_done(self.dir / f"{_name(part)}.json")
            if done is not None:
                self.run.reused.append(_name(part))
                self._planned(part, done)
            else:
                todo.setdefault(self.placement.get(part[0]), []).append(_Task(_name(part), part, plan_task))
        for tasks in todo.values():
            self._submit(tasks)

    def _planned(self, part: Part, plan: dict[str, Any]) -> None:
        """Keep a part's plan and its cheap rows; submit (or reuse) each of its shards."""
        self.plans[part] = plan
        self.rows[part] = {i: r for i, r in plan["rows"]}
        n = len(plan["shards"])
        todo = []
        for k, items in enumerate(plan["shards"]):
            name = _name(part, k, n)
            done = _read_done(self.dir / f"{name}.json")
            if done is not None:
                self.run.reused.append(name)
                self.rows[part].update({i: r for i, r in done["rows"]})
            else:
                todo.append(_Task(name, part, shard_task, (items, plan["fingerprint"])))
        self._submit(todo)

    def drain(self) -> None:
        """Keep every result as it lands (task file first), until no task is left."""
        for fut in self.queue:
            task = self.what.pop(fut.key)
            if task.part in self.run.failed:
                fut.release()
                continue
            try:  # a result lost with its worker is recomputed first (as_completed's own gathering can hang then)
                res: Any = fut.result()
            except (Exception, asyncio.CancelledError) as exc:  # the task raised, or its workers died
                res = exc
            fut.release()
            if isinstance(res, BaseException):
                if task.pin and type(res).__name__ == "NoValidWorkerError":  # its host lost its workers
                    task.pin = False
                    self._submit([task])
                else:
                    self.run.failed[task.part] = _failure(task.part, res)
                continue
            if "error" in res:  # the files could not be read there (DumpError, one line)
                self.run.failed[task.part] = f"rank {task.part[0]} step {task.part[1]}: could not be read: {res['error']}"
                continue
            write_atomic(self.dir / f"{task.name}.json", dumps(res))
            self.run.computed.append(task.name)
            self.run.where[task.name] = res["worker"]
            if task.fn is plan_task:
                self._planned(task.part, res)
            else:
                self.rows[task.part].update({i: r for i, r in res["rows"]})

    def assemble(self, thresholds: Thresholds, mapping: Mapping | None, workers: int) -> None:
        """One Comparison per part from its plan's layout and the rows of all its tasks."""
        for part, plan in sorted(self.plans.items()):
            if part in self.run.failed:
                continue
            rows, layout = self.rows[part], plan["pairs"]
            if len(rows) != len(layout):
                self.run.failed[part] = f"rank {part[0]} step {part[1]}: {len(layout) - len(rows)} pairs missing from the task results"
                continue
            grec, trec = records(plan)
            results: list[PairResult | None] = [unrow(layout[i], rows[i], grec, trec) for i in range(len(layout))]
            g, t = _stand_in(plan["golden"], part, grec), _stand_in(plan["target"], part, trec)
            self.run.comparisons[part] = Comparison(golden=g, target=t, mode=plan["mode"], results=finish(results, g, t),
                                                    thresholds=thresholds, mapping=mapping,
                                                    tensor_bytes=plan["tensor_bytes"], workers=workers)
            self.run.tensor_bytes += plan["tensor_bytes"]


def _failure(part: Part, exc: BaseException) -> str:
    """One line: why a part could not be compared (unreadable files, or workers that kept dying)."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if type(exc).__name__ == "KilledWorker":
        text = f"the workers running it died {RETRIES + 1} times"
    return f"rank {part[0]} step {part[1]}: could not be read: {text}"


def compare_distributed(golden: str | Path, target: str | Path, out: str | Path, *, scheduler: str | None = None,
                        client: Any = None, placement: dict[int, str] | str | Path | None = None,
                        mapping: Mapping | str | Path | None = None, mode: str = "auto",
                        thresholds: Thresholds | str | None = None, rank: int | None = None,
                        step: int | None = None, shard_bytes: int = DEFAULT_SHARD_BYTES,
                        allow_partial: bool = False) -> DistributedRun:
    """Compare every (rank, step) part of two dumps on Dask (docs/scale.md): `scheduler` is an address
    or ``local:N``, or pass a connected `client`. Task results go to `out`/.opdiff-tasks/."""
    t0 = time.perf_counter()
    if mode not in MODES:
        raise OpdiffError(f"--mode must be one of {', '.join(MODES)}, not {mode!r}")
    if isinstance(mapping, (str, Path)):
        mapping = load_mapping(mapping)
    if isinstance(placement, (str, Path)):
        placement = load_placement(placement)
    th = resolve_thresholds(thresholds)
    spec = Spec(str(golden), str(target), mode, th, mapping, int(shard_bytes), allow_partial)
    own = None
    if client is None:
        if scheduler is None:
            raise OpdiffError("compare_distributed: give a scheduler address, local:N, or a client")
        client, own = connect(scheduler)
    try:
        runner = _Runner(client, spec, Path(out), placement)
        runner.start(runner.parts(rank, step))
        runner.drain()
        workers = len(client.scheduler_info().get("workers", {}))
        runner.assemble(th, mapping, workers)
    finally:
        if own is not None:
            client.close()
            own.close()
    run = runner.run
    run.workers, run.elapsed = workers, time.perf_counter() - t0
    return run
