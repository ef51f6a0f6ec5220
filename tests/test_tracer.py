"""The programmatic tracer: what a `WarpCall` carries, and how the cores arm and disarm."""

import cProfile
import os
import sys
import threading
import time
import weakref

import numpy as np
import pytest
import warp as wp
from acme import gen
from acme.kernels import add_one
from helpers import assert_nothing_left, monitoring_state, volume_on_cpu

import trackgen_contract
from trackgen_contract import BACKEND, Tracer, WarpCall, hot_path, hot_path_guard
from trackgen_contract.hotpaths import unmark_code
from trackgen_contract.registry import installed

SYSMON = sys.version_info >= (3, 12)


def trace(fn, *args, read=lambda call: call):
    """Run fn under a Tracer; return what `read` made of each call, read inside on_call."""
    seen = []
    with Tracer(lambda call: seen.append(read(call))):
        fn(*args)
    assert_nothing_left()
    return seen


def test_backend_matches_the_interpreter():
    assert ("sys.monitoring" if SYSMON else "sys.setprofile") == BACKEND


def test_every_watched_call_is_reported_violation_or_not(arr):
    def work():
        gen.launch_with_stream(arr)
        gen.read_back(arr)
        gen.allocate(2)

    apis = trace(work, read=lambda call: call.api)
    # Warp's own watched calls on the user's behalf are reported too, in call order.
    expected = [
        "wp.launch",
        "wp.array.numpy",
        "wp.ScopedStream",
        "wp.array.__array_interface__",
        "wp.array._init_new",
        "wp.CpuDefaultAllocator",
        "wp.array.zero_",
    ]
    assert len(apis) == len(expected)
    assert all(api.startswith(prefix) for api, prefix in zip(apis, expected, strict=True))


def test_fields_of_a_call(arr):
    def read(call):
        return call.api, call.op, dict(call.args), call.explicit, call.site, call.caller

    (launch,) = trace(gen.launch_with_stream, arr, read=read)
    api, op, args, explicit, site, caller = launch
    assert (api, op) == ("wp.launch", "launch")
    assert args["kernel"] is add_one and args["inputs"] == [arr] and args["stream"] is None
    assert explicit == {"kernel", "dim", "inputs", "device", "stream"}
    assert site == caller
    assert (site.module, site.function) == ("acme.gen", "launch_with_stream")


def test_nested_call_fields(arr):
    calls = trace(gen.allocate, 3, read=lambda c: (c.api, (c.via, c.within, c.direct, c.caller)))
    via, within, direct, caller = dict(calls)["wp.array._init_new"]
    assert (via, within, direct) == ("wp.zeros", (), False)
    assert caller.module.startswith("warp")
    via, within, direct, caller = dict(calls)["wp.array.zero_"]
    assert (via, direct, caller.function) == ("wp.zeros", False, "zeros")
    calls = dict(trace(gen.read_back, arr, read=lambda c: (c.api, (c.within, c.site.function))))
    assert calls["wp.array.__array_interface__"] == (("wp.array.numpy",), "read_back")


def test_an_allocation_is_made_by_the_public_call_that_made_it(arr):
    # Warp's chokepoint inside another watched call (a wp.array(...) that
    # Volume.load_from_numpy makes) is made by wp.array, inside the program's call
    data = np.zeros((4, 4, 4), dtype=np.float32)
    read = lambda c: (c.api, (c.made_by, c.via, c.within))  # noqa: E731
    calls = trace(lambda: volume_on_cpu(data), read=read)
    made = [fields for api, fields in calls if api == "wp.array._init_new"]
    assert made and {(made_by, via) for made_by, via, _ in made} == {
        ("wp.array", "wp.Volume.load_from_numpy")
    }
    assert all(within[0] == "wp.Volume.load_from_numpy" for _, _, within in made)
    assert dict(calls)["wp.Volume.load_from_numpy"] == ("wp.Volume.load_from_numpy",) * 2 + ((),)
    # inside no other watched call it is `via`: what the program called
    calls = trace(gen.allocate, 3, read=read)
    assert [fields for api, fields in calls if api == "wp.array._init_new"] == [
        ("wp.zeros", "wp.zeros", ())
    ]


