"""Room to judge a call made near the recursion limit.

The rules run inside the tracer's callback, a few frames above the user's call: a call
that works unguarded at the deepest nesting its own body allows must not become a
RecursionError under a guard. So the limit is raised while a call is judged within
`ROOM` frames of it (on 3.11, while any call is judged: see `dispatch`), in any thread,
and the last one out puts it back. Elsewhere the process-wide limit is left alone: other
threads read and set it as they would unguarded.
"""

from __future__ import annotations

import sys

ROOM = 200  # frames: far more than judging one call takes


class _Headroom:
    """The recursion limit, raised while a call near it is judged (in any thread).

    `dispatch` raises it, unless it is raised already, inline: a method called for it
    would need a frame, and near the limit there is none. It then counts itself in
    (``users += 1``), and out (``users -= 1``) before `settle`, with no call in between:
    with the GIL that is one step for other threads and for signals alike. Everything else
    may be cut anywhere: a limit raised and not yet counted is recognised (it equals saved
    + ROOM) and never saved as the user's own; one not yet put back is put back by the
    next `settle` in a shallow stack.
    """

    def __init__(self) -> None:
        self.users = 0
        self.saved = -ROOM  # saved + ROOM is then 0, a limit no one can set

    def settle(self) -> None:
        """Put the user's limit back once nobody is judging (where the stack is too deep
        for it still, a later call does it)."""
        if self.users == 0 and sys.getrecursionlimit() == self.saved + ROOM:
            try:  # noqa: SIM105 (contextlib.suppress costs more, at every judged call)
                sys.setrecursionlimit(self.saved)
            except RecursionError:
                pass

    def reset_after_fork(self) -> None:
        """A forked child's judging threads are gone."""
        self.users = 0
        self.settle()


headroom = _Headroom()
