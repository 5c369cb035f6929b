"""The capture context manager: options, steps, rank, meta.json, and putting hooks/modes on and off."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import torch

from ...base.errors import OpdiffError
from ...store.names import node_name
from ...store.writer import DumpWriter
from ..options import Options
from ..progress import CaptureProgress
from ..session import Session
from . import collectives, module_hooks, optim, ranks
from .api_mode import ApiMode
from .aten_mode import AtenMode
from .preserve import ModelState
from .recorder import Recorder
from .state import CaptureState

STEPS_ENV = "OPDIFF_STEPS"  # steps to capture when `steps` is not given ("0-3,8"): chosen without editing the script


def parse_steps(steps: str | int | Iterable[int] | None) -> frozenset[int] | None:
    """"0,5,10" / "0-3,8" / [0, 5] / 3 -> the set of steps to keep; None keeps every step."""
    if steps is None:
        return None
    if isinstance(steps, int):
        return frozenset({steps})
    if isinstance(steps, str):
        out: set[int] = set()
        for part in filter(None, (p.strip() for p in steps.split(","))):
            lo, sep, hi = part.partition("-")
            try:
                out.update(range(int(lo), int(hi) + 1) if sep else (int(lo),))
            except ValueError:
                raise OpdiffError(f"opdiff.capture: bad steps {steps!r} (expected e.g. \"0,5,10\" or \"0-3\")") from None
        return frozenset(out)
    return frozenset(int(s) for s in steps)


def _never(step: int) -> bool:
    return False


def _dist_rank() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _layout_meta(layout: str | os.PathLike | None, pipeline: tuple[int, int] | None) -> dict[str, Any]:
    """What meta.json says about the run's parallel layout: DTensor records carry their own; a layout file's
    rules and the pipeline stage come from the capture's options (docs/parallel.md)."""
    from ...store.layout import load_rules

    out: dict[str, Any] = {"layout_sources": ["dtensor"]}
    if layout is not None:
        out["layout_rules"] = load_rules(layout).to_json()
        out["layout_file"] = str(layout)
        out["layout_sources"].append("layout-file")
    if pipeline is not None:
        stage, stages = pipeline
        if not (isinstance(stage, int) and isinstance(stages, int) and 0 <= stage < stages):
            raise OpdiffError(f"opdiff.capture: pipeline must be (stage, stages) with 0 <= stage < stages, not {pipeline!r}")
        out["pipeline"] = {"stage": stage, "stages": stages}
        out["layout_sources"].append("pipeline")
    return out


