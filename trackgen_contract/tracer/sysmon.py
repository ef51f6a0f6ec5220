"""The ``sys.monitoring`` core (Python >= 3.12).

Only *local* PY_START events are set, on the code objects of the watched Warp entry points:
no global event, so code that is not watched runs exactly as fast as without a tracer, in
every thread. The callback returns None (never DISABLE, which would switch a location off
for every thread) and the tool never calls ``restart_events()``, which would re-enable
other tools' disabled events.

The tool id is taken when the first tracer starts and given back, local events cleared
first, when the last one stops. Ids 0 (debugger), 1 (coverage), 2 (profiler) and 5
(optimizer) are left to the tools CPython reserves them for while another id is free, so
coverage.py's sysmon core, cProfile and debuggers keep working beside a guard.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from contextvars import ContextVar
from types import CodeType

from ..registry import Entry, installed
from .call import Dispatch

_TOOL_NAME = "trackgen_contract"
_PREFERRED_IDS = (3, 4, 5, 2, 1, 0)


class SysMonitoringCore:
    """Arms local PY_START events on the watched code objects while any tracer runs."""

    name = "sys.monitoring"

    def __init__(self, active: ContextVar[tuple], dispatch: Dispatch) -> None:
        self._active = active
        self._dispatch = dispatch
        self._lock = threading.Lock()
        self._users = 0
        self._tool: int | None = None
        self._entries: dict[int, Entry] = {}  # by id(code), see Registry

    @property
    def tool_id(self) -> int | None:
        """The ``sys.monitoring`` tool id held while armed."""
        return self._tool

    def attach(self) -> None:
        with self._lock:
            if self._users == 0:
                self._arm()
            self._users += 1

    def detach(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                self._disarm()

    def _callback(self, entries: dict[int, Entry]) -> Callable[[CodeType, int], None]:
        # Runs at every start of a watched function, in every thread: a closure over
        # locals, with the cheap context check first.
        active, dispatch, frame_of = self._active.get, self._dispatch, sys._getframe

        def on_start(code: CodeType, offset: int) -> None:
            tracers = active()
            if tracers:
                try:
                    # frame_of(1) is the watched function's frame, about to run its body.
                    dispatch(tracers, entries[id(code)], frame_of(1))
                except BaseException:
                    __tracebackhide__ = True  # read by pytest
                    raise

        return on_start

    def _arm(self) -> None:
        entries = installed().by_id  # may raise RegistryError: nothing is held yet
        monitoring = sys.monitoring
        tool = _claim_tool_id()
        try:
            callback = self._callback(entries)
            monitoring.register_callback(tool, monitoring.events.PY_START, callback)
            for entry in entries.values():
                monitoring.set_local_events(tool, entry.code, monitoring.events.PY_START)
        except BaseException:
            _release(tool, entries)
            raise
        self._tool, self._entries = tool, entries

    def _disarm(self) -> None:
        tool, self._tool = self._tool, None
        if tool is not None:
            _release(tool, self._entries)


def _claim_tool_id() -> int:
    monitoring = sys.monitoring
    for tool in _PREFERRED_IDS:
        if monitoring.get_tool(tool) is None:
            try:
                monitoring.use_tool_id(tool, _TOOL_NAME)
            except ValueError:
                continue  # taken by another thread in between
            return tool
    holders = ", ".join(f"{i}: {monitoring.get_tool(i)!r}" for i in range(6))
    raise RuntimeError(
        f"no sys.monitoring tool id is free for {_TOOL_NAME} (held: {holders}); "
        "stop a debugger, profiler or coverage tool to use a guard"
    )


def _release(tool: int, entries: dict[int, Entry]) -> None:
    monitoring = sys.monitoring
    for entry in entries.values():
        monitoring.set_local_events(tool, entry.code, 0)
    monitoring.register_callback(tool, monitoring.events.PY_START, None)
    monitoring.free_tool_id(tool)
