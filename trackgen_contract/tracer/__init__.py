"""How to watch: the `Tracer` and the core that feeds it.

Two interchangeable cores produce the same events, chosen here and nowhere else:

- `sysmon` (Python >= 3.12): a PEP 669 ``sys.monitoring`` tool with *local* PY_START
  events on the registry's code objects only. Code that is not watched runs at full speed,
  in every thread.
- `pyprofile` (Python 3.11): ``sys.setprofile`` in the traced thread, which sees every
  Python call of that thread and picks out the watched ones.

A core arms the code objects its running tracers need and disarms them when the last one
stops (`arming`). Each tracer is registered in a context variable and remembers its
thread, so a call is reported only to the tracers started in the calling thread and
context (asyncio task): a thread running a copy of the context is not traced. Starting
and stopping run as signal-safe critical sections (`critical`), and a forked child starts
with no tracer of its parent's.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from types import FrameType
from typing import Protocol

from ..handlers import raised_by_handler
from ..registry import Entry, installed
from . import critical, fastpath
from .call import WarpCall
from .collector import collector
from .headroom import DEPTH_IS_FRAMES, ROOM, headroom

__all__ = [
    "BACKEND",
    "COMPILED",
    "CallRefused",
    "Tracer",
    "WarpCall",
    "check_setting",
    "keep_armed",
]

# The tracers started in the current context, in start order. A stopped tracer may linger
# in a context it was not stopped from; dispatch skips it and the next start drops it.
_active: ContextVar[tuple[Tracer, ...]] = ContextVar("trackgen_contract_tracers", default=())


class CallRefused(Exception):
    """Raised by an ``on_call`` to refuse a call: its traceback starts again where the
    tracer raises it, so it shows the user's call, the watched function and the tracer's
    own few frames (which pytest hides), none of ``on_call``'s (other exceptions keep
    them)."""


class Core(Protocol):
    """What a backend provides: arm what tracers need while they run."""

    name: str
    compiled: bool  # whether its first filter runs in C (see _compiled_wanted)

    def hold(self, entries: tuple[Entry, ...]) -> None:
        """Keep `entries` armed (counted) until `release`; no thread is hooked by it."""

    def release(self, entries: tuple[Entry, ...]) -> None:
        """Undo one `hold`."""

    def attach(self, tracer: Tracer) -> None:
        """`tracer` starts in the current thread: arm what it needs."""

    def detach(self, tracer: Tracer, thread: int) -> str | None:
        """`tracer`, started in `thread`, stops (from any thread). Returns why it may have
        missed calls (its hook was replaced or removed by someone else), or None."""

    def idle(self) -> bool:
        """Whether nothing is held (no tracer, no `keep_armed` block)."""

    def inside_callback(self) -> bool:
        """Whether this thread is inside the core's callback (a signal handler or
        finaliser that ran there): CPython reports no event until it returns."""

    def reset_after_fork(self) -> None:
        """In a forked child: hold nothing of the parent's."""


def _references_of_a_local() -> int:
    # What sys.getrefcount says of an object only a local variable holds (it varies with
    # the version: 3.14 passes some locals without a new reference).
    probe = WarpCall.__new__(WarpCall)
    return sys.getrefcount(probe)


_UNSHARED = _references_of_a_local()


def dispatch(tracers: tuple[Tracer, ...], entry: Entry, frame: FrameType) -> None:
    """Report a watched call, about to run in `frame`, to the running `tracers` of this
    thread that watch its kind of operation.

    Every such tracer sees the call, even when one of them raises; the first exception is
    then raised at the call, before the callee runs (that is how a strict guard refuses a
    call). A `WarpCall` that an ``on_call`` kept is read in full before the frames move on.
    """
    # Judging runs a few frames above the user's call: near the recursion limit it gets
    # the room it needs (see headroom), so a call that works unguarded works guarded. Up
    # to the limit raised, no Python call (no comprehension either: a frame on 3.11): this
    # is `headroom.reserve` written inline, where a frame for it may be missing.
    # Counted in (its token in `users`) before the limit is raised: no settle puts it
    # back under a call counted in. Out first thing, by one C-level pop (see collector);
    # a limit left raised is put back by a later settle.
    thread = threading.get_ident()
    live = []
    for tracer in tracers:
        if tracer._thread == thread and entry.op in tracer.ops:
            live.append(tracer)
    if not live:
        return
    __tracebackhide__ = True  # read by pytest
    token = object()
    try:
        limit = sys.getrecursionlimit()
        raised = headroom.raised and limit == headroom.saved + ROOM  # not put back yet
        needed = not raised
        if needed and DEPTH_IS_FRAMES:
            try:
                sys._getframe(limit - ROOM)
            except ValueError as error:  # ROOM frames below the limit: the user's will do
                # No call where it was raised here (a profile function's frame is one more)
                if error.__traceback__.tb_next is not None and raised_by_handler(error):
                    raise
                needed = False
        if needed or raised:
            headroom.users[token] = thread
            limit = sys.getrecursionlimit()  # checked again once counted in: see settle
            if not (headroom.raised and limit == headroom.saved + ROOM):
                headroom.saved, headroom.raised = limit, True
                sys.setrecursionlimit(limit + ROOM)
        collector.hold(token, thread)  # no finaliser runs in the middle of judging
        _judge(live, entry, frame)
    finally:
        # A signal handler may raise as each call returns: each pop in a `finally` of its
        # own. One raising in a settle leaves it to the next settle.
        try:
            collector.holders.pop(token, None)
        finally:
            try:
                headroom.users.pop(token, None)
            finally:
                collector.settle()
                headroom.settle()


