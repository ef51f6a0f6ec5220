"""Every row of the contract (SPEC section 1), against real Warp on the CPU, strict and not."""

import inspect
import re

import numpy as np
import pytest
import warp as wp
from acme import gen
from acme.kernels import add_one
from helpers import assert_nothing_left

from trackgen_contract import HotPathViolation, hot_path_guard
from trackgen_contract.registry import installed, parse_version

WARP = parse_version(wp.__version__)


def record(fn, *args, **options):
    """Run fn under a non-strict guard; return the guard."""
    with hot_path_guard(strict=False, **options) as guard:
        fn(*args)
    assert_nothing_left()
    return guard


def only(guard):
    """The single violation recorded, as (category, api, function)."""
    assert len(guard.violations) == 1, guard.report()
    v = guard.violations[0]
    return v.category, v.api, v.site.function


def line_of(fn, text):
    """The line number in `fn`'s source holding `text`."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# --- host_sync ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fn", "api"),
    [
        (gen.read_back, "wp.array.numpy()"),
        (gen.read_list, "wp.array.list()"),
        (gen.read_asarray, "wp.array.__array_interface__"),
        (gen.print_array, "wp.array.numpy()"),
    ],
)
def test_readbacks_are_host_syncs(fn, api, arr):
    guard = record(fn, arr)
    assert only(guard) == ("host_sync", api, fn.__name__)


@pytest.mark.parametrize("fn", [gen.sync, gen.sync_device])
def test_synchronize(fn):
    guard = record(fn)
    category, api, function = only(guard)
    assert (category, function) == ("host_sync", fn.__name__)
    assert re.fullmatch(r"wp\.synchronize(_device)?\(\)", api)


@pytest.mark.parametrize(
    "call",
    [
        lambda: wp.synchronize_stream("cpu"),
        lambda: wp.synchronize_event(None),
    ],
    ids=["synchronize_stream", "synchronize_event"],
)
def test_other_synchronize_calls_are_refused_before_they_run(call):
    # Both would fail on a CPU-only machine if they ran: the guard refuses them first.
    with pytest.raises(HotPathViolation, match=r"host sync on a hot path: wp\.synchronize_"):
        with hot_path_guard():
            call()
    assert_nothing_left()


def test_the_readback_inside_numpy_is_reported_once(arr):
    # numpy() reads __array_interface__ itself: one user call, one violation.
    guard = record(gen.read_back, arr)
    assert [v.api for v in guard.violations] == ["wp.array.numpy()"]


def test_site_names_the_users_line(arr):
    guard = record(gen.read_back, arr)
    site = guard.violations[0].site
    assert site.module == "acme.gen"
    assert site.filename == gen.__file__
    assert site.lineno == line_of(gen.read_back, "a.numpy()")
    assert site.source_line() == "return a.numpy()"
    assert str(guard.violations[0]) == f"wp.array.numpy() from read_back ({site.location})"


def test_key_is_the_direct_caller(arr):
    guard = record(gen.print_array, arr)  # numpy() called by Warp's __str__
    v = guard.violations[0]
    assert v.site.function == "print_array"
    assert v.key[0] == "wp.array.numpy"
    assert v.key[2] == "array.__str__"


# --- allocation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "api"),
    [
        (lambda a: wp.zeros(4, dtype=float, device="cpu"), "wp.zeros()"),
        (lambda a: wp.empty(4, dtype=float, device="cpu"), "wp.empty()"),
        (lambda a: wp.ones(4, dtype=float, device="cpu"), "wp.ones()"),
        (lambda a: wp.full(4, 2.0, dtype=float, device="cpu"), "wp.full()"),
        (lambda a: wp.empty_like(a), "wp.empty_like()"),
        (lambda a: wp.zeros_like(a), "wp.zeros_like()"),
        (lambda a: wp.ones_like(a), "wp.ones_like()"),
        (lambda a: wp.full_like(a, 3.0), "wp.full_like()"),
        (lambda a: wp.clone(a), "wp.clone()"),
        (lambda a: wp.array([1.0, 2.0], dtype=float, device="cpu"), "wp.array()"),
        (lambda a: wp.from_numpy(np.ones(3, dtype=np.float32), device="cpu"), "wp.from_numpy()"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_every_allocation_path_names_the_public_function(make, api, arr):
    guard = record(make, arr, host_sync=False, stream=False)
    assert [v.api for v in guard.violations] == [api]
    assert guard.violations[0].category == "allocation"
    (made,) = guard.allocated()
    assert isinstance(made, wp.array) and made.device.is_cpu


def test_views_are_not_allocations(arr):
    assert record(gen.views, arr).ok
    assert record(lambda: wp.array(np.ones(4, dtype=np.float32), device="cpu", copy=False)).ok


def test_allocated_arrays_are_kept_alive_and_complete():
    guard = record(gen.allocate, 5, stream=False)
    (made,) = guard.allocated()
    assert made.shape == (5,)
    assert np.all(made.numpy() == 0)


@pytest.mark.parametrize(
    ("fn", "api"),
    [(gen.hash_grid, "wp.HashGrid()")],
)
def test_native_objects(fn, api):
    guard = record(fn)
    assert only(guard) == ("allocation", api, fn.__name__)
    assert guard.allocated() == []  # no wp.array: a native object


def test_hash_grid_reserve():
    grid = gen.hash_grid()
    guard = record(gen.reserve, grid)
    assert only(guard) == ("allocation", "wp.HashGrid.reserve()", "reserve")


def test_native_objects_refused_before_they_are_made():
    with pytest.raises(HotPathViolation, match=r"allocation on a hot path: wp\.Mesh\(\)"):
        with hot_path_guard():
            wp.Mesh(points=None, indices=None)  # would fail if it ran


def test_empty_volume_shell_is_not_an_allocation():
    assert record(lambda: wp.Volume(None)).ok


# --- stream -------------------------------------------------------------------------------


def test_launch_with_stream_is_clean(arr):
    assert record(gen.launch_with_stream, arr).ok
    assert record(gen.launch_positional_stream, arr).ok


def test_launch_without_stream(arr):
    guard = record(gen.launch_without_stream, arr)
    assert only(guard) == ("stream", "wp.launch without stream=", "launch_without_stream")


@pytest.mark.parametrize(
    ("kw", "clean"),
    [({"stream": None}, True), ({}, False), ({"outputs": []}, False)],
)
def test_forwarded_keywords(kw, clean, arr):
    assert record(gen.launch_forwarding, arr, **{}).ok is False  # no stream at all
    guard = record(lambda: gen.launch_forwarding(arr, **kw))
    assert guard.ok is clean


@pytest.mark.parametrize("with_stream", [True, False])
def test_forwarded_positionals(with_stream, arr):
    args = [add_one, 8, [arr], [], [], [], "cpu"] + ([None] if with_stream else [])
    guard = record(gen.launch_star, *args)
    assert guard.ok is with_stream


@pytest.mark.parametrize(
    "fn",
    [gen.launch_imported, gen.launch_alias, gen.launch_closure],
)
def test_every_way_of_reaching_launch_is_seen(fn, arr):
    guard = record(fn, arr)
    assert only(guard)[:2] == ("stream", "wp.launch without stream=")


def test_launch_through_a_dict_entry(arr):
    guard = record(gen.launch_from_dict, arr, {"launch": wp.launch})
    assert only(guard) == ("stream", "wp.launch without stream=", "launch_from_dict")


@pytest.mark.parametrize("with_stream", [True, False])
def test_launch_stored_on_an_object(with_stream, arr):
    holder = gen.Holder()
    guard = record(lambda: gen.launch_through_holder(holder, arr, with_stream=with_stream))
    assert guard.ok is with_stream


def test_partial_with_stream_is_clean(arr):
    assert record(gen.launch_through_partial, gen.Holder(), arr).ok


@pytest.mark.parametrize("stream_given", [True, False])
def test_launch_tiled_is_one_call(stream_given, arr):
    guard = record(gen.launch_tiled, arr, stream_given)
    apis = [v.api for v in guard.violations]
    assert apis == ([] if stream_given else ["wp.launch_tiled without stream="])


@pytest.mark.parametrize("stream_given", [True, False])
def test_recorded_launch_replay(stream_given, arr):
    cmd = wp.launch(add_one, dim=8, inputs=[arr], device="cpu", record_cmd=True)
    guard = record(gen.replay, cmd, stream_given)
    apis = [v.api for v in guard.violations]
    assert apis == ([] if stream_given else ["wp.Launch.launch without stream="])


def test_recording_a_launch_runs_nothing(arr):
    guard = record(lambda: wp.launch(add_one, dim=8, inputs=[arr], device="cpu", record_cmd=True))
    assert guard.ok


def test_copy(arr, arr2):
    assert record(gen.copy_with_stream, arr2, arr).ok
    guard = record(gen.copy_without_stream, arr2, arr)
    assert only(guard) == ("stream", "wp.copy without stream=", "copy_without_stream")


def test_launch_made_by_a_warp_utility_counts_against_the_caller(arr):
    ints = wp.zeros(8, dtype=int, device="cpu")
    guard = record(gen.cast, ints, arr)
    assert only(guard) == ("stream", "wp.launch without stream=", "cast")


@pytest.mark.parametrize(
    ("fn", "api"),
    [
        (gen.memset_zero, "wp.array.zero_()"),
        (gen.memset_fill, "wp.array.fill_()"),
    ],
)
def test_memsets(fn, api, arr):
    guard = record(fn, arr)
    assert only(guard) == ("stream", api, fn.__name__)


def test_assign_is_one_violation(arr, arr2):
    guard = record(gen.memset_assign, arr2, arr)  # assign() copies without a stream itself
    assert only(guard) == ("stream", "wp.array.assign()", "memset_assign")


def test_warps_own_memsets_are_not_the_callers(arr):
    guard = record(gen.allocate, 4)  # wp.zeros fills its new array with zero_()
    assert [v.category for v in guard.violations] == ["allocation"]


def test_scoped_stream():
    guard = record(gen.scoped_stream)
    assert only(guard) == ("stream", "wp.ScopedStream", "scoped_stream")


def test_modules_narrow_the_stream_check(arr):
    assert record(gen.launch_without_stream, arr, modules=("other",)).ok
    assert not record(gen.launch_without_stream, arr, modules=("acme",)).ok
    assert not record(gen.launch_without_stream, arr, modules="acme.gen").ok
    assert record(gen.launch_without_stream, arr, modules=("acme.gen.x",)).ok
    # host syncs are checked from every caller, whatever `modules` says
    assert not record(gen.read_back, arr, modules=("other",)).ok


# --- capture ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "api"),
    [
        (lambda: wp.capture_begin(device="cpu"), "wp.capture_begin()"),
        (lambda: wp.capture_end(device="cpu"), "wp.capture_end()"),
        (lambda: wp.capture_launch(None), "wp.capture_launch()"),
        (lambda: wp.ScopedCapture(device="cpu").__enter__(), "wp.ScopedCapture"),
    ],
    ids=["begin", "end", "launch", "ScopedCapture"],
)
def test_capture_controls_are_refused_before_they_run(call, api):
    with pytest.raises(HotPathViolation, match=rf"capture on a hot path: {re.escape(api)} from"):
        with hot_path_guard():
            call()
    assert_nothing_left()


@pytest.mark.skipif(WARP < (1, 8), reason="capture_if/capture_while arrived in Warp 1.8")
@pytest.mark.parametrize("name", ["capture_if", "capture_while"])
def test_conditional_capture_controls(name):
    with pytest.raises(HotPathViolation, match=rf"wp\.{name}\(\)"):
        with hot_path_guard():
            getattr(wp, name)(None, None)


@pytest.mark.skipif(WARP < (1, 13), reason="CPU graph capture arrived in Warp 1.13")
def test_scoped_capture_is_one_violation_for_the_whole_construct():
    # Its __exit__ ends the capture with capture_end(): part of the same user construct.
    with hot_path_guard(strict=False) as guard:
        with wp.ScopedCapture(device="cpu"):
            pass
    assert [v.api for v in guard.violations] == ["wp.ScopedCapture"]


@pytest.mark.skipif(WARP < (1, 13), reason="CPU graph capture arrived in Warp 1.13")
def test_capture_controls_called_directly_are_one_violation_each():
    with hot_path_guard(strict=False) as guard:
        wp.capture_begin(device="cpu")
        graph = wp.capture_end(device="cpu")
    assert graph is not None
    assert [v.api for v in guard.violations] == ["wp.capture_begin()", "wp.capture_end()"]


# --- strict mode --------------------------------------------------------------------------


def test_strict_refuses_before_the_call_runs(arr):
    before = arr.numpy().copy()
    with pytest.raises(HotPathViolation) as info:
        with hot_path_guard():
            gen.launch_without_stream(arr)
    assert np.array_equal(arr.numpy(), before)  # the kernel never ran
    assert str(info.value).startswith("stream on a hot path: wp.launch without stream= from")
    assert "launch_without_stream" in str(info.value)
    assert_nothing_left()


def test_strict_memset_does_not_run(arr):
    with pytest.raises(HotPathViolation):
        with hot_path_guard():
            gen.memset_zero(arr)
    assert arr.numpy()[3] == 3.0


def test_strict_allocation_keeps_nothing():
    with hot_path_guard(strict=False) as loose:
        with pytest.raises(HotPathViolation):
            with hot_path_guard() as strict:
                gen.allocate(4)
    assert strict.allocated() == []
    assert len(loose.allocated()) == 0  # the outer guard saw the refused call: nothing made
    assert [v.api for v in loose.violations] == ["wp.zeros()"]


def test_swallowed_violation_still_fails_the_block(arr):
    with pytest.raises(HotPathViolation, match=r"host sync \(1\)") as info:
        with hot_path_guard() as guard:
            assert gen.swallow(gen.read_back, arr) == "swallowed"
    assert len(guard.violations) == 1
    # Its traceback ends in the guard's exit: the message shows the breaching line.
    assert str(info.value).splitlines()[2] == "      return a.numpy()"
    assert str(info.value) == guard.report(with_source=True) != guard.report()


def test_other_exceptions_pass_through_unchanged():
    with pytest.raises(KeyError, match="boom"):
        with hot_path_guard():
            raise KeyError("boom")
    assert_nothing_left()


def test_message_names_category_site_and_hint(arr):
    with pytest.raises(HotPathViolation) as info:
        with hot_path_guard():
            gen.allocate(3)
    message = str(info.value)
    assert message.startswith("allocation on a hot path: wp.zeros() from allocate (")
    assert "allocate them once" in message


# --- the watched APIs are the real ones ---------------------------------------------------


def test_no_warp_attribute_is_rebound():
    before = {name: getattr(wp, name) for name in ("launch", "copy", "zeros", "synchronize")}
    with hot_path_guard(strict=False):
        assert all(getattr(wp, name) is fn for name, fn in before.items())
        assert wp.launch.__code__ is installed().by_api("wp.launch").code
