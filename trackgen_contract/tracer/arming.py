"""Which watched code objects are armed: those the running tracers need, counted.

Both cores keep the same books: how many running tracers need each list of watched entries.
`sync` brings the backend's armed set in line with them, one code object at a time, and
runs again until nothing is left to do, so a change that comes in while it runs (a guard
exited by a finaliser in the middle of another guard's entry, in the same thread) is not
lost: the nested call only updates the books and the outer one finishes the work.

Every method runs inside a `critical.protected` section, under one re-entrant lock.
"""

from __future__ import annotations

import sys
import threading

from ..registry import Entry


class Books:
    """How many running tracers need each list of watched entries, and what they need.

    Tracers share their lists (a guard's comes from its checks, a plain tracer's is the
    whole registry), so the books count lists by identity, and a code object is counted
    once per distinct list that holds it: a guard entered and exited where the same list
    is already needed changes one number.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.counts: dict[int, int] = {}  # id(entries) -> tracers needing that list
        self.lists: dict[int, tuple[Entry, ...]] = {}  # id(entries) -> the list, while needed
        self.per_code: dict[int, int] = {}  # id(code) -> needed lists holding it
        self.wanted: dict[int, Entry] = {}  # id(code) -> entry: what must be armed
        self.version = 0  # changes whenever `wanted` does
        self.syncing = False

    # add and remove make any table they change anew and put them all in place at the
    # end, so that one that fails part way (a MemoryError) leaves the books as they were:
    # a count kept for a guard that never started would hold the tool id for good.

    def add(self, entries: tuple[Entry, ...]) -> None:
        key = id(entries)
        count = self.counts.get(key, 0)
        if count:
            self.counts[key] = count + 1  # one store of an existing key
            return
        per_code, wanted, version = dict(self.per_code), dict(self.wanted), self.version
        for entry in entries:
            code = id(entry.code)
            held = per_code.get(code, 0)
            per_code[code] = held + 1
            if not held:
                wanted[code] = entry
                version += 1
        self._put({**self.counts, key: 1}, {**self.lists, key: entries}, per_code, wanted, version)

    def remove(self, entries: tuple[Entry, ...]) -> None:
        key = id(entries)
        left = self.counts.get(key, 0) - 1
        if left > 0:
            self.counts[key] = left
            return
        if key not in self.counts:
            return
        per_code, wanted, version = dict(self.per_code), dict(self.wanted), self.version
        for entry in entries:
            code = id(entry.code)
            if per_code[code] > 1:
                per_code[code] -= 1
            else:
                del per_code[code], wanted[code]
                version += 1
        counts, lists = dict(self.counts), dict(self.lists)
        del counts[key], lists[key]
        self._put(counts, lists, per_code, wanted, version)

    def _put(
        self,
        counts: dict[int, int],
        lists: dict[int, tuple[Entry, ...]],
        per_code: dict[int, int],
        wanted: dict[int, Entry],
        version: int,
    ) -> None:
        """Put the tables made anew in place, all at once (see `add`)."""
        self.counts, self.lists, self.per_code, self.wanted, self.version = (
            counts, lists, per_code, wanted, version
        )  # fmt: skip

    def reset(self) -> None:
        """Forget everything (a forked child; its lock may be held by a thread it lacks)."""
        self.lock = threading.RLock()
        for table in (self.counts, self.lists, self.per_code, self.wanted):
            table.clear()
        self.version += 1
        self.syncing = False


class ArmingCore:
    """What both cores share: books, and holding or releasing a list of entries under
    their lock. A subclass provides `_sync`, which arms what the books want."""

    def __init__(self) -> None:
        self._books = Books()

    def inside_callback(self) -> bool:
        callbacks = self.callback_codes()
        frame = sys._getframe(1)
        while frame is not None:
            if id(frame.f_code) in callbacks:
                return True
            frame = frame.f_back
        return False

    def callback_codes(self) -> frozenset[int]:
        """``id()`` of the code objects of the core's Python callbacks."""
        raise NotImplementedError

    def hold(self, entries: tuple[Entry, ...]) -> None:
        """Keep `entries` armed (counted) until `release`."""
        books = self._books
        with books.lock:
            books.add(entries)
            try:
                self._sync()
            except BaseException:  # arming failed (no tool id free): hold nothing
                books.remove(entries)
                self._sync()
                raise

    def release(self, entries: tuple[Entry, ...]) -> None:
        """Undo one `hold`."""
        books = self._books
        with books.lock:
            books.remove(entries)
            self._sync()

    def idle(self) -> bool:
        """Whether nothing is held."""
        return not self._books.counts

    def _sync(self) -> None:
        raise NotImplementedError
