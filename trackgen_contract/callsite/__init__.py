"""Which arguments did the caller pass explicitly? Read off its call instruction.

A callee's frame holds the *bound* arguments, so ``stream=None`` passed by the caller and
``stream`` left at its default ``None`` look the same there. The caller's bytecode does
not lie: its call instruction says how many positional arguments it passed and by which
keywords, and for a ``*args`` / ``**kwargs`` call the instructions before it say how the
sequence and the dict were put together, whose starred parts are then read back from the
caller's frame.

- `bytecode`: a code object's instructions, read from its bytes.
- `values`: what the model knows about a stack value.
- `model`: the value stack, one instruction at a time, per Python version.
- `analysis`: the call sites of one code object (an abstract interpretation of its
  control-flow graph), cached per code object.
- `readback`: reading a described value from a frame without running the user's code.
- `decision`: the explicit parameters of one call.

Where any part cannot be known, the answer is None and the rules fall back on the bound
value of the argument.
"""

from __future__ import annotations

from types import CodeType, FrameType

from ..codecache import CodeCache
from . import decision
from .analysis import CallSite, analyse

__all__ = ["CallSite", "call_site", "explicit_arguments", "passed"]

_sites: CodeCache[dict[int, CallSite]] = CodeCache()


def call_site(code: CodeType, lasti: int) -> CallSite | None:
    """The call instruction of `code` that ``f_lasti == lasti`` is executing, if any."""
    return _sites.get_or_make(code, analyse).get(lasti)


def passed(callee: FrameType, parameters: tuple[str, ...]) -> decision.Passed:
    """What the caller of `callee` passed: every parameter it passed explicitly (by
    position or keyword, ``self`` included for a bound method), or None when that cannot be
    known; and the ones it surely passed by keyword. See `decision.Passed`."""
    caller = callee.f_back
    site = None if caller is None else call_site(caller.f_code, caller.f_lasti)
    if site is None:
        return decision.UNKNOWN_CALL  # not a call instruction: a property, an operator, C
    return decision.passed(site, callee, parameters)


def explicit_arguments(callee: FrameType, parameters: tuple[str, ...]) -> frozenset[str] | None:
    """The names of the parameters the caller of `callee` passed explicitly (by position
    or keyword, ``self`` included for a bound method), or None when it cannot be known.

    `parameters` are the callee's positional parameter names in order (for a ``*args``
    signature, the names its positions stand for).
    """
    return passed(callee, parameters).explicit
