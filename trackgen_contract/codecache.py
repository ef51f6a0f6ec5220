"""A cache of facts about code objects that dies with them.

Keyed by ``id(code)``: hashing a code object hashes its whole bytecode, microseconds for a
large function, on every lookup. Each entry holds a weak reference to its code object,
whose callback removes the entry, so code made and dropped at run time (``exec``'d cells,
generated functions) takes its entries with it and an id that is reused later never finds
a stale entry. `clear` empties every cache at once (the last guard's exit calls it).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import partial
from types import CodeType
from typing import Generic, TypeVar

from .handlers import raised_by_handler

V = TypeVar("V")

_caches: list[weakref.ref[CodeCache]] = []


class CodeCache(Generic[V]):
    """``code -> value``, entries removed when the code object dies."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[CodeType], V]] = {}
        _caches.append(weakref.ref(self))

    def get(self, code: CodeType) -> V | None:
        entry = self._entries.get(id(code))
        if entry is None or entry[0]() is not code:
            return None
        return entry[1]

    def put(self, code: CodeType, value: V) -> V:
        key = id(code)
        entries = self._entries
        # The callback, called with the dead reference, pops the key (the reference is
        # pop's default). All in C: a Python callback is a frame where a signal handler of
        # the program's could run, and CPython prints and drops what a callback raises.
        try:
            ref = weakref.ref(code, partial(entries.pop, key))
        except TypeError as error:  # not weakly referenceable: not kept
            if raised_by_handler(error):
                raise
            return value
        entries[key] = (ref, value)
        return value

    def get_or_make(self, code: CodeType, make: Callable[[CodeType], V]) -> V:
        value = self.get(code)
        return self.put(code, make(code)) if value is None else value

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()


def clear_all() -> None:
    """Empty every cache (each is filled again on demand)."""
    for ref in list(_caches):
        cache = ref()
        if cache is not None:
            cache.clear()
