"""Forked children start with no guard of their parent's, and never hang.

Modes:

- ``pool``: a fork-started ``multiprocessing`` pool made inside a strict guard. Each worker
  finds nothing of the parent's armed, allocates with ``wp.zeros`` (the parent's strict
  guard is not its guard), finds ``TRACKGEN_DEBUG_SYNC`` as the user set it, and a guard
  of its own records its own breach.
- ``nested``: a worker of such a pool enters its own guard and forks; in the worker the
  guard keeps working (it records a breach made after the fork and exits cleanly), and
  the worker's child starts with nothing armed.
- ``race``: another thread enters and exits guards and tracers in a loop while the main
  thread forks ``--forks`` times. Each child must enter and exit a guard of its own within
  ``--child-timeout`` seconds: a child stuck on a lock its parent's other thread held at
  the fork is reported as hung (with its stack).
- ``answers``: the parent's guard answers a repeat breach site from the core (see
  ``tracer.fastpath``) when it forks; in the child a call at that site, with the core
  armed again, is not recorded in the child's copy of the parent's guard, and a guard of
  the child's own records it.
- ``sweep``: the same, deterministic: another thread stops at each line it executes
  while it enters a host-sync guard, breaches it and exits, and the main thread forks
  there; each child must work as above and have ``TRACKGEN_DEBUG_SYNC`` as the user set
  it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import threading
import time
import warnings

from _child import DEBUG_SYNC_ENV, final_state, report, start, step_watchdog

# Forking a process that runs threads is what this program tests.
warnings.filterwarnings("ignore", category=DeprecationWarning)

USER_VALUE = "set-by-the-user"


def _own_guard_records_one_breach() -> list[str]:
    import warp as wp

    from trackgen_contract import hot_path_guard

    with hot_path_guard(strict=False) as guard:
        wp.zeros(1, dtype=float, device="cpu")
    return [] if len(guard.violations) == 1 else [f"own guard recorded {guard.violations}"]


def pool_worker(n: int) -> list[str]:
    """In a worker forked while the parent was inside a strict guard."""
    import warp as wp
    from helpers import leftovers

    problems = [f"inherited: {p}" for p in leftovers()]
    try:
        wp.zeros(n, dtype=float, device="cpu")
    except BaseException as exc:
        problems.append(f"wp.zeros() in the worker raised {exc!r}")
    if os.environ.get(DEBUG_SYNC_ENV) != USER_VALUE:
        problems.append(f"{DEBUG_SYNC_ENV} in the worker is {os.environ.get(DEBUG_SYNC_ENV)!r}")
    problems += _own_guard_records_one_breach()
    problems += leftovers()
    return problems


def nested_worker(n: int) -> list[str]:
    """In a worker: enter a guard of its own, fork inside it, keep using it."""
    import warp as wp
    from helpers import leftovers

    from trackgen_contract import hot_path_guard

    problems: list[str] = []
    with hot_path_guard(strict=False) as guard:
        wp.zeros(1, dtype=float, device="cpu")
        pid = os.fork()
        if pid == 0:  # the worker's child: nothing of the worker's guard
            status = 0
            try:
                if leftovers() or _own_guard_records_one_breach() or leftovers():
                    status = 3
                wp.zeros(1, dtype=float, device="cpu")
            except BaseException:
                status = 4
            os._exit(status)
        wp.zeros(1, dtype=float, device="cpu")  # after the fork: still recorded
        status = _wait(pid, 30.0)
    if status != 0:
        problems.append(f"the worker's forked child ended with {status}")
    if len(guard.violations) != 2:
        problems.append(f"the worker's guard recorded {len(guard.violations)} breaches, not 2")
    problems += leftovers()
    return problems


def _wait(pid: int, timeout: float) -> int | str:
    """The child's exit code, or "hung" (the child is then killed)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGUSR2)  # the child prints its stack (see run_race)
            time.sleep(0.5)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hung"
        time.sleep(0.002)


