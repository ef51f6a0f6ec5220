"""Set-up shared by the child programs of `test_reliability.py` and `benchmarks/stress.py`.

Each child program runs in its own interpreter, started with a timeout, so that a hang or
a crash fails its test instead of stalling the run. A child prints one JSON object as its
last line of output: what it did, and what it found wrong (``problems``, empty when all
went well).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import time

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)  # acme and helpers

import warp as wp  # noqa: E402

if hasattr(wp.config, "log_level"):
    wp.config.log_level = wp.LOG_WARNING
else:
    wp.config.quiet = True

DEBUG_SYNC_ENV = "TRACKGEN_DEBUG_SYNC"


def start(watchdog: float) -> None:
    """Load Warp, and dump every thread's stack and exit if the program still runs after
    `watchdog` seconds (a hang shows where it hangs). SIGINT gets Python's own handler,
    as in a program run from a terminal: one started in the background of a shell
    inherits SIGINT ignored, and the checks compare with Python's handler."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    faulthandler.enable()
    faulthandler.dump_traceback_later(watchdog, exit=True)
    wp.init()
    from acme import kernels

    a = wp.zeros(4, dtype=float, device="cpu")
    wp.launch(kernels.add_one, dim=4, inputs=[a], device="cpu", stream=None)  # build once


def step_watchdog(seconds: float) -> None:
    """Restart the watchdog at a step of a long program: a run that slows down under load
    takes longer in all, but a hang is still a step that never ends."""
    faulthandler.dump_traceback_later(seconds, exit=True)


def final_state(problems: list[str], *, env_value: str | None = None) -> None:
    """Append to `problems` what is wrong after the last guard: anything of ours still
    armed, the environment variable not back, an unguarded Warp call refused, a fresh
    strict guard not refusing."""
    from helpers import leftovers

    from trackgen_contract import HotPathViolation, hot_path_guard

    problems += leftovers()
    if env_value is not None and os.environ.get(DEBUG_SYNC_ENV) != env_value:
        problems.append(
            f"{DEBUG_SYNC_ENV} is {os.environ.get(DEBUG_SYNC_ENV)!r} after the last guard"
        )
    try:
        wp.zeros(1, dtype=float, device="cpu")
    except BaseException as exc:
        problems.append(f"wp.zeros() outside any guard raised {exc!r}")
    try:
        with hot_path_guard():
            wp.zeros(1, dtype=float, device="cpu")
        problems.append("a fresh strict guard let an allocation through")
    except HotPathViolation:
        pass
    except BaseException as exc:
        problems.append(f"a fresh strict guard raised {exc!r}")
    problems += [f"after a fresh guard: {p}" for p in leftovers()]


def report(result: dict) -> None:
    """Print the result as the last line and exit: 0 when no problem was found."""
    faulthandler.cancel_dump_traceback_later()
    sys.stdout.flush()
    print(json.dumps(result), flush=True)
    os._exit(1 if result.get("problems") else 0)


def now() -> float:
    return time.perf_counter()
