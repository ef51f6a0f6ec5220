"""The category rules as plain functions of one call, without any tracer.

Calls are built with `WarpCall.of`. The copy between two devices cannot be made on a
CPU-only machine: its test builds the call with stand-ins for a CPU and a CUDA array (the
only stand-ins in this suite) and says so.
"""

from types import SimpleNamespace

import pytest

from trackgen_contract import Site, WarpCall, rules, sanction
from trackgen_contract.rules import (
    ALLOWED,
    SANCTIONED,
    VIOLATION,
    Violation,
    allocation,
    capture,
    host_sync,
    judge,
    make_policy,
    stream,
)

USER = Site("acme.gen", "Gen.generate", "/src/acme/gen.py", 12)
WARP = Site("warp._src.context", "clone", "/site-packages/warp/_src/context.py", 900)
POLICY = make_policy()


class Device:
    """A stand-in for a Warp device: the two attributes Warp stores and the rules read."""

    def __init__(self, name):
        self.alias = name
        self.ordinal = -1 if name == "cpu" else int(name.partition(":")[2] or 0)


def array_on(name):
    """A stand-in for a Warp array on a named device."""
    return SimpleNamespace(device=Device(name))


# --- host_sync -----------------------------------------------------------------------------


def test_sync_is_a_violation():
    finding = host_sync(WarpCall.of("wp.synchronize", site=USER), POLICY)
    assert finding.outcome == VIOLATION
    assert finding.violation == Violation(
        "host_sync", "wp.synchronize()", USER, ("wp.synchronize", "acme.gen", "Gen.generate")
    )
    assert str(finding.violation) == f"wp.synchronize() from Gen.generate ({USER.location})"


def test_allowed_readback():
    policy = make_policy(allow=[("wp.array.numpy", "acme.gen", "Gen.generate")])
    finding = host_sync(WarpCall.of("wp.array.numpy", site=USER), policy)
    assert finding.outcome == ALLOWED


def test_sanctioned_readback():
    sanction.site("rules-test")(_sanctioned_poll)
    call = WarpCall.of(
        "wp.array.numpy",
        site=Site(__name__, "_sanctioned_poll", __file__, 1),
        caller_code=_sanctioned_poll.__code__,
    )
    assert host_sync(call, POLICY).outcome == VIOLATION
    with sanction.scope("rules-test"):
        assert host_sync(call, POLICY).outcome == SANCTIONED


def _sanctioned_poll():
    pass


def test_readback_served_by_another_readback_is_not_reported_again():
    call = WarpCall.of(
        "wp.array.__array_interface__",
        site=USER,
        within=("wp.array.numpy",),
        args={"self": array_on("cpu")},
    )
    assert host_sync(call, POLICY) is None


def test_array_interface_of_a_cuda_array_is_no_readback():
    call = WarpCall.of("wp.array.__array_interface__", site=USER, args={"self": array_on("cuda:0")})
    assert host_sync(call, POLICY) is None
    call = WarpCall.of("wp.array.__array_interface__", site=USER, args={"self": array_on("cpu")})
    assert host_sync(call, POLICY).violation.api == "wp.array.__array_interface__"


@pytest.fixture
def two_devices(monkeypatch):
    """Pretend the runtime has a CUDA device: this machine has none."""
    monkeypatch.setattr(rules, "_several_devices", lambda: True)


@pytest.mark.parametrize(
    ("src", "dest", "api"),
    [
        ("cpu", "cuda:0", "wp.copy from cpu to cuda:0"),
        ("cuda:0", "cpu", "wp.copy from cuda:0 to cpu"),
        ("cuda:0", "cuda:1", "wp.copy from cuda:0 to cuda:1"),
        ("cuda:0", "cuda:0", None),
    ],
)
def test_copy_between_devices_is_a_host_sync(two_devices, src, dest, api):
    call = WarpCall.of(
        "wp.copy",
        site=USER,
        caller=WARP,
        explicit=frozenset({"dest", "src"}),
        args={"dest": array_on(dest), "src": array_on(src)},
    )
    finding = host_sync(call, POLICY)
    if api is None:
        assert finding is None
    else:
        assert (finding.violation.api, finding.violation.site) == (api, USER)
        assert finding.violation.key == ("wp.copy", WARP.module, WARP.function)


def test_copy_on_a_single_device_runtime_is_never_a_host_sync():
    call = WarpCall.of("wp.copy", site=USER, args={"dest": array_on("cpu"), "src": array_on("x")})
    assert rules._several_devices() is False  # this machine: CPU only
    assert host_sync(call, POLICY) is None


def test_other_ops_are_not_host_syncs():
    assert host_sync(WarpCall.of("wp.launch", site=USER), POLICY) is None


# --- allocation ----------------------------------------------------------------------------


