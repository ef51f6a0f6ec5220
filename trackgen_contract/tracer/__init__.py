"""How to watch: the `Tracer` and the core that feeds it.

Two interchangeable cores produce the same events, chosen here and nowhere else:

- `sysmon` (Python >= 3.12): a PEP 669 ``sys.monitoring`` tool with *local* PY_START
  events on the registry's code objects only. Code that is not watched runs at full speed,
  in every thread.
- `pyprofile` (Python 3.11): ``sys.setprofile`` in the traced thread, which sees every
  Python call of that thread and picks out the watched ones.

A core is armed when the first tracer starts and disarmed when the last one stops. Each
tracer is registered in a context variable, so a call is reported only to the tracers
started in the calling thread and context (asyncio task); elsewhere the callback returns
at once.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from contextvars import ContextVar
from types import FrameType
from typing import Protocol

from ..registry import Entry
from .call import WarpCall

__all__ = ["BACKEND", "CallRefused", "Tracer", "WarpCall"]

# The tracers started in the current context, in start order.
_active: ContextVar[tuple[Tracer, ...]] = ContextVar("trackgen_contract_tracers", default=())


class CallRefused(Exception):
    """Raised by an ``on_call`` to refuse a call: it is shown from the user's call down,
    without the frames of the tracer and of ``on_call`` (other exceptions keep them)."""


class Core(Protocol):
    """What a backend provides: arm on the first tracer of a scope, disarm on the last."""

    name: str

    def attach(self) -> None:
        """A tracer starts in the current thread."""

    def detach(self) -> None:
        """A tracer started in the current thread stops."""


def dispatch(tracers: tuple[Tracer, ...], entry: Entry, frame: FrameType) -> None:
    """Report a watched call, about to run in `frame`, to `tracers`.

    Every started tracer sees the call, even when one of them raises; the first exception
    is then raised at the call, before the callee runs (that is how a strict guard refuses
    a call). The frames are dropped from the `WarpCall` afterwards: they move on.
    """
    call = WarpCall(entry, frame)
    error: BaseException | None = None
    for tracer in tracers:
        if tracer._thread is not None:  # started (a stopped one may linger in a context)
            try:
                tracer.on_call(call)
            except BaseException as exc:
                error = error or exc
    call._frame = None
    if error is not None:
        __tracebackhide__ = True  # read by pytest
        raise error.with_traceback(None) if isinstance(error, CallRefused) else error


def _choose_core() -> Core:
    if sys.version_info >= (3, 12):
        from .sysmon import SysMonitoringCore

        return SysMonitoringCore(_active, dispatch)
    from .pyprofile import ProfileCore

    return ProfileCore(_active, dispatch)


_core = _choose_core()

#: The name of the backend this interpreter uses: ``"sys.monitoring"`` or ``"sys.setprofile"``.
BACKEND: str = _core.name


class Tracer:
    """Calls ``on_call(call)`` with a `WarpCall` for every watched Warp call made in the
    thread and context that started it, violation or not.

    Use it as a context manager, or call `start` and `stop` (in the same thread). An
    exception raised by ``on_call`` is raised at the Warp call, before the callee runs.
    A tracer can be started again after it stopped.
    """

    def __init__(self, on_call: Callable[[WarpCall], object]) -> None:
        if not callable(on_call):
            raise TypeError(f"Tracer(on_call): on_call must be callable, got {on_call!r}")
        self.on_call = on_call
        self._thread: int | None = None

    @property
    def active(self) -> bool:
        """Whether the tracer is started."""
        return self._thread is not None

    def start(self) -> Tracer:
        """Start reporting calls made in this thread and context."""
        if self._thread is not None:
            raise RuntimeError("this Tracer is already started")
        _core.attach()
        self._thread = threading.get_ident()
        _active.set((*_active.get(), self))
        return self

    def stop(self) -> None:
        """Stop reporting; the core is disarmed when no tracer is left."""
        if self._thread is None:
            return
        if self._thread != threading.get_ident():
            raise RuntimeError("a Tracer must be stopped in the thread that started it")
        self._thread = None
        _active.set(tuple(t for t in _active.get() if t is not self))
        _core.detach()

    def __enter__(self) -> Tracer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "active" if self.active else "stopped"
        return f"<Tracer {BACKEND} {state} on_call={self.on_call!r}>"
