"""A signal handler's exception is the program's: it reaches the call it landed in, whatever
its type and wherever the guard was in its work, never taken for a failure of the guard's
own (`trackgen_contract.handlers`)."""

import functools
import itertools
import signal
import sys
import threading
import time
import warnings

import pytest
import warp as wp
from helpers import Alarm, signal_storm

from trackgen_contract import handlers, hot_path_guard, no_host_sync
from trackgen_contract.diagnostics import TrackgenContractWarning
from trackgen_contract.tracer import critical

needs_312 = pytest.mark.skipif(
    sys.version_info < (3, 12), reason="3.11 removes a profile function that raises"
)


class _Invalid(ValueError):
    """A ValueError: what the guard's frame lookups take for 'no such frame'."""


class _Deep(RecursionError):
    """A RecursionError: what the guard takes for 'no room to answer, judge in full'."""


def _a_new_site_each_call(filename):
    """A function that calls ``wp.synchronize()`` from a new code object each time, made
    from file ``filename(turn)``: each call is the first at its site, judged in full."""
    turns = itertools.count()

    def call():
        exec(compile("wp.synchronize()", filename(next(turns)), "exec"), {"wp": wp})

    return call


def _each_reaches_the_call(call, *, alarm, set_inside):
    """Under a signal storm (`signal_storm`), `call` (one host sync) made in a loop under a
    non-strict host-sync guard: each exception its handler raises reaches the call, none
    is swallowed, and no call is recorded twice."""
    swallowed, twice, raised = signal_storm(
        lambda: no_host_sync(strict=False), call, 1, alarm=alarm, set_inside=set_inside
    )
    assert raised > 100
    assert (swallowed, twice) == (0, 0)


@needs_312
@pytest.mark.parametrize("set_inside", [False, True], ids=["wrapped", "set-in-the-block"])
@pytest.mark.parametrize("alarm", [Alarm, TimeoutError, _Invalid])
def test_a_handlers_exception_while_a_call_is_judged_in_full_reaches_the_call(alarm, set_inside):
    # BUG: an exception a handler raised while a call was judged in full (reading it back,
    # walking its stack, the rules, reading its file for pragmas) was taken for the
    # judging's own failure: swallowed, with a warning. A TimeoutError was taken for an
    # unreadable file by os.path and the pragma reader, a ValueError for a missing frame.
    # A handler the program set after the guard's entry (as under the command line) was
    # not told apart at all. And one raised in the callback that forgets a dead code
    # object's facts was printed and dropped by CPython.
    first_call_at_a_new_site = _a_new_site_each_call(lambda turn: f"<turn {turn}>")
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        _each_reaches_the_call(first_call_at_a_new_site, alarm=alarm, set_inside=set_inside)
    assert not [w for w in warned if issubclass(w.category, TrackgenContractWarning)]


@needs_312
def test_a_handlers_timeout_while_a_missing_files_path_is_resolved_reaches_the_call(tmp_path):
    # BUG: code whose file is gone (a notebook cell's, a deleted script's) had its path
    # resolved by os.path.realpath, which takes any OSError on its way for a missing part.
    gone = tmp_path / "gone"
    first_call_in_a_missing_file = _a_new_site_each_call(lambda turn: str(gone / f"cell_{turn}.py"))
    _each_reaches_the_call(first_call_in_a_missing_file, alarm=TimeoutError, set_inside=True)


@needs_312
def test_a_handlers_recursion_error_in_an_answer_reaches_the_call():
    # BUG: a RecursionError out of a repeat's answer was taken for no room to answer (the
    # call judged in full instead), also where a handler raised it.
    _each_reaches_the_call(wp.synchronize, alarm=_Deep, set_inside=True)


_ALLOWED = """import warp as wp

def f():
    wp.synchronize()  # trackgen_contract: allow host_sync
"""


@needs_312
def test_a_handlers_timeout_while_pragmas_are_read_leaves_them_honoured(tmp_path):
    # BUG: a TimeoutError (an OSError) that landed while the guard read a file for its
    # pragmas was swallowed, and the file was then taken to have none: its allowed
    # breaches were reported from then on.
    modules = []
    for k in range(150):
        path = tmp_path / f"allowed_{k}.py"
        path.write_text(_ALLOWED)
        code = compile(path.read_text(), str(path), "exec")
        namespace = {}
        exec(code, namespace)
        modules.append(namespace["f"])
    turns = iter(modules)

    def first_breach_in_a_new_file():
        next(turns, modules[-1])()

    with no_host_sync(strict=False) as guard:
        swallowed, _, raised = signal_storm(
            lambda: no_host_sync(strict=False),
            first_breach_in_a_new_file,
            0,
            alarm=TimeoutError,
        )
        for f in modules:  # no timer now: every line's pragma allows its breach
            f()
    assert raised > 0 and swallowed == 0
    assert guard.violations == []


def _told(handler, raise_it=None):
    """Whether the exception `handler` raises for SIGUSR1 (from `raise_it`) is told for a
    handler's, asked while it is set; none of the program's code may run to tell it."""
    previous = signal.signal(signal.SIGUSR1, handler)
    _Handler.looked_up.clear()  # what pytest's ids and signal.signal read aside
    try:
        (raise_it or (lambda: signal.raise_signal(signal.SIGUSR1)))()
    except Exception as error:
        told = handlers.raised_by_handler(error)
        assert _Handler.looked_up == []  # none of the program's code ran to tell it
        return told
    finally:
        signal.signal(signal.SIGUSR1, previous)
    raise AssertionError("the handler did not raise")


def _raises(signum, frame):
    raise Alarm("from the program's handler")


