"""Changes of the tracer's global state that a signal cannot cut in half.

Arming a guard touches several things (the core's users, ``sys.monitoring`` events or a
profile function, a context variable, the guard's own record). A ``KeyboardInterrupt`` or
any exception a signal handler raises lands between two bytecodes, and one that lands
half-way would leave a tool id held or a guard armed that nobody will exit. So every such
change runs through `protected`:

- Python runs signal handlers only in the main thread, and only at a few points: at the
  start of a Python function, at a backward jump and right after a call returns (and
  ``signal.signal`` runs the pending ones before it changes a handler). While guards are
  in use, every Python-level handler is wrapped (`_Wrapper`): a signal that arrives while
  a change is under way, or at the start of one of the entry points that lead to it
  (`entry`: a guard's ``__exit__`` before its change begins, say), is recorded and its
  handler runs when the change is complete; anywhere else the handler runs at once, as
  if nothing were wrapped. The wrappers are taken down when the last guard is gone.
- If the change raised, or a signal arrived during it, `undo` runs before the signals
  are delivered, so the caller sees the exception with nothing done. A signal whose
  handler does not raise does not abandon the change: it is made again.
- The rest of `protected` (the room near the recursion limit given back, see
  `headroom`) still holds signals back. Then, after an exit or a change undone, the
  wrappers come down if no guard is left (not before: a signal could then cut the room's
  put-back in half) and the handlers that waited run. After an entry made, they wait for
  the next change: raised at the end of a guard's ``__enter__``, the exception would
  leave the ``with`` before ``__exit__`` could run (the guard armed for good). So does a
  signal landing in an entry point's own frame after `protected` returned (the end of a
  guard's ``__exit__``). There is always a next change: the wrappers are up only while a
  guard or a `keep_armed` block is, and its end is one.
- The garbage collector is held off during a change, so no finaliser (a generator holding
  a guard, say) re-enters the core half-way through one.

Other threads cannot be interrupted by signals: there, `protected` runs `undo` when the
change raises, and holds the collector off too.
"""

from __future__ import annotations

import _signal
import threading
from collections.abc import Callable
from itertools import compress
from types import CodeType, FrameType
from typing import TypeVar

from ..handlers import SIGNALS, main, wrapper_code
from .collector import collector
from .headroom import headroom

T = TypeVar("T")
F = TypeVar("F", bound=Callable)


class _State:
    """The main thread's open change, what arrived during it, and the wrapped handlers."""

    def __init__(self) -> None:
        self.depth = 0  # > 0: a change is under way in the main thread
        # What arrived during a change: the signal, its frame, the handler it waits to run.
        self.pending: list[tuple[int, FrameType | None, Callable]] = []
        self.wrappers: dict[int, _Wrapper] = {}  # signal -> the wrapper we set, to take down
        self.entries: set[int] = set()  # id(code) of the functions that lead to a change
        self.swapping = False  # handlers are being wrapped or unwrapped
        self.rewrapped = False  # a guard a handler started during a swap wrapped them
        self.arrivals: dict[int, int] = {}  # signal -> times its wrapper ran
        self.idle: Callable[[], bool] = lambda: True  # no guard left: unwrap
        # The code of a profile function's own frames (Python 3.11, see `watch_hooks`),
        # and the last exception a wrapped handler raised in one, until the core asks.
        self.hook_codes: tuple[CodeType, ...] = ()
        self.hook_raise: BaseException | None = None


_state = _State()


def entry(fn: F) -> F:
    """Mark `fn` as a way into a change: a signal arriving at its start waits for it."""
    _state.entries.add(id(fn.__code__))
    return fn


def set_idle_check(idle: Callable[[], bool]) -> None:
    """Tell when no guard is left (the handlers are then unwrapped)."""
    _state.idle = idle


def watch_hooks(codes: tuple[CodeType, ...]) -> None:
    """Name the code of a profile function's own frames, where no ``try`` of the function
    covers a handler's exception: one raised there leaves the profile function, and
    Python 3.11 removes it. The core asks for it with `take_hook_raise`."""
    _state.hook_codes = codes


