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
from collections.abc import Callable, Mapping
from types import CodeType, FrameType
from typing import TypeVar

from .sites import module_name, plain_text

F = TypeVar("F", bound=Callable)

#: What marks a hot path, as tallies count it: id() of a marked code object, or the
#: (module, qualified name) of a function marked by name.
Key = int | tuple[str, str]

# id(code) -> (code, the module of its function). Keyed by id: hashing a code object hashes
# its whole bytecode. The module tells two marked functions of one qualified name apart.
_codes: dict[int, tuple[CodeType, str]] = {}
# qualified name -> the modules whose function of that name is a hot path (see mark_name)
_names: dict[str, set[str]] = {}


def function_code(fn: object) -> CodeType:
    """The code object of a function, method, staticmethod or classmethod (unwrapped)."""
    code = getattr(_unwrapped(fn), "__code__", None)
    if not isinstance(code, CodeType):
        raise TypeError(f"hot_path expects a Python function or method, got {fn!r}")
    return code


def _unwrapped(fn: object) -> object:
    target = getattr(fn, "__func__", fn)  # staticmethod, classmethod, bound method
    return inspect.unwrap(target) if callable(target) else target


def hot_path(fn: F) -> F:
    """Mark `fn` as a hot path and return it unchanged (no wrapper).

    The command line (``python -m trackgen_contract.trace``) checks calls made inside
    marked functions, nested calls included, when any hot path is marked.
    """
    mark_function(fn)
    return fn


def mark_function(fn: object) -> None:
    """Mark a function, method, staticmethod or classmethod as a hot path (see
    `function_code`), known in reports by its module where its name is not enough."""
    code = function_code(fn)
    # The module as its frames run it (its globals' __name__, as a hot path marked by name
    # is matched), not __module__, which a decorator may have set to another.
    globals_ = getattr(_unwrapped(fn), "__globals__", None)
    named = isinstance(globals_, dict) and issubclass(type(dict.get(globals_, "__name__")), str)
    mark_code(code, module_name(globals_) if named else plain_text(code.co_filename))


def mark_code(code: CodeType, module: str) -> None:
    """Mark a code object, of a function of `module`, as a hot path."""
    _codes[id(code)] = (code, module)


def mark_name(module: str, qualname: str) -> None:
    """Mark the function `qualname` of `module` as a hot path by its name, for a module not
    imported yet (the command line's ``--hot``, which must not import it ahead of the
    program): a frame of code of that qualified name run under that module's globals."""
    _names.setdefault(qualname, set()).add(module)


def unmark_code(code: CodeType) -> None:
    """Forget a hot path marked with `mark_code` (tests and the command line use it)."""
    known = _codes.get(id(code))
    if known is not None and known[0] is code:
        del _codes[id(code)]


def any_marked() -> bool:
    """Whether any hot path is marked (cheaper than `marked`)."""
    return bool(_codes or _names)


def marked() -> dict[str, tuple[Key, ...]]:
    """The marked hot paths by the names reports show, each with what marks it (see
    `keys_on_stack`): a function marked by code shows its qualified name, or
    ``module:qualname`` where another hot path is marked with that qualified name (in
    another module, or by name); one marked by name shows ``module:qualname``. Hot paths
    of one module and qualified name (one function marked both ways, a module reloaded)
    share their name."""
    modules_of: dict[str, set[str]] = {}
    for code, module in _codes.values():
        modules_of.setdefault(plain_text(code.co_qualname), set()).add(module)
    found: dict[str, tuple[Key, ...]] = {}
    for key, (code, module) in _codes.items():
        name = plain_text(code.co_qualname)
        alone = len(modules_of[name]) == 1 and name not in _names
        label = name if alone else _label(module, name)
        found[label] = (*found.get(label, ()), key)
    for name, modules in _names.items():
        for module in sorted(modules):
            label = _label(module, name)
            found[label] = (*found.get(label, ()), (module, name))
    return found


def ran(keys: tuple[Key, ...], tally: Mapping[Key, int]) -> bool:
    """Whether `tally` (calls counted by `keys_on_stack`) has a call made inside the hot
    path that `keys` mark."""
    return any(tally.get(key) for key in keys)


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


def keys_on_stack(frame: FrameType | None) -> set[Key]:
    """What marks the hot paths whose frames are `frame` or below it (see `Key`)."""
    found: set[Key] = set()
    while frame is not None:
        if id(frame.f_code) in _codes:
            found.add(id(frame.f_code))
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


def _marked_by_name(frame: FrameType) -> tuple[str, str] | None:
    """The (module, qualified name) that marks the hot path `frame` runs as one marked by
    name (see `mark_name`), if it does. Its module is the globals' own ``__name__``, read
    as a plain dict would (no code of the program runs)."""
    qualname = plain_text(frame.f_code.co_qualname)
    modules = _names.get(qualname)
    if modules is None:
        return None
    module = module_name(frame.f_globals)
    return (module, qualname) if module in modules else None


def _label(module: str, qualname: str) -> str:
    return f"{module}:{qualname}"