class CaptureSession(Session):
    """`with opdiff.capture(model, path, ...) as cap:` ... `cap.step()` between training iterations."""

    who = "opdiff.capture"
    recorder: Recorder

    def __init__(self, model: torch.nn.Module, path: str | os.PathLike, *, level: str = "module", mode: str = "tensor",
                 backward: bool = False, steps: str | Iterable[int] | None = None, include: str | None = None,
                 exclude: str | None = None, overwrite: bool = False, rank: int | None = None, source: bool = False,
                 optimizer: torch.optim.Optimizer | None = None, when: Callable[[int], bool] | None = None,
                 layout: str | os.PathLike | None = None, pipeline: tuple[int, int] | None = None):
        self.layout_meta = _layout_meta(layout, pipeline)
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise OpdiffError(f"opdiff.capture: optimizer must be a torch.optim.Optimizer, not {type(optimizer).__name__}")
        if when is not None and not callable(when):
            raise OpdiffError("opdiff.capture: when must be a callable taking the step number")
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"opdiff.capture: model must be a torch.nn.Module, not {type(model).__name__}")
        self.options = Options.parse("opdiff.capture", "torch", level=level, mode=mode, include=include, exclude=exclude)
        self.model, self.path, self.level, self.mode = model, path, level, mode
        self.backward, self.source, self.overwrite = bool(backward), bool(source), overwrite
        self.steps = parse_steps(steps if steps is not None else os.environ.get(STEPS_ENV) or None)
        self.optimizer, self.when = optimizer, when
        self.include_text, self.exclude_text = include, exclude
        dist_rank, self.world_size = _dist_rank()
        self.rank = dist_rank if rank is None else int(rank)
        self.tag_graph = level == "aten" and self.backward
        self.state = CaptureState()  # everything that changes while capturing (state.py)
        self._entered = False
        self._handles: list = []
        self._mode: ApiMode | AtenMode | None = None
        self._wanted: dict[tuple[str, str], bool] = {}
        self._restore_collectives: Callable[[], None] | None = None
        self._phase_from: torch.optim.Optimizer | None = None  # an unattached optimizer whose step runs (optim.py)
        self._found: ModelState | None = None  # the model's hooks as found (preserve.py)

    # -- options ------------------------------------------------------------------------------
    def hooks_module(self, path: str) -> bool:
        """Whether module `path` gets capture hooks (all here; compiled.py leaves compiled regions' insides alone)."""
        return True

    def wanted(self, module: str, op: str) -> bool:
        """include/exclude regexes, searched in the module path and in the op name."""
        key = (module, op)
        hit = self._wanted.get(key)
        if hit is None:
            hit = self._wanted[key] = self.options.wanted(module, op)
        return hit

    def meta(self) -> dict[str, Any]:
        first = next(self.model.parameters(), None)
        return {
            "framework": "torch",
            "framework_version": torch.__version__,
            "device": str(first.device) if first is not None else "cpu",
            "default_dtype": str(torch.get_default_dtype()).removeprefix("torch."),
            "seed": torch.initial_seed(),
            "num_threads": torch.get_num_threads(),
            "model": type(self.model).__name__,
            "level": self.level,
            "mode": self.mode,
            "backward": self.backward,
            "steps": sorted(self.steps) if self.steps is not None else "all",
            "include": self.include_text,
            "exclude": self.exclude_text,
            "source": self.source,
            "rank": self.rank,
            "world_size": self.world_size,
            "optimizer": type(self.optimizer).__name__ if self.optimizer is not None else None,
            **self.layout_meta,
        }

    # -- lifecycle ------------------------------------------------------------------------------
    # the skeleton (capture/session.py) runs these: open, install, finish, uninstall, close, publish
    def _open(self) -> DumpWriter:
        self._staging = ranks.staging_path(self.path, self.rank, self.world_size)
        writer = DumpWriter(self._staging, self.meta(), overwrite=self.overwrite)
        self.progress = CaptureProgress(self.path)
        writer.on_flush = self.progress.tick
        self.recorder = Recorder(writer, self.mode, self.rank)
        self.recorder.pipeline = self.layout_meta.get("pipeline")
        return writer

    def _install(self) -> None:
        self._found = ModelState.snapshot(self.model, hooks_only=True)  # hooks and forwards go back as found (preserve.py)
        self.state.index_parameters(self._named_parameters())
        self._handles = module_hooks.install(self)
        if self.optimizer is not None:
            self._handles += optim.install(self, self.optimizer)
        else:
            self._handles += optim.install_phase(self)
        self._restore_collectives = collectives.install(self)
        if self.backward:
            self._install_grad_hooks()
        self._begin_step()

    def _uninstall(self) -> None:
        self._remove()
        if self._found is not None:
            self._found.restore(hooks_only=True)

    def _finish(self, ok: bool) -> None:
        self._end_step()

    def _final_meta(self) -> dict[str, Any]:
        return {"steps_captured": self.state.steps_captured, "records": self.writer.records_written,
                "skipped_tensors": self.recorder.skipped}

    def _published(self) -> None:
        ranks.merge(self.path, self._staging, self.rank)
        self.progress.summary(self.writer.records_written, self.writer.bytes_written, True)

    def _next_step(self) -> None:
        """End the current training step and start the next (`step()`, between iterations)."""
        self._end_step()
        self.state.next_step()
        self._begin_step()

    def attach_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Record `optimizer`'s steps from now on (for a launcher that meets it after the capture began)."""
        self.optimizer = optimizer
        self._handles += optim.install(self, optimizer)
        self.writer.update_meta(optimizer=type(optimizer).__name__)

    def abandon(self) -> None:
        """Record nothing more, in this step or later ones (a forked child must not write into the parent's dump)."""
        self.state.pause()
        self.when = _never

    def selected(self, step: int) -> bool:
        """Whether `step` is captured: in `steps` (None: all) and, with `when`, when(step) is true."""
        if self.steps is not None and step not in self.steps:
            return False
        return self.when is None or bool(self.when(step))

    def _begin_step(self) -> None:
        st = self.state
        selected = self.selected(st.step_index)
        st.begin_step(selected)
        if not selected:
            return  # not selected: hooks stay in place but return at once; no mode is active
        self.recorder.start_step(st.step_index)
        if self.level == "api":
            self._mode = ApiMode(self)
        elif self.level == "aten":
            self._mode = AtenMode(self)
        if self._mode is not None:
            self._mode.__enter__()

    def _end_step(self) -> None:
        st = self.state
        if not st.end_step(written=self.recorder.step == st.step_index):
            return
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)
        self.writer.flush()

    def _remove(self) -> None:
        self.state.stop()
        if self._mode is not None:
            mode, self._mode = self._mode, None
            try:
                mode.__exit__(None, None, None)
            except Exception:
                pass
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._restore_collectives is not None:
            self._restore_collectives()
            self._restore_collectives = None

    # -- parameters -------------------------------------------------------------------------------
    def _named_parameters(self):
        """(module path, local name, parameter), each parameter once (tied weights under their first owner)."""
        seen: set[int] = set()
        for mpath, m in self.model.named_modules():
            for pname, p in m.named_parameters(recurse=False):
                if id(p) not in seen:
                    seen.add(id(p))
                    yield mpath, pname, p

    def record_parameters(self) -> None:
        """Parameters, once per step, before the first forward of the step uses them; in tensor mode written
        from their own memory (no copy) and on disk before this returns."""
        if not self.state.claim_parameters():
            return
        rec = self.recorder
        current = None
        for mpath, pname, p in self._named_parameters():
            if not self.wanted(mpath, "parameter"):
                continue
            if current is None or current[0] != mpath:
                current = (mpath, *rec.node(mpath, "parameter"))
            rec.record(p, node=current[1], module=mpath, op="parameter", level="param", call=current[2],
                       direction="forward", role="parameter", pos=pname, live=True)
        rec.settle()  # written from the parameters' own memory, before the forward (or anything) can change them

    def _install_grad_hooks(self) -> None:
        for mpath, pname, p in self._named_parameters():
            if p.requires_grad:
                self._handles.append(p.register_post_accumulate_grad_hook(partial(self._param_grad, mpath, pname)))

    def _param_grad(self, mpath: str, pname: str, p: torch.Tensor) -> None:
        """A parameter's gradient once accumulated (a second accumulation in one step gets call 1, ...)."""
        st = self.state
        if not st.recording or p.grad is None or not self.wanted(mpath, "parameter"):
            return
        with st.own_code():
            k = st.gradient_call(p)
            self.recorder.record(p.grad, node=node_name(mpath, "parameter", k), module=mpath, op="parameter",
                                 level="param", call=k, direction="backward", role="gradient", pos=pname)

