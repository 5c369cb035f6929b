"""The skeleton of every capture session: entered once, a DumpWriter opened on entry, observers installed and
removed whatever happens, the dump closed complete only when the run ended without an exception.

A backend's session subclasses `Session` and fills in what differs: where the writer writes (`_open`), how it
observes the model (`_install`, `_uninstall`), how the last step ends (`_finish`), what meta it adds at the
end (`_final_meta`), what happens once the dump is whole (`_published`) and how a step ends (`_next_step`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ..base.errors import OpdiffError
from ..store.writer import DumpWriter

if TYPE_CHECKING:
    from typing import Self


class Session:
    """`with session:` runs the model under observation; `session.step()` between training iterations."""

    who: ClassVar[str] = "opdiff.capture"  # the name errors start with
    writer: DumpWriter  # made on entering the `with` block
    _entered: bool = False

    # -- what a backend fills in ------------------------------------------------------------------
    def _open(self) -> DumpWriter:
        raise NotImplementedError

    def _install(self) -> None:
        """Start observing (hooks, modes, patches); `_uninstall` undoes it, also after a failed install."""

    def _uninstall(self) -> None:
        """Stop observing; safe to call twice and after a partial install."""

    def _finish(self, ok: bool) -> None:
        """End the last step (observers are still installed; `ok`: the run raised nothing)."""

    def _final_meta(self) -> dict[str, Any]:
        return {"records": self.writer.records_written}

    def _published(self) -> None:
        """After the complete dump is closed (move it into place, print a summary)."""

    def _next_step(self) -> None:
        raise OpdiffError(f"{self.who}: this capture has no steps")

    # -- the skeleton -----------------------------------------------------------------------------
    def __enter__(self) -> Self:
        if self._entered:
            raise OpdiffError(f"{self.who}: a capture session can be entered only once")
        self.writer = self._open()
        self._entered = True
        try:
            self._install()
        except BaseException:
            self._uninstall()
            self.writer.close(complete=False)
            raise
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        ok = exc_type is None
        try:
            self._finish(ok)
        finally:
            self._uninstall()
            self.writer.meta.update(self._final_meta())  # written by close(), once
            try:
                self.writer.close(complete=ok)
            except Exception:  # after the run raised, the run's own exception is the one to report
                if ok:
                    raise
            if ok:
                self._published()

    def step(self) -> None:
        """End the current step and start the next (call it between iterations)."""
        if not self._entered:
            raise OpdiffError(f"{self.who}: step() called outside the `with` block")
        self._next_step()


__all__ = ["Session"]
