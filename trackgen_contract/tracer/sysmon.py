"""The ``sys.monitoring`` core (Python >= 3.12).

Only *local* PY_START events are set, on the code objects of the watched Warp entry points
that the running tracers need: no global event, so code that is not watched runs exactly
as fast as without a tracer, in every thread. The callback returns None (never DISABLE,
which would switch a location off for every thread) and the tool never calls
``restart_events()``, which would re-enable other tools' disabled events.

The tool id is taken when the first tracer starts and given back, local events cleared
first (``free_tool_id`` leaves them set on 3.12 and 3.13), when the last one stops. Ids 0
(debugger), 1 (coverage), 2 (profiler) and 5 (optimizer) are left to the tools CPython
reserves them for while another id is free, so coverage.py's sysmon core, cProfile and
debuggers keep working beside a guard.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from types import CodeType, ModuleType

from .. import codecache
from ..callsite.readback import describe
from ..handlers import raised_by_handler
from ..registry import Entry, installed
from . import fastpath
from .arming import ArmingCore
from .call import Dispatch

try:
    from ._fastclean import running as _filter_running
except ImportError:  # not built: the core is made with compiled=False
    _filter_running = None

_TOOL_NAME = "trackgen_contract"
_PREFERRED_IDS = (3, 4, 5, 2, 1, 0)


class SysMonitoringCore(ArmingCore):
    """Arms local PY_START events on the watched code objects the running tracers need."""

    name = "sys.monitoring"

    def __init__(self, active: ContextVar[tuple], dispatch: Dispatch, compiled: bool) -> None:
        super().__init__()
        self._active = active
        self._dispatch = dispatch
        self.compiled = compiled  # the clean-site test in C first (_fastclean.c)
        self._tool: int | None = None
        self._armed: dict[int, CodeType] = {}  # id(code) -> code with events set
        self._synced = 0  # the books' version last armed
        self._callback: Callable[[CodeType, int], None] | None = None  # as registered
        self._on_start: Callable[[CodeType, int], None] | None = None  # the Python callback
        self._callback_codes: frozenset[int] | None = None  # id() of its code and dispatch's

    @property
    def tool_id(self) -> int | None:
        """The ``sys.monitoring`` tool id held while armed."""
        return self._tool

    def attach(self, tracer: object) -> None:
        self.hold(tracer.entries)  # type: ignore[attr-defined]

    def detach(self, tracer: object, thread: int) -> str | None:
        books = self._books
        with books.lock:
            last = len(books.counts) == 1 and sum(books.counts.values()) == 1
            try:
                blind = self._blind(tracer.entries if last else ())  # type: ignore[attr-defined]
            finally:  # released whatever cut the reading short (a MemoryError)
                self.release(tracer.entries)  # type: ignore[attr-defined]
        return blind

    def _sync(self) -> None:
        books = self._books
        if books.syncing:
            return  # this thread is already syncing, further down: it will see the change
        books.syncing = True
        try:
            self._sync_until_current()  # its loop is not written here: see critical._wrap
        finally:
            books.syncing = False

    def _sync_until_current(self) -> None:
        books = self._books
        while self._synced != books.version:
            version = books.version
            self._apply(dict(books.wanted))  # a copy: a nested change may come in
            self._synced = version

    def _apply(self, wanted: dict[int, Entry]) -> None:
        monitoring = sys.monitoring
        if self._tool is not None and monitoring.get_tool(self._tool) != _TOOL_NAME:
            self._disown()  # freed behind our back (by the program, say)
        if wanted and self._tool is None:
            self._tool = _claim_tool_id()
            self._callback = self._callback or self._registered_callback()
            monitoring.register_callback(self._tool, monitoring.events.PY_START, self._callback)
        tool = self._tool
        for key in [k for k in self._armed if k not in wanted]:
            monitoring.set_local_events(tool, self._armed.pop(key), 0)
        for key, entry in wanted.items():
            if key not in self._armed:
                monitoring.set_local_events(tool, entry.code, monitoring.events.PY_START)
                self._armed[key] = entry.code
        if not wanted and tool is not None:
            _give_back(tool, ())  # its events are cleared above
            self._tool = None
            fastpath.forget()  # nothing armed: no cache is worth its memory
            codecache.clear_all()

    def _disown(self) -> None:
        """Let go of a tool id that was freed behind our back (the tracers running then
        find it blind). 3.12 and 3.13 keep a freed id's local events and callback: where no
        one took the id since, take it back for a moment to clear them; else none of it is
        ours to touch."""
        monitoring = sys.monitoring
        tool, armed = self._tool, list(self._armed.values())
        self._tool = None
        self._armed.clear()
        if tool is None or monitoring.get_tool(tool) is not None:
            return
        try:
            monitoring.use_tool_id(tool, _TOOL_NAME)
        except ValueError as error:
            if raised_by_handler(error):
                raise
            return  # taken in between
        _give_back(tool, armed)

    def _blind(self, entries: tuple[Entry, ...]) -> str | None:
        """Whether another tool took our id or callback while the tracer ran (or switched
        off the events of `entries`: checked by the last tracer out, when it costs nothing
        next to the disarming)."""
        monitoring, tool = sys.monitoring, self._tool
        if tool is None or monitoring.get_tool(tool) != _TOOL_NAME:
            return f"sys.monitoring tool id {tool} was freed or taken by another tool"
        previous = monitoring.register_callback(tool, monitoring.events.PY_START, self._callback)
        if previous is not self._callback:
            return f"the PY_START callback of tool id {tool} was replaced by {describe(previous)}"
        for entry in entries:
            if not monitoring.get_local_events(tool, entry.code) & monitoring.events.PY_START:
                return f"the events on {entry.api} were switched off by another tool"
        return None

    def _registered_callback(self) -> Callable[[CodeType, int], None]:
        self._on_start = self._make_callback()
        if not self.compiled:
            return self._on_start
        from ._fastclean import CleanFilter

        # It answers a clean call the Python callback would answer the same way, and hands
        # every other call to it, untouched.
        return CleanFilter(self._on_start, self._active, fastpath)

    def _make_callback(self) -> Callable[[CodeType, int], None]:
        # Runs at every start of a watched function, in every thread: a closure over
        # locals, the cheap context check first, then a clean site or a repeat of a judged
        # breach answered from the caller's frame alone (see fastpath) before any
        # WarpCall is made.
        active, dispatch, frame_of = self._active.get, self._dispatch, sys._getframe
        entries_get, clean_at = installed().by_id.get, fastpath.table.get
        ident = threading.get_ident
        quiet, last, counting = fastpath.quiet, fastpath.last, fastpath.counting
        dict_get = dict.get  # the globals' own __name__, read as a plain dict (no user code)
        repeats, answer_repeat = fastpath.repeats, fastpath.answer_repeat
        module_type = ModuleType

        def on_start(code: CodeType, offset: int) -> None:
            tracers = active()
            if not tracers:
                return
            try:
                caller = frame_of(2)  # 0: this callback, 1: the watched function
            except ValueError as error:  # called from C with no Python frame below
                if raised_by_handler(error):
                    raise
                caller = None
            # fastpath.answered, inline: this is the cost of every clean launch.
            clean = caller and clean_at(caller.f_lasti)
            if clean is not None and clean.caller is not caller.f_code:  # type: ignore[union-attr]
                clean = clean.others.get(id(caller.f_code))  # type: ignore[union-attr]
            if (
                clean is not None
                and clean.callee is code
                and dict_get(names := caller.f_globals, "__name__") is clean.name  # type: ignore[union-attr]
            ):
                binding = clean.binding
                if binding is None:
                    try:  # the check's error, near the recursion limit say: the full path
                        loads = clean.check is None or clean.check(caller)
                    except Exception as error:
                        if raised_by_handler(error):
                            raise
                        loads = False
                else:  # Binding.holds, inline: the globals read once, no call
                    loads = (
                        type(names) is dict
                        and dict_get(names, binding.variable) is binding.bound
                        and (not binding.module_body or caller.f_locals is names)  # type: ignore[union-attr]
                    )
                    if loads and binding.namespace is not None:
                        loads = type(binding.bound) is module_type and (
                            dict_get(binding.namespace, binding.attribute) is binding.target
                        )
                if loads:
                    me, now = ident(), last.now
                    if tracers is not now.tracers or me != now.thread:
                        now = quiet(tracers, me)
                    watching = now.mine.get(clean.counted)
                    if watching is None:  # not asked yet, or the full path
                        watching = counting(now, clean.counted)
                    if watching is not None:
                        for tracer in watching:
                            tracer.clean_calls += 1
                        return
            if repeats and caller and answer_repeat(tracers, code, caller, ident()):
                return
            entry = entries_get(id(code))
            if entry is None:
                # Not ours: events the program set under our id, or, on 3.12 and 3.13,
                # local ones a tool that held the id before left behind (freeing an id
                # keeps them there, and no API lists the code objects that carry them).
                return
            try:
                # frame_of(1) is the watched function's frame, about to run its body.
                dispatch(tracers, entry, frame_of(1))
            except BaseException:
                __tracebackhide__ = True  # read by pytest
                raise

        return on_start

    def inside_callback(self) -> bool:
        # Compiled, the Python callback runs only inside the filter, which counts the
        # calls it is inside: that says it in one call, where the frames below would have
        # to be walked (and the Python code the filter runs itself has no callback frame).
        if self.compiled:
            return _filter_running()  # type: ignore[misc]
        return super().inside_callback()

    def callback_codes(self) -> frozenset[int]:
        callback = self._on_start
        if self._callback_codes is None and callback is not None:
            self._callback_codes = frozenset({id(callback.__code__), id(self._dispatch.__code__)})
        return self._callback_codes or frozenset()

    def reset_after_fork(self) -> None:
        # The child inherited the parent's tool id and events: give them back.
        self._books.reset()
        monitoring = sys.monitoring
        for tool in range(6):
            if monitoring.get_tool(tool) == _TOOL_NAME:
                _give_back(tool, [entry.code for entry in installed()])
        self._armed.clear()
        self._tool = None
        self._synced = self._books.version


def _give_back(tool: int, codes: Iterable[CodeType]) -> None:
    """Clear our events on `codes`, the global events and our callback under `tool`, then
    free it: 3.12 and 3.13 keep a freed id's events and callback."""
    monitoring = sys.monitoring
    for code in codes:
        monitoring.set_local_events(tool, code, 0)
    monitoring.set_events(tool, 0)  # any the program set under our id
    monitoring.register_callback(tool, monitoring.events.PY_START, None)
    monitoring.free_tool_id(tool)


def _claim_tool_id() -> int:
    monitoring = sys.monitoring
    for tool in _PREFERRED_IDS:
        if monitoring.get_tool(tool) is None:
            try:
                monitoring.use_tool_id(tool, _TOOL_NAME)
            except ValueError as error:
                if raised_by_handler(error):
                    raise
                continue  # taken by another thread in between
            # 3.12 and 3.13 keep a freed id's global events: a tool that held it before
            # may have left some (every function's start, say).
            monitoring.set_events(tool, 0)
            return tool
    holders = ", ".join(f"{i}: {monitoring.get_tool(i)!r}" for i in range(6))
    raise RuntimeError(
        f"no sys.monitoring tool id is free for {_TOOL_NAME} (held: {holders}); "
        "stop a debugger, profiler or coverage tool to use a guard"
    )