def _judge(live: list[Tracer], entry: Entry, frame: FrameType) -> None:
    call = WarpCall(entry, frame)
    error: BaseException | None = None
    for tracer in live:
        try:
            tracer.on_call(call)
        except BaseException as exc:
            error = error or exc
    if sys.getrefcount(call) > _UNSHARED:  # an on_call kept it
        call.complete()
    call.release()
    if error is not None:
        __tracebackhide__ = True  # read by pytest
        raise error.with_traceback(None) if isinstance(error, CallRefused) else error


def _choose_core() -> Core:
    compiled = _compiled_wanted()
    if sys.version_info >= (3, 12):
        from .sysmon import SysMonitoringCore

        return SysMonitoringCore(_active, dispatch, compiled=compiled)
    from .pyprofile import ProfileCore

    return ProfileCore(_active, dispatch, compiled=compiled)


def _compiled_wanted() -> bool:
    """Whether the core's first filter runs in C: on 3.12+ the ``sys.monitoring``
    callback's clean-site test (`_fastclean`), on 3.11 the profile hook's filter
    (`_fastprofile`). Where the extension was built, unless
    ``TRACKGEN_CONTRACT_PURE_PYTHON=1`` asks for the Python test alone (the same
    verdicts, slower; for comparing the two). A bad setting is refused by `check_setting`
    (nothing starts under it), not at import: a traceback from an import line (the
    pytest plugin's, in every pytest run of the environment) would not say where it
    matters."""
    if _SETTING_ERROR is not None or os.environ.get(_PURE_PYTHON) == "1":
        return False
    try:
        if sys.version_info >= (3, 12):
            from . import _fastclean  # noqa: F401
        else:
            from . import _fastprofile  # noqa: F401
    except ImportError:  # not built here (no C compiler at install)
        return False
    return True


def _setting_error() -> str | None:
    setting = os.environ.get(_PURE_PYTHON, "")
    if setting in ("", "0", "1"):
        return None
    return f"{_PURE_PYTHON} must be 1, 0 or empty, not {setting!r}"


def check_setting() -> None:
    """Raise ValueError where ``TRACKGEN_CONTRACT_PURE_PYTHON`` had a bad value when this
    package was imported: no tracer, guard or `keep_armed` block starts then (the
    environment is read once, at import, where the core is chosen)."""
    if _SETTING_ERROR is not None:
        raise ValueError(_SETTING_ERROR)


_PURE_PYTHON = "TRACKGEN_CONTRACT_PURE_PYTHON"
_SETTING_ERROR = _setting_error()
_core = _choose_core()

#: The name of the backend this interpreter uses: ``"sys.monitoring"`` or ``"sys.setprofile"``.
BACKEND: str = _core.name

#: Whether the core's first filter runs in C (`_fastclean` on 3.12+, `_fastprofile` on
#: 3.11): where the extension was built and ``TRACKGEN_CONTRACT_PURE_PYTHON`` is 0 or
#: empty (with a bad value nothing starts: see `check_setting`).
COMPILED: bool = _core.compiled

_started: weakref.WeakSet[Tracer] = weakref.WeakSet()


# The objects passed as `entries` whose tuple is found by identity (a guard's, which it
# passes at every entry); past that many, others are let go, and found by their codes.
_ALIASES_KEPT = 32