class _Handler:
    """A handler object whose attribute lookups are the program's own code."""

    looked_up: list = []

    def __getattr__(self, name):
        _Handler.looked_up.append(name)
        raise AttributeError(name)

    def __call__(self, signum, frame):
        raise Alarm("from the program's handler")

    def method(self, signum, frame):
        raise Alarm("from the program's handler")


class _StaticCall:
    __call__ = staticmethod(_raises)


class _Partial(functools.partial):
    """A partial of the program's own class."""

    def __getattribute__(self, name):
        _Handler.looked_up.append(name)
        return super().__getattribute__(name)


@pytest.mark.parametrize(
    "handler",
    [
        _raises,
        _Handler(),
        _Handler().method,
        functools.partial(_raises),
        functools.partial(_Handler().method),
        _StaticCall(),
        _Partial(_raises),
    ],
    ids=[
        "function",
        "callable-object",
        "bound-method",
        "partial",
        "partial-of-method",
        "static-call",
        "partial-subclass",
    ],
)
def test_a_handler_set_without_a_guard_is_told_in_every_shape(handler):
    assert _told(handler)


def test_a_stop_iteration_a_generator_turned_into_a_runtime_error_is_told():
    def raising(signum, frame):
        raise StopIteration

    def generator():
        signal.raise_signal(signal.SIGUSR1)
        yield 1

    assert _told(raising, lambda: list(generator()))


def test_the_packages_own_errors_are_not_a_handlers():
    def ours():
        raise ValueError("the package's own")

    try:
        ours()
    except ValueError as error:
        assert not handlers.raised_by_handler(error)  # a frame of its own below, no handler
    try:
        sys._getframe(10**6)
    except ValueError as error:
        assert not handlers.raised_by_handler(error)  # raised where it was caught
    previous = signal.signal(signal.SIGUSR1, _raises)
    try:
        ours()
    except ValueError as error:
        assert not handlers.raised_by_handler(error)  # a handler set, but not in its frames
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_an_exception_raised_in_place_of_a_handlers_on_the_way_is_told():
    # zipimport, reading a source for pragmas, raises its own error in place of an OSError
    # (a handler's TimeoutError): the handler's is its context.
    def converting():
        try:
            signal.raise_signal(signal.SIGUSR1)
        except Alarm:
            raise LookupError("raised in its place") from None

    assert _told(_raises, converting)


def test_an_error_of_the_packages_while_the_program_handles_a_handlers_is_not_told():
    # The program, in its `except` of a handler's exception, makes a call the package
    # judges: the package's own error there has the handler's exception as its context,
    # but was not raised in place of it.
    def ours():
        try:
            raise ValueError("the package's own")
        except ValueError as error:
            return handlers.raised_by_handler(error)

    previous = signal.signal(signal.SIGUSR1, _raises)
    try:
        try:
            signal.raise_signal(signal.SIGUSR1)
        except Alarm:
            told = ours()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert told is False


def test_a_handler_function_called_in_another_thread_is_not_a_handlers_exception():
    # Python runs signal handlers in the main thread alone: a worker thread's call of the
    # same function (a `counts` that dumps state, say) is the package's to judge.
    told = []

    def worker():
        try:
            _raises(signal.SIGUSR1, None)
        except Alarm as error:
            told.append(handlers.raised_by_handler(error))

    previous = signal.signal(signal.SIGUSR1, _raises)
    try:
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert told == [False]


def test_telling_runs_none_of_the_exceptions_own_code():
    class Nosy(Exception):
        def __getattribute__(self, name):
            _Handler.looked_up.append(name)
            return super().__getattribute__(name)

    def raising(signum, frame):
        raise Nosy

    assert _told(raising)


class _Landed(Exception):
    """Raised by a handler whose signal landed in a given frame of the guard's hook."""


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="a profile function's own frames")
@pytest.mark.parametrize("hook_frame", ["profile", "on_call"])
def test_a_handlers_exception_in_the_profile_functions_own_frame_is_told(hook_frame):
    # BUG (3.11): a handler's exception raised in the profile function's own frames, out
    # of reach of its `try` (its first instruction, say), left it, and CPython removed it;
    # the guard took that for `sys.setprofile(None)` ("replaced by nothing", not what
    # happened), and did not give the hook back to the guards still running when an inner
    # one exited: their calls went unseen to the end of their blocks.
    landed = []

    def handler(signum, frame):
        at_once = critical.is_wrapper(sys._getframe(1).f_code)  # not held back and run later
        name = frame.f_code.co_qualname if frame is not None else ""
        if at_once and not landed and name.endswith(f"<locals>.{hook_frame}"):
            landed.append(name)
            raise _Landed

    previous = signal.signal(signal.SIGALRM, handler)  # set before the guards: wrapped
    outer, inner = hot_path_guard(strict=False), no_host_sync(strict=False)
    deadline = time.monotonic() + 60
    caught = False
    try:
        with outer:
            with inner:
                # With the Python filter alone the hook runs at every call, the loop's too:
                # the exception may come from any of them.
                try:
                    signal.setitimer(signal.ITIMER_REAL, 0.0001, 0.00005)
                    while time.monotonic() < deadline:
                        wp.synchronize_device("cpu")  # watched: the hook runs in full
                except _Landed:
                    caught = True
                signal.setitimer(signal.ITIMER_REAL, 0)
            wp.synchronize()  # after the inner exit: seen by the outer guard again
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert landed and caught, f"no signal landed in the hook's {hook_frame} frame in 60 s"
    removed = "an exception raised from the profile function made Python 3.11 remove it"
    assert (inner.blind, outer.blind) == (removed, removed)
    assert outer.violations[-1].api == "wp.synchronize()"
