"""The skeleton the api and aten modes share: for each intercepted call, decide whether and where it
is recorded, count it, record its inputs and call line, run it, record its outputs.

A mode supplies only what differs (docs/capture.md, "What each level records"): how a function is
named, which module and direction a call belongs to, and how its results are recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from .calls import Call, record_inputs, user_source

if TYPE_CHECKING:
    from .session import CaptureSession

# where a call is recorded: (module path, direction, extra fields of its records or None)
Site = tuple[str, str, dict[str, Any] | None]
F = TypeVar("F", bound=Callable[..., Any])  # what the mode intercepts: a torch function, an aten OpOverload


class CallDispatch(Generic[F]):
    """Mixin for a torch mode: `dispatch(func, args, kwargs)` runs and records one intercepted call."""

    LEVEL: ClassVar[str]  # the records' level ("api", "aten")

    def __init__(self, session: CaptureSession):
        super().__init__()
        self.s = session
        self.state = session.state

    # -- what a mode supplies ---------------------------------------------------------------------
    @staticmethod
    def op_name(func: Any) -> str | None:
        """The op's name in records; None for a call that is never recorded."""
        raise NotImplementedError

    def run_unnamed(self, func: F, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run a call that `op_name` does not name."""
        return func(*args, **kwargs)

    def site(self, func: F, op: str, args: tuple[Any, ...]) -> Site | None:
        """Module, direction and extra fields of this call's records; None to run it unrecorded.

        Here, for a call that no autograd node runs: the optimizer's update (named after the module
        owning the tensors it updates), else the forward or gradient processing in the innermost module.
        """
        st = self.state
        direction = st.ambient_direction()
        return (st.update_module(args) if direction == "update" else st.module_path()), direction, None

    def base_op(self, func: F, op: str) -> str:
        """The op's short name ("add_", "copy_"), which says whether it overwrites its first argument."""
        raise NotImplementedError

    def wants_source(self, direction: str) -> bool:
        """Whether a call of this direction gets the user's source line (when `source=True`)."""
        return True

    def record_result(self, func: F, c: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
                      out: Any) -> None:
        """Record the outputs of a call that has just run."""
        raise NotImplementedError

    # -- the skeleton -----------------------------------------------------------------------------
    def intercept(self, func: F, types: Any, args: tuple[Any, ...] = (),
                  kwargs: dict[str, Any] | None = None) -> Any:
        """A mode's `__torch_function__` / `__torch_dispatch__`."""
        return self.dispatch(func, args, kwargs or {})

    def dispatch(self, func: F, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        st = self.state
        if st.internal or not st.recording:
            return func(*args, **kwargs)
        op = self.op_name(func)
        if op is None:
            return self.run_unnamed(func, args, kwargs)
        site = self.site(func, op, args)
        if site is None:
            return func(*args, **kwargs)
        module, direction, extra = site
        s = self.s
        node, call = s.recorder.node(module, op)  # counted even when filtered out: names do not depend on filters
        if not s.wanted(module, op):
            return func(*args, **kwargs)
        c = Call(node, module, op, self.LEVEL, call, direction,
                 source=user_source() if s.source and self.wants_source(direction) else None, extra=extra)
        record_inputs(s, c, args, kwargs, base_op=self.base_op(func, op))
        out = func(*args, **kwargs)
        self.record_result(func, c, args, kwargs, out)
        return out
