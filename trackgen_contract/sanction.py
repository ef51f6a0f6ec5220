"""Sanctioned host operations: the few deliberate host syncs a library declares on its path.

A host sync or readback is *sanctioned* only when both hold:

- its direct caller is a function marked ``@sanction.site(kind)``, and
- a ``sanction.scope(kind)`` of the same kind is active in the current context.

The function is the place, the scope is the permission: the same sync from that function
outside the scope, or from any other function inside it (a plugin's own readback, a loop
body), is still a violation.

    @sanction.site("host-poll")
    def poll(flag):
        return int(flag.numpy()[0])

    with sanction.scope("host-poll"):
        poll(flag)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import CodeType
from typing import TypeVar

from .sites import inlined_comprehensions

__all__ = ["is_sanctioned", "marks", "scope", "site"]

F = TypeVar("F", bound=Callable)

# id(code) -> (code, kind). By code object, not by name: two lambdas of one module, or two
# functions with one qualified name, are two places.
_sites: dict[int, tuple[CodeType, str]] = {}
_scopes: ContextVar[frozenset[str]] = ContextVar("trackgen_contract_sanctions", default=frozenset())
marked = [0]  # functions marked so far; read in place where a call less counts


def marks() -> int:
    """How many functions were marked so far: a verdict remembered for a call site under
    fewer marks may no longer hold (its function may have been marked since)."""
    return marked[0]


def _check_kind(kind: object, use: str) -> str:
    if not isinstance(kind, str) or not kind:
        # The usual slip: the decorator written without its kind, `@sanction.site`.
        hint = f' (the kind comes first: {use}("host-poll"))' if callable(kind) else ""
        raise TypeError(f"a sanction kind must be a non-empty string, got {kind!r}{hint}")
    return kind


def site(kind: str) -> Callable[[F], F]:
    """Mark a function whose own host syncs and readbacks `kind` scopes may let through.

    Returns the function unchanged.
    """
    _check_kind(kind, "@sanction.site")

    def mark(fn: F) -> F:
        target = getattr(fn, "__func__", fn)  # staticmethod, classmethod, bound method
        code = getattr(target, "__code__", None)
        if not isinstance(code, CodeType):
            raise TypeError(f"sanction.site({kind!r}) expects a function, got {fn!r}")
        for own in (code, *inlined_comprehensions(code)):  # 3.11's run apart
            _sites[id(own)] = (own, kind)
        marked[0] += 1
        return fn

    return mark


@contextmanager
def scope(kind: str) -> Iterator[None]:
    """Let the syncs of functions marked ``site(kind)`` through while the block runs."""
    token = _scopes.set(_scopes.get() | {_check_kind(kind, "sanction.scope")})
    try:
        yield
    finally:
        _scopes.reset(token)


def may_sanction(code: CodeType | None) -> bool:
    """Whether the function running `code` is marked: a scope could let its syncs through."""
    marked = _sites.get(id(code))
    return marked is not None and marked[0] is code


def is_sanctioned(code: CodeType | None) -> bool:
    """Whether a sync made directly by the function running `code` is sanctioned now."""
    marked = _sites.get(id(code))
    return marked is not None and marked[0] is code and marked[1] in _scopes.get()
