"""The reader interface: what every dump source gives the pipeline, whatever format it was read from.

A `Dump` is one (rank, step) part of a run: its meta, its records in execution order, and each
record's data as a `TensorSpan` (bytes on disk, read zero-copy in chunks by compare) or as an
array already in memory. opdiff's own format is one implementation (readers/opdiff_format.py);
each foreign format is another module in store/readers/ (docs/architecture.md).
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..base.errors import DumpError
from ..base.record import Record
from ..base.safepath import regular_size
from .format import numpy_dtype
from .stats import content_hash

_NAME = attrgetter("name")


@dataclass(frozen=True)
class TensorSpan:
    """Where a record's elements lie: C-contiguous little-endian `dtype` elements at `offset` of `path`."""

    path: Path
    offset: int
    dtype: str  # an opdiff dtype name (store/format.py)
    shape: tuple[int, ...]
    hash: str | None = None  # the record's content hash, verified while reading

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * numpy_dtype(self.dtype).itemsize


@dataclass
class Dump(ABC):
    """One (rank, step) part of a run, in any format: records in execution order and their data."""

    format: ClassVar[str] = ""

    root: Path
    meta: dict[str, Any]
    rank: int
    step: int
    records: list[Record]
    parts: list[tuple[int, int]]
    problems: list[str] = field(default_factory=list)
    _by_name: dict[str, Record] = field(default_factory=dict, repr=False)
    # what the user's path addressed: (rank | None, step | None) and the path itself (store/readers/address.py)
    scope: tuple[int | None, int | None] = field(default=(None, None), repr=False)
    address: Path | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        """Records by name, built at C speed; a name that repeats is refused (one would shadow the other)."""
        self._by_name = dict(zip(map(_NAME, self.records), self.records))
        if len(self._by_name) != len(self.records):
            seen: set[str] = set()
            for r in self.records:
                if r.name in seen:  # the first name that repeats, as a part's reader meets it
                    raise DumpError(f"{self.root}: two records are named {r.name!r} (names must be unique within "
                                    "a part)")
                seen.add(r.name)

    # -- what a format provides ---------------------------------------------------------------
    @abstractmethod
    def span(self, rec: Record) -> TensorSpan | np.ndarray:
        """The record's data: where its bytes lie on disk, or an array in memory (DumpError if unreadable)."""

    def locate(self, rec: Record) -> tuple[Path, int] | None:
        """(file, offset) of the record's bytes when they lie raw there exactly as its own dtype and shape
        describe (checked as span checks it; DumpError as span raises), without building a TensorSpan: compare
        asks this for every record. None: this format answers by span() only."""
        return None

    def open_part(self, rank: int, step: int) -> Dump:
        """The same run's other (rank, step) part, as the format opens it (with_part checks the scope first)."""
        raise DumpError(f"{self.root}: a {self.format or 'this'} dump has one part (rank {self.rank} step {self.step}), "
                        f"not rank {rank} step {step}")

    def with_part(self, rank: int, step: int) -> Dump:
        """The same run's other (rank, step) part, only within what the user's path addressed: a step or rank
        folder never opens a part outside it."""
        if (rank, step) == (self.rank, self.step):
            return self
        if (rank, step) not in self.parts and self.scope == (None, None):
            return self.open_part(rank, step)  # the format says what it has
        if (rank, step) not in self.parts:
            have = ", ".join(f"rank {r} step {s}" for r, s in self.parts)
            raise DumpError(f"{self.where}: no part rank {rank} step {step} here (has {have})")
        return self.open_part(rank, step).narrow(self.scope, self.address)

    def narrow(self, scope: tuple[int | None, int | None], address: Path | None) -> Dump:
        """Keep only the parts the user's path addressed (a step folder: that step; a rank folder: that rank)."""
        self.scope, self.address = scope, address
        rank, step = scope
        self.parts = [p for p in self.parts if (rank is None or p[0] == rank) and (step is None or p[1] == step)]
        return self

    @property
    def where(self) -> Path:
        """The path the user named for this dump (a part of it, perhaps), else the run's root: what reports show."""
        return self.address if self.address is not None else self.root

    def check(self) -> None:  # noqa: B027 - optional hook, a no-op for formats without a whole-file check
        """A cheap check of the whole part before long work starts (DumpError); formats may add their own."""

    @property
    def complete(self) -> bool:
        """False when the run was cut off (the format says it did not finish, or a file ends mid-record)."""
        return bool(self.meta.get("complete") is True) and not self.problems

    @property
    def calls(self) -> list[dict[str, Any]]:
        """Call-description lines for replay; formats that keep none return []."""
        return []

    # -- shared by every format ---------------------------------------------------------------
    def tensor(self, rec: Record | str, *, copy: bool = False) -> np.ndarray:
        """The record's data as a numpy array (ml_dtypes for bf16/fp8), checked against the record."""
        if isinstance(rec, str):
            rec = self[rec]
        if rec.data is None:
            raise DumpError(f"{self.root}: record {rec.name!r} has no tensor data (captured in stats or hash mode)")
        src = self.span(rec)
        if isinstance(src, np.ndarray):
            arr = src
            if arr.size != rec.numel:
                raise DumpError(f"{self.root}: record {rec.name!r} holds {arr.size} elements, its record says {rec.numel}")
            arr = arr.reshape(rec.shape)
            return arr.copy() if copy else arr
        return _map_span(src, rec, copy)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> Record:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"{self.root}: no record named {name!r}") from None

    def get(self, name: str) -> Record | None:
        return self._by_name.get(name)

    def select(self, name: str | None = None, op: str | None = None, module: str | None = None) -> list[Record]:
        """Records whose name / op / module match the given regexes (search, not full match)."""
        pats = [(attr, _regex(p, attr)) for attr, p in (("name", name), ("op", op), ("module", module)) if p]
        return [r for r in self.records if all(p.search(getattr(r, attr)) for attr, p in pats)]


def _regex(pattern: str, what: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise DumpError(f"bad {what} pattern {pattern!r}: {exc}") from None


def _map_span(span: TensorSpan, rec: Record, copy: bool) -> np.ndarray:
    """Read a span (memory-mapped, read-only) after checking it against its record and the file's real
    size, and its content hash where the record has one."""
    if span.numel != rec.numel or span.dtype != rec.dtype:
        raise DumpError(f"{span.path}: tensor {rec.name!r} is {span.dtype}{list(span.shape)} in the file but "
                        f"{rec.dtype}{list(rec.shape)} in the record")
    np_dtype = numpy_dtype(span.dtype)
    size = regular_size(span.path, what="tensor file")
    if span.offset < 0 or span.offset + span.nbytes > size:
        raise DumpError(f"{span.path}: tensor {rec.name!r} is truncated or its offsets are wrong")
    if span.numel == 0:
        arr = np.zeros(rec.shape, dtype=np_dtype)
    else:
        arr = np.memmap(span.path, dtype=np_dtype, mode="r", offset=span.offset, shape=(span.numel,)).reshape(rec.shape)
    if span.hash and span.hash.startswith("xxh3:") and content_hash(arr, span.dtype, tuple(rec.shape)) != span.hash:
        raise DumpError(f"{span.path}: tensor {rec.name!r} does not match its recorded hash (corrupt shard)")
    return np.array(arr) if copy else arr
