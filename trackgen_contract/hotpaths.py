"""Hot paths: functions marked with `hot_path` (or named on the command line).

A call is inside a hot path when a marked function's frame is on the stack below it. That
is read off the stack at each watched Warp call rather than counted with enter/leave
events: ``sys.monitoring`` offers no *local* PY_UNWIND event, and a count that an
exception can skip would drift. The stack never drifts, covers generators (a suspended
generator's frame is off the stack) and callbacks from C, and costs nothing elsewhere.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from types import CodeType, FrameType
from typing import TypeVar

F = TypeVar("F", bound=Callable)

# id(code) -> code. Keyed by id: hashing a code object hashes its whole bytecode.
_codes: dict[int, CodeType] = {}
# qualified name -> the modules whose function of that name is a hot path (see mark_name)
_names: dict[str, set[str]] = {}


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


def mark_name(module: str, qualname: str) -> None:
    """Mark the function `qualname` of `module` as a hot path by its name, for a module not
    imported yet (the command line's ``--hot``, which must not import it ahead of the
    program): a frame of code of that qualified name run under that module's globals."""
    _names.setdefault(qualname, set()).add(module)


def unmark_code(code: CodeType) -> None:
    """Forget a hot path marked with `mark_code` (tests and the command line use it)."""
    if _codes.get(id(code)) is code:
        del _codes[id(code)]


def any_marked() -> bool:
    """Whether any hot path is marked (cheaper than `marked`)."""
    return bool(_codes or _names)


def marked() -> tuple[str, ...]:
    """The names of the marked hot paths, as reports show them: the qualified name of a
    marked function, ``module:qualname`` of one marked by name."""
    by_code = (code.co_qualname for code in _codes.values())
    by_name = (_label(module, name) for name, modules in _names.items() for module in modules)
    return tuple(dict.fromkeys([*by_code, *by_name]))


def on_stack(frame: FrameType | None) -> bool:
    """Whether a hot path's frame is `frame` or below it."""
    codes, names = _codes, _names
    if not codes and not names:
        return False
    while frame is not None:
        if id(frame.f_code) in codes or (names and _marked_by_name(frame)):
            return True
        frame = frame.f_back
    return False


def names_on_stack(frame: FrameType | None) -> set[str]:
    """The names (as `marked` gives them) of the hot paths whose frames are `frame` or
    below it."""
    found = set()
    while frame is not None:
        if id(frame.f_code) in _codes:
            found.add(frame.f_code.co_qualname)
        by_name = _marked_by_name(frame)
        if by_name is not None:
            found.add(by_name)  # (a function marked both ways counts for both)
        frame = frame.f_back
    return found


def never_imported() -> dict[str, str]:
    """The hot paths marked by name whose module is not imported (yet), by name (as
    `marked` gives it) -> module."""
    return {
        _label(module, qualname): module
        for qualname, modules in _names.items()
        for module in modules
        if module not in sys.modules
    }


def _marked_by_name(frame: FrameType) -> str | None:
    """The name of the hot path `frame` runs as one marked by name (see `mark_name`), if it
    does. Its module is the globals' own ``__name__``, read as a plain dict would (no code
    of the program runs)."""
    qualname = frame.f_code.co_qualname
    modules = _names.get(qualname)
    if modules is None:
        return None
    module = dict.get(frame.f_globals, "__name__")
    return _label(module, qualname) if type(module) is str and module in modules else None


def _label(module: str, qualname: str) -> str:
    return f"{module}:{qualname}"
