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
from typing import TypeVar

__all__ = ["is_sanctioned", "scope", "site"]

F = TypeVar("F", bound=Callable)

_sites: dict[tuple[str, str], str] = {}  # (module, qualified name) -> kind
_scopes: ContextVar[frozenset[str]] = ContextVar("trackgen_contract_sanctions", default=frozenset())


def _check_kind(kind: object) -> str:
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"a sanction kind must be a non-empty string, got {kind!r}")
    return kind


def site(kind: str) -> Callable[[F], F]:
    """Mark a function whose own host syncs and readbacks `kind` scopes may let through.

    Returns the function unchanged.
    """
    _check_kind(kind)

    def mark(fn: F) -> F:
        target = getattr(fn, "__func__", fn)
        module, name = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
        if not isinstance(module, str) or not isinstance(name, str):
            raise TypeError(f"sanction.site({kind!r}) expects a function, got {fn!r}")
        _sites[(module, name)] = kind
        return fn

    return mark


@contextmanager
def scope(kind: str) -> Iterator[None]:
    """Let the syncs of functions marked ``site(kind)`` through while the block runs."""
    token = _scopes.set(_scopes.get() | {_check_kind(kind)})
    try:
        yield
    finally:
        _scopes.reset(token)


def is_sanctioned(module: str, function: str) -> bool:
    """Whether a sync made directly by `module`.`function` is sanctioned right now."""
    kind = _sites.get((module, function))
    return kind is not None and kind in _scopes.get()
