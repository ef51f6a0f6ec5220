"""Which parameters did the caller pass? The call site's shape, read against the callee.

The callable decides what is bound ahead of the call's own arguments: nothing for a plain
function, ``self`` for a bound method or a class, the stored arguments of a
``functools.partial``. It is read back from the caller's frame (`readback`); a callable
that cannot be read, or one that calls the callee later from C code (``map``,
``Context.run``), makes the answer unknown (None), never a guess.
"""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass
from types import CodeType, FrameType

from . import readback
from .analysis import CallSite
from .readback import Unresolved
from .values import Args, CallShape, Kwargs, Name, Result, Star


@dataclass(frozen=True)
class Bound:
    """What a callable binds before the call's own arguments: ``self``, partial's args."""

    positional: int
    names: frozenset[str]

    def then(self, positional: int, names: frozenset[str] = frozenset()) -> Bound:
        return Bound(self.positional + positional, self.names | names)


PLAIN = Bound(0, frozenset())  # a plain function binds nothing ahead
_type_call = type.__dict__["__call__"]


def binding(func: object, code: CodeType) -> Bound | None:
    """What calling `func` binds ahead of the call's arguments when it runs `code`, or None
    when it does not run `code` with them (a builtin that calls it later, another
    function)."""
    kind = type(func)
    if kind is types.FunctionType:
        return PLAIN if func.__code__ is code else None  # type: ignore[attr-defined]
    if kind is types.MethodType:
        inner = binding(func.__func__, code)  # type: ignore[attr-defined]
        return inner and inner.then(1)
    if kind is functools.partial:
        inner = binding(func.func, code)  # type: ignore[attr-defined]
        keywords = func.keywords  # type: ignore[attr-defined]
        if inner is None or type(keywords) is not dict:
            return None
        if not all(type(name) is str for name in keywords):
            return None  # a str subclass's hash and == are the user's code
        return inner.then(len(func.args), frozenset(keywords))  # type: ignore[attr-defined]
    if issubclass(kind, type) and readback.class_lookup(kind, "__call__") is _type_call:
        init = readback.class_lookup(func, "__init__")  # type: ignore[arg-type]
        if type(init) is types.FunctionType and init.__code__ is code:
            return PLAIN.then(1)  # the new instance is bound as self
    return None


def _count(args: object, frame: FrameType) -> int:
    """How many positional arguments an argument list passes."""
    if type(args) is not Args:
        return readback.sequence_length(args, frame)
    total = 0
    for item in args.items:
        total += readback.sequence_length(item.value, frame) if type(item) is Star else 1
    return total


def _names(kwargs: object, frame: FrameType) -> frozenset[str]:
    """Which keywords a keyword dict passes."""
    if type(kwargs) is not Kwargs:
        return readback.mapping_keys(kwargs, frame)
    names: set[str] = set()
    for part in kwargs.items:
        if type(part) is Star:
            names |= readback.mapping_keys(part.value, frame)
        else:
            names.add(readback.keyword(part.value, frame) if type(part) is Name else part)
    return frozenset(names)


def _inline_partial(shape: CallShape, code: CodeType, frame: FrameType) -> Bound | None:
    """The binding of ``functools.partial(f, *args, **kw)`` made by `shape`, read from its
    arguments (the partial itself, a value on the stack, cannot be read back)."""
    if readback.resolve(shape.func, frame) is not functools.partial or type(shape.args) is not Args:
        return None
    first, *rest = shape.args.items or (None,)
    if first is None or type(first) is Star:
        return None
    inner = _binding_of(first, code, frame)
    return inner and inner.then(_count(Args(tuple(rest)), frame), _names(shape.kwargs, frame))


def _binding_of(func: object, code: CodeType, frame: FrameType) -> Bound | None:
    """The binding of the callable `func` describes, read from `frame`: a partial made
    inline, or the one binding that each option of a branch (``f if c else g``) has."""
    if type(func) is Result:
        return _inline_partial(func.shape, code, frame)
    return readback.agreed(
        lambda option, at: binding(readback.resolve(option, at), code), func, frame
    )


def _callable_binding(site: CallSite, code: CodeType, frame: FrameType) -> Bound | None:
    bound = _binding_of(site.shape.func, code, frame)
    if site.direct and bound is not PLAIN and (bound is None or bound != PLAIN.then(1)):
        return None  # a Python-to-Python call is a function or a bound method: it changed
    return bound


@dataclass(frozen=True)
class Passed:
    """What a call passed: `explicit`, every parameter it passed (None when that cannot be
    known), and `keywords`, the ones it surely passed by keyword (known also where the
    positional part is not: a ``*`` of an iterator); None when neither can be known."""

    explicit: frozenset[str] | None
    keywords: frozenset[str] | None


UNKNOWN_CALL = Passed(None, None)


def passed(site: CallSite, callee: FrameType, parameters: tuple[str, ...]) -> Passed:
    """What the call at `site` passed to `callee` (``self`` included for a bound method).

    `parameters` are the callee's positional parameter names in order (for a ``*args``
    signature, the names its positions stand for).
    """
    caller = callee.f_back
    try:
        bound = _callable_binding(site, callee.f_code, caller)  # type: ignore[arg-type]
    except Unresolved:
        bound = None
    if bound is None:
        # The callable cannot be read back as the call loaded it, or C code that passes
        # its own arguments reached the callee. A Python-to-Python call (3.11 and 3.12 tell
        # one by its offset) passed it the keywords spelled out, whatever its callable.
        return Passed(None, _literal_names(site.shape.kwargs)) if site.direct else UNKNOWN_CALL
    try:
        names = bound.names | _names(site.shape.kwargs, caller)  # type: ignore[arg-type]
    except Unresolved:
        return Passed(None, bound.names | _literal_names(site.shape.kwargs))
    try:
        positional = bound.positional + _count(site.shape.args, caller)  # type: ignore[arg-type]
    except Unresolved:
        return Passed(None, names)
    return Passed(names | frozenset(parameters[:positional]), names)


def _literal_names(kwargs: object) -> frozenset[str]:
    """The keywords spelled out at the call site (a ``**`` part may hold more)."""
    if type(kwargs) is not Kwargs:
        return frozenset()
    return frozenset(part for part in kwargs.items if type(part) is str)


def explicit_arguments(
    site: CallSite, callee: FrameType, parameters: tuple[str, ...]
) -> frozenset[str] | None:
    """The names of the parameters the call at `site` passed to `callee` explicitly (by
    position or keyword, ``self`` included for a bound method), or None when that
    cannot be known."""
    return passed(site, callee, parameters).explicit
