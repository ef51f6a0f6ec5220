"""Changes of the tracer's global state that a signal cannot cut in half.

Arming a guard touches several things (the core's users, ``sys.monitoring`` events or a
profile function, a context variable, the guard's own record). A ``KeyboardInterrupt`` or
any exception a signal handler raises lands between two bytecodes, and one that lands
half-way would leave a tool id held or a guard armed that nobody will exit. So every such
change runs through `protected`:

- Python runs signal handlers only in the main thread, and only at a few points: at the
  start of a Python function, at a backward jump and right after a call returns. In the
  main thread `protected` first swaps every Python-level handler for one that records
  the signal (one C call, so no handler can run half-way through the swap), runs the
  change, then puts the handlers back (one C call again) and re-raises each recorded
  signal, whose own handler then runs as usual, late but not lost.
- If the change raised, or a signal arrived during it, `undo` runs (also deferred)
  before the signals are delivered, so the caller sees the exception with nothing done.
- The swap is skipped when a section is already open in this thread (a finaliser that
  exits a guard while another guard is entering): the outermost section delivers.

Other threads cannot be interrupted by signals: there, `protected` runs `undo` when the
change raises, and nothing more.
"""

from __future__ import annotations

import _signal
import threading
from collections import deque
from collections.abc import Callable
from itertools import compress, repeat
from typing import TypeVar

T = TypeVar("T")

# Every signal whose handler Python lets us replace.
_SIGNALS = tuple(s for s in _signal.valid_signals() if s not in (_signal.SIGKILL, _signal.SIGSTOP))
_consume = deque  # deque(iterator, 0) runs an iterator of C calls inside one C call


class _Sections:
    """The main thread's open sections: how deep, what arrived, what was replaced."""

    def __init__(self) -> None:
        self.main = threading.main_thread().ident
        self.depth = 0
        self.pending: list[int] = []
        self.replaced: dict[int, object] = {}


_state = _Sections()


def _record(signum: int, frame: object) -> None:
    """The handler while a section is open: remember the signal for later."""
    if _state.depth > 0:
        _state.pending.append(signum)
        return
    # A section's restore never ran (the process forked inside one): put the original
    # back and let it handle this signal.
    original = _state.replaced.pop(signum, _signal.default_int_handler)
    _signal.signal(signum, original)
    if callable(original):
        original(signum, frame)


def _python_handled() -> list[int]:
    # C-level iteration throughout: this runs twice per guard.
    handled = list(compress(_SIGNALS, map(callable, map(_signal.getsignal, _SIGNALS))))
    return [s for s in handled if _signal.getsignal(s) is not _record]


def protected(change: Callable[[], T], undo: Callable[[], object] | None = None) -> T:
    """Run `change` so that no signal handler runs until it is complete (or, if it raised
    or a signal arrived meanwhile, undone by `undo`); then deliver the signals.

    A signal whose handler returns (does not raise) does not abandon the change: it is
    undone, the handler runs, and the change is made again.
    """
    if threading.get_ident() != _state.main:
        return _plain(change, undo)
    if _state.depth > 0:  # nested in an open section of this thread
        _state.depth += 1
        try:
            return _plain(change, undo)
        finally:
            _state.depth -= 1
    while True:
        done, result = _attempt(change, undo)
        if done:
            return result  # type: ignore[return-value]


def _plain(change: Callable[[], T], undo: Callable[[], object] | None) -> T:
    try:
        return change()
    except BaseException:
        if undo is not None:
            undo()
        raise


def _attempt(change: Callable[[], T], undo: Callable[[], object] | None) -> tuple[bool, T | None]:
    signals = _python_handled()  # nothing has changed yet: an interrupt here is harmless
    saved: list = []
    swap = map(_signal.signal, signals, repeat(_record))
    _state.depth = 1  # before the swap: from its first instant the new handler records
    try:
        saved.extend(swap)  # one C call: every handler replaced, originals kept in order
        _state.replaced = dict(zip(signals, saved, strict=True))
        result = change()
        if _state.pending and undo is not None:
            raise _Interrupted
    except _Interrupted:
        undo()  # type: ignore[misc]
        _close(signals, saved)  # a handler that raises ends it here
        return False, None
    except BaseException:
        if not saved:  # the interrupt came before the swap: swap now, then undo
            saved.extend(swap)
        if undo is not None:
            undo()
        _close(signals, saved)
        raise
    _close(signals, saved)
    return True, result


class _Interrupted(Exception):
    """A signal arrived during a change that must then be undone (raised internally)."""


def _close(signals: list[int], saved: list) -> None:
    """Put the handlers back and deliver what arrived, in order."""
    restore = map(_signal.signal, signals, saved)
    pending, _state.pending, _state.replaced = _state.pending, [], {}
    _state.depth = 0
    _consume(restore, 0)  # one C call; from here on the originals handle what comes
    for signum in dict.fromkeys(pending):
        _signal.raise_signal(signum)


def reset_after_fork() -> None:
    """A forked child's state: its main thread is the one that forked."""
    _state.main = threading.get_ident()
    _state.depth = 0
    _state.pending = []
