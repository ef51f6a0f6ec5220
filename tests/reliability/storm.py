"""Ctrl-C at random points: a SIGALRM storm over guard and tracer entries and exits.

A SIGALRM handler raises ``KeyboardInterrupt`` while an operation runs and re-arms the
timer with a random interval (log-uniform between --min-us and --max-us), so interrupts
land at every kind of point: before, inside and after a guard's enter and exit, between
nested guards, inside a watched Warp call. The operations are strict and recording guards
with and without breaches, calls judged in full, three guards nested, a guard object
entered again and again, a `Tracer`, and a guard inside a `keep_armed()` block. After the
storm nothing may be left: no guard or tracer still active, nothing armed, the handlers as
they were, ``TRACKGEN_DEBUG_SYNC`` back, the recursion limit unchanged (after each
operation too), the garbage
collector on and held by no one, an unguarded ``wp.zeros()`` working and a fresh strict
guard refusing. A strict guard may refuse a block it did not see in full on 3.11, where
CPython removes the profile function that a ``KeyboardInterrupt`` was raised in, when that
interrupt was lost on its way (in a finaliser): counted, not a problem.

Prints one JSON object: cycles, interrupts raised, interrupts caught, problems.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import traceback

from _child import DEBUG_SYNC_ENV, final_state, now, report, start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--cycles", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-us", type=float, default=5.0)
    parser.add_argument("--max-us", type=float, default=2000.0)
    parser.add_argument("--watchdog", type=float, default=60.0)
    args = parser.parse_args()
    start(watchdog=args.watchdog)

    import warp as wp
    from acme.kernels import add_one

    from trackgen_contract import (
        HotPathViolation,
        Tracer,
        hot_path_guard,
        no_allocation,
        no_host_sync,
        stream_explicit,
    )
    from trackgen_contract.tracer import keep_armed
    from trackgen_contract.tracer.headroom import headroom

    os.environ[DEBUG_SYNC_ENV] = "storm"
    limit = sys.getrecursionlimit()
    a = wp.zeros(8, dtype=float, device="cpu")
    rng, timer_rng = random.Random(args.seed), random.Random(args.seed + 1)
    low, high = args.min_us * 1e-6, args.max_us * 1e-6
    state = {"inside": False, "stop": False, "raised": 0, "ignored": 0}
    made: list = []  # every guard and tracer of the storm: none may stay active
    seen = [0]

    def alarm(signum: int, frame: object) -> None:
        if not state["stop"]:
            signal.setitimer(signal.ITIMER_REAL, low * (high / low) ** timer_rng.random())
        if state["inside"]:
            state["raised"] += 1
            raise KeyboardInterrupt
        state["ignored"] += 1

    def launch() -> None:
        wp.launch(add_one, dim=8, inputs=[a], device="cpu", stream=None)

    def strict_empty() -> None:
        guard = hot_path_guard()
        made.append(guard)
        with guard:
            pass

    def recording() -> None:
        guard = hot_path_guard(strict=False)
        made.append(guard)
        with guard:
            launch()
            wp.zeros(1, dtype=float, device="cpu")

    def nested() -> None:
        outer, middle, inner = hot_path_guard(strict=False), no_host_sync(), stream_explicit()
        made.extend((outer, middle, inner))
        with outer, middle:
            with inner:
                launch()
            wp.zeros(1, dtype=float, device="cpu")

    def strict_breach() -> None:
        guard = no_allocation()
        made.append(guard)
        try:
            with guard:
                wp.zeros(1, dtype=float, device="cpu")
        except HotPathViolation:
            pass

    def held() -> None:
        with keep_armed():
            guard = hot_path_guard(strict=False)
            made.append(guard)
            with guard:
                launch()

    options = {"device": "cpu"}

    def judged() -> None:
        guard = hot_path_guard(strict=False)
        made.append(guard)
        with guard:
            for _ in range(3):  # `**` of a dict: judged in full at every call
                wp.launch(add_one, dim=8, inputs=[a], **options)

    reused = no_host_sync(strict=False)
    made.append(reused)

    def reuse() -> None:
        with reused:
            launch()

    def tracer() -> None:
        traced = Tracer(lambda call: seen.__setitem__(0, seen[0] + 1))
        made.append(traced)
        with traced:
            launch()

    operations = [strict_empty, recording, nested, strict_breach, reuse, tracer, held, judged]

    # What CPython prints and drops (an exception raised in a finaliser), kept by a C
    # function: no signal lands in it.
    lost: list = []
    sys.unraisablehook = lost.append

    def blind_after_a_lost_interrupt(exc: Exception) -> bool:
        """A strict guard's refusal on 3.11, as documented: a KeyboardInterrupt raised in
        its profile function (which CPython then removes) was lost on its way, in a
        finaliser (a Warp array's ``__del__``), and the block went on unseen."""
        return (
            sys.version_info < (3, 12)
            and isinstance(exc, HotPathViolation)
            and "an exception raised from the profile function made Python 3.11 remove it"
            in str(exc)
            and any(args.exc_type is KeyboardInterrupt for args in lost)
        )

    problems: list[str] = []

    def room_left_raised(when: str) -> str:
        return (
            f"{when}: the recursion limit is {sys.getrecursionlimit()}, was {limit} (raised "
            f"{headroom.raised!r} from {headroom.saved}, counted in {headroom.users})"
        )

    cycles = caught = blinded = 0
    signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, low)
    began = now()
    try:
        while cycles < args.cycles and now() - began < args.seconds:
            operation = rng.choice(operations)
            cycles += 1
            lost.clear()
            try:
                state["inside"] = True
                try:
                    operation()
                finally:
                    state["inside"] = False
            except KeyboardInterrupt:
                caught += 1
            except Exception as exc:
                if blind_after_a_lost_interrupt(exc):
                    blinded += 1
                elif len(problems) < 10:
                    where = traceback.extract_tb(exc.__traceback__)[-1]
                    problems.append(
                        f"{operation.__name__} raised {exc!r} at {where.filename}:{where.lineno}"
                    )
            if sys.getrecursionlimit() != limit and len(problems) < 10:
                # Every operation exits its guards in a shallow stack: the room is back.
                problems.append(room_left_raised(f"after {operation.__name__}"))
    except KeyboardInterrupt:
        problems.append("a KeyboardInterrupt arrived outside any operation")
    finally:
        state["stop"] = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        sys.unraisablehook = sys.__unraisablehook__
    seconds = now() - began

    if caught > state["raised"]:
        problems.append(
            f"{caught - state['raised']} KeyboardInterrupt(s) that the SIGALRM handler did "
            "not raise (a signal handled by something other than its own handler)"
        )
    if signal.getsignal(signal.SIGALRM) is not alarm:
        problems.append(f"the SIGALRM handler is now {signal.getsignal(signal.SIGALRM)!r}")
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        problems.append(f"the SIGINT handler is now {signal.getsignal(signal.SIGINT)!r}")
    active = [repr(g) for g in made if g.active]
    if active:
        problems.append(f"{len(active)} guard(s) or tracer(s) still active: {active[:3]}")
    if sys.getrecursionlimit() != limit:
        problems.append(room_left_raised("at the end"))
    final_state(problems, env_value="storm")
    report(
        {
            "python": sys.version.split()[0],
            "cycles": cycles,
            "seconds": round(seconds, 2),
            "interrupts": state["raised"],
            "caught": caught,
            "blind_after_a_lost_interrupt": blinded,
            "guards_and_tracers": len(made),
            "problems": problems,
        }
    )


if __name__ == "__main__":
    main()
