"""Telling an exception of the program's signal handlers from a failure of this package's.

Python runs a signal handler between two bytecodes of whatever runs in the main thread,
this package's own code included, and what the handler raises comes out there. Code of
this package's that catches its own failures (`except ValueError` around a frame lookup,
`except Exception` while a call is judged) must pass such an exception on, whatever its
type: it is the program's (a timeout, a Ctrl-C turned into an exception), and would be
lost, or turned into a verdict, if taken for ours.

The handler's frame is in the exception's traceback: a guard's wrapper of the handler
(`tracer.critical`), or the handler itself where the program set it after the guards
wrapped them. Only Python functions leave a frame: a handler that is a C function (a
builtin) is not told apart.
"""

from __future__ import annotations

import _signal
import os
import threading
from _thread import get_ident as _get_ident
from functools import partial
from types import CodeType, FunctionType, MethodType

#: Every signal whose handler Python lets a program set.
SIGNALS = tuple(s for s in _signal.valid_signals() if s not in (_signal.SIGKILL, _signal.SIGSTOP))
_NESTING = 8  # levels of partials, bound methods and callable instances looked through
# Read off the type itself, past any metaclass (whose attributes could be the user's).
_type_mro = type.__dict__["__mro__"].__get__
_type_dict = type.__dict__["__dict__"].__get__

# An exception's links and a partial's function as stored, past any attribute of the
# program's class (a property, __getattribute__).
_traceback_of = BaseException.__dict__["__traceback__"].__get__
_cause_of = BaseException.__dict__["__cause__"].__get__
_context_of = BaseException.__dict__["__context__"].__get__
_partial_func = partial.__dict__["func"].__get__

#: The main thread's id as ``main[0]``, read in place (threading.main_thread() is a call: a
#: frame more near the recursion limit); a forked child's main thread is the one that forked.
main = [threading.main_thread().ident]
os.register_at_fork(after_in_child=lambda: main.__setitem__(0, _get_ident()))

_wrappers: set[int] = set()  # id() of the code of the guards' wrappers of handlers


def wrapper_code(code: CodeType) -> None:
    """Count `code` as a wrapper of the program's handlers: its frame marks theirs."""
    _wrappers.add(id(code))


def raised_by_handler(error: BaseException) -> bool:
    """Whether `error` came out of a signal handler of the program's: its own exception, to
    pass on, never taken for a failure of this package's. Also where code on the way (a
    generator's StopIteration made a RuntimeError, zipimport's own error) caught it and
    raised another in its place: that one is passed on, the handler's as its context."""
    # One frame until the handlers set now are read: it is called where an error is
    # caught, near the recursion limit too, and within a guard's entry and exit, where a
    # signal landing more than a few frames deep is not seen to be on the way in.
    try:
        if _get_ident() != main[0]:
            return False  # Python runs signal handlers in the main thread alone
        codes: list[int] = []
        frames: list[int] = []  # of the links so far: one raised in place of another caught it
        link: BaseException | None = error
        made = False  # `link` is the StopIteration of a generator's RuntimeError
        for _ in range(_NESTING):  # the exception, and those it was raised in place of
            tb = None if link is None else _traceback_of(link)
            if tb is None or (frames and not made and id(tb.tb_frame) not in frames):
                break  # not caught on the way (one the program was handling as it called)
            single = tb.tb_next is None  # raised where it was caught: no handler in between
            while tb is not None:
                code = id(tb.tb_frame.f_code)
                if code in _wrappers:
                    return True
                if not single:
                    codes.append(code)
                frames.append(id(tb.tb_frame))
                tb = tb.tb_next
            cause = _cause_of(link)  # type: ignore[arg-type]
            made = type(link) is RuntimeError and type(cause) is StopIteration
            link = cause or _context_of(link)  # type: ignore[arg-type]
        return bool(codes) and not _handler_codes().isdisjoint(codes)
    except RecursionError as limit:  # caught near the recursion limit: no room to tell
        if type(limit) is not RecursionError:
            raise  # a handler's own subclass, landing here: CPython raises the class itself
        return False


def _handler_codes() -> frozenset[int]:
    """The ids of the code objects of the Python-level signal handlers set now, read
    without running any code of the program's (no attribute it defines)."""
    found = (_code_of(_signal.getsignal(signum)) for signum in SIGNALS)
    return frozenset(id(code) for code in found if code is not None)


def _code_of(handler: object) -> CodeType | None:
    """The code a handler runs first: a function's, through bound methods, partials and
    instances whose class defines ``__call__`` (a few levels: one nested deeper is not
    recognised)."""
    for _ in range(_NESTING):
        kind = type(handler)
        if kind is FunctionType:
            return handler.__code__  # type: ignore[attr-defined]
        if kind is MethodType or kind is staticmethod:
            handler = handler.__func__  # type: ignore[attr-defined]
        elif issubclass(kind, partial):
            handler = _partial_func(handler)
        elif callable(handler):
            handler = _call_of(kind)
        else:
            return None  # SIG_DFL, SIG_IGN, or None (set from C)
    return None


def _call_of(kind: type) -> object:
    """``__call__`` as the first class of `kind`'s MRO that defines it stores it."""
    for klass in _type_mro(kind):
        found = _type_dict(klass).get("__call__")
        if found is not None:
            return found
    return None
