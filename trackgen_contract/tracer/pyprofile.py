"""The ``sys.setprofile`` core (Python 3.11, which has no ``sys.monitoring``).

A profile function sees every Python call of its thread, so one is installed in each
thread that starts a tracer, and the profile function that was there before (a Python
function, or cProfile's C hook) is put back when that thread's last tracer stops. The
watched code objects are looked up in one shared dict that holds only what the running
tracers need. Where the extension was built, the hook is installed behind a C function
(``_fastprofile.c``) that makes its first test, on the same set, and calls it only for
the events it would act on: ~130 events per launch cost no Python frame; the hook is
still the profile object ``sys.getprofile()`` returns.

A thread's hook can be taken down only by that thread. When its last tracer is stopped
from another thread, the hook is marked closing and puts the previous profile function
back itself at its next event: the stopping thread swaps the hook's code for one without
a filter (see `_close`), so the hook pays nothing for closing while open.

CPython removes a profile function that raises. A strict guard raises from it to refuse a
call (as does any ``on_call`` that raises), and so does a signal handler that raises while
the hook runs (its exception leaves the hook; where it lands in the hook's own frames,
before its ``try``, the handlers' wrappers tell the core), so after such a raise the hook
is gone until a tracer next starts or stops in that thread. Where the exception went
straight up to that point (a strict guard's own exit, say) nothing was missed but what ran
while it was handled (an ``except`` or ``finally`` block on its way, which is not seen);
where the code under test handled it and went on, every tracer that was running in the
thread reports itself blind when it stops: the calls it made meanwhile were not seen. A
hook replaced or removed by anything else (``sys.setprofile(None)``,
``cProfile.Profile().enable()``, a handler the guard did not wrap raising in the hook's own
frames) and not put back is reported when the tracer stops: its calls from then on were
not seen. (One put back before then goes unnoticed: an audit hook would see every swap, but
CPython 3.11 raises an audit event at every ``frame.f_code`` read, and an audit hook cannot
be removed: it would slow every profiled call for the rest of the process.)
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from collections.abc import Callable
from contextvars import ContextVar
from types import FrameType, ModuleType

from .. import codecache
from ..callsite.readback import describe
from ..registry import Entry
from . import critical, fastpath
from .arming import ArmingCore
from .call import Dispatch

Profile = Callable[[FrameType, str, object], None]


class _Hook:
    """One thread's profile function and what it replaced."""

    __slots__ = (
        "closing", "previous", "probed", "profile", "raised", "reenable", "removals",
        "since", "unwinding", "users", "way_back",
    )  # fmt: skip

    def __init__(self, previous: object) -> None:
        self.previous = previous
        # How to put it back, worked out now: the closing hook does it with C calls alone
        # (see on_call). cProfile installs a C hook; sys.getprofile() returns its Profile
        # object, which is not callable: enable() is how it puts its hook back.
        if previous is not None and not callable(previous) and hasattr(previous, "enable"):
            self.way_back, self.reenable = None, previous.enable
        else:
            self.way_back, self.reenable = previous, None
        self.users = 0
        self.raised = False  # an exception raised from it, so CPython removed it
        self.unwinding: BaseException | None = None  # that exception, until put back
        self.removals = 0  # removals after which calls may have gone unseen (_put_back)
        self.since: dict[int, int] = {}  # id(tracer) -> `removals` when it attached
        self.closing = False  # take the hook down at the next event (see _close)
        self.probed = False  # the hook saw `_probe` run (see attach)
        self.profile: Profile | None = None


# The qualified names of the watched code objects: the hooks' first filter. One set for
# the process (there is one core), read as a global: a hook's free variables cost it at
# every event (see `_make_profile`). Updated in place.
_watched_names: set[str] = set()


