"""The one rule for output directories: nothing a user made is overwritten unless they say --force."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from .errors import OpdiffError


def claim_dir(path: Path, force: bool, *, noun: str = "output directory", hint: str = "use --force",
              error: type[OpdiffError] = OpdiffError) -> bool:
    """Refuse a file at `path`, or a non-empty directory unless `force`; True when it holds something.

    The caller decides what a forced run may replace (all of it, or only its own outputs).
    """
    if not path.exists():
        return False
    if not path.is_dir():
        raise error(f"{path}: exists and is not a directory")
    if not any(path.iterdir()):
        return False
    if not force:
        raise error(f"{path}: {noun} exists and is not empty ({hint})")
    return True


def check_writable(path: Path, error: type[OpdiffError] = OpdiffError) -> None:
    """Prove that files can be created in directory `path` (a real probe: permission bits lie for root,
    read-only mounts and full disks), before any long work starts."""
    import os
    import tempfile

    try:
        fd, probe = tempfile.mkstemp(dir=path, prefix=".opdiff-probe-")
    except OSError as exc:
        raise error(f"{path}: output directory is not writable: {exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(probe)


def check_replaceable(path: Path, error: type[OpdiffError] = OpdiffError, *, directory: bool = False) -> bool:
    """An output opdiff may replace: absent, a regular file or a symlink (the link itself is replaced,
    never what it points to), and with `directory` (an output that is a folder) a directory too; a
    special file, or a directory where a file goes, is the user's, not opdiff's. True when it is a directory."""
    import stat

    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return False
    if directory and stat.S_ISDIR(mode):
        return True
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        what = "folder or file" if directory else "file"
        raise error(f"{path}: exists and is not a {what} opdiff wrote (a directory or special file); not replaced")
    return False


def current_umask() -> int:
    """The process' umask, read without changing it where Linux tells it (/proc/self/status), else set
    and restored at once (os.umask is the only portable way to read it)."""
    import os

    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def write_atomic(path: Path, write: Callable[[Path], object], error: type[OpdiffError] = OpdiffError, *,
                 directory: bool = False) -> None:
    """Write `path` through `write(tmp)` on a new, uniquely named temporary file (or, with `directory`,
    folder) in the same directory, then rename it into place: readers never see half an output, a
    symlink at `path` is replaced, not followed, and the temporary is removed when writing fails."""
    import os
    import tempfile

    if directory:
        _write_dir_atomic(path, write, error)
        return
    check_replaceable(path, error)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes it 0600; an output gets what open() would give
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_dir_atomic(path: Path, write: Callable[[Path], object], error: type[OpdiffError]) -> None:
    """write_atomic for an output that is a folder: an earlier folder of that name (opdiff's own output,
    replaced under --force) is moved aside, the new one renamed in, the old one removed."""
    import os
    import tempfile

    was_dir = check_replaceable(path, error, directory=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp makes it 0700; an output gets what mkdir() would give
        write(tmp)
        if was_dir:
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.old."))
            os.replace(path, old / "x")  # a rename inside the output directory: never follows a link
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # a file or a symlink: the link itself, never what it points to
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def prepare_outputs(out: Path, force: bool, outputs: Iterable[str], *, hint: str = "use --force") -> None:
    """An empty output directory; with `force`, only the named outputs of an earlier run are replaced."""
    if claim_dir(out, force, hint=hint):
        for name in outputs:
            p = out / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
    out.mkdir(parents=True, exist_ok=True)