def test_thread_is_the_calling_thread(arr):
    assert trace(gen.read_back, arr, read=lambda c: c.thread)[0] == threading.get_ident()


def test_explicit_is_unknown_through_c(arr):
    def through_map():
        list(map(gen.launch_star, [add_one], [8], [[arr]]))  # python callee: seen as usual
        list(map(wp.synchronize_device, ["cpu"]))  # Warp called by C code

    explicit = trace(through_map, read=lambda c: (c.api, c.explicit))
    assert explicit[-1] == ("wp.synchronize_device", None)


def test_a_call_kept_by_on_call_stays_readable(arr):
    calls = []
    with Tracer(calls.append):
        gen.read_back(arr)
        gen.launch_with_stream(arr)
    readback, *_, launch = calls
    assert not readback.live and not launch.live
    assert readback.args["self"] is arr
    assert (readback.site.function, readback.caller.function) == ("read_back", "read_back")
    assert (readback.direct, readback.in_hot_path, readback.within) == (True, False, ())
    assert readback.thread == threading.get_ident()
    assert launch.explicit == {"kernel", "dim", "inputs", "device", "stream"}
    assert repr(readback) == "<WarpCall wp.array.numpy() (done)>"
    assert str(readback) == f"wp.array.numpy() from {readback.site}"


def test_a_call_nobody_kept_is_not_read_in_full(arr, monkeypatch):
    walks = []
    real = WarpCall._walk_stack
    monkeypatch.setattr(WarpCall, "_walk_stack", lambda self, f: walks.append(1) or real(self, f))
    with Tracer(lambda call: call.api):
        gen.read_back(arr)
    assert walks == []  # nothing asked for the site: the stack was never walked


def test_an_exception_from_on_call_is_raised_before_the_call_runs(arr):
    def refuse(call):
        raise LookupError(call.api)

    before = arr.numpy().copy()
    with pytest.raises(LookupError, match="wp.launch"), Tracer(refuse):
        gen.launch_without_stream(arr)
    assert (arr.numpy() == before).all()
    assert_nothing_left()


def test_every_tracer_sees_a_call_even_when_one_raises(arr):
    seen = []
    with Tracer(lambda c: seen.append("outer")):
        with pytest.raises(KeyError), Tracer(lambda c: (_ for _ in ()).throw(KeyError())):
            with Tracer(lambda c: seen.append("inner")):
                gen.sync()
    assert seen == ["outer", "inner"]


def test_calls_after_a_swallowed_exception_from_on_call_are_seen_or_owned_up_to(arr):
    # 3.11 removes a profile function that raises: the calls after it go unseen there, and
    # every tracer and guard running in the thread says so. sys.monitoring sees them all.
    seen = []

    def raise_once(call):
        seen.append(call.api)
        if len(seen) == 1:
            raise LookupError("raised once")

    with hot_path_guard(strict=False) as guard:
        with Tracer(raise_once) as tracer:
            with pytest.raises(LookupError):
                gen.launch_with_stream(arr)
            gen.sync()
            gen.read_back(arr)
    assert not guard.ok
    if SYSMON:
        assert guard.blind is None and tracer.blind is None
        assert [v.api for v in guard.violations] == ["wp.synchronize()", "wp.array.numpy()"]
        assert {"wp.synchronize", "wp.array.numpy"} <= set(seen)
    else:
        assert guard.violations == [] and seen == ["wp.launch"]
        assert "made Python 3.11 remove it" in guard.blind
        assert tracer.blind == guard.blind
        assert "cannot vouch for it: an exception raised from the profile" in guard.report()
    with hot_path_guard(strict=False) as later:  # the next one is whole again
        gen.sync()
    assert later.blind is None and [v.api for v in later.violations] == ["wp.synchronize()"]
    assert_nothing_left()


