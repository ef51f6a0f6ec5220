"""The ``sys.setprofile`` core (Python 3.11, which has no ``sys.monitoring``).

A profile function sees every Python call of its thread, so it is installed in the thread
that starts a tracer only, and the profile function that was there before (a Python
function, or cProfile's C hook) is put back when that thread's last tracer stops.

CPython removes a profile function that raises. A strict guard raises from it to refuse a
call, so after such a raise the hook is gone until the next tracer starts or stops in that
thread, which puts it back; calls made in between (after the code under test swallowed the
violation) are not seen. The block still fails on exit with the violation it raised.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from contextvars import ContextVar
from types import FrameType

from ..registry import Entry, installed
from .call import Dispatch


class ProfileCore:
    """Installs a profile function in each thread with a running tracer."""

    name = "sys.setprofile"

    def __init__(self, active: ContextVar[tuple], dispatch: Dispatch) -> None:
        self._active = active
        self._dispatch = dispatch
        self._lock = threading.Lock()
        self._entries: dict[int, Entry] | None = None  # by id(code), see Registry
        self._threads: dict[int, list] = {}  # thread id -> [tracers, previous profile]
        self._profile: Callable[[FrameType, str, object], None] | None = None

    def attach(self) -> None:
        if self._profile is None:
            self._entries = installed().by_id
            self._profile = self._make_profile()
        thread = threading.get_ident()
        with self._lock:
            record = self._threads.get(thread)
            if record is None:
                self._threads[thread] = [1, sys.getprofile()]
            else:
                record[0] += 1
        sys.setprofile(self._profile)

    def _make_profile(self) -> Callable[[FrameType, str, object], None]:
        # Runs at every Python call, return and C call of the thread: a closure over
        # locals, with the cheapest test first.
        entries, active, dispatch = self._entries, self._active.get, self._dispatch

        def profile(frame: FrameType, event: str, arg: object) -> None:
            if event == "call":
                entry = entries.get(id(frame.f_code))
                if entry is not None:
                    tracers = active()
                    if tracers:
                        try:
                            dispatch(tracers, entry, frame)
                        except BaseException:
                            __tracebackhide__ = True  # read by pytest
                            raise

        return profile

    def detach(self) -> None:
        thread = threading.get_ident()
        with self._lock:
            record = self._threads[thread]
            record[0] -= 1
            if record[0]:
                sys.setprofile(self._profile)  # in case a raise removed it
                return
            del self._threads[thread]
        _restore(record[1])


def _restore(previous: object) -> None:
    # cProfile installs a C hook; sys.getprofile() returns its Profile object, which is not
    # callable: enable() is how it puts its hook back.
    if previous is not None and not callable(previous) and hasattr(previous, "enable"):
        sys.setprofile(None)
        previous.enable()
    else:
        sys.setprofile(previous)
