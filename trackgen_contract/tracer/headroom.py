"""Room to judge a call made near the recursion limit.

The rules run inside the tracer's callback, a few frames above the user's call: a call
that works unguarded at the deepest nesting its own body allows must not become a
RecursionError under a guard. So the limit is raised while a call is judged within
`ROOM` frames of it (on 3.11, while any call is judged: see `dispatch`), in any thread,
and the last one out puts it back. Elsewhere the process-wide limit is left alone: other
threads read and set it as they would unguarded.

A guard entered or exited near the limit gets the same room (`reserve`), from before its
change begins: a RecursionError half-way through arming or disarming would leave a tool
id held, or the signal wrappers waiting for a change that never ends.
"""

from __future__ import annotations

import sys
import threading

from ..handlers import raised_by_handler

ROOM = 200  # frames: far more than judging one call takes
_SETTLING = "settling"  # `raised` while `settle` puts the limit back

# From 3.12 the recursion limit counts Python frames alone (C calls have their own), so
# the frames on the stack say how close the limit is; 3.11's also counts C calls that no
# frame shows (a __repr__ calling repr()), so it is raised for every call judged there.
DEPTH_IS_FRAMES = sys.version_info >= (3, 12)


class _Headroom:
    """The recursion limit, raised while a call near it is judged (in any thread).

    `dispatch` counts itself in (its token in `users`) and then raises it, unless it is
    raised already, inline: a method called for it would need a frame, and near the limit
    there is none. A call judged while it is raised counts itself in too, and each counts
    itself out (one C-level ``pop`` of its token in its ``finally``: see `collector` for
    why a token) before `settle`, which acts only when no one is counted: so no one puts
    the limit back under a call that relies on it, whatever thread or signal handler runs
    in between. `raised` tells the limit it raised (it reads saved +
    ROOM) from one the program set to the same value after it was put back; a limit not
    put back yet is put back by the next `settle` in a shallow stack, and one the program
    set meanwhile stands.
    """

    def __init__(self) -> None:
        self.users: dict[object, int] = {}  # token -> the thread counted in
        self.saved = 0
        self.raised: bool | str = False  # by a judged call, and not put back yet

    def reserve(self, token: object, thread: int) -> None:
        """Room for a change made here (see the module): the limit raised where this is
        within `ROOM` frames of it, and `token` counted in while it is raised. The caller
        pops it from `users` in its ``finally`` and then, if it was there, calls `settle`.
        Needs a frame: where there is none, the RecursionError comes before the change.
        (Frames tell on 3.11 too: a change takes a small part of `ROOM`.)"""
        limit = sys.getrecursionlimit()
        if not (self.raised and limit == self.saved + ROOM):  # not raised, or put back
            try:
                sys._getframe(limit - ROOM)
            except ValueError as error:  # ROOM frames below the limit: the user's will do
                # No call where it was raised here (a profile function's frame is one more)
                if error.__traceback__.tb_next is not None and raised_by_handler(error):
                    raise
                return
        self.users[token] = thread
        limit = sys.getrecursionlimit()  # checked again once counted in: see `settle`
        if not (self.raised and limit == self.saved + ROOM):
            self.saved, self.raised = limit, True
            sys.setrecursionlimit(limit + ROOM)

    def settle(self) -> None:
        """Put the user's limit back once nobody is judging (where the stack is too deep
        for it still, a later call does it). A limit the program set meanwhile stands.

        Another thread may count itself in while this runs. Up to the limit's read it is
        seen in `users`, and the limit stays; from the read to the put-back nothing can
        switch in on 3.12+ (no call returns in between); one that counts in later finds
        the limit put back and raises it itself (`raised` is `_SETTLING` meanwhile, so
        this does not then mark that raise as put back). On 3.11 a profile function runs
        as each C call starts: a call counted in at the put-back's start may be judged
        under the user's limit (README).

        C calls alone, written inline: a change's ``finally`` calls this after the point of
        no return, where no frame deeper may start (see `critical.protected`)."""
        if not self.users and self.raised:
            limit = sys.getrecursionlimit()
            if self.users:  # counted in as the limit was read: it is theirs to settle
                return
            if limit != self.saved + ROOM:
                self.raised = False  # the program's own since
                return
            self.raised = _SETTLING
            try:
                sys.setrecursionlimit(self.saved)
            except RecursionError as limit:
                self.raised = True
                if type(limit) is not RecursionError:
                    raise  # a signal handler's subclass: the program's (CPython's is exact)
                return
            if self.raised is _SETTLING:  # else one counted in since raised it again
                self.raised = False

    def reset_after_fork(self) -> None:
        """A forked child's other threads are gone, and their judging with them; the
        thread that forked may be judging a call itself."""
        me = threading.get_ident()
        self.users = {token: t for token, t in self.users.items() if t == me}
        self.settle()


headroom = _Headroom()
