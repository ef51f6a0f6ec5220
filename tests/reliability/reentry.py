"""A guard entered from a signal handler or a finaliser while the same thread is inside
another guard's enter or exit: it works or fails clearly, and never blocks.

Modes:

- ``signal``: a SIGALRM handler, re-armed at random short intervals, enters a guard and
  breaches it, while the main thread enters and exits guards (host-sync ones among them,
  with ``TRACKGEN_DEBUG_SYNC`` set) and tracers in a loop.
- ``finaliser``: the same from a ``__del__``: with the collector run at every allocation,
  a finaliser that leaves a new cycle of garbage behind it runs at each allocation of the
  main thread's enter or exit in turn (n allocations in, for n = 0, 1, 2, ... from one
  enter or exit to the next, and the few after it).

Each guard so entered must record its breach (a strict one refuse it), or raise a clear
``RuntimeError``; none may miss it or block (the program's watchdog reports a hang with
every thread's stack). Afterwards nothing is left armed.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import signal
import sys
import traceback

from _child import DEBUG_SYNC_ENV, final_state, now, report, start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["signal", "finaliser"])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--allocations", type=int, default=250)
    parser.add_argument("--watchdog", type=float, default=30.0)
    args = parser.parse_args()
    start(watchdog=args.watchdog)

    import warp as wp

    import trackgen_contract
    from trackgen_contract import (
        HotPathViolation,
        Tracer,
        hot_path_guard,
        no_allocation,
        no_host_sync,
    )

    package = os.path.dirname(os.path.abspath(trackgen_contract.__file__))
    os.environ[DEBUG_SYNC_ENV] = "reentry"
    outcomes: dict[str, int] = {}
    problems: list[str] = []
    kinds = ["host_sync", "allocation", "strict"]
    turn = [0]

    def inside_the_package(frame) -> bool:
        while frame is not None:
            if frame.f_code.co_filename.startswith(package):
                return True
            frame = frame.f_back
        return False

    def guard_inside(frame) -> None:
        """Enter a guard and breach it; note what happened. (The handler re-arms its
        timer first, so another one may run inside this guard's block and breach it too:
        at least one breach is this guard's own.)"""
        kind = kinds[turn[0] % len(kinds)]
        turn[0] += 1
        where = "during enter/exit" if inside_the_package(frame) else "elsewhere"
        try:
            if kind == "host_sync":
                with hot_path_guard(strict=False, allocation=False) as guard:
                    wp.synchronize()
                ok = len(guard.violations) >= 1
            elif kind == "allocation":
                with no_allocation(strict=False) as guard:
                    wp.zeros(1, dtype=float, device="cpu")
                ok = len(guard.violations) >= 1
            else:
                try:
                    with no_host_sync():
                        wp.synchronize()
                    ok = False
                except HotPathViolation:
                    ok = True
            outcome = f"{kind} {where}: " + ("recorded" if ok else "MISSED the breach")
        except RuntimeError:
            outcome = f"{kind} {where}: refused with RuntimeError"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    rng = random.Random(0)
    running = [True]

    if args.mode == "signal":
        busy = [False]

        def alarm(signum: int, frame) -> None:
            # Not inside itself: a handler that re-arms a 10 us timer and runs a guard
            # would otherwise nest without bound and end in a RecursionError of its own.
            if not running[0]:
                return
            signal.setitimer(signal.ITIMER_REAL, rng.uniform(10e-6, 400e-6))
            if not busy[0]:
                busy[0] = True
                try:
                    guard_inside(frame)
                finally:
                    busy[0] = False

        signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, 100e-6)
    else:

        class Finaliser:
            def __del__(self) -> None:
                if skip[0] > 0:  # not there yet: the next allocation collects again
                    skip[0] -= 1
                    plant_one()
                elif budget[0] > 0 and running[0]:
                    budget[0] -= 1
                    guard_inside(sys._getframe(1))
                    plant_one()

    skip, budget = [0], [0]

    def plant_one() -> None:
        garbage = Finaliser()
        garbage.cycle = garbage

    def plant() -> None:
        """In finaliser mode: finalisers at the n-th allocation from here on and the few
        after it, n = 0, 1, 2, ... from one call to the next."""
        if args.mode == "finaliser":
            skip[0] = budget[0] = 0
            gc.collect(0)
            skip[0], budget[0] = cycles % args.allocations, 3
            plant_one()
            gc.set_threshold(1, 1000, 1000)

    cycles = 0
    began = now()
    try:
        while now() - began < args.seconds and not (
            args.mode == "finaliser" and cycles >= args.allocations
        ):
            cycles += 1
            # Recording guards only: a breach of the handler's or finaliser's that lands
            # inside one of them is (rightly) this guard's breach too.
            plant()
            with no_host_sync(strict=False):
                plant()
            plant()
            with hot_path_guard(strict=False):
                plant()
            plant()
            with no_host_sync(strict=False), no_allocation(strict=False):
                plant()
            plant()
            with Tracer(lambda call: None):
                plant()
    except BaseException as exc:
        where = [f"{f.name} ({os.path.basename(f.filename)}:{f.lineno})"
                 for f in traceback.extract_tb(exc.__traceback__)[-3:]]  # fmt: skip
        problems.append(f"the main loop raised {exc!r} in {' < '.join(reversed(where))}")
    finally:
        running[0] = False
        if args.mode == "signal":
            signal.setitimer(signal.ITIMER_REAL, 0)
        else:
            skip[0] = budget[0] = 0
            gc.set_threshold(700, 10, 10)
            gc.collect()
    problems += [f"{n}x {what}" for what, n in outcomes.items() if "MISSED" in what]
    if sum(outcomes.values()) < 20:
        problems.append(f"only {sum(outcomes.values())} re-entries happened: {outcomes}")
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        problems.append(f"the SIGINT handler is now {signal.getsignal(signal.SIGINT)!r}")
    final_state(problems, env_value="reentry")
    report(
        {
            "python": sys.version.split()[0],
            "mode": args.mode,
            "cycles": cycles,
            "reentries": outcomes,
            "problems": problems,
        }
    )


if __name__ == "__main__":
    main()