def test_allocation_names_the_public_function():
    made = object()
    call = WarpCall.of(
        "wp.array._init_new", site=USER, caller=WARP, via="wp.zeros", args={"self": made}
    )
    finding = allocation(call, POLICY)
    assert finding.violation.api == "wp.zeros()"
    assert finding.violation.key == ("wp.zeros", "acme.gen", "Gen.generate")
    assert finding.violation.array is made
    kept = allocation(call, make_policy(keep_arrays=False)).violation.array
    assert kept is None


def test_allocation_inside_another_is_one_violation():
    call = WarpCall.of(
        "wp.array._init_new", site=USER, via="wp.Volume.allocate", within=("wp.Volume.allocate",)
    )
    assert allocation(call, POLICY) is None


def test_empty_volume_is_no_allocation():
    call = WarpCall.of("wp.Volume", site=USER, args={"data": None})
    assert allocation(call, POLICY) is None
    call = WarpCall.of("wp.Volume", site=USER, args={"data": object()})
    assert allocation(call, POLICY).violation.api == "wp.Volume()"


# --- stream --------------------------------------------------------------------------------


def launch(explicit, args=None, **fields):
    return WarpCall.of("wp.launch", site=USER, explicit=explicit, args=args or {}, **fields)


@pytest.mark.parametrize(
    ("explicit", "args", "reported"),
    [
        (frozenset({"kernel", "dim", "stream"}), {"stream": None}, False),
        (frozenset({"kernel", "dim"}), {"stream": None}, True),
        (None, {"stream": None}, True),  # unknown call shape: the bound value decides
        (None, {"stream": object()}, False),
        (frozenset({"kernel", "dim", "record_cmd"}), {"record_cmd": True}, False),
        (frozenset({"kernel", "dim", "record_cmd"}), {"record_cmd": False}, True),
    ],
)
def test_launch_stream(explicit, args, reported):
    finding = stream(launch(explicit, args), POLICY)
    assert (finding is not None) is reported
    if reported:
        assert finding.violation.api == "wp.launch without stream="


def test_launch_tiled_stream_through_star_args():
    star = {"args": (1, 2, [], [], [], [], None, object()), "kwargs": {}}
    call = WarpCall.of("wp.launch_tiled", site=USER, explicit=None, args=star)
    assert stream(call, POLICY) is None
    star = {"args": (1, 2), "kwargs": {"stream": object()}}
    assert stream(WarpCall.of("wp.launch_tiled", site=USER, args=star), POLICY) is None
    star = {"args": (1, 2), "kwargs": {}}
    assert stream(WarpCall.of("wp.launch_tiled", site=USER, args=star), POLICY) is not None


def test_launch_served_by_launch_tiled_is_not_reported_again():
    call = launch(frozenset(), {"stream": None}, within=("wp.launch_tiled",))
    assert stream(call, POLICY) is None


@pytest.mark.parametrize(
    ("modules", "reported"),
    [(None, True), (("acme",), True), (("acme.gen",), True), (("acm",), False)],
)
def test_modules_filter(modules, reported):
    finding = stream(launch(frozenset(), {}), make_policy(modules=modules))
    assert (finding is not None) is reported


def test_memset_counts_only_when_called_directly():
    direct = WarpCall.of("wp.array.zero_", caller=USER, direct=True)
    assert stream(direct, POLICY).violation.api == "wp.array.zero_()"
    from_warp = WarpCall.of("wp.array.zero_", caller=WARP, site=USER, direct=False)
    assert stream(from_warp, POLICY) is None


def test_scoped_stream_spelling():
    finding = stream(WarpCall.of("wp.ScopedStream", caller=USER), POLICY)
    assert finding.violation.api == "wp.ScopedStream"


# --- capture -------------------------------------------------------------------------------


def test_capture_controls():
    assert capture(WarpCall.of("wp.capture_launch", site=USER), POLICY).violation.api == (
        "wp.capture_launch()"
    )
    nested = WarpCall.of("wp.capture_begin", site=USER, within=("wp.ScopedCapture",))
    assert capture(nested, POLICY) is None


# --- judge ---------------------------------------------------------------------------------


def test_judge_runs_only_the_checks_asked_for(two_devices):
    call = WarpCall.of(
        "wp.copy",
        site=USER,
        explicit=frozenset({"dest", "src"}),
        args={"dest": array_on("cuda:0"), "src": array_on("cpu")},
    )
    assert [f.violation.category for f in judge(call, POLICY)] == ["host_sync", "stream"]
    only_stream = make_policy(checks=["stream"])
    assert [f.violation.category for f in judge(call, only_stream)] == ["stream"]


@pytest.mark.parametrize(
    ("checks", "error"),
    [(["host_sync", "gpu"], "unknown check category 'gpu'"), ("stream", "not a string")],
)
def test_make_policy_rejects_bad_checks(checks, error):
    with pytest.raises((ValueError, TypeError), match=error.replace("not a string", "the string")):
        make_policy(checks=checks)