class ProfileCore(ArmingCore):
    """Installs a profile function in each thread with a running tracer."""

    name = "sys.setprofile"

    def __init__(self, active: ContextVar[tuple], dispatch: Dispatch, compiled: bool) -> None:
        super().__init__()
        self._active = active
        self._dispatch = dispatch
        self.compiled = compiled  # the hooks' first filter in C (_fastprofile.c)
        self._watched: dict[int, Entry] = {}  # id(code) -> entry: what the hooks look for
        self._synced = 0  # the books' version last applied
        self._hooks: dict[int, _Hook] = {}  # thread id -> its hook
        # The code of the hook's own frames: a signal handler's exception raised there
        # leaves the hook, which CPython then removes (see `_put_back`).
        model = _Hook(None)
        own = (self._make_profile(model).__code__, self._make_on_call(model).__code__, _CLOSING)
        critical.watch_hooks(own)
        # The hook and what it calls: CPython reports no event while the hook runs.
        self._callback_codes = frozenset(map(id, (*own, dispatch.__code__)))

    def attach(self, tracer: object) -> None:
        books = self._books
        with books.lock:
            self.hold(tracer.entries)  # type: ignore[attr-defined]
            thread = threading.get_ident()
            hook = self._hooks.get(thread)
            if hook is None or hook.closing:
                hook = self._hooks[thread] = self._new_hook(hook)
            hook.users += 1
            self._put_back(hook, thread, stopping=False)
            hook.raised = False
            hook.since[id(tracer)] = hook.removals
        self._install(hook.profile)  # also after a raise removed it
        hook.probed = False
        _probe()
        if not hook.probed:
            # CPython 3.11 does not always start profiling the frame that is running (a
            # finaliser run by the collector in the middle of other code): refuse.
            self.detach(tracer, thread)
            raise RuntimeError(
                "a guard or Tracer cannot start here: Python 3.11 does not report the calls "
                "of this frame to a profile function installed in it (a finaliser run by the "
                "garbage collector, say)"
            )

    def detach(self, tracer: object, thread: int) -> str | None:
        books = self._books
        with books.lock:
            self.release(tracer.entries)  # type: ignore[attr-defined]
            hook = self._hooks.get(thread)
            if hook is None:
                return None
            self._put_back(hook, thread, stopping=True)
            blind = self._blind(hook, thread, tracer)
            hook.users -= 1
            if hook.users > 0:
                self._reinstall_after_raise(hook, thread)
                return blind
            del self._hooks[thread]
        if thread == threading.get_ident():
            current = sys.getprofile()
            if current is hook.profile or (current is None and hook.raised):
                _restore(hook)  # (after a refusal CPython removed ours: the previous too)
            # else: someone installed their own profiler since: leave it in place
        else:
            _close(hook)
        return blind

    def _put_back(self, hook: _Hook, thread: int, stopping: bool) -> None:
        """A tracer starts or stops in `thread` after an exception raised from the hook
        removed it: the hook goes back, or away. Its tracers missed nothing if a tracer
        stops here as that exception goes straight up through it (a strict guard's exit,
        say); else the code under test handled it and went on, unseen. One raised in the
        hook's own frames, out of reach of its ``try``, is the signal handlers' wrappers'
        to tell (`critical.take_hook_raise`)."""
        landed = critical.take_hook_raise(thread)
        if landed is not None:
            hook.raised, hook.unwinding = True, landed
        if hook.unwinding is None:
            return
        error, hook.unwinding = hook.unwinding, None
        if not (
            stopping
            and thread == threading.get_ident()
            and _went_straight_up(error, self.callback_codes())
        ):
            hook.removals += 1

    def _reinstall_after_raise(self, hook: _Hook, thread: int) -> None:
        # A refusal raised from the hook and CPython removed it: the tracers still running
        # in this thread need it back (unless someone installed another profiler since).
        if hook.raised and thread == threading.get_ident() and sys.getprofile() is None:
            hook.raised = False
            self._install(hook.profile)

    def _install(self, profile: Profile) -> None:
        if not self.compiled:
            sys.setprofile(profile)
            return
        # `profile` behind a C function that calls it for the events its filter takes
        # alone, on the same set: it is still what sys.getprofile() returns.
        fast = _fastprofile()
        fast.watch(_watched_names, _CLOSING)
        fast.install(profile)

    def _sync(self) -> None:
        # The hooks read this dict at every call: update it in place.
        if self._synced == self._books.version:
            return
        self._synced = self._books.version
        wanted = dict(self._books.wanted)
        for key in [k for k in self._watched if k not in wanted]:
            del self._watched[key]
        self._watched.update(wanted)
        names = {entry.code.co_qualname for entry in wanted.values()} | {_PROBE.co_qualname}
        _watched_names.intersection_update(names)
        _watched_names.update(names)
        if not wanted:
            fastpath.forget()  # nothing watched: no cache is worth its memory
            codecache.clear_all()

    def _blind(self, hook: _Hook, thread: int, tracer: object) -> str | None:
        """Why the hook missed calls of `tracer`'s (an exception raised from it while the
        tracer ran, or it was replaced and still is), or None."""
        if hook.since.pop(id(tracer), hook.removals) != hook.removals:
            # Removed until a tracer next started or stopped in this thread.
            return "an exception raised from the profile function made Python 3.11 remove it"
        if thread != threading.get_ident() or hook.raised:
            return None
        current = sys.getprofile()
        if current is hook.profile:
            return None
        return f"the profile function was replaced by {_describe(current)}"

    def _new_hook(self, old: _Hook | None) -> _Hook:
        previous = sys.getprofile()
        if old is not None and previous is old.profile:
            previous = old.previous  # a closing hook of ours is not worth putting back
        hook = _Hook(previous)
        hook.profile = self._make_profile(hook)
        return hook

    def _make_profile(self, hook: _Hook) -> Profile:
        # Runs at every Python call, return and C call of the thread (~130 times per
        # launch; compiled, its first test runs in C and it runs for watched calls
        # alone), so it does the least that tells a call of a watched function from the
        # rest: a constant compared with the event, then the qualified name of the code
        # looked up in a global set (a string whose hash it keeps: less than the id() call
        # and lookup it spares most calls; a plain name would also let every `__init__`
        # through). One free variable: 3.11 copies each into the frame of every call.
        on_call = self._make_on_call(hook)

        def profile(frame: FrameType, event: str, arg: object) -> None:
            if event == "call" and frame.f_code.co_qualname in _watched_names:
                on_call(frame)

        return profile

    def _make_on_call(self, hook: _Hook) -> Callable[[FrameType], None]:
        # A call of a function with a watched qualified name (or any event of a closing
        # hook). A
        # watched call at a clean site or a repeat of a judged breach is answered from the
        # caller's frame (fastpath). One frame, not two: near the recursion limit the
        # hook's frames must fit below the user's call before dispatch widens the room.
        watched, active, dispatch = self._watched.get, self._active.get, self._dispatch
        setprofile = sys.setprofile

        def on_call(frame: FrameType) -> None:
            if hook.closing:  # _restore, inline: no frame deeper than the open hook's
                setprofile(hook.way_back)
                if hook.reenable is not None:
                    hook.reenable()
                return
            try:  # from its first call: a signal handler may raise as any call returns
                code = frame.f_code
                entry = watched(id(code))
                if entry is None:
                    if code is _PROBE:
                        hook.probed = True
                    return
                tracers = active()
                if not tracers:
                    return
                caller, thread = frame.f_back, threading.get_ident()
                if fastpath.answered(tracers, code, caller, thread):
                    return
                if caller and fastpath.answer_repeat(tracers, code, caller, thread):
                    return
                dispatch(tracers, entry, frame)
            except BaseException as error:
                hook.raised = True  # CPython removes the hook as this leaves it
                hook.unwinding = error
                __tracebackhide__ = True  # read by pytest
                raise

        return on_call

    def callback_codes(self) -> frozenset[int]:
        return self._callback_codes

    def reset_after_fork(self) -> None:
        hook = self._hooks.get(threading.get_ident())
        self._books.reset()
        self._watched.clear()
        _watched_names.clear()
        self._hooks.clear()
        self._synced = self._books.version
        if hook is not None and sys.getprofile() is hook.profile:
            _restore(hook)


