"""What many tests repeat: running the `opdiff` command and reading its JSON strictly.

- `opdiff_cli` (fixture): run the CLI as `python -m opdiff ARGS` on this checkout's code (its src/ first on
  PYTHONPATH, whatever the working directory), capture its output, never raise on a non-zero exit.
- `strict_json` (fixture): parse JSON text or a file, refusing NaN/Infinity tokens (opdiff writes strict JSON).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def run_opdiff(*args: object, timeout: float = 300, stdin: str | None = None, env: dict[str, str] | None = None,
               umask: int | None = None) -> subprocess.CompletedProcess[str]:
    """`opdiff ARGS` in a subprocess with this interpreter; `env` adds to (not replaces) the environment."""
    path = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    full = {**os.environ, "PYTHONPATH": path, **(env or {})}
    pre = (lambda: os.umask(umask)) if umask is not None else None
    return subprocess.run([sys.executable, "-m", "opdiff", *map(str, args)], capture_output=True, text=True,
                          input=stdin, timeout=timeout, env=full, preexec_fn=pre)


def read_strict_json(source: str | os.PathLike[str]) -> Any:
    """JSON from text or a file; a NaN, Infinity or -Infinity token fails the test."""
    text = Path(source).read_text(encoding="utf-8") if isinstance(source, os.PathLike) else source

    def bad(token: str) -> None:
        raise AssertionError(f"non-strict JSON token {token} in {source if isinstance(source, os.PathLike) else 'text'}")
    return json.loads(text, parse_constant=bad)


# Modules of the slow tier: each builds and runs real models (torch, TensorFlow, ONNX Runtime, torch.compile),
# starts another tool's venv, a Dask cluster or a browser, or builds a wheel. `make test-fast` (pytest -m
# "not slow") leaves them out; `make test` and CI run everything. A test may also mark itself slow.
SLOW_MODULES = frozenset({
    "test_capture_levels", "test_capture_module", "test_capture_session", "test_capture_stats", "test_capture_tf",
    "test_capture_inplace", "test_compare_torch", "test_convert", "test_demo_cli", "test_diagnose_cli",
    "test_diagnose_scenarios", "test_diagnose_training", "test_docs_run", "test_export_onnx", "test_fusion_onnx",
    "test_fusion_torch", "test_hunt", "test_packaging", "test_reader_msprobe", "test_reader_tfdbg",
    "test_replay_torch", "test_report_browser", "test_report_overflow_browser", "test_run_launcher",
    "test_scale_dask", "test_tf_vs_torch", "test_trust_agree", "test_trust_cases", "test_trust_fuzz",
    "test_trust_kill", "test_deferred_stats", "test_capture_cli", "test_report_explorer", "test_format_safetensors",
    "test_unmatched_rule", "test_tfdbg_modes", "test_ge_fusion", "test_ge_torchair", "test_ge_msaccucmp",
    "test_model_as_found", "test_diagnose_patch", "test_diagnose_classes", "test_patch_search",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of SLOW_MODULES `slow`; a listed module that no longer exists fails the run (no silent drift)."""
    here = Path(__file__).parent
    gone = sorted(m for m in SLOW_MODULES if not (here / f"{m}.py").is_file())
    if gone:
        raise pytest.UsageError(f"tests/conftest.py SLOW_MODULES names missing modules: {', '.join(gone)}")
    for item in items:
        if item.path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def opdiff_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_opdiff


@pytest.fixture(scope="session")
def strict_json() -> Callable[[str | os.PathLike[str]], Any]:
    return read_strict_json



@pytest.fixture(scope="session", autouse=True)
def _session_environ() -> dict[str, str]:
    """The environment as the session's first test finds it (set up before any module's fixtures)."""
    return dict(os.environ)


_FRESH_THREADS: list[int] = []  # torch's thread count in a fresh process, measured once per worker


def _fresh_threads(environ: dict[str, str]) -> int:
    """torch's intra-op thread count as a fresh process started with `environ` has it."""
    if not _FRESH_THREADS:
        out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], env=environ,
                             capture_output=True, text=True, timeout=120, check=True)
        _FRESH_THREADS.append(int(out.stdout.strip()))
    return _FRESH_THREADS[0]


def _put_environ_back(saved: dict[str, str]) -> None:
    for key in [k for k in os.environ if k not in saved]:
        del os.environ[key]
    os.environ.update({k: v for k, v in saved.items() if os.environ.get(k) != v})


@pytest.fixture(autouse=True)
def _environ_and_threads_put_back(_session_environ: dict[str, str]) -> Any:
    """Each test leaves the environment as the session found it and torch's thread count as a fresh process
    has it. A Dask LocalCluster's nanny sets OMP_NUM_THREADS=1 (and MKL_, OPENBLAS_) in the process that
    starts it; left there, every later subprocess (msprobe's dumps, the CLI) would run bf16 reductions on one
    thread while this process runs them on two: a parameter gradient one bf16 rounding apart. Code that pins
    torch's threads (a sweep case, a fault class) must not change the next test's numerics either."""
    yield
    _put_environ_back(_session_environ)
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != _fresh_threads(_session_environ):
        torch.set_num_threads(_fresh_threads(_session_environ))