class _Lists:
    """One tuple per distinct list of entries, with its kinds of operation: the core's
    books count lists by identity."""

    def __init__(self) -> None:
        self.by_codes: dict[tuple[int, ...], tuple[Entry, ...]] = {}
        self.ops: dict[int, frozenset[str]] = {}  # id(shared tuple) -> its ops
        self.aliases: dict[int, tuple[object, tuple[Entry, ...]]] = {}  # id(given) -> shared
        self.everything: tuple[Entry, ...] | None = None

    def shared(self, entries: Iterable[Entry] | None) -> tuple[Entry, ...]:
        if entries is None:
            if self.everything is None:
                self.everything = self.shared(tuple(installed()))
            return self.everything
        known = self.aliases.get(id(entries))
        if known is not None and known[0] is entries:
            return known[1]
        given = entries
        try:
            entries = tuple(entries)
        except TypeError:
            raise _not_entries(given) from None
        if not all(type(entry) is Entry for entry in entries):
            raise _not_entries(given)
        found = self.by_codes.setdefault(tuple(id(e.code) for e in entries), entries)
        self.ops[id(found)] = frozenset(entry.op for entry in found)
        if len(self.aliases) >= _ALIASES_KEPT:  # lists made afresh each time: a few kept
            # The newest goes (the guards' tuples, found first, stay), in one step that
            # another thread's at the same time cannot break (no iteration, no key read).
            with contextlib.suppress(KeyError):
                self.aliases.popitem()
        self.aliases[id(given)] = (given, found)  # the caller's own object, kept alive
        return found


def _not_entries(given: object) -> TypeError:
    # Made only when raised: the repr of a list of entries is long.
    return TypeError(
        "Tracer(entries=...) takes entries of the registry (see "
        f"trackgen_contract.registry.installed()), or None for all; got {given!r}"
    )


_lists = _Lists()


class Tracer:
    """Calls ``on_call(call)`` with a `WarpCall` for every watched Warp call made in the
    thread and context that started it, violation or not.

    Use it as a context manager, or call `start` and `stop`. It can be stopped from any
    thread, and started again after it stopped. An exception raised by ``on_call`` is
    raised at the Warp call, before the callee runs.

    `entries` narrows what is watched (every registry entry by default). With
    ``every_call=False`` the core may skip the calls at sites already found clean (see
    `fastpath`): guards use it; a tracer that counts or records calls keeps the default.
    `counts` then says which of the skipped calls `clean_calls` counts:
    ``counts(op, module)`` by their kind of operation and their caller's module (None for
    a call Warp's own code makes), asked once per pair in the core's callback; True or
    False, or None where it cannot tell (those calls then go to ``on_call``, as they do
    if it raises); every one when `counts` is None.
    """

    # `clean_calls` in a slot: the compiled callback counts a skipped call there in place
    # (see _fastclean.c), where reading and writing the attribute cost as much as the
    # rest of its test. Every other attribute lives in the instance's dict, as usual.
    __slots__ = ("__dict__", "__weakref__", "clean_calls")

    def __init__(
        self,
        on_call: Callable[[WarpCall], object],
        *,
        entries: Iterable[Entry] | None = None,
        every_call: bool = True,
        counts: Callable[[str, str | None], bool | None] | None = None,
    ) -> None:
        check_setting()
        if not callable(on_call):
            raise TypeError(f"Tracer(on_call): on_call must be callable, got {on_call!r}")
        if not isinstance(every_call, bool):
            raise TypeError(f"Tracer(every_call=...) must be True or False, got {every_call!r}")
        if counts is not None and not callable(counts):
            raise TypeError(f"Tracer(counts=...) must be callable or None, got {counts!r}")
        self.on_call = on_call
        self.entries = _lists.shared(entries)
        self.ops = _lists.ops[id(self.entries)]
        self.every_call = every_call
        self.counts = counts
        #: What `counts` answered, by (op, module): it is asked once for each.
        self.counted: dict[tuple[str, str | None], bool | None] = {}
        #: Calls at clean sites answered without ``on_call`` that `counts` takes
        #: (``every_call=False`` only).
        self.clean_calls = 0
        #: Why the tracer may have missed calls, found when it stopped (its hook replaced
        #: or removed by another tool), or None.
        self.blind: str | None = None
        self._thread: int | None = None  # set last on start: from then on calls are seen
        self._claim = threading.Lock()  # held from start to stop: one start at a time
        self._attached = False

    @property
    def active(self) -> bool:
        """Whether the tracer is started."""
        return self._thread is not None

    @critical.entry
    def start(self) -> Tracer:
        """Start reporting calls made in this thread and context."""
        claimed: list[bool] = []
        critical.protected(
            lambda: self.start_step(claimed), lambda: self.stop_step() if claimed else None
        )
        return self

    @critical.entry
    def stop(self) -> None:
        """Stop reporting (from any thread); the core disarms when no tracer is left."""
        critical.protected(self.stop_step)

    # The changes `start` and `stop` make, for an owner that makes them steps of its own
    # `critical.protected` change (a guard's entry and exit: one change, not two nested).

    def start_step(self, claimed: list[bool]) -> None:
        """What `start` changes; `claimed` is appended to once this tracer is taken, and
        then an undo must call `stop_step`."""
        if _core.inside_callback():
            raise RuntimeError(
                "a guard or Tracer cannot start while a watched Warp call is being judged in "
                "this thread (a signal handler or finaliser ran inside the tracer's "
                "callback): CPython reports no call made there"
            )
        if not self._claim.acquire(blocking=False):
            raise RuntimeError(f"this Tracer is already started (by thread {self._thread})")
        claimed.append(True)
        self.blind = None
        self.counted = {}  # its counts may answer otherwise now
        fastpath.let_go(self)  # what was remembered for it as it was being stopped
        _started.add(self)
        # Attached last but for publishing the tracer: on 3.11 each Python call made once
        # its thread's profile function is in place runs in tracing mode.
        _core.attach(self)
        self._attached = True
        running = _active.get()  # mostly empty: no generator made then
        _active.set((*(t for t in running if t._thread is not None), self) if running else (self,))
        self._thread = threading.get_ident()

    def stop_step(self) -> None:
        """What `stop` changes. Idempotent: also undoes a start cut short at any step."""
        thread, self._thread = self._thread, None
        current = _active.get()
        # By identity (no __eq__ of a subclass runs), and mostly the only one: no loop.
        if current and current[-1] is self and len(current) == 1:
            _active.set(())
        elif any(t is self for t in current):
            _active.set(tuple(t for t in current if t is not self))
        fastpath.let_go(self)
        if self._attached:
            self._attached = False
            self.blind = _core.detach(self, thread if thread is not None else threading.get_ident())
        _started.discard(self)
        headroom.settle()
        if self._claim.locked():
            self._claim.release()

    def answer_repeats(
        self, call: WarpCall, check: fastpath.Check | None, answer: Callable[[], object]
    ) -> None:
        """Answer later calls made at `call`'s site the same way (the same callable from the
        same code under the same globals, `check` of the caller's frame passing, see
        `WarpCall.repeat_check`) by calling ``answer()`` in place of ``on_call``, while
        this tracer is the only one running in its thread that watches the call. For
        calls whose verdict follows from their site alone (see `rules.SiteVerdicts`);
        `call` must be live. A tracer made with ``every_call=True`` is still never skipped
        at a clean site: only the sites it asked for are answered for it.

        ``answer()`` runs inside the core's callback, with nothing around it: it should be
        short. It may refuse a call by returning False, or fail with RecursionError near
        the limit, only before it recorded anything: the call is then judged in full. Any
        other exception reaches the call, as one raised by ``on_call`` does."""
        call.remember_repeat(self, check, answer)

    @critical.entry
    def __enter__(self) -> Tracer:
        return self.start()

    @critical.entry
    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "active" if self.active else "stopped"
        return f"<Tracer {BACKEND} {state} on_call={self.on_call!r}>"


