"""Ctrl-C at each point of a guard's enter and exit where CPython would run a handler.

CPython runs a Python signal handler, so raises ``KeyboardInterrupt`` for Ctrl-C, only at
a few points of the main thread, the first of which is the start of every Python
function. This program walks every function start that a guard's (and a `Tracer`'s) enter
and exit goes through, in order, and raises ``KeyboardInterrupt`` at the k-th one for
k = 1, 2, ... (a ``sys.settrace`` function raising it there). A point counts only while
SIGINT's handler is still Python's own, i.e. where a real Ctrl-C would raise: inside a
section in which the package has put its own handler in place, nothing is injected.

After each interrupted operation nothing may be left: the guards and tracer inactive,
nothing armed, ``TRACKGEN_DEBUG_SYNC`` back. Each point that leaves something is a
problem naming the function, its line and what was left; it is then cleaned up so that
the next point starts from a clean state.
"""

from __future__ import annotations

import _signal
import os
import signal
import sys

from _child import DEBUG_SYNC_ENV, final_state, report, start


def main() -> None:
    start(watchdog=60)
    import warp as wp
    from acme.kernels import add_one
    from helpers import leftovers

    import trackgen_contract
    from trackgen_contract import Tracer, hot_path_guard, no_allocation, no_host_sync

    package = os.path.dirname(os.path.abspath(trackgen_contract.__file__))
    os.environ[DEBUG_SYNC_ENV] = "sweep"
    signal.signal(signal.SIGINT, signal.default_int_handler)
    a = wp.zeros(8, dtype=float, device="cpu")

    def launch() -> None:
        wp.launch(add_one, dim=8, inputs=[a], device="cpu", stream=None)

    def guard(made: list) -> None:
        with made[0]:
            launch()

    def strict_nested(made: list) -> None:
        with made[0], made[1]:
            launch()

    def tracer(made: list) -> None:
        with made[0]:
            launch()

    operations = {
        guard: lambda: [hot_path_guard(strict=False)],
        strict_nested: lambda: [no_host_sync(), no_allocation()],
        tracer: lambda: [Tracer(lambda call: None)],
    }

    class Inject:
        """Raises KeyboardInterrupt at the k-th function start in the package where a
        Ctrl-C would raise it."""

        def __init__(self, k: int) -> None:
            self.k, self.seen, self.where = k, 0, None

        def __call__(self, frame, event, arg):
            if (
                event == "call"
                and frame.f_code.co_filename.startswith(package)
                and _signal.getsignal(signal.SIGINT) is signal.default_int_handler
            ):
                self.seen += 1
                if self.seen == self.k:
                    code = frame.f_code
                    where = os.path.relpath(code.co_filename, os.path.dirname(package))
                    self.where = f"{code.co_qualname} ({where}:{code.co_firstlineno})"
                    sys.settrace(None)
                    raise KeyboardInterrupt
            return None  # no line events: only function starts

    problems: list[str] = []
    points = 0
    for operation, make in operations.items():
        k = 0
        while True:
            k += 1
            created = make()
            inject = Inject(k)
            sys.settrace(inject)
            try:
                operation(created)
            except KeyboardInterrupt:
                pass
            finally:
                sys.settrace(None)
            if inject.where is None:
                break  # past the last point
            points += 1
            left = [f"{type(o).__name__} still active" for o in created if o.active]
            left += leftovers()
            if os.environ.get(DEBUG_SYNC_ENV) != "sweep":
                left.append(f"{DEBUG_SYNC_ENV} not back")
            if left:
                problems.append(
                    f"{operation.__name__}: Ctrl-C at the start of {inject.where}"
                    f" left: {'; '.join(left)}"
                )
                for o in reversed(created):
                    if o.active:
                        o.__exit__(None, None, None)
                os.environ[DEBUG_SYNC_ENV] = "sweep"
                still = leftovers()
                if still:
                    problems.append(f"  and it could not be cleaned up: {still}")
                    break
    final_state(problems, env_value="sweep")
    report({"python": sys.version.split()[0], "points": points, "problems": problems})


if __name__ == "__main__":
    main()
