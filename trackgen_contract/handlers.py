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
from functools import partial
from types import CodeType, FunctionType, MethodType

#: Every signal whose handler Python lets a program set.
SIGNALS = tuple(s for s in _signal.valid_signals() if s not in (_signal.SIGKILL, _signal.SIGSTOP))
_NESTING = 8  # levels of partials, bound methods and callable instances looked through
# Read off the type itself, past any metaclass (whose attributes could be the user's).
_type_mro = type.__dict__["__mro__"].__get__
_type_dict = type.__dict__["__dict__"].__get__

_wrappers: set[int] = set()  # id() of the code of the guards' wrappers of handlers


def wrapper_code(code: CodeType) -> None:
    """Count `code` as a wrapper of the program's handlers: its frame marks theirs."""
    _wrappers.add(id(code))


def raised_by_handler(error: BaseException) -> bool:
    """Whether `error` came out of a signal handler of the program's: its own exception, to
    pass on, never taken for a failure of this package's. A StopIteration that a generator
    of this package's turned into a RuntimeError is looked for as its cause."""
    # Called where an error is caught, near the recursion limit too: one frame, until the
    # handlers set now are read.
    cause = error.__cause__
    if type(error) is RuntimeError and type(cause) is StopIteration:
        error = cause
    tb = error.__traceback__
    if tb is None or tb.tb_next is None:
        return False  # raised in the frame that caught it: no handler ran in between
    codes = []
    while tb is not None:
        code = id(tb.tb_frame.f_code)
        if code in _wrappers:
            return True
        codes.append(code)
        tb = tb.tb_next
    try:
        return not _handler_codes().isdisjoint(codes)
    except RecursionError:  # no room to read them: taken for the package's own
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
        if kind is MethodType:
            handler = handler.__func__  # type: ignore[attr-defined]
        elif kind is partial:
            handler = handler.func  # type: ignore[attr-defined]
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
