"""Checks shared by the tests."""

import gc
import signal
import sys
import time

import pytest
import warp as wp


def stack_depth():
    """How many frames the caller's stack holds."""
    frame, count = sys._getframe(1), 0
    while frame is not None:
        frame, count = frame.f_back, count + 1
    return count


def monitoring_state():
    """(tool ids this package holds, Warp APIs with local events of a free or held id)."""
    if sys.version_info < (3, 12):
        return None
    from trackgen_contract.registry import installed

    ours_or_free = [
        i for i in range(6) if sys.monitoring.get_tool(i) in (None, "trackgen_contract")
    ]
    held = [i for i in range(6) if sys.monitoring.get_tool(i) == "trackgen_contract"]
    # Another tool (coverage.py) may watch Warp's code; ids that are free or ours may not.
    armed = [
        e.api
        for e in installed()
        for i in ours_or_free
        if sys.monitoring.get_local_events(i, e.code)
    ]
    return held, armed


def assert_nothing_left():
    """No tool id, no local events, no profile function of ours after the last guard, and
    no hold on the collector or the recursion limit."""
    if sys.version_info >= (3, 12):
        assert monitoring_state() == ([], [])
    from trackgen_contract import tracer
    from trackgen_contract.tracer.collector import collector
    from trackgen_contract.tracer.headroom import headroom

    profile = getattr(sys.getprofile(), "__qualname__", "")
    assert not profile.startswith("ProfileCore."), "a profile function of ours is left"
    assert tracer._core._books.counts == {}, "the core still counts users"
    assert collector.holders == {}, "the collector is still held off"
    assert headroom.users == {}, "room near the recursion limit is still counted"


def leftovers():
    """What a guard or tracer left behind, in words (empty when nothing): tool ids and
    local events of ours, a profile function of ours, users the core still counts. For
    child programs that report rather than assert."""
    from trackgen_contract import tracer

    found = []
    state = monitoring_state()
    if state is not None and state != ([], []):
        held, armed = sorted(set(state[0])), sorted(set(state[1]))
        found.append(f"tool ids {held} held, local events on {len(armed)} Warp APIs {armed[:3]}")
    profile = getattr(sys.getprofile(), "__qualname__", "")
    if profile.startswith("ProfileCore."):
        found.append(f"a profile function of ours is installed: {profile}")
    if tracer._core._books.counts:
        found.append(f"the core still counts users: {tracer._core._books.counts}")
    from trackgen_contract.tracer.collector import collector
    from trackgen_contract.tracer.headroom import headroom

    if collector.holders or not gc.isenabled():
        found.append(f"the collector is off ({len(collector.holders)} holds on it)")
    if headroom.users:
        found.append(f"room near the recursion limit still counted: {len(headroom.users)}")
    return found


def volume_on_cpu(data):
    """``wp.Volume.load_from_numpy(data)`` on the CPU, a Warp call that makes arrays
    itself; skips where the installed Warp builds volumes on CUDA devices only (1.10)."""
    try:
        return wp.Volume.load_from_numpy(data, bg_value=0.0, device="cpu")
    except RuntimeError as error:
        if "Only CUDA devices" not in str(error):
            raise
        pytest.skip(f"warp-lang {wp.config.version}: {error}")


class Alarm(Exception):
    """What a signal handler of the program's raises (a timeout, say)."""


def _in_coverage(frame):
    """Whether `frame` runs inside coverage.py's code (its tracer's callback)."""
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("coverage."):
            return True
        frame = frame.f_back
    return False


def signal_storm(guarded, calls, breaches, *, alarm=Alarm, set_inside=False):
    """Run `calls` (`breaches` breaching calls) twice under `guarded()`, which yields its
    guard, then in a loop for a second while SIGALRM fires every 0.2 ms with a handler that
    raises `alarm` (once per turn). The handler is set before the guard is entered (and so
    wrapped by it), or with `set_inside` in its block (as a program run by the command line
    sets it). Returns how many loop turns had a handler raise and yet ran to their end (the
    exception swallowed on the way), how many turns recorded more breaches than they made,
    and how many handlers raised."""
    raised_here, raised = [False], [0]

    def handler(signum, frame):
        # One per turn: none while one propagates. None in coverage.py's callback (a run
        # under it): what it does with the exception is its own (it takes a TimeoutError
        # for a missing file, as unguarded).
        if armed[0] and not raised_here[0] and not _in_coverage(frame):
            raised[0] += 1
            raised_here[0] = True
            raise alarm("from the program's handler")

    armed, swallowed, twice = [False], 0, 0
    previous = signal.getsignal(signal.SIGALRM)
    collecting = gc.isenabled()
    gc.disable()  # a handler run inside a gc callback (some plugins install one) is lost
    try:
        if not set_inside:
            signal.signal(signal.SIGALRM, handler)
        with guarded() as guard:
            if set_inside:
                signal.signal(signal.SIGALRM, handler)
            calls()  # judged in full, then from the guard's memo: before any signal
            calls()
            signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                before = len(guard.violations)
                raised_here[0] = False
                try:
                    armed[0] = True
                    calls()
                    armed[0] = False
                    swallowed += raised_here[0]
                except alarm:
                    armed[0] = False
                twice += len(guard.violations) - before > breaches
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if collecting:
            gc.enable()
    return swallowed, twice, raised[0]
