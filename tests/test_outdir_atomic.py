"""base/outdir.write_atomic: each output written to a uniquely named temporary (file or folder) in the
output directory and renamed into place; the temporary removed when writing fails; a symlink at the
output's name replaced, never written through."""

from __future__ import annotations

import pytest

from opdiff.base.outdir import write_atomic


def _names(d):
    return sorted(p.name for p in d.iterdir())


def test_file_written_through_a_unique_temporary(tmp_path):
    seen = []

    def write(tmp):
        seen.append(tmp)
        tmp.write_text("x")

    for _ in range(3):  # the same output again and again: a new temporary name each time, none left behind
        write_atomic(tmp_path / "report.json", write)
    assert len({p.name for p in seen}) == 3 and all(p.parent == tmp_path for p in seen)
    assert _names(tmp_path) == ["report.json"]


def test_failed_write_leaves_nothing_behind(tmp_path):
    (tmp_path / "report.json").write_text("old")

    def fail(tmp):
        (tmp / "x.json" if tmp.is_dir() else tmp).write_text("half")
        raise RuntimeError("disk full")

    for directory in (False, True):
        with pytest.raises(RuntimeError):
            write_atomic(tmp_path / ("overlays" if directory else "report.json"), fail, directory=directory)
    assert _names(tmp_path) == ["report.json"] and (tmp_path / "report.json").read_text() == "old"


def test_folder_output_replaced_whole(tmp_path):
    out = tmp_path / "model-explorer"

    def write(files):
        def w(tmp):
            tmp.mkdir(parents=True, exist_ok=True)  # a writer that makes its folder itself
            for f in files:
                (tmp / f).write_text(f)
        return w

    write_atomic(out, write(["a.json", "b.json"]), directory=True)
    write_atomic(out, write(["c.json"]), directory=True)  # --force: an earlier run's folder is replaced
    assert _names(out) == ["c.json"] and _names(tmp_path) == ["model-explorer"]


def test_symlink_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    d = tmp_path / "out"
    d.mkdir()
    (d / "report.json").symlink_to(victim)
    (d / "model-explorer").symlink_to(tmp_path)
    write_atomic(d / "report.json", lambda tmp: tmp.write_text("report"))
    write_atomic(d / "model-explorer", lambda tmp: (tmp / "x.json").write_text("{}"), directory=True)
    assert victim.read_text() == "mine" and not (d / "report.json").is_symlink()
    assert not (d / "model-explorer").is_symlink() and _names(d / "model-explorer") == ["x.json"]
    assert _names(tmp_path) == ["out", "victim.txt"]


@pytest.fixture
def umask_027():
    import os

    old = os.umask(0o027)
    yield
    os.umask(old)


def test_outputs_get_the_umasks_permissions(tmp_path, umask_027):
    """mkstemp/mkdtemp make 0600/0700 temporaries; the output ends up as open()/mkdir() would make it."""
    write_atomic(tmp_path / "report.json", lambda tmp: tmp.write_text("x"))
    write_atomic(tmp_path / "overlays", lambda tmp: (tmp / "a.json").write_text("{}"), directory=True)
    assert (tmp_path / "report.json").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "overlays").stat().st_mode & 0o777 == 0o750
    assert (tmp_path / "overlays" / "a.json").stat().st_mode & 0o777 == 0o640


def test_cli_reports_readable_under_a_group_umask(tmp_path, opdiff_cli):
    """`opdiff compare` and `diagnose --html/--out` in a process whose umask is 002 (a shared CI folder):
    every report is -rw-rw-r--, the explorer folder drwxrwxr-x."""
    import numpy as np

    from opdiff.testing.synthetic import Tensor, write_dump

    rng = np.random.default_rng(0)
    g = [Tensor(f"h.{i}", "aten.mul.Tensor", "output", "0", rng.standard_normal(16).astype(np.float32)) for i in range(3)]
    write_dump(tmp_path / "golden", g)
    write_dump(tmp_path / "target", [Tensor(t.module, t.op, t.role, t.pos, t.array * (1.01 if i == 1 else 1))
                                     for i, t in enumerate(g)])

    def opdiff(*args):
        return opdiff_cli(*args, umask=0o002)

    out = tmp_path / "cmp"
    p = opdiff("compare", tmp_path / "golden", tmp_path / "target", "-o", out, "--format", "csv,xlsx,json,html,model-explorer",
               "--no-progress")
    assert p.returncode == 1, p.stderr
    p = opdiff("diagnose", tmp_path / "golden", tmp_path / "target", "--no-replay", "--html", tmp_path / "d.html",
               "--out", tmp_path / "d.json")
    assert p.returncode == 1, p.stderr
    files = [f for f in [*out.iterdir(), tmp_path / "d.html", tmp_path / "d.json"] if f.is_file()]
    assert len(files) >= 6
    assert {f.name: oct(f.stat().st_mode & 0o777) for f in files} == {f.name: "0o664" for f in files}
    folders = [d for d in out.iterdir() if d.is_dir()]
    assert folders and all(d.stat().st_mode & 0o777 == 0o775 for d in folders)
