"""Which arguments a caller passed, read off its call instruction.

`launch` below has the shape of ``wp.launch`` and reports what `explicit_arguments` makes
of its own caller; the shapes are then checked on the real ``wp.launch`` and ``wp.copy``
through a tracer.
"""

import functools
import sys
import types

import pytest
import warp as wp
from acme.kernels import add_one

from trackgen_contract import Tracer
from trackgen_contract.callsite import explicit_arguments

PARAMS = ("kernel", "dim", "inputs", "outputs", "adj_inputs", "adj_outputs", "device", "stream")


def launch(
    kernel,
    dim,
    inputs=(),
    outputs=(),
    adj_inputs=(),
    adj_outputs=(),
    device=None,
    stream=None,
    record_cmd=False,
):
    return explicit_arguments(sys._getframe(), PARAMS)


def launch_tiled(*args, **kwargs):
    return explicit_arguments(sys._getframe(), PARAMS)


class Launch:
    def launch(self, stream=None):
        return explicit_arguments(sys._getframe(), ("self", "stream"))


module = types.ModuleType("fake_warp")
module.launch, module.Launch = launch, Launch


def passed(explicit):
    return None if explicit is None else "stream" in explicit


k, n, s = object(), 8, None
kw, kws = {"inputs": []}, {"stream": None}
args, args8 = (k, n), (k, n, [], [], [], [], None, None)
cmd = Launch()
bound = cmd.launch
with_stream = functools.partial(launch, stream=None)
without_stream = functools.partial(launch, k, n)
of_bound = functools.partial(cmd.launch, None)
table = {"launch": with_stream}


SHAPES = {
    "keyword": (lambda: launch(k, n, stream=s), True),
    "none": (lambda: launch(k, n), False),
    "positional": (lambda: launch(k, n, [], [], [], [], None, None), True),
    "one short": (lambda: launch(k, n, [], [], [], [], None), False),
    "stream and **kw": (lambda: launch(k, n, stream=s, **kw), True),
    "**kw without": (lambda: launch(k, n, **kw), False),
    "**kw with": (lambda: launch(k, n, **kws), True),
    "**kw then keyword": (lambda: launch(k, n, **kw, stream=s), True),
    "*args short": (lambda: launch(*args), False),
    "*args full": (lambda: launch(*args8), True),
    "positional then *args": (lambda: launch(k, *args8[1:]), None),  # a slice: unknown
    "tiled *args **kw": (lambda: launch_tiled(*args, **kws), True),
    "tiled *args": (lambda: launch_tiled(*args, **kw), False),
    "tiled positional": (lambda: launch_tiled(k, n, [], [], [], [], None, s), True),
    "module attribute": (lambda: module.launch(k, n, stream=s), True),
    "module attribute without": (lambda: module.launch(k, n, inputs=[]), False),
    "method": (lambda: cmd.launch(s), True),
    "method without": (lambda: cmd.launch(), False),
    "method keyword": (lambda: cmd.launch(stream=None), True),
    "through the class": (lambda: module.Launch.launch(cmd), False),
    "through the class with": (lambda: module.Launch.launch(cmd, None), True),
    "bound method": (lambda: bound(), False),
    "bound method with": (lambda: bound(None), True),
    "partial with": (lambda: with_stream(k, n), True),
    "partial without": (lambda: without_stream(), False),
    "partial of a bound method": (lambda: of_bound(), True),
    "partial from a dict": (lambda: table["launch"](k, n), True),
    "ternary argument": (lambda: launch(k, n, inputs=[1] if k else [2], stream=s), True),
    "ternary without": (lambda: launch(k, n, inputs=[1] if k else [2]), False),
    "nested call": (lambda: launch(k, len(kw), stream=s), True),
    "arithmetic": (lambda: launch(k, n * 2 + 1, stream=s), True),
    "comprehension": (lambda: launch(k, n, inputs=[x for x in (1, 2)], stream=s), True),
    "comprehension without": (lambda: launch(k, n, inputs=[x for x in (1, 2)]), False),
    "f-string": (lambda: launch(k, f"{n}", stream=s), True),
    "map": (lambda: next(map(launch, [k], [n])), None),  # called by C: cannot be known
}


@pytest.mark.parametrize(("make", "expected"), SHAPES.values(), ids=SHAPES.keys())
def test_shapes(make, expected):
    assert passed(make()) is expected


def test_names_passed_by_position_and_keyword():
    assert launch(k, n, device=None) == {"kernel", "dim", "device"}
    assert cmd.launch() == {"self"}
    assert with_stream(k, dim=n) == {"kernel", "dim", "stream"}


def test_a_site_reused_with_another_callable():
    results = [fn(k, n) for fn in (launch, with_stream, without_stream)]
    assert [passed(r) for r in results] == [False, True, False]


def test_unknown_kwargs_shape():
    def make_kwargs():
        return {"stream": None}

    explicit = launch(k, n, **make_kwargs())  # outside the assert, which pytest rewrites
    assert explicit is None


# --- the real Warp entry points ------------------------------------------------------------


def explicit_of(fn):
    seen = []
    with Tracer(lambda call: seen.append((call.api, call.explicit))):
        fn()
    return seen


def test_real_launch(arr):
    (api, explicit), *_ = explicit_of(
        lambda: wp.launch(add_one, dim=8, inputs=[arr], device="cpu", stream=None)
    )
    assert api == "wp.launch"
    assert explicit == {"kernel", "dim", "inputs", "device", "stream"}


def test_real_copy(arr, arr2):
    ((api, explicit),) = explicit_of(lambda: wp.copy(arr2, arr, 0, 0, 8, None))
    assert (api, explicit) == (
        "wp.copy",
        {"dest", "src", "dest_offset", "src_offset", "count", "stream"},
    )


def test_real_recorded_launch(arr):
    recorded = wp.launch(add_one, dim=8, inputs=[arr], device="cpu", record_cmd=True)
    ((api, explicit),) = explicit_of(lambda: recorded.launch())
    assert (api, explicit) == ("wp.Launch.launch", {"self"})


def test_real_launch_tiled(arr):
    calls = explicit_of(
        lambda: wp.launch_tiled(
            add_one, dim=[8], inputs=[arr], block_dim=1, device="cpu", stream=None
        )
    )
    expected = {"kernel", "dim", "inputs", "block_dim", "device", "stream"}
    assert calls[0] == ("wp.launch_tiled", expected)
