"""The garbage collector, held off while the tracer changes or judges something.

A finaliser that ran in the middle of arming, disarming or judging a call would re-enter
the tracer half-way through (a generator holding a guard, say), or make Warp calls that no
tracer sees. Several threads hold it off at once, so it is turned back on by the last
holder out, and only where a holder turned it off: each one reading and restoring it on
its own could leave it off for good (one turns it off; another reads "off"; the first
turns it on again; the second turns it off and, having found it off, leaves it so).

Each holder holds a token of its own (a fresh object), put in by `hold` and taken out by
one C-level ``pop`` in the holder's own ``finally``, before it calls `settle`. A signal
handler that raises anywhere in between cannot leave a token that no one takes out (a
count raised in one function and lowered in a ``finally`` could: the handler may run at
the start of the function that lowers it); one that raises at the start of `settle`
leaves the collector off only until the next holder settles. No lock: a signal handler
raising as a ``with`` block acquires one can leave it held (3.14), and the next thread to
judge a call would wait for good.
"""

from __future__ import annotations

import gc
import threading

_ENABLING = "enabling"  # `off` while `settle` turns it on (a child forked then does it)


class _Collector:
    def __init__(self) -> None:
        self.holders: dict[object, int] = {}  # token -> the thread holding it
        self.off: bool | str = False  # turned off by a holder, not turned on again since

    def hold(self, token: object, thread: int) -> None:
        """Hold the collector off until `token` is popped from `holders` and `settle`
        is called (both in the caller's ``finally``)."""
        self.holders[token] = thread
        if gc.isenabled():
            self.off = True
            gc.disable()

    def settle(self) -> None:
        """Turn the collector back on where no one holds it and a holder turned it off
        (flag first: a holder coming in meanwhile finds it still off and leaves it be,
        or turns it off again and says so)."""
        if not self.holders and self.off:
            self.off = _ENABLING
            gc.enable()
            if self.off is _ENABLING:
                self.off = False

    def reset_after_fork(self) -> None:
        """A forked child's other threads are gone, and their holds with them; the thread
        that forked may be inside one of its own."""
        me = threading.get_ident()
        self.holders = {token: t for token, t in self.holders.items() if t == me}
        if self.off is _ENABLING:  # forked while another thread was turning it on
            self.off = True
        self.settle()


collector = _Collector()