def take_hook_raise(thread: int) -> BaseException | None:
    """The last exception a wrapped handler raised in a hook's own frame since the last
    asking, where `thread` is the main thread (the only one that runs handlers)."""
    if thread != main[0]:
        return None
    error, _state.hook_raise = _state.hook_raise, None
    return error


class _Wrapper:
    """A wrapped signal handler: it runs the handler later during a change, at once
    anywhere else. Each holds its own: one the program saved from `signal.getsignal()`
    during a guard and sets again later (for any signal) calls the handler it wrapped.
    Once the last guard is gone, only the program's own reference to a wrapper keeps
    its handler alive."""

    __slots__ = ("original",)

    def __init__(self, original: Callable) -> None:
        self.original = original

    def __call__(self, signum: int, frame: FrameType | None) -> object:
        _state.arrivals[signum] = _state.arrivals.get(signum, 0) + 1
        if _state.depth > 0 or _on_the_way_in(frame):
            _state.pending.append((signum, frame, self.original))
            return None
        try:
            return self.original(signum, frame)
        except BaseException as error:
            # Landed in a profile function's own frame, it leaves the function: the core
            # is told it was removed (no call here: another signal would land in it).
            if frame is not None and frame.f_code in _state.hook_codes:
                _state.hook_raise = error
            raise

    def __repr__(self) -> str:
        return f"<trackgen_contract's wrapper of {self.original!r}>"


wrapper_code(_Wrapper.__call__.__code__)


def is_wrapper(code: object) -> bool:
    """Whether `code` is the wrappers' own: a traceback of an exception a wrapped handler
    raised (a Ctrl-C's KeyboardInterrupt) has a frame of it last, which Python's has not."""
    return code is _Wrapper.__call__.__code__


_LOOK_UP = 3  # frames: an entry point, or a callback a hook of ours runs at its start


def _on_the_way_in(frame: FrameType | None) -> bool:
    """Whether `frame` is (at the start of) a way into a change. On 3.11 the profile
    function of a guard still in place runs at the call of its own ``__exit__``: the
    signal lands in it, one frame above. The frames of a wrapper that was deciding when
    this signal came (and of this look-up) are passed over, not counted: a signal landing
    in them is where the signal that wrapper decides about landed."""
    entries, looked = _state.entries, 0
    while frame is not None and looked < _LOOK_UP:
        code = frame.f_code
        if id(code) in entries:
            return True
        if code is not _WRAPPER_CODE and code is not _LOOK_UP_CODE:
            looked += 1
        frame = frame.f_back
    return False


_WRAPPER_CODE, _LOOK_UP_CODE = _Wrapper.__call__.__code__, _on_the_way_in.__code__


# The loops of `_wrap` and `_unwrap` run in functions of their own, called from inside
# `try`, never written in it: CPython (3.11 to 3.14) may look up the handler of an
# exception raised at a loop's backward jump (where a signal handler runs) with the
# instruction before the jump, which the exception table can leave uncovered, and then
# skip the `finally` (python/cpython#108214, #130279). `swapping` stayed set, no handler
# was wrapped again, and the next Ctrl-C cut guards' exits in half.


@entry
def _wrap() -> None:
    """Wrap every Python-level handler not wrapped yet (the user may have set one)."""
    if _state.swapping:
        # A handler not wrapped yet ran in the middle of a swap (this thread's: only the
        # main one swaps) and is starting a guard. Wrap them all now, or a signal landing
        # in that guard's change would run its handler there; the outer swap reads each
        # handler again (an unwrapping one then goes round once more).
        _state.rewrapped = True
        _wrap_each()
        return
    _state.swapping = True
    try:
        _wrap_each()
    finally:
        _state.swapping = False