def test_a_refusal_that_goes_straight_up_to_its_guard_leaves_no_one_blind(arr):
    # On 3.11 the refusal removes the profile function until the inner guard's exit puts
    # it back, but nothing ran in between that it did not see: nobody is blind.
    with hot_path_guard(strict=False) as outer:
        with pytest.raises(HotPathViolationType):
            with hot_path_guard(host_sync=False):
                gen.allocate(4)
        gen.sync()
    assert outer.blind is None
    assert [v.api for v in outer.violations] == ["wp.zeros()", "wp.synchronize()"]
    inner = hot_path_guard(host_sync=False)
    try:
        with inner:
            gen.allocate(4)
    except HotPathViolationType:
        pass
    assert inner.blind is None and len(inner.violations) == 1
    assert_nothing_left()


def _refused_in_a_generator(arr):
    yield 1
    gen.read_back(arr)


def test_a_refusal_kept_and_raised_again_later_is_owned_up_to(arr):
    # Handled when the guard exits, but only after the block went on (a retry loop that
    # raises its last failure): on 3.11 the sync went unseen, and the guard says so.
    guard, last = hot_path_guard(), None
    with pytest.raises(HotPathViolationType):
        with guard:
            for _ in range(2):
                try:
                    gen.read_back(arr)
                except HotPathViolationType as error:
                    last = error
            gen.sync()
            raise last
    if SYSMON:
        assert guard.blind is None and len(guard.violations) == 3
    else:
        assert "made Python 3.11 remove it" in guard.blind and len(guard.violations) == 1
    # Straight up through a generator and two frames: nothing missed, no one blind.
    with hot_path_guard(strict=False) as outer:
        with pytest.raises(HotPathViolationType):
            with hot_path_guard(allocation=False):
                for _ in _refused_in_a_generator(arr):
                    pass
        gen.sync()
    assert outer.blind is None and len(outer.violations) == 2
    assert_nothing_left()


def test_a_strict_refusal_swallowed_on_3_11_leaves_the_guard_blind(arr):
    with pytest.raises(HotPathViolationType, match="host sync"):
        with hot_path_guard() as guard:
            assert gen.swallow(gen.read_back, arr) == "swallowed"
            gen.sync()  # unseen on 3.11: the refusal took the profile function down
    assert [v.api for v in guard.violations][:1] == ["wp.array.numpy()"]
    if SYSMON:
        assert guard.blind is None and len(guard.violations) == 2
    else:
        assert "made Python 3.11 remove it" in guard.blind and len(guard.violations) == 1
    assert_nothing_left()


def test_start_stop_and_restart(arr):
    seen = []
    tracer = Tracer(lambda c: seen.append(c.api))
    assert tracer.start() is tracer
    with pytest.raises(RuntimeError, match="already started"):
        tracer.start()
    gen.sync()
    tracer.stop()
    tracer.stop()  # stopping twice is harmless
    gen.sync()
    with tracer:
        gen.sync()
    assert seen == ["wp.synchronize", "wp.synchronize"]
    assert_nothing_left()


def test_a_tracer_stopped_from_another_thread_stops_for_good(arr):
    seen = []
    tracer = Tracer(seen.append).start()
    thread = threading.Thread(target=tracer.stop)
    thread.start()
    thread.join()
    assert not tracer.active
    gen.sync()  # in the thread that started it: no longer traced
    assert seen == []
    assert_nothing_left()


def test_on_call_must_be_callable():
    with pytest.raises(TypeError, match="on_call must be callable"):
        Tracer("not a function")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"entries": ["wp.launch"]}, r"Tracer\(entries=...\) takes entries of the registry"),
        ({"entries": "wp.launch"}, r"or None for all; got 'wp.launch'"),
        ({"entries": 5}, r"or None for all; got 5"),
        ({"every_call": "no"}, r"Tracer\(every_call=...\) must be True or False, got 'no'"),
    ],
)
def test_bad_tracer_options_are_named(options, message):
    # BUG: a name for an entry failed inside the tracer (AttributeError: 'str' object has
    # no attribute 'code'), and every_call took any value.
    with pytest.raises(TypeError, match=message):
        Tracer(print, **options)
    assert_nothing_left()


