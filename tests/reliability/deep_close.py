"""Python 3.11: a guard exited from another thread while its thread waits at the deepest
nesting that works unguarded and under the open guard.

The thread's next event takes the hook down and puts the previous profile function back;
that must need no deeper a frame than the open hook does there, or the user's code gets a
``RecursionError`` it gets in neither case, and CPython drops the hook, the previous
profile function with it. Run in a process of its own: the depth is measured here, in a
plain program, not under a test runner's frames and hooks.
"""

from __future__ import annotations

import sys
import threading

from _child import final_state, report, start

from trackgen_contract import hot_path_guard


def _previous(frame: object, event: str, arg: object) -> None:
    return None


def _nest(depth: int, bottom) -> None:
    return bottom() if depth == 0 else _nest(depth - 1, bottom)


def wait_at(depth: int, guarded: bool, close_elsewhere: bool) -> str | None:
    """Nest `depth` frames and wait there while another thread maybe exits the guard:
    what went wrong, or None."""
    sys.setprofile(_previous)
    guard = hot_path_guard(strict=False)
    if guarded:
        guard.__enter__()
    reached, closed = threading.Event(), threading.Event()

    def stopper() -> None:
        reached.wait(10)
        if close_elsewhere:
            guard.__exit__(None, None, None)
        closed.set()

    def bottom() -> None:
        reached.set()
        closed.wait(10)

    thread = threading.Thread(target=stopper)
    thread.start()
    try:
        _nest(depth, bottom)
        wrong = None
    except RecursionError as exc:
        wrong = f"RecursionError: {exc}"
    reached.set()
    thread.join()
    if guarded and not close_elsewhere:
        guard.__exit__(None, None, None)
    if wrong is None and sys.getprofile() is not _previous:
        wrong = f"the previous profile function is not back: {sys.getprofile()!r}"
    sys.setprofile(None)
    return wrong


def deepest(guarded: bool) -> int:
    low, high = 0, sys.getrecursionlimit()
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if wait_at(middle, guarded, False) is None else (low, middle - 1)
    return low


def closed_elsewhere(depth: int, times: int) -> list[str]:
    # Called from as deep a frame as `deepest` (no comprehension, a frame of its own).
    problems = []
    for _ in range(times):
        wrong = wait_at(depth, True, True)
        if wrong:
            problems.append(f"depth {depth}: {wrong}")
    return problems


def main() -> None:
    start(watchdog=60)
    depth = min(deepest(False), deepest(True))
    problems = closed_elsewhere(depth, 10)
    if depth < 100:
        problems.append(f"the deepest nesting found is {depth}")
    final_state(problems)
    report({"depth": depth, "problems": problems})


if __name__ == "__main__":
    main()