@entry
def _wrap_each() -> None:
    # Mostly every handler is wrapped already (guards entered inside keep_armed): told
    # by C calls alone (types and identities, not ==, which could run a handler's __eq__).
    handlers = list(map(_signal.getsignal, SIGNALS))
    if set(map(type, filter(callable, handlers))) <= {_Wrapper}:
        return
    # The busiest signal first: until it is wrapped its own handler may raise here, and
    # the ones wrapped before it would stay wrapped with no guard to take them down. Only
    # the signals with a Python-level handler are sorted (sorting all 60 cost more than
    # the rest of the wrapping), and each handler is read again as it is swapped: one
    # may have run meanwhile.
    python_level = compress(SIGNALS, map(callable, handlers))
    for signum in sorted(python_level, key=lambda signum: -_state.arrivals.get(signum, 0)):
        handler = _signal.getsignal(signum)
        if type(handler) is not _Wrapper and callable(handler):
            # Known before it is set, and the same one for the same handler: a handler that
            # signal.signal runs first may start a guard that wraps this signal too.
            wrapper = _state.wrappers.get(signum)
            if wrapper is None or wrapper.original is not handler:
                _state.wrappers[signum] = wrapper = _Wrapper(handler)
            _signal.signal(signum, wrapper)


@entry
def _unwrap() -> None:
    """Put the original handlers back (a handler the user set meanwhile stays). A signal
    pending at each swap is handled by the wrapper, which keeps it for `_deliver`; one
    that lands in the instant after a swap meets its original handler."""
    if _state.swapping:
        return  # nested in a swap of this thread's: the outer one finishes it
    _state.swapping = True
    try:
        error = _unwrap_each()
    finally:
        _state.swapping = False
    if error is not None:
        raise error


@entry
def _unwrap_each() -> BaseException | None:
    """Unwrap every handler; the first exception a swap raised is returned, not raised:
    the other handlers are unwrapped first."""
    error: BaseException | None = None
    _state.rewrapped = False  # before `found` is read: set again, it means read again
    found = dict(_state.wrappers)
    while True:
        # The busiest signal last: once unwrapped, its own handler may raise at the next
        # point where handlers run, and the others would stay wrapped.
        order = sorted(found.items(), key=lambda i: _state.arrivals.get(i[0], 0))
        for signum, wrapper in order:
            try:
                current = _signal.getsignal(signum)
                if type(current) is _Wrapper:  # ours, or one the program saved and set again
                    _signal.signal(signum, current.original)
                # Not if a guard a handler started meanwhile wrapped it again.
                if (
                    _state.wrappers.get(signum) is wrapper
                    and _signal.getsignal(signum) is not wrapper
                ):
                    del _state.wrappers[signum]
            except BaseException as exc:
                error = error or exc
        if not _state.rewrapped:
            return error
        if not _state.idle():  # a guard a handler started is still in use: wrap them all
            try:
                _wrap_each()
            except BaseException as exc:
                error = error or exc
            return error
        # Else a guard came and went in a handler, wrapping them again: once more, over
        # what is set now (that guard may have set one between a check above and its `del`).
        _state.rewrapped = False
        found = dict(_state.wrappers)
        for signum in SIGNALS:
            handler = _signal.getsignal(signum)
            if type(handler) is _Wrapper:
                found.setdefault(signum, handler)


@entry
def protected(change: Callable[[], T], undo: Callable[[], object] | None = None) -> T:
    """Run `change` so that no signal handler runs until it is complete (or, if it raised
    or a signal arrived meanwhile, undone by `undo`); then deliver the signals. Near the
    recursion limit it is given room first (see `headroom`): a RecursionError can only
    come before the change begins."""
    thread = threading.get_ident()
    if thread == main[0] and _state.depth > 0:
        # Nested in an open change of this thread, which has the room and holds the
        # collector off: undone with it if it raises.
        _state.depth += 1
        try:
            return _undone_on_error(change, undo)
        finally:
            _state.depth -= 1
    token, entered = object(), False
    try:
        headroom.reserve(token, thread)
        if thread != main[0]:  # no signal handler runs here
            return _collected(lambda: _undone_on_error(change, undo))
        result = _until_made(change, undo)
        entered = undo is not None
        return result
    finally:
        # The change stands or was undone. A signal arriving from here on waits (see
        # `_Wrapper`) while the room is given back: no frame deeper than settle's is
        # made, and the token goes out inline. Only then may the wrappers come down (a
        # signal would then cut the put-back in half) and the signals that waited run;
        # after an entry made, they wait for the next change (see the module).
        if headroom.users.pop(token, None) is not None:
            headroom.settle()
        if thread == main[0] and not entered:
            _finish()


