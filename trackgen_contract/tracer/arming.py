"""Which watched code objects are armed: those the running tracers need, counted.

Both cores keep the same books: how many running tracers need each watched code object.
`sync` brings the backend's armed set in line with them, one code object at a time, and
runs again until nothing is left to do, so a change that comes in while it runs (a guard
exited by a finaliser in the middle of another guard's entry, in the same thread) is not
lost: the nested call only updates the books and the outer one finishes the work.

Every method runs inside a `critical.protected` section, under one re-entrant lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from ..registry import Entry


class Books:
    """Per watched code object, the number of running tracers that need it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.counts: dict[int, int] = {}  # id(code) -> tracers needing it
        self.entries: dict[int, Entry] = {}  # id(code) -> its entry, while needed
        self.syncing = False

    def add(self, entries: Iterable[Entry]) -> None:
        for entry in entries:
            key = id(entry.code)
            self.counts[key] = self.counts.get(key, 0) + 1
            self.entries[key] = entry

    def remove(self, entries: Iterable[Entry]) -> None:
        for entry in entries:
            key = id(entry.code)
            left = self.counts.get(key, 0) - 1
            if left > 0:
                self.counts[key] = left
            else:
                self.counts.pop(key, None)
                self.entries.pop(key, None)

    def wanted(self) -> dict[int, Entry]:
        """The entries some running tracer needs, by id(code)."""
        return dict(self.entries)

    def reset(self) -> None:
        """Forget everything (a forked child; its lock may be held by a thread it lacks)."""
        self.lock = threading.RLock()
        self.counts.clear()
        self.entries.clear()
        self.syncing = False