@functools.cache
def _fastprofile() -> ModuleType:
    # Imported once, where it was built (`compiled`): an import statement in `_install`
    # cost a guard's entry ~0.7 us.
    from . import _fastprofile

    return _fastprofile


def _went_straight_up(error: BaseException, hook_codes: frozenset[int]) -> bool:
    """Whether `error`, raised from the hook, is being handled here having come straight
    up from the call it was raised at: each frame of its traceback, down to the hook's, is
    the caller of the next, so none caught it and raised it again later (a finished
    generator's frame no longer knows its caller: its consumer is taken on trust), and
    none is a coroutine's (the event loop may have run other tasks while it was handled
    there). Where it cannot tell (an exception thrown into a generator, as contextlib
    does), the answer is no. What ran in an ``except`` or ``finally`` block on its way is
    not seen (see README)."""
    if sys.exc_info()[1] is not error:
        return False
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        here, below = tb.tb_frame, tb.tb_next.tb_frame
        if here.f_code.co_flags & _ASYNC:
            return False
        if id(below.f_code) in hook_codes:
            return True
        generator = below.f_code.co_flags & inspect.CO_GENERATOR
        if below.f_back is not here and not (below.f_back is None and generator):
            return False
        tb = tb.tb_next
    return False


_ASYNC = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


def _describe(profile: object) -> str:
    if profile is None:
        # Or CPython removed it after an exception raised in its own frames (by a signal
        # handler the guard did not wrap: one set inside the block).
        return (
            "nothing (sys.setprofile(None), or Python 3.11 removed it after an exception "
            "raised in it: a signal handler's set inside the block, say)"
        )
    return describe(profile)  # the user's object: none of its code runs to name it


def _close(hook: _Hook) -> None:
    """Have `hook` take itself down at its thread's next event (only that thread can): the
    profile function's code is swapped for one without a filter, with the same free
    variable, so that the next event, whatever it is, reaches `on_call`, which sees
    `closing`. (A function's code can be set from any thread, and the next call runs the
    new one; a flag read at every event would cost every open hook at every event.)"""
    hook.closing = True
    hook.profile.__code__ = _CLOSING  # type: ignore[union-attr]


def _closing_profile(on_call: Callable[[FrameType], None]) -> Profile:
    # Made only for its code, which `_close` gives an open hook: the same free variable.
    def closing(frame: FrameType, event: str, arg: object) -> None:
        on_call(frame)  # any event: it takes the hook down (see _close)

    return closing


_CLOSING = _closing_profile(lambda frame: None).__code__


def _probe() -> None:
    """Called once a hook is installed: the hook must see it."""


_PROBE = _probe.__code__


def _restore(hook: _Hook) -> None:
    """Put back the profile function that `hook` replaced."""
    sys.setprofile(hook.way_back)  # type: ignore[arg-type]
    if hook.reenable is not None:
        hook.reenable()