def test_tracers_made_from_fresh_lists_of_entries_keep_none_of_them(arr):
    # BUG: every object passed as `entries` was kept for good (its tuple found again by
    # identity): a Tracer made from a new list each time grew the process by one list.
    sync = [entry for entry in installed() if entry.api == "wp.synchronize"]
    made = []
    for _ in range(200):
        given = FreshList(sync)
        Tracer(print, entries=given)
        made.append(weakref.ref(given))
    del given
    assert sum(ref() is not None for ref in made) <= 32
    seen = []
    with Tracer(seen.append, entries=FreshList(sync)):
        arr.numpy()
        gen.sync()
    assert [call.api for call in seen] == ["wp.synchronize"]  # found again by its codes
    assert_nothing_left()


def test_tracers_made_from_fresh_lists_in_many_threads_at_once():
    # BUG: letting the oldest object go read the table's first key while other threads
    # changed it: KeyError and "dictionary changed size during iteration" from Tracer().
    sync = [entry for entry in installed() if entry.api == "wp.synchronize"]
    errors = []
    until = time.monotonic() + 1.0

    def make():
        while time.monotonic() < until:
            try:
                Tracer(print, entries=FreshList(sync))
            except Exception as error:
                errors.append(error)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between any two bytecodes
    try:
        threads = [threading.Thread(target=make) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


class FreshList(list):
    """A list that a weak reference can follow."""


def test_counts_must_be_callable():
    with pytest.raises(TypeError, match=r"Tracer\(counts=...\) must be callable or None"):
        Tracer(print, every_call=False, counts=True)


def test_calls_in_other_threads_are_not_reported(arr):
    seen = []
    with Tracer(lambda c: seen.append(threading.get_ident())):
        thread = threading.Thread(target=gen.read_back, args=(arr,))
        thread.start()
        thread.join()
        gen.sync()
    assert seen == [threading.get_ident()]


def test_calls_made_while_on_call_runs_are_not_reported(arr):
    seen = []

    def on_call(call):
        seen.append(call.api)
        if call.api == "wp.synchronize":
            arr.numpy()  # the tracer's own Warp call

    trace(gen.sync, read=on_call)
    assert seen == ["wp.synchronize"]


# --- hot paths -----------------------------------------------------------------------------


@pytest.fixture
def marked():
    functions = []

    def mark(fn):
        functions.append(fn)
        return hot_path(fn)

    yield mark
    for fn in functions:
        unmark_code(getattr(fn, "__func__", fn).__code__)


def test_in_hot_path_covers_nested_calls(arr, marked):
    def helper():
        gen.sync()

    def hot():
        helper()

    assert marked(hot) is hot  # unchanged, no wrapper
    calls = trace(lambda: (hot(), gen.sync_device()), read=lambda c: (c.api, c.in_hot_path))
    assert calls == [("wp.synchronize", True), ("wp.synchronize_device", False)]


def test_a_suspended_generator_is_not_a_hot_path(arr, marked):
    @marked
    def produce():
        gen.sync()
        yield
        gen.sync()

    def consume():
        it = produce()
        next(it)
        gen.sync_device()  # the generator is suspended: not inside it
        next(it, None)

    calls = trace(consume, read=lambda c: c.in_hot_path)
    assert calls == [True, False, True]


def test_hot_path_accepts_methods(marked):
    class Gen:
        @marked
        @staticmethod
        def static():
            gen.sync()

        def method(self):
            gen.sync()

    marked(Gen.method)
    calls = trace(lambda: (Gen.static(), Gen().method()), read=lambda c: c.in_hot_path)
    assert calls == [True, True]
    assert (
        "test_hot_path_accepts_methods.<locals>.Gen.method" in trackgen_contract.hotpaths.marked()
    )


def test_hot_path_rejects_what_is_not_a_function():
    with pytest.raises(TypeError, match="hot_path expects a Python function"):
        hot_path(42)


# --- building calls ------------------------------------------------------------------------


def test_call_built_from_values():
    call = WarpCall.of("wp.copy", args={"dest": 1}, explicit=frozenset({"dest"}), via="wp.clone")
    assert (call.api, call.op, call.via, call.within) == ("wp.copy", "copy", "wp.clone", ())
    assert dict(call.args) == {"dest": 1}
    assert call.site == call.caller
    with pytest.raises(KeyError, match="'wp.nothing' is not watched"):
        WarpCall.of("wp.nothing")


# --- arming and disarming ------------------------------------------------------------------


def test_nothing_is_armed_before_or_after():
    assert_nothing_left()
    with hot_path_guard():
        if SYSMON:
            held, armed = monitoring_state()
            assert len(held) == 1
            assert set(armed) >= {"wp.launch", "wp.copy", "wp.array._init_new"}
    assert_nothing_left()


@pytest.mark.skipif(not SYSMON, reason="sys.monitoring arrived in Python 3.12")
def test_preferred_tool_id_is_left_to_its_owner():
    monitoring = sys.monitoring
    free = [i for i in (3, 4) if monitoring.get_tool(i) is None]
    monitoring.use_tool_id(free[0], "someone else")
    try:
        with hot_path_guard():
            held, _ = monitoring_state()
            assert held and held[0] != free[0]
            assert held[0] not in (0, 1, 2, 5) or not [i for i in (3, 4) if i != free[0]]
    finally:
        monitoring.free_tool_id(free[0])
    assert_nothing_left()


@pytest.mark.skipif(not SYSMON, reason="sys.monitoring arrived in Python 3.12")
def test_no_free_tool_id_is_a_clear_error_and_leaves_nothing(arr):
    monitoring = sys.monitoring
    taken = [i for i in range(6) if monitoring.get_tool(i) is None]
    for i in taken:
        monitoring.use_tool_id(i, f"tool{i}")
    try:
        with pytest.raises(RuntimeError, match="no sys.monitoring tool id is free"):
            with hot_path_guard():
                pass  # never reached
        guard = hot_path_guard()
        with pytest.raises(RuntimeError):
            guard.__enter__()
        assert not guard.active
    finally:
        for i in taken:
            monitoring.free_tool_id(i)
    assert_nothing_left()
    with hot_path_guard(strict=False) as guard:  # and it works again
        gen.read_back(arr)
    assert len(guard.violations) == 1


def _user_function(n):
    return n + 1


@pytest.mark.skipif(not SYSMON, reason="sys.monitoring arrived in Python 3.12")
@pytest.mark.parametrize("when", ["left by a tool before", "set by the program meanwhile"])
def test_events_under_our_id_that_are_not_ours_change_nothing(arr, when):
    # 3.12 and 3.13 keep a freed id's events: the guard's callback was called for code it
    # does not watch (every function's start) and raised KeyError into the program's calls.
    # A program may also set events under the guard's id while it runs, on any version.
    monitoring, events = sys.monitoring, sys.monitoring.events
    tool = next(i for i in (3, 4, 5, 2, 1, 0) if monitoring.get_tool(i) is None)
    code = _user_function.__code__

    def set_foreign_events():
        monitoring.set_events(tool, events.PY_START | events.PY_RETURN)
        monitoring.set_local_events(tool, code, events.PY_START)

    def calls():
        assert _user_function(1) == 2
        gen.read_back(arr)
        wp.launch(add_one, dim=8, inputs=[arr], stream=None)

    with hot_path_guard(strict=False) as plain:
        calls()
    if when == "left by a tool before":
        monitoring.use_tool_id(tool, "a tool before")
        set_foreign_events()
        monitoring.free_tool_id(tool)
    try:
        with hot_path_guard(strict=False) as guard:
            assert monitoring_state()[0] == [tool]
            if when == "set by the program meanwhile":
                set_foreign_events()
            calls()
        assert [v.api for v in guard.violations] == ["wp.array.numpy()"]
        assert guard.calls == plain.calls and guard.blind is None
        assert monitoring.get_events(tool) == 0  # given back without them
        assert_nothing_left()
    finally:  # the local events a freed id keeps on 3.12 and 3.13, which no tool clears
        if monitoring.get_tool(tool) is None:
            monitoring.use_tool_id(tool, "cleanup")
            monitoring.set_local_events(tool, code, 0)
            monitoring.set_events(tool, 0)
            monitoring.free_tool_id(tool)


@pytest.mark.skipif(SYSMON, reason="the sys.setprofile core runs on Python 3.11")
def test_previous_profile_function_is_restored(arr):
    events = []

    def profiler(frame, event, arg):
        events.append(event)

    sys.setprofile(profiler)
    try:
        with hot_path_guard(strict=False) as guard:
            gen.read_back(arr)
        assert sys.getprofile() is profiler
    finally:
        sys.setprofile(None)
    assert len(guard.violations) == 1


@pytest.mark.skipif(SYSMON, reason="the sys.setprofile core runs on Python 3.11")
@pytest.mark.parametrize("kind", ["function", "cProfile"])
def test_previous_profile_function_is_restored_after_a_strict_refusal(arr, kind):
    # CPython removes a profile function that raises: the guard's exit still puts back
    # what was there before it.
    if kind == "cProfile":
        profiler = cProfile.Profile()
        profiler.enable()
        before = sys.getprofile()
    else:
        before = lambda frame, event, arg: None  # noqa: E731
        sys.setprofile(before)
    try:
        with pytest.raises(trackgen_contract.HotPathViolation):
            with hot_path_guard():
                gen.swallow(gen.read_back, arr)
        assert sys.getprofile() is before
    finally:
        # A profiler freed while it counts itself enabled uninstalls whatever profile
        # function its thread has then, from its destructor: a later test's guard's.
        if kind == "cProfile":
            profiler.disable()
        else:
            sys.setprofile(None)
    assert_nothing_left()


@pytest.mark.skipif(SYSMON, reason="the sys.setprofile core runs on Python 3.11")
def test_profile_function_is_set_in_the_guarded_thread_only():
    seen = {}

    def other():
        seen["profile"] = sys.getprofile()

    with hot_path_guard():
        assert sys.getprofile() is not None
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert seen["profile"] is None
    assert sys.getprofile() is None


@pytest.mark.skipif(SYSMON, reason="the sys.setprofile core runs on Python 3.11")
def test_a_hook_closed_from_another_thread_goes_at_its_threads_next_event_of_any_kind():
    # Only the owner thread can take its hook down. The tracer is stopped while the owner
    # waits in a C call; from then on to the check below the owner makes no Python call:
    # only that C call's return and the C call of sys.getprofile itself, which must
    # already find the hook gone.
    seen = []
    tracer = Tracer(seen.append).start()
    stopped = threading.Lock()
    stopped.acquire()
    owner = threading.get_ident()

    def stop():
        deadline = time.monotonic() + 10
        while sys._current_frames()[owner].f_lineno != waiting_line:
            if time.monotonic() > deadline:
                break  # the test still stops the tracer (and then proves less)
            time.sleep(0.01)
        time.sleep(0.1)  # past the line's start, into the wait
        tracer.stop()
        stopped.release()

    waiting_line = sys._getframe().f_lineno + 2
    threading.Thread(target=stop).start()
    assert stopped.acquire(timeout=60)
    profile = sys.getprofile()
    assert profile is None
    gen.sync()
    assert seen == []
    assert_nothing_left()


@pytest.mark.skipif(SYSMON, reason="the sys.setprofile core runs on Python 3.11")
def test_profile_hook_comes_back_after_a_swallowed_strict_violation(arr):
    # CPython drops a profile function that raises: the next guard boundary restores it.
    with hot_path_guard(strict=False) as outer:
        with pytest.raises(HotPathViolationType):
            with hot_path_guard():
                gen.swallow(gen.read_back, arr)
        gen.launch_without_stream(arr)
    assert [v.category for v in outer.violations] == ["host_sync", "stream"]


HotPathViolationType = trackgen_contract.HotPathViolation


def test_other_exceptions_keep_their_traceback(arr):
    def broken(call):
        return {}["missing"]

    with pytest.raises(KeyError) as info, Tracer(broken):
        gen.sync()
    assert any(entry.name == "broken" for entry in info.traceback)


def test_a_refusal_is_shown_from_the_users_call(arr):
    def refuse(call):
        raise HotPathViolationType("no")

    with pytest.raises(HotPathViolationType) as info, Tracer(refuse):
        gen.sync()
    names = [entry.name for entry in info.traceback]
    assert "sync" in names and "refuse" not in names


# --- keep_armed(): guards by the hundred, and nothing held after ---------------------------


def _breaches(arr):
    with hot_path_guard(strict=False) as guard:
        gen.launch_with_stream(arr)
        gen.read_back(arr)
    return [v.category for v in guard.violations]


def test_guards_inside_keep_armed_judge_as_outside_and_nothing_is_held_after(arr):
    alone = _breaches(arr)
    with trackgen_contract.tracer.keep_armed():
        inside = [_breaches(arr) for _ in range(3)]
        if SYSMON:  # armed between the guards: that is what makes them cheap
            held, armed = monitoring_state()
            assert held and "wp.launch" in armed
        with pytest.raises(trackgen_contract.HotPathViolation):
            with hot_path_guard():
                gen.read_back(arr)
    assert alone == ["host_sync"] and inside == [alone] * 3
    assert_nothing_left()
    with hot_path_guard() as after:  # the next bare guard arms and disarms as usual
        gen.launch_with_stream(arr)
    assert after.ok
    assert_nothing_left()


def test_keep_armed_alone_watches_nothing_and_refuses_nothing(arr):
    with trackgen_contract.tracer.keep_armed():
        gen.read_back(arr)  # no guard: an ordinary call
        assert not getattr(sys.getprofile(), "__qualname__", "").startswith("ProfileCore.")
    assert_nothing_left()


def test_keep_armed_blocks_nest_and_end_on_an_exception(arr):
    outer = trackgen_contract.tracer.keep_armed()
    with pytest.raises(ValueError, match="in the block"):
        with outer:
            with trackgen_contract.tracer.keep_armed():
                assert _breaches(arr) == ["host_sync"]
            assert _breaches(arr) == ["host_sync"]  # the outer block holds still
            raise ValueError("in the block")
    assert_nothing_left()
    with outer:  # a block object may be used again once it ended
        pass
    assert_nothing_left()


def test_a_keep_armed_block_entered_twice_is_refused(arr):
    block = trackgen_contract.tracer.keep_armed()
    with block:
        with pytest.raises(RuntimeError, match="already entered"):
            block.__enter__()
        assert _breaches(arr) == ["host_sync"]
    assert_nothing_left()


def test_keep_armed_in_another_thread_ends_there(arr):
    entered, done = threading.Event(), threading.Event()

    def hold():
        with trackgen_contract.tracer.keep_armed():
            entered.set()
            done.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    entered.wait(10)
    try:
        assert _breaches(arr) == ["host_sync"]  # a guard here meanwhile works as ever
    finally:
        done.set()
        thread.join()
    assert_nothing_left()


@pytest.mark.parametrize("what", ["tracer", "guard"])
def test_one_left_running_by_a_thread_that_ended_is_stopped_from_another(what, monkeypatch):
    # README, Reliability: nobody else stops it (the caches of the core may keep it
    # alive), so the program does, from any thread, and nothing is left.
    monkeypatch.setenv("TRACKGEN_DEBUG_SYNC", "1")
    started = []

    def start():
        made = Tracer(print) if what == "tracer" else hot_path_guard(strict=False)
        made.__enter__()
        gen.sync()  # a call: the core remembers its tracer
        gen.sync()
        started.append(made)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    assert "TRACKGEN_DEBUG_SYNC" not in os.environ or what == "tracer"
    started[0].__exit__(None, None, None)
    assert_nothing_left()
    assert os.environ["TRACKGEN_DEBUG_SYNC"] == "1"
