"""Hot paths: functions marked with `hot_path` (or named on the command line).

A call is inside a hot path when a marked function's frame is on the stack below it. That
is read off the stack at each watched Warp call rather than counted with enter/leave
events: ``sys.monitoring`` offers no *local* PY_UNWIND event, and a count that an
exception can skip would drift. The stack never drifts, covers generators (a suspended
generator's frame is off the stack) and callbacks from C, and costs nothing elsewhere.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import CodeType, FrameType
from typing import TypeVar

F = TypeVar("F", bound=Callable)

# id(code) -> code. Keyed by id: hashing a code object hashes its whole bytecode.
_codes: dict[int, CodeType] = {}


def function_code(fn: object) -> CodeType:
    """The code object of a function, method, staticmethod or classmethod (unwrapped)."""
    target = getattr(fn, "__func__", fn)  # staticmethod, classmethod, bound method
    target = inspect.unwrap(target) if callable(target) else target
    code = getattr(target, "__code__", None)
    if not isinstance(code, CodeType):
        raise TypeError(f"hot_path expects a Python function or method, got {fn!r}")
    return code


def hot_path(fn: F) -> F:
    """Mark `fn` as a hot path and return it unchanged (no wrapper).

    The command line (``python -m trackgen_contract.trace``) checks calls made inside
    marked functions, nested calls included, when any hot path is marked.
    """
    mark_code(function_code(fn))
    return fn


def mark_code(code: CodeType) -> None:
    """Mark a code object as a hot path."""
    _codes[id(code)] = code


def unmark_code(code: CodeType) -> None:
    """Forget a hot path marked with `mark_code` (tests and the command line use it)."""
    if _codes.get(id(code)) is code:
        del _codes[id(code)]


def any_marked() -> bool:
    """Whether any hot path is marked (cheaper than `marked`)."""
    return bool(_codes)


def marked() -> tuple[str, ...]:
    """Qualified names of the marked hot paths."""
    return tuple(code.co_qualname for code in _codes.values())


def on_stack(frame: FrameType | None) -> bool:
    """Whether a hot path's frame is `frame` or below it."""
    codes = _codes
    if not codes:
        return False
    while frame is not None:
        if id(frame.f_code) in codes:
            return True
        frame = frame.f_back
    return False
