"""What changes while a torch capture runs, in one object that the session owns.

Hooks and modes read its fields and change it only through its methods; the session drives its
lifecycle (steps on and off). Options that never change (level, mode, filters) stay on the session.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .module_hooks import Frame


class OwnCode:
    """`with state.own_code():` marks capture's own torch calls, which are then not recorded."""

    __slots__ = ("state",)

    def __init__(self, state: CaptureState):
        self.state = state

    def __enter__(self) -> None:
        self.state.internal += 1

    def __exit__(self, *exc: object) -> None:
        self.state.internal -= 1


@dataclass(eq=False)
class CaptureState:
    """The capture's moving parts: recording or not, step, module stack, phase, parameter owners."""

    recording: bool = False  # inside the context and the current step is selected
    internal: int = 0  # >0 while capture's own code runs (its torch calls are not recorded)
    step_index: int = 0
    phase: str = "forward"  # "update" while the optimizer's step runs
    grads_seen: bool = False  # a parameter gradient was recorded this step (later collectives sync gradients)
    stack: list[Frame] = field(default_factory=list)  # module calls in progress, innermost last
    param_names: dict[int, tuple[str, str]] = field(default_factory=dict)  # id(parameter) -> (owner, local name)
    update_owner: dict[int, str] = field(default_factory=dict)  # id(parameter or state) -> owner, during the step
    last_update_module: str = ""
    params_done: bool = False  # this step's parameters are recorded
    grad_calls: dict[int, int] = field(default_factory=dict)  # id(parameter) -> gradient accumulations this step
    steps_captured: list[int] = field(default_factory=list)
    _own: OwnCode = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._own = OwnCode(self)

    # -- reading ------------------------------------------------------------------------------
    def own_code(self) -> OwnCode:
        """Context manager around capture's own work (recording, hooks): torch calls in it are not recorded."""
        return self._own

    def live(self, step: int) -> bool:
        """Whether a hook installed during `step` may still record (that step is the one being captured)."""
        return self.recording and self.step_index == step

    def module_path(self) -> str:
        """Path of the innermost module running, "" outside every module."""
        stack = self.stack
        return stack[-1].path if stack else ""

    def ambient_direction(self) -> str:
        """Direction of an op that no autograd node runs: the optimizer's update, gradient processing
        outside any module once gradients arrived (averaging, clipping), or the forward."""
        if self.phase == "update":
            return "update"
        return "backward" if self.grads_seen and not self.stack else "forward"

    def update_module(self, args: Iterable[Any]) -> str:
        """During the optimizer's step: the module owning the first parameter or state tensor among `args`
        (the last one seen when none is: a temporary of the same update)."""
        for a in args:
            for t in a if isinstance(a, (list, tuple)) else (a,):
                if isinstance(t, torch.Tensor):
                    owner = self.update_owner.get(id(t))
                    if owner is not None:
                        self.last_update_module = owner
                        return owner
        return self.last_update_module

    # -- module stack -------------------------------------------------------------------------
    def enter_module(self, frame: Frame) -> None:
        self.stack.append(frame)

    def leave_module(self, module: torch.nn.Module) -> Frame | None:
        """Pop the innermost frame if it is `module`'s call (None: the stack does not hold it)."""
        stack = self.stack
        if not stack or stack[-1].module is not module:
            return None
        return stack.pop()

    # -- parameters and the optimizer ---------------------------------------------------------
    def index_parameters(self, named: Iterable[tuple[str, str, torch.Tensor]]) -> None:
        """Remember each parameter's owner module and local name (from (module path, name, parameter))."""
        for mpath, pname, p in named:
            self.param_names[id(p)] = (mpath, pname)

    def claim_parameters(self) -> bool:
        """True the first time in a step: the caller records the parameters."""
        if self.params_done:
            return False
        self.params_done = True
        return True

    def gradient_call(self, p: torch.Tensor) -> int:
        """Call number of this accumulation of `p`'s gradient in the step (0, 1, ...); marks gradients seen."""
        self.grads_seen = True
        k = self.grad_calls.get(id(p), 0)
        self.grad_calls[id(p)] = k + 1
        return k

    def begin_update(self, owners: dict[int, str]) -> None:
        """The optimizer's step starts: ops now have direction "update", named after `owners[id(tensor)]`."""
        self.phase = "update"
        self.update_owner = owners

    def end_update(self) -> None:
        self.phase = "forward"
        self.update_owner = {}

    # -- steps --------------------------------------------------------------------------------
    def begin_step(self, selected: bool) -> None:
        """A step starts; it is recorded only when `selected`."""
        self.grads_seen = False
        if not selected:
            return
        self.stack.clear()
        self.params_done = False
        self.grad_calls.clear()
        self.recording = True

    def end_step(self, written: bool) -> bool:
        """The step ends; `written`: something of it reached the dump. False when it was not being recorded."""
        if not self.recording:
            return False
        self.recording = False
        if written:
            self.steps_captured.append(self.step_index)
        return True

    def next_step(self) -> None:
        self.step_index += 1

    def pause(self) -> None:
        """Nothing more is recorded in this step (hooks stay; the session decides about later steps)."""
        self.recording = False

    def stop(self) -> None:
        """Nothing more is recorded (hooks and modes are being removed)."""
        self.recording = False
        self.stack.clear()
