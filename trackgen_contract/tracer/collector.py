"""The garbage collector, held off while the tracer changes or judges something.

A finaliser that ran in the middle of arming, disarming or judging a call would re-enter
the tracer half-way through (a generator holding a guard, say), or make Warp calls that no
tracer sees. Several threads hold it off at once, so whether it was on is read by the
first one in and put back by the last one out: each reading and restoring it on its own
could leave it off for good (one turns it off; another reads "off"; the first turns it on
again; the second turns it off and, having found it off, leaves it so).
"""

from __future__ import annotations

import gc
import threading


class _Collector:
    def __init__(self) -> None:
        # Reentrant: a signal handler or a finaliser that runs while this thread holds it
        # may make a watched call, judged here again.
        self._lock = threading.RLock()
        self._holders = 0
        self._restore = False  # it was on when the first holder came in

    def hold(self) -> None:
        """Hold the collector off (until the matching `release`)."""
        with self._lock:
            if self._holders == 0:
                self._restore = gc.isenabled()
                gc.disable()
            self._holders += 1

    def release(self) -> None:
        """The end of a `hold`: the last holder out turns it back on if it was on."""
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._restore:
                gc.enable()

    def reset_after_fork(self) -> None:
        """A forked child's other threads, and their holds, are gone (the lock with them)."""
        self._lock = threading.RLock()
        if self._holders > 0 and self._restore:
            gc.enable()
        self._holders = 0


collector = _Collector()
