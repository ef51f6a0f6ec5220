"""The command line's `Recording`: a repeat breach at a site whose findings follow from the
site alone is counted by its tracer's answer (see `Recording._answer_repeats`), without a
`WarpCall`. What it records must be what judging every call in full records, in every
shape a site can be reached; these run the two side by side on real Warp calls."""

import types

import numpy as np
import pytest
import warp as wp
from acme.kernels import add_one
from helpers import volume_on_cpu

from trackgen_contract import hot_path_guard, hotpaths, sanction
from trackgen_contract.recording import Recording
from trackgen_contract.rules import make_policy

ROUNDS = 6  # the first call judged, the second from the memo, the rest answered


def _record(recording):
    """Everything a report is made of, comparable."""
    return {
        "calls": {name: vars(count) for name, count in recording.calls.items()},
        "found": dict(recording.found),
        "allowed": dict(recording.allowed),
        "sanctioned": dict(recording.sanctioned),
        "by_pragma": dict(recording.by_pragma),
        "hot_calls": dict(recording.hot_calls),
        "pragma_errors": sorted(recording.pragma_errors),
    }


def _run(make_policy_args, fn, *, answered):
    """Run `fn` under a fresh recording's tracer; its record and how many calls its
    ``on_call`` judged. With ``answered=False`` no site is answered: every call judged."""
    recording = Recording(make_policy(**make_policy_args))
    if not answered:
        recording._answer_repeats = lambda *args: None
    tracer, judged = _judging(recording)
    with tracer:
        fn()
    return _record(recording), len(judged)


def _judging(recording):
    """The recording's tracer, and a list of the calls its ``on_call`` judges from now on."""
    judged = []
    tracer = recording.tracer()
    on_call = tracer.on_call
    tracer.on_call = lambda call: judged.append(call.api) or on_call(call)
    return tracer, judged


def _breaches(arr, cmd):
    """One call per breaching shape (and one clean launch), each at a site of its own."""
    wp.synchronize()
    arr.numpy()
    wp.launch(add_one, dim=8, inputs=[arr], device="cpu")  # no stream=
    wp.launch(add_one, dim=8, inputs=[arr], device="cpu", stream=None)  # clean
    cmd.launch()  # a recorded launch, no stream=
    arr.zero_()  # a memset on Warp's current stream
    with wp.ScopedStream(None):
        pass
    wp.zeros(2, dtype=float, device="cpu")
    wp.array([1.0, 2.0], dtype=float, device="cpu")  # allocates, then Warp's own copy
    wp.synchronize()  # trackgen_contract: allow host_sync


@pytest.fixture
def cmd(arr):
    return wp.launch(add_one, dim=8, inputs=[arr], device="cpu", record_cmd=True)


POLICIES = {
    "every check": {},
    "stream only": {"checks": ["stream"]},
    "host sync, allow=": {
        "checks": ["host_sync"],
        "allow": [("wp.synchronize", __name__, "_breaches")],
    },
}


@pytest.mark.parametrize("policy", POLICIES.values(), ids=POLICIES.keys())
def test_repeats_are_recorded_as_judging_each_call_would(arr, cmd, policy):
    def loop():
        for _ in range(ROUNDS):
            _breaches(arr, cmd)

    fast, judged_fast = _run(policy, loop, answered=True)
    full, judged_full = _run(policy, loop, answered=False)
    assert fast == full
    assert fast["found"] or fast["allowed"]
    assert judged_fast < judged_full  # the repeats were answered, not judged


def test_repeats_are_answered_after_two_judged_calls(arr):
    def loop():
        for _ in range(ROUNDS):
            wp.launch(add_one, dim=8, inputs=[arr], device="cpu")

    record, judged = _run({}, loop, answered=True)
    assert judged == 2
    (count,) = record["calls"].values()
    assert count == {
        "calls": ROUNDS,
        "in_hot_paths": 0,
        "breaches_inside": 0,
        "breaches_outside": ROUNDS,
    }
    assert list(record["found"].values()) == [ROUNDS]


def _syncs():
    for _ in range(ROUNDS):
        wp.synchronize()


def _syncs_in(name):
    """A copy of `_syncs` (a code object of its own) under globals of its own, named `name`."""
    return types.FunctionType(
        _syncs.__code__.replace(), {"wp": wp, "ROUNDS": ROUNDS, "__name__": name}
    )


def _hot():
    _syncs()


def _changes_under_way():
    """Sites whose answers must stop: a hot path marked, a function marked sanctioned, a
    module renamed in place, the program's own guard beside the recording."""
    renamed = _syncs_in("first")
    renamed()
    renamed.__globals__["__name__"] = "second"  # the same dict: now another module's site
    renamed()
    marked_later = _syncs_in("marked_later")
    with sanction.scope("poll"):
        marked_later()
        sanction.site("poll")(marked_later)
        marked_later()
    _syncs()
    with hot_path_guard(strict=False):  # the program's own guard: both judge every call
        _syncs()
    _hot()
    hotpaths.mark_code(_hot.__code__, __name__)
    try:
        _hot()  # inside a hot path now
        _syncs()  # a site answered before: outside the hot path, judged in full again
    finally:
        hotpaths.unmark_code(_hot.__code__)
    _syncs()


def test_changes_under_way_are_recorded_as_judging_each_call_would():
    fast, _ = _run({}, _changes_under_way, answered=True)
    full, _ = _run({}, _changes_under_way, answered=False)
    assert fast == full
    assert fast["sanctioned"] and fast["hot_calls"]
    assert {violation.site.module for violation, _ in fast["found"]} >= {"first", "second"}


def test_a_strict_recording_judges_every_call():
    # --strict stops at the first breach it does not tolerate; one it tolerates (a
    # baseline's) is judged in full every time.
    recording = Recording(make_policy(), strict=True, tolerated=lambda violation: True)
    tracer, judged = _judging(recording)
    with tracer:
        _syncs()
    assert len(judged) == ROUNDS
    assert sum(recording.found.values()) == ROUNDS


def test_an_allocation_warp_makes_is_named_by_the_call_that_made_it():
    # wp.Volume.load_from_numpy makes a wp.array(...): the table names that constructor
    # inside the program's call, never Warp's allocation chokepoint
    recording = Recording(make_policy())
    data = np.zeros((4, 4, 4), dtype=np.float32)
    with recording.tracer():
        volume_on_cpu(data)
        wp.zeros(2, dtype=float, device="cpu")
    names = {str(name): count for name, count in recording.calls.items()}
    assert names["wp.array (inside wp.Volume.load_from_numpy)"].calls >= 1
    assert names["wp.zeros"].calls == 1
    assert not any("_init_new" in name for name in names)