@entry
def _until_made(change: Callable[[], T], undo: Callable[[], object] | None) -> T:
    """Attempt `change` until it is made (a signal whose handler does not raise lets it
    be made again; see the module)."""
    while True:
        done, result = _attempt(change, undo)
        if done:
            return result  # type: ignore[return-value]


@entry
def _undone_on_error(change: Callable[[], T], undo: Callable[[], object] | None) -> T:
    try:
        return change()
    except BaseException:
        if undo is not None:
            undo()
        raise


class _Interrupted(Exception):
    """A signal arrived during a change that must then be undone (raised internally)."""


@entry
def _attempt(change: Callable[[], T], undo: Callable[[], object] | None) -> tuple[bool, T | None]:
    if undo is not None or not _state.wrappers:
        # An entry (an exit relies on the wrappers its entry put in place; a handler set
        # meanwhile is wrapped by the next entry). A pending signal may be handled here:
        # nothing has changed yet.
        _wrap()
    _state.depth = 1  # and no call before the `try`: the depth must not outlive the attempt
    try:
        result = _collected(change)
        # The last look: from here to the return there is no point where a handler runs,
        # and what arrives later waits (see the module).
        if _state.pending and undo is not None:
            raise _Interrupted
    except _Interrupted:
        _undo_and_deliver(undo)  # a handler that raises ends it here; else it is made again
        return False, None
    except BaseException:
        _undo_and_deliver(undo)
        raise
    _state.depth = 0
    return True, result  # no call since the last look: for an entry, nothing landed


@entry
def _undo_and_deliver(undo: Callable[[], object] | None) -> None:
    """Undo a change that raised or was interrupted, then close it and deliver what
    arrived, even where the undo raised too (a RecursionError): else the change stayed
    open, and every later signal waited for good."""
    try:
        if undo is not None:
            _collected(undo)
    finally:
        _state.depth = 0
        if _state.pending:
            _deliver()


@entry
def _collected(run: Callable[[], T]) -> T:
    """``run()`` with the garbage collector held off."""
    token = object()
    try:
        collector.hold(token, threading.get_ident())
        return run()
    finally:
        collector.holders.pop(token, None)
        collector.settle()


@entry
def _finish() -> None:
    """After a change and its room's put-back: the original handlers back if no guard
    is left, then the handlers of the signals that waited."""
    if _state.idle():
        _unwrap()
    if _state.pending:
        _deliver()


@entry
def _deliver() -> None:
    """Run the handlers of the signals that waited, in order, and of those that arrive
    meanwhile (a handler may raise a signal: it waits too, here). Once all have run, the
    last exception one raised is raised, each earlier one its ``__context__``: as Python
    shows a second handler's exception, raised while the first one's is handled."""
    error: BaseException | None = None
    while _state.pending:
        pending, _state.pending = _state.pending, []
        for signum, frame, handler in pending:
            try:
                handler(signum, frame)
            except BaseException as exc:
                error = _chained(exc, error)
    if error is not None:
        raise error


def _chained(later: BaseException, earlier: BaseException | None) -> BaseException:
    """`later`, with `earlier` at the end of its chain of contexts where the two chains
    share no exception (a handler may raise the same exception again, or one it caught):
    a chain never loops."""
    if earlier is None:
        return later
    chain = _contexts(later)
    if chain.keys().isdisjoint(_contexts(earlier)):
        chain[next(reversed(chain))].__context__ = earlier
    return later


def _contexts(error: BaseException) -> dict[int, BaseException]:
    """`error` and its chain of contexts, by id, in order (a loop, which CPython never
    makes, is cut where it comes back)."""
    chain: dict[int, BaseException] = {}
    link: BaseException | None = error
    while link is not None and id(link) not in chain:
        chain[id(link)] = link
        link = link.__context__
    return chain


def reset_after_fork() -> None:
    """A forked child's state: it has no guard (its parent's are over), so the original
    handlers come back. (Its main thread, the one that forked, `handlers` sets.)"""
    _state.depth = 0
    _state.pending = []
    _state.hook_raise = None
    _state.swapping = False  # forked while another thread swapped handlers: not here
    _unwrap()