class keep_armed:  # lower case: used like a function, ``with keep_armed():``
    """Keep every watched entry armed until the block ends, so that the guards entered and
    exited inside it touch no instrumentation and keep their caches.

    For the places where guards come and go by the hundred: the pytest plugin holds one
    for the session, the command line for the program's run. Blocks nest; after the
    outermost one nothing is held, as after the last guard. On Python 3.11 no thread is
    hooked by it: a guard still installs its thread's profile function.
    """

    def __init__(self) -> None:
        check_setting()
        self._entries = _lists.shared(None)
        self._held = False

    @critical.entry
    def __enter__(self) -> keep_armed:
        if self._held:
            raise RuntimeError("this keep_armed() block is already entered")
        critical.protected(self._hold, self._release)
        return self

    @critical.entry
    def __exit__(self, *exc_info: object) -> None:
        critical.protected(self._release)

    def _hold(self) -> None:
        _core.hold(self._entries)
        self._held = True

    def _release(self) -> None:
        if self._held:
            self._held = False
            _core.release(self._entries)


def _reset_after_fork() -> None:
    # The child has one thread, the one that forked: whatever the parent's tracers were
    # doing, in this process they are over.
    critical.reset_after_fork()
    collector.reset_after_fork()
    headroom.reset_after_fork()
    for tracer in list(_started):
        tracer._thread = None
        tracer._attached = False
        if tracer._claim.locked():
            tracer._claim.release()
    _started.clear()
    fastpath.forget()  # the parent's answers and its last quiet tracers
    _core.reset_after_fork()


critical.set_idle_check(lambda: not _started and _core.idle())
os.register_at_fork(after_in_child=_reset_after_fork)