def capture(model: torch.nn.Module, path: str | os.PathLike, *, level: str = "module", mode: str = "tensor",
            backward: bool = False, steps: str | Iterable[int] | None = None, include: str | None = None,
            exclude: str | None = None, overwrite: bool = False, rank: int | None = None,
            source: bool = False, optimizer: torch.optim.Optimizer | None = None,
            when: Callable[[int], bool] | None = None, compile: str | Iterable[str] | None = None,
            compile_options: dict[str, Any] | None = None, layout: str | os.PathLike | None = None,
            pipeline: tuple[int, int] | None = None) -> CaptureSession:
    """Capture `model`'s calls into a dump at `path`; use as ``with capture(model, path) as cap: ...``.

    level: "module" (every nn.Module call), "api" (torch API calls), "aten" (aten ops, incl. backward);
    mode: "tensor" (data + statistics + hash), "stats" (statistics), "hash" (statistics + hash).
    optimizer: also record its step (parameters before/after, gradients, state) as direction "update";
    when: a callable step -> bool that selects steps at run time (with `steps`, both must agree).
    compile: submodule paths (or "children") to run compiled by Inductor with config `compile_options`,
    observed at their boundaries (compiled.py, docs/fusion.md).
    layout: a layout file for hand-written tensor parallelism; pipeline: (stage, stages) of this rank
    (docs/parallel.md).
    See docs/capture.md for every option.
    """
    if compile is not None:
        from .compiled import capture as capture_compiled

        return capture_compiled(model, path, compile=compile, options=compile_options, level=level, mode=mode,
                                backward=backward, steps=steps, include=include, exclude=exclude, overwrite=overwrite,
                                rank=rank, source=source)
    return CaptureSession(model, path, level=level, mode=mode, backward=backward, steps=steps, include=include,
                          exclude=exclude, overwrite=overwrite, rank=rank, source=source, optimizer=optimizer,
                          when=when, layout=layout, pipeline=pipeline)