def run_pool(worker) -> dict:
    from trackgen_contract import hot_path_guard

    problems: list[str] = []
    context = multiprocessing.get_context("fork")
    with hot_path_guard() as guard, context.Pool(2) as pool:
        results = pool.map_async(worker, [3, 4, 5, 6]).get(timeout=60)
    for index, found in enumerate(results):
        problems += [f"worker {index}: {p}" for p in found]
    if not guard.ok:
        problems.append(f"the parent's guard is not ok: {guard.report()}")
    final_state(problems, env_value=USER_VALUE)
    return {"workers": len(results), "problems": problems}


def run_race(forks: int, child_timeout: float) -> dict:
    import faulthandler

    import warp as wp
    from helpers import leftovers

    from trackgen_contract import Tracer, hot_path_guard, no_allocation, no_host_sync

    stop = threading.Event()
    cycles = [0]

    def churn() -> None:
        while not stop.is_set():
            with hot_path_guard(strict=False):
                pass
            with no_host_sync(), no_allocation(strict=False):
                pass
            with Tracer(lambda call: None):
                pass
            cycles[0] += 1

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    time.sleep(0.05)
    outcomes: dict[str, int] = {}
    for _ in range(forks):
        step_watchdog(child_timeout + 60)
        pid = os.fork()
        if pid == 0:
            faulthandler.register(signal.SIGUSR2)  # a hung child shows where it hangs
            status = 0
            try:
                if leftovers():
                    print(f"child: inherited {leftovers()}", file=sys.stderr)
                    status = 3
                with hot_path_guard(strict=False) as guard:
                    wp.zeros(1, dtype=float, device="cpu")
                if len(guard.violations) != 1 or leftovers():
                    print(f"child: {guard.violations} {leftovers()}", file=sys.stderr)
                    status = 3
                wp.zeros(1, dtype=float, device="cpu")
                if os.environ.get(DEBUG_SYNC_ENV) != USER_VALUE:
                    print(f"child: {DEBUG_SYNC_ENV} not {USER_VALUE!r}", file=sys.stderr)
                    status = 3
            except BaseException as exc:
                print(f"child: {exc!r}", file=sys.stderr)
                status = 4
            os._exit(status)
        status = _wait(pid, child_timeout)
        key = {0: "ok", "hung": "hung", 3: "wrong", 4: "raised"}.get(status, str(status))
        outcomes[key] = outcomes.get(key, 0) + 1
        if outcomes.get("hung", 0) >= 3:
            break  # shown well enough; each hung child costs its whole timeout
    stop.set()
    thread.join(30)
    made = sum(outcomes.values())
    problems = [f"{n} of {made} children {what}" for what, n in outcomes.items() if what != "ok"]
    final_state(problems, env_value=USER_VALUE)
    return {"forks": forks, "outcomes": outcomes, "parent_cycles": cycles[0], "problems": problems}


