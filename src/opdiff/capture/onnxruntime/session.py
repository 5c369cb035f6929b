"""ONNX Runtime sessions as capture builds them: options, providers, and which optimizers fired.

ORT logs `GraphTransformer <Name> modified: 1` at verbose severity for every graph transformer
that changed the graph; the log goes to the process's stderr, so it is read from there (file
descriptor 2 is pointed at a temporary file while the session is built).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import onnxruntime as ort

from ...base.errors import OpdiffError

OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
DISABLE_KEY = "optimization.disable_specified_optimizers"
_FIRED_RE = re.compile(r"GraphTransformer (\S+) modified: 1\b")


@dataclass
class Settings:
    """What decides the graph a session runs: optimization level, optimizers switched off, config."""

    opt_level: str = "all"
    disabled: tuple[str, ...] = ()
    config: dict[str, str] = field(default_factory=dict)
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    threads: int = 0  # intra-op threads; 0 = ORT's default

    def __post_init__(self) -> None:
        if self.opt_level not in OPT_LEVELS:
            raise OpdiffError(f"--opt-level must be one of {', '.join(OPT_LEVELS)}, not {self.opt_level!r}")

    def to_json(self) -> dict:
        return {"opt_level": self.opt_level, "disabled_optimizers": list(self.disabled), "session_config": dict(self.config),
                "providers": list(self.providers), "intra_op_threads": self.threads}


def parse_config(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """["key=value", ...] -> {key: value}; a malformed item is a one-line OpdiffError."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise OpdiffError(f"--session-config: expected KEY=VALUE, not {item!r}")
        out[key.strip()] = value.strip()
    return out


def options(settings: Settings, *, level: str | None = None, verbose: bool = False,
            save_to: str | None = None) -> ort.SessionOptions:
    """SessionOptions for `settings` (level overrides the optimization level)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = OPT_LEVELS[level or settings.opt_level]
    if settings.threads:
        so.intra_op_num_threads = settings.threads
    for key, value in settings.config.items():
        if key != DISABLE_KEY:
            so.add_session_config_entry(key, value)
    if save_to:
        so.optimized_model_filepath = save_to
    if verbose:
        so.log_severity_level = 0
        so.log_verbosity_level = 1
    else:
        so.log_severity_level = 3
    return so


def disabled_optimizers(settings: Settings) -> list[str]:
    """Optimizers to switch off: the settings' names and those of the session config entry."""
    names = list(settings.disabled)
    names += [n.strip() for n in settings.config.get(DISABLE_KEY, "").split(",") if n.strip()]
    return list(dict.fromkeys(names))


@contextmanager
def _stderr_to(path: str) -> Iterator[None]:
    """Point file descriptor 2 at `path` for the duration (ORT's C++ logger writes there)."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def build(model: bytes | str, settings: Settings, *, level: str | None = None, save_to: str | None = None,
          log: bool = False) -> tuple[ort.InferenceSession, list[str]]:
    """An InferenceSession, and (with `log`) the graph transformers that modified the graph, in order."""
    so = options(settings, level=level, verbose=log, save_to=save_to)
    kwargs = {"providers": list(settings.providers)}
    disabled = disabled_optimizers(settings)
    if disabled and (level or settings.opt_level) != "disable":
        kwargs["disabled_optimizers"] = disabled
    if not log:
        return _session(model, so, kwargs), []
    fd, tmp = tempfile.mkstemp(prefix="opdiff-ort-", suffix=".log")
    os.close(fd)
    try:
        with _stderr_to(tmp):
            sess = _session(model, so, kwargs)
        with open(tmp, encoding="utf-8", errors="replace") as f:
            fired = list(dict.fromkeys(m.group(1) for m in _FIRED_RE.finditer(f.read())))
    finally:
        os.unlink(tmp)
    return sess, fired


def _session(model: bytes | str, so: ort.SessionOptions, kwargs: dict) -> ort.InferenceSession:
    try:
        return ort.InferenceSession(model, so, **kwargs)
    except Exception as exc:  # ORT raises its own exception types for a bad model or option
        where = model if isinstance(model, str) else "model"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OpdiffError(f"{where}: onnxruntime cannot build a session: {first}") from None
