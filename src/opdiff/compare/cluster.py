"""The Dask side of distributed compare: connect to a scheduler (or start a local cluster), read a
placement file (which host holds which rank's files) and tell which placement hosts have a live
worker. Dask distributed is imported only here and in the tasks' worker lookup (`opdiff[dask]`).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..base.errors import OpdiffError

# A local cluster's settings (docs/scale.md says how to give a remote scheduler and its workers the same):
LOCAL_CONFIG = {
    "distributed.scheduler.no-workers-timeout": "20s",  # a task pinned to a host without live workers fails,
    # then runs elsewhere
    "distributed.worker.profile.enabled": False,  # the 10 ms stack sampler costs a loaded core more than it tells
}
_LIVE_TTL = 1.0  # seconds a view of the live workers is reused


def load_placement(path: str | Path) -> dict[int, str]:
    """rank -> host (or worker address/name) from a YAML/JSON file ``ranks: {0: node-a, "2-3": node-b}``."""
    import yaml

    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise OpdiffError(f"{p}: cannot read placement file: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise OpdiffError(f"{p}: not YAML/JSON: {str(exc).splitlines()[0]}") from None
    ranks = doc.get("ranks") if isinstance(doc, dict) else None
    if not isinstance(ranks, dict) or not ranks:
        raise OpdiffError(f"{p}: placement file needs a `ranks:` mapping of rank (or \"lo-hi\") to host")
    out: dict[int, str] = {}
    for key, host in ranks.items():
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(key))
        if not m or not isinstance(host, str) or not host:
            raise OpdiffError(f"{p}: bad placement entry {key!r}: {host!r} (expected rank or \"lo-hi\": host)")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        out.update({r: host for r in range(lo, hi + 1)})
    return out


@contextmanager
def _environ_kept() -> Iterator[None]:
    """Run the block, then put this process's environment back: a LocalCluster's nannies set their workers'
    variables (OMP_NUM_THREADS=1, MKL_NUM_THREADS=1 ...) here before spawning them, which would leave the
    caller's later subprocesses, and a torch imported later, on one thread."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for key in [k for k in os.environ if k not in saved]:
            del os.environ[key]
        os.environ.update({k: v for k, v in saved.items() if os.environ.get(k) != v})


def connect(scheduler: str) -> tuple[Any, Any]:
    """(Client, LocalCluster or None): `local:N` starts N worker processes here, else an address."""
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        raise OpdiffError("--scheduler needs Dask distributed: pip install 'opdiff[dask]'") from None
    m = re.fullmatch(r"local:(\d+)", scheduler)
    if m:
        n = int(m.group(1))
        if n < 1:
            raise OpdiffError(f"--scheduler {scheduler}: needs at least one worker")
        with dask.config.set(LOCAL_CONFIG), _environ_kept():
            cluster = LocalCluster(n_workers=n, processes=True, threads_per_worker=1,  # type: ignore[no-untyped-call]
                                   dashboard_address=None)
        return Client(cluster), cluster  # type: ignore[no-untyped-call]
    if scheduler.startswith("local"):
        raise OpdiffError(f"--scheduler {scheduler}: expected local:N (N worker processes) or a scheduler address")
    try:
        return Client(scheduler, timeout="20s"), None  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError) as exc:
        raise OpdiffError(f"--scheduler {scheduler}: cannot reach the Dask scheduler ({exc})") from None


class LiveHosts:
    """Which names (worker address, worker name, host) have a live worker now, refreshed at most once a second."""

    def __init__(self, client: Any):
        self.client = client
        self.names: set[str] = set()
        self.count = 0
        self.at = -_LIVE_TTL

    def __contains__(self, host: object) -> bool:
        if time.monotonic() - self.at >= _LIVE_TTL:
            self.refresh()
        return host in self.names

    def refresh(self) -> None:
        from distributed.comm.addressing import get_address_host

        workers = self.client.scheduler_info(n_workers=-1).get("workers", {})
        names: set[str] = set()
        for addr, info in workers.items():
            names |= {addr, str(info.get("name")), str(info.get("host")), get_address_host(addr)}
        self.names, self.count, self.at = names, len(workers), time.monotonic()