def run_sweep(child_timeout: float) -> dict:
    """Fork at each line another thread executes while it enters a host-sync guard,
    breaches it and exits (Warp's own lines left out): each child must start with nothing
    armed and ``TRACKGEN_DEBUG_SYNC`` as the user set it, and its own guard must work."""
    import warp as wp
    from helpers import leftovers

    from trackgen_contract import no_host_sync

    warp_dir = os.path.dirname(os.path.abspath(wp.__file__))
    problems: list[str] = []
    points = 0

    def operation() -> None:
        with no_host_sync(strict=False):
            wp.synchronize()

    k = 0
    while True:
        k += 1
        paused, resume, seen, where = threading.Event(), threading.Event(), [0], [""]

        def trace(frame, event, arg, k=k, paused=paused, resume=resume, seen=seen, where=where):
            if event == "line" and not frame.f_code.co_filename.startswith(warp_dir):
                seen[0] += 1
                if seen[0] == k:
                    code = frame.f_code
                    where[0] = f"{code.co_qualname} ({code.co_filename}:{frame.f_lineno})"
                    paused.set()
                    resume.wait(30)
            return trace

        def other(trace=trace) -> None:
            sys.settrace(trace)
            try:
                operation()
            finally:
                sys.settrace(None)

        thread = threading.Thread(target=other)
        thread.start()
        while not paused.wait(0.01):
            if not thread.is_alive():
                break
        if not paused.is_set():
            thread.join()
            break  # the other thread finished before the k-th line: every point done
        points += 1
        step_watchdog(child_timeout + 60)
        pid = os.fork()
        if pid == 0:
            faulthandler_register()
            status = 0
            try:
                if leftovers():
                    status = 3
                with no_host_sync(strict=False) as guard:
                    wp.synchronize()
                if len(guard.violations) != 1 or leftovers():
                    status = 3
                if os.environ.get(DEBUG_SYNC_ENV) != USER_VALUE:
                    status = 5
            except BaseException:
                status = 4
            os._exit(status)
        status = _wait(pid, child_timeout)
        resume.set()
        thread.join()
        if status != 0:
            what = {
                "hung": "hung in its first guard",
                3: "inherited something armed, or its own guard did not work",
                4: "raised",
                5: f"has no {DEBUG_SYNC_ENV} after its own guard",
            }.get(status, f"ended with {status}")
            problems.append(f"a child forked while the other thread was at {where[0]} {what}")
            if len(problems) >= 5:
                break
    final_state(problems, env_value=USER_VALUE)
    return {"forks": points, "problems": problems}


def _sync() -> None:
    import warp as wp

    wp.synchronize()  # one call site: a repeat breach after the first calls


def run_answers(child_timeout: float) -> dict:
    from trackgen_contract import no_host_sync
    from trackgen_contract.tracer import keep_armed

    problems: list[str] = []
    with no_host_sync(strict=False) as parents:
        for _ in range(3):
            _sync()
        pid = os.fork()
        if pid == 0:
            faulthandler_register()
            status = 0
            try:
                before = len(parents.violations)
                with keep_armed():  # the core armed again, in the child
                    _sync()
                with no_host_sync(strict=False) as own:
                    for _ in range(3):
                        _sync()
                if len(parents.violations) != before:
                    status = 3
                elif len(own.violations) != 3:
                    status = 4
            except BaseException:
                status = 5
            os._exit(status)
        status = _wait(pid, child_timeout)
    what = {
        3: "recorded a call of its own into its copy of the parent's guard",
        4: "had a guard of its own that did not record its calls",
        5: "raised",
        "hung": "hung",
    }
    if status != 0:
        problems.append(f"the child {what.get(status, f'exited with {status}')}")
    if len(parents.violations) != 3:
        problems.append(f"the parent's guard recorded {len(parents.violations)} breaches, not 3")
    final_state(problems, env_value=USER_VALUE)
    return {"problems": problems}


def faulthandler_register() -> None:
    import faulthandler

    faulthandler.register(signal.SIGUSR2)  # a hung child shows where it hangs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["pool", "nested", "race", "sweep", "answers"])
    parser.add_argument("--forks", type=int, default=40)
    parser.add_argument("--child-timeout", type=float, default=30.0)
    args = parser.parse_args()
    start(watchdog=120)
    os.environ[DEBUG_SYNC_ENV] = USER_VALUE
    if args.mode == "pool":
        result = run_pool(pool_worker)
    elif args.mode == "nested":
        result = run_pool(nested_worker)
    elif args.mode == "race":
        result = run_race(args.forks, args.child_timeout)
    elif args.mode == "answers":
        result = run_answers(args.child_timeout)
    else:
        result = run_sweep(args.child_timeout)
    report({"python": sys.version.split()[0], "mode": args.mode, **result})


if __name__ == "__main__":
    main()
