"""Property-based: mutate real captured dumps every way a file can be damaged, and run every command.

Each mutation (meta.json fields, index fields and lines, shard headers, offsets and bytes, paths, file
kinds) is applied to a copy of a real capture; then info, ls, compare, diagnose, replay, the shell's
commands, opdiff.load and Dump.tensor run on it. Each must answer: exit 0 or 1 with a correct answer
(a pass only when the data compared is bitwise what was captured, checked with the safetensors
file layout, not with opdiff's reader), otherwise exit 2 with one line; never a traceback, never a hang, nothing
written outside the output directory, no pickled code run. OPDIFF_FUZZ_EXAMPLES=N runs more.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import stat
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import opdiff
from opdiff.base.errors import OpdiffError
from trust_helpers import capture_tiny, copy_dump, run_cli, snapshot, time_limit

EXAMPLES = int(os.environ.get("OPDIFF_FUZZ_EXAMPLES", "20"))
# no shrinking: a failure is reported as generated (shrinking re-runs every command many times)
SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
PART = "rank0/step0"
FOUND: Counter = Counter()  # mutation kind -> how each ran out (exit codes), reported at the end


@pytest.fixture(scope="session")
def dumps(tmp_path_factory):
    base = tmp_path_factory.mktemp("trust")
    return {"tensor": capture_tiny(base / "tensor"), "stats": capture_tiny(base / "stats", mode="stats")}


# -- JSON values a hostile file could hold ---------------------------------------------------------
TEXTS = st.sampled_from(["", "x", "[bold red]boom[/]", "\x1b[31mred\x1b[0m", "a\x00b", "../../etc/passwd", "/etc/passwd",
                         "float32", "bfloat16", "float128", "F32", "true", "false", "NaN", "é" * 3, "a" * 5000])
NUMBERS = st.sampled_from([0, 1, -1, 2, 7, 2**31, 2**63, -(2**63), 10**30, 0.5, -0.0, 1e308, float("inf"), float("nan")])
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXTS)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=4), st.dictionaries(TEXTS, SCALARS, max_size=3),
                   st.lists(st.integers(-3, 40), max_size=5), st.just(None))
DELETE = object()


def _json_line(obj) -> str:
    return json.dumps(obj, allow_nan=True)


def _index(root: Path) -> Path:
    return root / PART / "index.jsonl"


def _shard(root: Path) -> Path:
    return root / PART / "shards" / "000000.safetensors"


def _regular(path: Path) -> Path:
    """`path` when it is (or links to) a regular file; the oracle must not block on a FIFO either."""
    if not stat.S_ISREG(path.stat().st_mode):
        raise OSError(f"{path}: not a regular file")
    return path


def _tensor_lines(root: Path, partial: bool = False) -> list[tuple[int, dict]]:
    text = _regular(_index(root)).read_text()
    lines = text.splitlines()
    if partial and not text.endswith("\n"):
        lines = lines[:-1]  # a cut-off last line: what --allow-partial reads up to
    objs = [(i, json.loads(x)) for i, x in enumerate(lines) if x.strip()]
    return [(i, o) for i, o in objs if o.get("kind", "tensor") == "tensor"]


def _read_safetensors(path: Path) -> dict[str, tuple[str, list[int], bytes]]:
    """key -> (dtype code, shape, bytes), straight from the file layout (the oracle shares no code with opdiff)."""
    raw = _regular(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for k, v in header.items():
        if k != "__metadata__":
            a, b = v["data_offsets"]
            assert 0 <= a <= b and 8 + n + b <= len(raw)
            out[k] = (v["dtype"], list(v["shape"]), raw[8 + n + a:8 + n + b])
    return out


def _set(root: Path, lineno: int, obj) -> None:
    lines = _index(root).read_text().splitlines()
    lines[lineno] = _json_line(obj) if not isinstance(obj, str) else obj
    _index(root).write_text("\n".join(lines) + "\n")


# -- the oracle: what a pass must mean, read without opdiff ------------------------------------------
def _independent(root: Path, partial: bool = False) -> list[dict] | None:
    """Each tensor record of a dump as (name, dtype, shape, bytes or stats), read with json and the
    safetensors library; None when that cannot be done (then no command may pass)."""
    try:
        shards: dict[str, dict] = {}
        out = []
        for _, r in _tensor_lines(root, partial):
            item = {"name": r["name"], "dtype": r["dtype"], "shape": list(r["shape"]), "stats": r.get("stats")}
            if r.get("data"):
                f = r["data"]["file"]
                path = (root / PART / f).resolve()
                if root.resolve() not in path.parents:
                    return None
                if f not in shards:
                    shards[f] = _read_safetensors(path)
                code, shape, data = shards[f][r["data"]["key"]]
                item["bytes"] = data
                item["dtype_on_disk"] = (code, shape)
            out.append(item)
        return out
    except Exception:
        return None


def intact(original: Path, mutated: Path, mode: str, partial: bool = False) -> bool:
    """True when every record still holds what was captured (by name, else by line position): a pass is
    then right. `partial`: a cut-off dump may hold only the first records (--allow-partial compares those)."""
    a, b = _independent(original), _independent(mutated, partial)
    if a is None or b is None or len(b) > len(a) or (len(a) != len(b) and not partial):
        return False
    if partial:
        a = a[:len(b)]
    names_a, names_b = [x["name"] for x in a], [x["name"] for x in b]
    if set(names_a) == set(names_b) and len(set(names_b)) == len(names_b):  # pair by name where names allow
        by_name = {x["name"]: x for x in b}
        b = [by_name[n] for n in names_a]
    for x, y in zip(a, b):
        if x["dtype"] != y["dtype"] or x["shape"] != y["shape"]:
            return False
        if mode == "tensor" and "bytes" in y and (x.get("bytes") != y["bytes"] or x["dtype_on_disk"] != y["dtype_on_disk"]):
            return False
        if (mode == "stats" or "bytes" not in y) and json.dumps(x["stats"]) != json.dumps(y["stats"]):
            return False
    return True


# -- running every command on a mutation ----------------------------------------------------------
def _check_run(kind: str, cmd: str, r, ok_pass: bool) -> None:
    """One command's answer: 0/1 (0 only when `ok_pass`), or 2 with one line; no traceback."""
    FOUND[f"{kind}:{cmd}:exit{r.code}"] += 1
    assert not r.tb, f"{kind}: `{cmd}` raised:\n{r.tb}"
    assert "Traceback" not in r.text, f"{kind}: `{cmd}` printed a traceback:\n{r.text[-3000:]}"
    assert r.code in (0, 1, 2), f"{kind}: `{cmd}` exit {r.code}:\n{r.text[-2000:]}"
    if r.code == 2:
        lines = [x for x in r.err.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("opdiff: error: "), f"{kind}: `{cmd}` exit 2 said:\n{r.err}"
    if r.code == 0 and cmd in ("compare", "diagnose"):
        assert ok_pass, f"{kind}: `{cmd}` passed a dump whose data changed:\n{r.text[-3000:]}"


def run_everything(kind: str, pristine: Path, mutated: Path, work: Path, mode: str) -> None:
    ok_pass = intact(pristine, mutated, mode)
    ok_partial = intact(pristine, mutated, mode, partial=True)
    marker = work / "PICKLE_RAN"
    before = snapshot(work)
    out = work / "out"
    runs = {
        "info": ("info", mutated),
        "ls": ("ls", mutated),
        "ls-regex": ("ls", mutated, "--name", "(["),
        "compare": ("compare", pristine, mutated, "-o", out, "--format", "json,csv,html", "--no-progress"),
        "compare-partial": ("compare", pristine, mutated, "-o", out, "--force", "--format", "json",
                            "--no-progress", "--allow-partial"),
        "diagnose": ("diagnose", pristine, mutated, "--no-replay", "--allow-partial"),
        "replay": ("replay", pristine, mutated, "transformer.h.0.mlp.c_fc/Conv1D#0", "--allow-partial"),
        "shell": ("shell", pristine, mutated, "-c", "ls", "-c", "ls --name ([", "-c", "ni #3", "-c", "pt -t #3",
                  "-c", "cmp #3", "-c", "compare", "-c", "fails", "-c", "diag"),
    }
    for cmd, args in runs.items():
        partial = "--allow-partial" in args
        _check_run(kind, cmd.split("-")[0] if cmd != "ls-regex" else cmd, run_cli(*args),
                   ok_partial if partial else ok_pass)
    with time_limit(60):
        try:
            d = opdiff.load(mutated)
            for rec in d.records:
                if rec.data is not None:
                    try:
                        d.tensor(rec, copy=True)
                        FOUND[f"{kind}:tensor:ok"] += 1
                    except OpdiffError:
                        FOUND[f"{kind}:tensor:refused"] += 1
            FOUND[f"{kind}:load:ok"] += 1
        except OpdiffError:
            FOUND[f"{kind}:load:refused"] += 1
    after = snapshot(work)
    written = {p for p in set(after) - set(before) if not p.startswith(str(out))}
    changed = {p for p in set(before) & set(after) if before[p] != after[p] and not p.startswith(str(out))}
    assert not written and not changed, f"{kind}: wrote outside the output directory: {sorted(written | changed)[:5]}"
    assert not marker.exists(), f"{kind}: pickled code ran"
    FOUND[f"{kind}:mutations"] += 1
    FOUND[f"{kind}:pass-allowed" if ok_pass else f"{kind}:data-changed"] += 1


class Work:
    """A scratch directory per example: a pristine copy, a mutated copy, and the output directory."""

    def __init__(self, src: Path):
        self.dir = Path(tempfile.mkdtemp(prefix="opdiff-fuzz-"))
        self.pristine = copy_dump(src, self.dir / "pristine")
        self.mutated = copy_dump(src, self.dir / "mutated")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.dir.rglob("*"):
            if p.is_fifo():
                p.unlink()
        shutil.rmtree(self.dir, ignore_errors=True)


# -- the mutations ------------------------------------------------------------------------------------
META_KEYS = ["format", "format_version", "complete", "model", "framework", "level", "mode", "parts", "rank",
             "world_size", "records", "created", "host", "default_dtype", "device", "nonsense"]


@SETTINGS
@given(mode=st.sampled_from(["tensor", "stats"]), key=st.sampled_from(META_KEYS),
       value=st.one_of(VALUES, st.just(DELETE), st.just("false")))
def test_meta_fields(dumps, mode, key, value):
    with Work(dumps[mode]) as w:
        meta_path = w.mutated / "meta.json"
        meta = json.loads(meta_path.read_text())
        if value is DELETE:
            meta.pop(key, None)
        else:
            meta[key] = value
        meta_path.write_text(_json_line(meta))
        run_everything(f"meta.{key}", w.pristine, w.mutated, w.dir, mode)


RECORD_FIELDS = ["index", "name", "node", "module", "op", "level", "call", "direction", "role", "pos", "dtype", "shape",
                 "stats", "hash", "source", "data", "src", "extra", "kind", "stats.numel", "stats.min", "stats.nan",
                 "data.file", "data.key", "shape.0"]


@SETTINGS
@given(mode=st.sampled_from(["tensor", "stats"]), pick=st.integers(0, 10_000), field=st.sampled_from(RECORD_FIELDS),
       value=st.one_of(VALUES, st.just(DELETE)), other=st.integers(0, 10_000))
def test_record_fields(dumps, mode, pick, field, value, other):
    with Work(dumps[mode]) as w:
        recs = _tensor_lines(w.mutated)
        lineno, rec = recs[pick % len(recs)]
        if value == "x" and field in ("name", "dtype", "shape", "data.key"):  # take another record's value
            value = recs[other % len(recs)][1].get(field.split(".")[0])
            value = value if field != "data.key" or not isinstance(value, dict) else value.get("key")
        head, _, sub = field.partition(".")
        target = rec
        if sub:
            target = rec.get(head)
            if not isinstance(target, (dict, list)):
                return
            if isinstance(target, list):
                sub = int(sub) % max(1, len(target)) if target else 0
                if not target:
                    return
        key = sub if sub != "" else head
        if value is DELETE:
            if isinstance(target, dict):
                target.pop(key, None)
            else:
                target.pop(key)
        else:
            target[key] = value
        _set(w.mutated, lineno, rec)
        run_everything(f"record.{field}", w.pristine, w.mutated, w.dir, mode)


LINE_OPS = ["delete", "duplicate", "swap", "truncate", "garbage", "blank", "nested", "not-object", "call-garbage"]


@SETTINGS
@given(mode=st.sampled_from(["tensor", "stats"]), op=st.sampled_from(LINE_OPS), pick=st.integers(0, 10_000),
       cut=st.integers(1, 400))
def test_index_lines(dumps, mode, op, pick, cut):
    with Work(dumps[mode]) as w:
        idx = _index(w.mutated)
        lines = idx.read_text().splitlines()
        i = pick % len(lines)
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = (i + 1) % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "garbage":
            lines.insert(i, "{not json")
        elif op == "blank":
            lines.insert(i, "   ")
        elif op == "nested":
            lines.insert(i, "[" * 100_000 + "]" * 100_000)
        elif op == "not-object":
            lines.insert(i, "[1, 2, 3]")
        elif op == "call-garbage":
            lines.insert(i, '{"kind": "call", "node": 5, "args": "x", "kwargs": [1]}')
        text = "\n".join(lines) + "\n"
        if op == "truncate":
            text = text[: max(1, len(text) - cut)]
        idx.write_text(text)
        run_everything(f"lines.{op}", w.pristine, w.mutated, w.dir, mode)


SHARD_OPS = ["byte", "header-len", "header-byte", "truncate", "append", "offsets", "dtype", "shape", "metadata"]


@SETTINGS
@given(op=st.sampled_from(SHARD_OPS), pos=st.integers(0, 1 << 30), byte=st.integers(0, 255),
       value=st.one_of(VALUES, st.lists(st.integers(-100, 1 << 20), min_size=2, max_size=2)))
def test_shard(dumps, op, pos, byte, value):
    with Work(dumps["tensor"]) as w:
        shard = _shard(w.mutated)
        raw = bytearray(shard.read_bytes())
        n = int.from_bytes(raw[:8], "little")
        if op == "byte":
            raw[pos % len(raw)] = byte
        elif op == "header-len":
            raw[:8] = (pos if pos % 3 else (1 << 64) - 1 - pos % 100).to_bytes(8, "little", signed=False)[:8] \
                if pos < (1 << 64) else raw[:8]
        elif op == "header-byte":
            raw[8 + pos % n] = byte
        elif op == "truncate":
            del raw[pos % len(raw):]
        elif op == "append":
            raw += bytes([byte]) * (1 + pos % 64)
        else:
            header = json.loads(raw[8:8 + n])
            key = sorted(k for k in header if k != "__metadata__")[pos % (len(header) - 1)]
            field = {"offsets": "data_offsets", "dtype": "dtype", "shape": "shape"}.get(op)
            if op == "metadata":
                header["__metadata__"] = value
            else:
                header[key][field] = value
            body = json.dumps(header).encode()
            body += b" " * ((8 - len(body) % 8) % 8)
            raw = bytearray(len(body).to_bytes(8, "little")) + body + raw[8 + n:]
        shard.write_bytes(bytes(raw))
        run_everything(f"shard.{op}", w.pristine, w.mutated, w.dir, "tensor")


KINDS = ["missing", "directory", "fifo", "symlink-outside", "symlink-inside", "symlink-loop", "empty", "pickle",
         "unreadable"]
FILES = ["meta.json", f"{PART}/index.jsonl", f"{PART}/shards/000000.safetensors", f"{PART}/shards", PART]


@SETTINGS
@given(mode=st.sampled_from(["tensor", "stats"]), which=st.sampled_from(FILES), kind=st.sampled_from(KINDS))
def test_file_kinds(dumps, mode, which, kind):
    with Work(dumps[mode]) as w:
        target = w.mutated / which
        if not target.exists() and kind != "missing":
            return
        outside = w.dir / "outside_copy"
        if target.is_dir():
            shutil.copytree(target, outside)
        elif target.exists():
            shutil.copy(target, outside)
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        if kind == "directory":
            target.mkdir()
        elif kind == "fifo":
            os.mkfifo(target)
        elif kind == "symlink-outside" and outside.exists():
            target.symlink_to(outside)
        elif kind == "symlink-inside" and outside.exists():
            inside = w.mutated / f".{target.name}.real"
            os.rename(outside, inside)
            target.symlink_to(inside.relative_to(target.parent, walk_up=True) if hasattr(Path, "walk_up") else inside)
        elif kind == "symlink-loop":
            target.symlink_to(target)
        elif kind == "empty":
            target.write_bytes(b"")
        elif kind == "pickle":
            target.write_bytes(pickle.dumps(_Marker(str(w.dir / "PICKLE_RAN"))))
        elif kind == "unreadable" and outside.is_file():
            shutil.copy(outside, target)
            target.chmod(0)
        run_everything(f"kind.{which.split('/')[-1]}.{kind}", w.pristine, w.mutated, w.dir, mode)


class _Marker:
    """Unpickling this creates a file: a dump that holds it must never be unpickled."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


DATA_PATHS = ["../../../../etc/passwd", "/etc/passwd", "shards/../../../meta.json", "shards/../shards/000000.safetensors",
              "shards/link.safetensors", "shards", "", "C:\\x", "shards/000000.safetensors\x00"]


@SETTINGS
@given(path=st.sampled_from(DATA_PATHS), pick=st.integers(0, 10_000))
def test_data_paths(dumps, path, pick):
    with Work(dumps["tensor"]) as w:
        (w.mutated / PART / "shards" / "link.safetensors").symlink_to(_shard(w.pristine))  # resolves outside
        recs = [(i, r) for i, r in _tensor_lines(w.mutated) if r.get("data")]
        lineno, rec = recs[pick % len(recs)]
        rec["data"]["file"] = path
        _set(w.mutated, lineno, rec)
        run_everything(f"path.{DATA_PATHS.index(path)}", w.pristine, w.mutated, w.dir, "tensor")


def test_zz_report(capsys):
    """The counts of what ran and how it ended (printed with -s; the report quotes them)."""
    mutations = sum(v for k, v in FOUND.items() if k.endswith(":mutations"))
    if not mutations and os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("the fuzz tests ran in another xdist worker: their counts are that worker's")
    with capsys.disabled():
        print(f"\nfuzz: {mutations} mutations, {sum(v for k, v in FOUND.items() if ':exit' in k)} command runs")
        summary: Counter = Counter()
        for k, v in FOUND.items():
            parts = k.split(":")
            if len(parts) == 3:
                summary[f"{parts[1]}:{parts[2]}"] += v
        for k in sorted(summary):
            print(f"  {k}: {summary[k]}")
    assert mutations > 0
