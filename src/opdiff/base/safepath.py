"""Paths a dump names, kept inside the dump, and files opened only when they are regular files.

The rule (docs/reliability.md): a path read from a dump is relative, has no `..`, and resolves
(symlinks followed) inside the dump's root; anything else is refused. Only regular files are
opened, without blocking (a FIFO never hangs a read), and reads are bounded by the file's real size.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from .errors import DumpError


def inside(root: Path, rel: object, *, what: str = "path", within: Path | None = None) -> Path:
    """`root / rel` when `rel` is a relative path without `..` that, resolved, stays inside `within`
    (default `root`: e.g. a part's shard path must stay inside the whole dump); else DumpError."""
    if not isinstance(rel, str) or not rel or "\x00" in rel:
        raise DumpError(f"{root}: {what} {rel!r} is not a file name")
    p = PurePosixPath(rel)
    if p.is_absolute() or "\\" in rel or any(part == ".." for part in p.parts):
        raise DumpError(f"{root}: {what} {rel!r} leaves the dump directory (refused)")
    full = root / p
    try:
        resolved = full.resolve()
        base = (within or root).resolve()
    except (OSError, RuntimeError) as exc:  # symlink loops
        raise DumpError(f"{full}: cannot resolve {what}: {exc}") from None
    if resolved != base and base not in resolved.parents:
        raise DumpError(f"{full}: {what} resolves to {resolved}, outside the dump directory {base} (refused)")
    return full


def regular_size(path: Path, *, what: str = "file") -> int:
    """The size of `path` if it is a regular file (symlinks followed); DumpError otherwise."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise DumpError(f"{path}: {what} is missing") from None
    except OSError as exc:
        raise DumpError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise DumpError(f"{path}: {what} is {kind}")
    return st.st_size


def open_regular(path: Path, *, what: str = "file") -> tuple[int, int]:
    """(fd, size) of a regular file opened read-only without blocking; DumpError for anything else.

    The check is made on the opened descriptor, so a file swapped for a FIFO after a stat() is
    still refused, and O_NONBLOCK keeps the open itself from waiting for a writer."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise DumpError(f"{path}: {what} is missing") from None
    except OSError as exc:
        raise DumpError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise DumpError(f"{path}: {what} is {kind}")
    return fd, st.st_size


def read_regular(path: Path, *, what: str = "file", limit: int | None = None) -> bytes:
    """The bytes of a regular file (at most `limit`, else DumpError), read without blocking."""
    fd, size = open_regular(path, what=what)
    try:
        if limit is not None and size > limit:
            raise DumpError(f"{path}: {what} is {size} bytes, more than the {limit} this reader accepts")
        chunks = []
        left = size
        while left > 0:
            b = os.read(fd, min(left, 1 << 24))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)
    except OSError as exc:
        raise DumpError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
