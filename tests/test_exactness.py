"""Issue 9 made into tests: exact verdicts on every Python, never an internal error.

Every call here is a real ``wp.launch``, ``wp.launch_tiled``, ``wp.copy`` or
``wp.Launch.launch`` (recorded with ``record_cmd=True``) on the CPU, made under a stream
guard and a `Tracer` at once. For each call the test knows the truth from how the call is
written: which parameters the caller passed. The guard's verdict must be that truth
wherever the shape can be read back without running the caller's code; where it honestly
cannot (a callable that C code makes and drops, a mapping of the user's), the call must be
judged on its bound values (``explicit`` None, and then ``stream=None`` passed explicitly is
reported missing, as the README's limits say), never on a guess such as "a direct call".
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import contextlib
import contextvars
import copy
import cProfile
import functools
import gc
import json
import operator
import subprocess
import sys
import threading
import time
import traceback
import types
import warnings
import weakref
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import warp as wp
from acme import gen
from acme.kernels import add_one
from helpers import assert_nothing_left, stack_depth

from trackgen_contract import (
    HotPathViolation,
    Tracer,
    hot_path_guard,
    no_allocation,
    no_host_sync,
    sanction,
    stream_explicit,
)
from trackgen_contract import diagnostics as diagnostics_module
from trackgen_contract.callsite import readback
from trackgen_contract.diagnostics import TrackgenContractWarning
from trackgen_contract.tracer import BACKEND, COMPILED, fastpath, keep_armed

SYSMON = sys.version_info >= (3, 12)
LAUNCH = ("kernel", "dim", "inputs", "outputs", "adj_inputs", "adj_outputs", "device", "stream")
COPY = ("dest", "src", "dest_offset", "src_offset", "count", "stream")
CMD = ("self", "stream")


def names(params, positional, *keywords):
    """The parameter names a call passes: its first `positional` ones and `keywords`."""
    return frozenset(params[:positional]) | frozenset(keywords)


class Call:
    """What the test knows of one call: the API, the names passed, and whether the shape
    can be read back without running code (else the bound-value fallback is acceptable)."""

    def __init__(self, api, passed, knowable=True):
        self.api, self.passed, self.knowable = api, frozenset(passed), knowable

    def __repr__(self):
        return f"Call({self.api}, {sorted(self.passed)}, knowable={self.knowable})"


class Seen:
    """The launches and copies the test's own code made, as a guard and a tracer saw them."""

    def __init__(self):
        self.calls = []  # (api, explicit, keywords)
        self.reported = []  # the stream guard's violations, as api text

    def on_call(self, call):
        if call.op in ("launch", "copy") and call.direct:
            self.calls.append((call.api, call.explicit, call.keywords))

    def check(self, expected):
        """Each call's `explicit` is its truth (or None where the shape is unknowable), the
        keywords it surely passed are among the truth's, and the guard reported exactly
        the calls that passed no stream, the unknowable ones (no keyword known to say
        otherwise) judged on their bound ``stream``, which is None in every call here."""
        assert [api for api, _, _ in self.calls] == [c.api for c in expected], self.calls
        should_report = []
        for (api, explicit, keywords), truth in zip(self.calls, expected, strict=True):
            if truth.knowable:
                assert explicit == truth.passed, (truth, explicit)
            else:
                assert explicit in (None, truth.passed), (truth, explicit)
            assert keywords is None or keywords <= truth.passed, (truth, keywords)
            passed = "stream" in (explicit if explicit is not None else keywords or ())
            if not passed:
                should_report.append(f"{api} without stream=")
        assert self.reported == should_report, (expected, self.calls)


@contextmanager
def watching(**options):
    """A non-strict stream guard and a tracer over the block; yields a `Seen`."""
    seen = Seen()
    with stream_explicit(strict=False, **options) as guard, Tracer(seen.on_call):
        yield seen
    seen.reported = [v.api for v in guard.violations]
    seen.guard = guard


def observe(fn):
    with watching() as seen:
        fn()
    return seen


def exact(fn, expected, rounds=3):
    """`fn`'s calls are exact (see `Seen.check`) under a guard beside a tracer, which
    sees every call; and a guard alone, which answers a site it found clean from the
    caller's frame from then on, reports the same calls in each of `rounds` runs."""
    seen = observe(fn)
    seen.check(expected)
    with stream_explicit(strict=False) as guard:
        for _ in range(rounds):
            fn()
    assert [v.api for v in guard.violations] == seen.reported * rounds


@pytest.fixture
def cmd(arr):
    return wp.launch(add_one, dim=8, inputs=[arr], device="cpu", record_cmd=True)


@pytest.fixture
def cmd2(arr2):
    return wp.launch(add_one, dim=8, inputs=[arr2], device="cpu", record_cmd=True)


# --- issue 9 section 5: false breaches ------------------------------------------------------


def test_double_star_beside_a_branching_argument(arr, arr2):
    c = bool(arr.shape[0])
    with_stream, without = {"stream": None}, {}

    def calls():
        wp.launch(add_one, 8, inputs=[arr] if c else [arr2], device="cpu", **with_stream)
        wp.launch(add_one, 8, inputs=[arr] if c else [arr2], device="cpu", **without)
        wp.copy(arr2, arr, count=8 if c else 4, **with_stream)
        wp.copy(arr2, src=arr if c else arr2, count=8, **without)

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device", "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device")),
            Call("wp.copy", names(COPY, 2, "count", "stream")),
            Call("wp.copy", names(COPY, 1, "src", "count")),
        ],
    )


def test_double_star_beside_a_branching_positional_argument(arr, arr2):
    # Found in this pass, fixed since: a branch among the positional arguments of a `*`/`**`
    # call lost the whole positional list (the fixpoint joined an instruction's first entry,
    # made with one branch's item, with the merged one into UNKNOWN).
    c = bool(arr.shape[0])
    with_stream, without = {"stream": None}, {}
    arrays = [arr, arr2]

    def calls():
        wp.launch(add_one, 8, [arr] if c else [arr2], **with_stream, device="cpu")
        wp.launch(add_one, 8, [arr] if c else [arr2], device="cpu", **without)
        wp.launch(add_one, 8, [x for x in arrays[:1]], **with_stream)
        wp.copy(arr2 if c else arr, arr, 0, 0, 8, **with_stream)

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 3, "device", "stream")),
            Call("wp.launch", names(LAUNCH, 3, "device")),
            Call("wp.launch", names(LAUNCH, 3, "stream")),
            Call("wp.copy", names(COPY, 5, "stream")),
        ],
    )


def test_comprehension_argument_beside_double_star(arr, arr2):
    arrays = [arr, arr2]
    with_stream, without = {"stream": None}, {}

    def calls():
        wp.launch(add_one, 8, inputs=[x for x in arrays[:1]], device="cpu", **with_stream)
        wp.launch(add_one, 8, inputs=[x for x in arrays[:1]], device="cpu", **without)
        wp.launch(add_one, 8, inputs=[x for x in arrays if x is arr], **with_stream, device="cpu")
        wp.launch(add_one, dim=sum(1 for _ in arrays) * 4, inputs=[arr], **with_stream)

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device", "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device", "stream")),
            Call("wp.launch", names(LAUNCH, 1, "dim", "inputs", "stream")),
        ],
    )


def test_double_star_of_a_subscript_with_a_local_key(arr):
    cfg = {"fast": {"stream": None, "device": "cpu"}, "slow": {"device": "cpu"}}
    nested = {"modes": cfg}

    def calls():
        for mode in ("fast", "slow"):
            wp.launch(add_one, 8, inputs=[arr], **cfg[mode])
        wp.launch(add_one, 8, inputs=[arr], **cfg["fast"])
        wp.launch(add_one, 8, inputs=[arr], **nested["modes"][mode])  # mode: "slow"

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device", "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device", "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device")),
        ],
    )


def test_items_at_the_constants_the_interpreter_loads_itself(arr, cmd, cmd2):
    # 3.15 loads -1, None, True, False and '' with LOAD_COMMON_CONSTANT, not LOAD_CONST:
    # an item read at one of them is as readable as at any other constant.
    fast, slow = {"stream": None, "device": "cpu"}, {"device": "cpu"}
    configs = [slow, fast]
    by_key = {None: fast, True: fast, False: slow, "": slow}
    leading = [(add_one, 8, [arr]), (add_one, 8, [arr], [], [], [], "cpu", None)]
    cmds = [cmd2, cmd]

    def calls():
        wp.launch(add_one, 8, inputs=[arr], **configs[-1])
        wp.launch(add_one, 8, inputs=[arr], **by_key[None])
        wp.launch(add_one, 8, inputs=[arr], **by_key[True])
        wp.launch(add_one, 8, inputs=[arr], **by_key[False])
        wp.launch(add_one, 8, inputs=[arr], **by_key[""])
        wp.launch(*leading[-1])
        cmds[-1].launch(None)
        cmds[-1].launch()

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device", "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device", "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device", "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device")),
            Call("wp.launch", names(LAUNCH, 8)),
            Call("wp.Launch.launch", {"self", "stream"}),
            Call("wp.Launch.launch", {"self"}),
        ],
    )


class _Options:
    """Launch options kept on an object, as a launch context keeps them."""

    def __init__(self, **kw):
        self.kw = kw


def test_double_star_of_an_attribute_chain(arr):
    holder = types.SimpleNamespace(fast=_Options(stream=None, device="cpu"), slow=_Options())

    def calls():
        wp.launch(add_one, 8, inputs=[arr], **holder.fast.kw)
        wp.launch(add_one, 8, inputs=[arr], device="cpu", **holder.slow.kw)

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device", "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device")),
        ],
    )


def test_partial_created_and_called_inline(arr):
    def calls():
        functools.partial(wp.launch, stream=None)(add_one, 8, inputs=[arr], device="cpu")
        functools.partial(wp.launch, device="cpu")(add_one, 8, inputs=[arr])
        functools.partial(wp.launch, add_one, 8)([arr], [], [], [], "cpu", None)
        functools.partial(wp.copy, arr, stream=None)(arr, count=8)
        functools.partial(wp.copy, arr)(arr, count=8)

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device", "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device")),
            Call("wp.launch", names(LAUNCH, 8)),
            Call("wp.copy", names(COPY, 2, "count", "stream")),
            Call("wp.copy", names(COPY, 2, "count")),
        ],
    )


def test_partials_held_in_a_list_and_called_by_index(arr):
    partials = [
        functools.partial(wp.launch, stream=None),
        functools.partial(wp.launch, add_one),
        functools.partial(functools.partial(wp.launch, add_one, 8), stream=None),
    ]
    table = {"launchers": partials}
    leading = [(add_one, 8), (8,)]

    def calls():
        for i in range(2):
            partials[i](*leading[i], inputs=[arr])
        partials[0](add_one, 8, inputs=[arr], device="cpu")
        partials[2](inputs=[arr])
        table["launchers"][1](8, [arr])

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device", "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream")),
            Call("wp.launch", names(LAUNCH, 3)),
        ],
    )


def test_one_call_site_reached_with_different_callables(cmd):
    def calls():
        for fn, x in ((wp.Launch.launch, cmd), (cmd.launch, None)):
            fn(x)
        for fn, x in ((cmd.launch, None), (wp.Launch.launch, cmd)):
            fn(x)

    exact(
        calls,
        [
            Call("wp.Launch.launch", {"self"}),
            Call("wp.Launch.launch", {"self", "stream"}),
            Call("wp.Launch.launch", {"self", "stream"}),
            Call("wp.Launch.launch", {"self"}),
        ],
    )


def test_one_call_site_reached_with_plain_function_bound_method_and_partial(arr, cmd):
    callables = [
        (wp.launch, (add_one, 8, [arr], [], [], [], "cpu")),
        (functools.partial(wp.launch, stream=None), (add_one, 8, [arr])),
        (cmd.launch, ()),
        (functools.partial(cmd.launch, None), ()),
        (wp.Launch.launch, (cmd, None)),
    ]

    def calls():
        for fn, args in callables:
            fn(*args)

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 7)),
            Call("wp.launch", names(LAUNCH, 3, "stream")),
            Call("wp.Launch.launch", {"self"}),
            Call("wp.Launch.launch", {"self", "stream"}),
            Call("wp.Launch.launch", {"self", "stream"}),
        ],
    )


# --- issue 9 section 5: missed breaches -----------------------------------------------------


def test_unbound_method_through_type_of_the_instance(cmd):
    def calls():
        type(cmd).launch(cmd)
        type(cmd).launch(cmd, None)

    # The callable is the result of a call: reading it back would run type(); the
    # bound-value fallback (stream None: reported) or the exact answer, never "self bound".
    exact(
        calls,
        [
            Call("wp.Launch.launch", {"self"}, knowable=False),
            Call("wp.Launch.launch", {"self", "stream"}, knowable=False),
        ],
    )


def test_unbound_method_with_a_branching_self(cmd, cmd2):
    c = cmd is not None

    def calls():
        wp.Launch.launch(cmd if c else cmd2)
        wp.Launch.launch(cmd if c else cmd2, None)
        wp.Launch.launch(cmd2 if not c else cmd, stream=None)

    exact(
        calls,
        [
            Call("wp.Launch.launch", {"self"}),
            Call("wp.Launch.launch", {"self", "stream"}),
            Call("wp.Launch.launch", {"self", "stream"}),
        ],
    )


def test_launches_reached_through_c_code(arr, cmd):
    """3.13+ cannot tell a direct call from one made through C by the caller's offset:
    where the callable cannot be read back either, the shape is unknown, never direct."""

    def calls():
        contextvars.copy_context().run(wp.launch, add_one, 8, [arr], [], [], [], None)
        contextvars.copy_context().run(wp.launch, add_one, 8, [arr], [], [], [], None, None)
        operator.methodcaller("launch")(cmd)
        operator.methodcaller("launch", None)(cmd)
        operator.methodcaller("launch", stream=None)(cmd)
        context = contextvars.copy_context()
        context.run(cmd.launch)
        context.run(wp.copy, arr, arr, 0, 0, 8)
        list(map(wp.launch, [add_one], [8], [[arr]]))

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 7), knowable=False),
            Call("wp.launch", names(LAUNCH, 8), knowable=False),
            Call("wp.Launch.launch", {"self"}, knowable=False),
            Call("wp.Launch.launch", {"self", "stream"}, knowable=False),
            Call("wp.Launch.launch", {"self", "stream"}, knowable=False),
            Call("wp.Launch.launch", {"self"}, knowable=False),
            Call("wp.copy", names(COPY, 5), knowable=False),
            Call("wp.launch", names(LAUNCH, 3), knowable=False),
        ],
    )


class _Replay(wp.Launch):
    """A recorded launch that replays itself through ``super()``."""

    def replay(self, *args, **kwargs):
        super().launch(*args, **kwargs)

    def replay_with_stream(self):
        super().launch(stream=None)

    def replay_without(self):
        super().launch()


def test_callables_computed_in_place(arr, cmd):
    """A callable that the call computes itself (``getattr(...)``, ``super()``) is gone once
    the call starts: the exact answer or the bound-value fallback, never a guess."""
    cmd.__class__ = _Replay
    name, c = "launch", arr.shape[0] > 0

    def calls():
        getattr(wp, name)(add_one, 8, inputs=[arr], stream=None)
        getattr(wp, name)(add_one, 8, inputs=[arr])
        getattr(cmd, name)(None)
        cmd.replay_with_stream()
        cmd.replay_without()
        (wp.launch if c else wp.launch)(add_one, 8, inputs=[arr], stream=None)  # noqa: RUF034

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream"), knowable=False),
            Call("wp.launch", names(LAUNCH, 2, "inputs"), knowable=False),
            Call("wp.Launch.launch", CMD, knowable=False),
            Call("wp.Launch.launch", CMD, knowable=False),
            Call("wp.Launch.launch", CMD[:1], knowable=False),
            # Both branches load the same callable: the join keeps it.
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream")),
        ],
    )


LAUNCH_ALIAS = wp.launch  # the same function under another name


def test_a_callable_chosen_by_a_branch_is_read_where_every_branch_agrees(arr, cmd, cmd2):
    """``(f if c else g)(...)``: whichever branch ran, the callable is known where every
    branch reads the same object (or, for a method, binds the same way); where they read
    different functions, or one cannot be read, it is not."""
    c, rest = arr.shape[0] > 0, (8, [arr])

    def other(*args, **kwargs):
        return wp.launch(*args, **kwargs)

    def calls():
        (wp.launch if c else LAUNCH_ALIAS)(add_one, 8, inputs=[arr], stream=None)
        (wp.launch if c else LAUNCH_ALIAS)(add_one, *rest, stream=None)
        (LAUNCH_ALIAS if not c else wp.launch)(add_one, 8, [arr], [], [], [], "cpu", None)
        (wp.launch if c else LAUNCH_ALIAS)(add_one, 8, inputs=[arr])
        (cmd if c else cmd2).launch(stream=None)
        (cmd2 if not c else cmd).launch()
        (wp.launch if c else other)(add_one, 8, inputs=[arr], stream=None)
        (wp.launch if c else unbound)(add_one, 8, inputs=[arr], stream=None)  # noqa: F821

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream")),
            Call("wp.launch", names(LAUNCH, 3, "stream")),
            Call("wp.launch", names(LAUNCH, 8)),
            Call("wp.launch", names(LAUNCH, 2, "inputs")),
            Call("wp.Launch.launch", CMD),
            Call("wp.Launch.launch", CMD[:1]),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream"), knowable=False),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream"), knowable=False),
        ],
    )


def test_a_caller_holding_an_unhashable_constant_is_still_read(arr):
    # BUG: two sides of a branch joined into a set of options hashed their constants: a
    # code object rebuilt with a list among them (as bytecode rewriters do) failed its
    # analysis, with a warning, and its explicit stream=None was reported missing.
    empty = ()

    def calls(c=True):
        wp.launch(add_one, 8, *(empty if c else "PLACEHOLDER"), inputs=[arr], stream=None)

    consts = calls.__code__.co_consts
    calls.__code__ = calls.__code__.replace(
        co_consts=tuple([] if k == "PLACEHOLDER" else k for k in consts)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrackgenContractWarning)
        # The `*` part is one of two values the set cannot hold: unknown, but the keyword
        # spelled out beside it counts, with no warning.
        exact(calls, [Call("wp.launch", names(LAUNCH, 2, "inputs", "stream"), knowable=False)])


STREAM_KEYWORD = "stream"


class _Keyword(str):
    """A keyword name of the user's own type: its hash and == are the user's code."""


def test_keyword_names_of_a_dict_display_read_from_variables(arr):
    """``**{name: value}``: a key read from a variable is read back as a plain ``str``; a
    ``**`` of one of several dicts is known where they all hold the same keys."""
    local, odd = "device", _Keyword("stream")
    c = arr.shape[0] > 0
    fast, also_fast, slow = {"stream": None}, {"stream": None}, {"device": "cpu"}

    def calls():
        wp.launch(add_one, 8, inputs=[arr], **{STREAM_KEYWORD: None})
        wp.launch(add_one, 8, inputs=[arr], **{local: "cpu"})
        wp.launch(add_one, 8, inputs=[arr], **{local: "cpu", STREAM_KEYWORD: None})
        wp.launch(add_one, 8, inputs=[arr], **{STREAM_KEYWORD if c else local: None})
        wp.launch(add_one, 8, inputs=[arr], **{odd: None})
        wp.launch(add_one, 8, inputs=[arr], **(fast if c else also_fast))
        wp.launch(add_one, 8, inputs=[arr], **(fast if c else slow))

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device", "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream"), knowable=False),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream"), knowable=False),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream"), knowable=False),
        ],
    )


def test_partials_made_inline_around_partials_made_inline(arr):
    def calls():
        functools.partial(functools.partial(wp.launch), stream=None)(add_one, 8, [arr])
        functools.partial(functools.partial(wp.launch, add_one), 8)(inputs=[arr])
        functools.partial(functools.partial(wp.launch, stream=None), add_one)(8, [arr])

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 3, "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs")),
            Call("wp.launch", names(LAUNCH, 3, "stream")),
        ],
    )


def test_await_inside_the_arguments(arr):
    # Found in this pass on 3.12+, fixed since: an `await` in a call's arguments lost the
    # whole call. The await's CLEANUP_THROW handler jumps back into the normal path (to
    # END_SEND), and a handler started with every stack value UNKNOWN, although the
    # exception table keeps the values below its `depth`.
    async def dim():
        return 8

    async def main():
        kw = {"stream": None}
        wp.launch(add_one, await dim(), inputs=[arr], stream=None)
        wp.launch(add_one, await dim(), inputs=[arr])
        wp.launch(add_one, 8, inputs=[arr] if await dim() else [], **kw)

    def calls():
        asyncio.run(main())

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream")),
            Call("wp.launch", names(LAUNCH, 2, "inputs")),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream")),
        ],
    )


def test_a_name_rebound_by_a_later_argument_of_the_same_call(arr):
    # Found in this pass, fixed since: the read-back read a name's value when the callee
    # started, not when the caller loaded it, and a walrus in a later argument rebinds it in
    # between. The answer was exact-looking and wrong (`**kw` read as {}; on 3.13+ a plain
    # `wp.launch` read as the partial bound later, a missed breach). The value passed is
    # gone: the bound-value fallback is the honest answer.
    with_stream = functools.partial(wp.launch, stream=None)

    def calls():
        kw = {"stream": None}
        fn = wp.launch
        wp.launch(add_one, 8, **kw, inputs=[arr] if (kw := {}) is not None else [])
        fn(add_one, 8, inputs=[arr] if (fn := with_stream) else [])

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream"), knowable=False),
            Call("wp.launch", names(LAUNCH, 2, "inputs"), knowable=False),
        ],
    )


_rebound_later = wp.launch


def test_a_binding_that_a_later_argument_rebinds_through_a_function_is_read_at_the_start(arr):
    # A documented limit: what the call instruction loaded is on the caller's value stack,
    # which CPython shows no one. A global, an attribute or a variable shared with a nested
    # function, rebound by a function that a later argument calls, is read as it is when
    # the call starts. 3.11 and 3.12 still tell the direct calls of wp.launch (each
    # passing no stream) from a call through the partial now bound.
    with_stream = functools.partial(wp.launch, stream=None)
    holder = types.SimpleNamespace(launch=wp.launch)

    def calls():
        global _rebound_later
        _rebound_later = fn = wp.launch
        holder.launch = wp.launch

        def rebind_global():
            global _rebound_later
            _rebound_later = with_stream
            return [arr]

        def rebind_shared():
            nonlocal fn
            fn = with_stream
            return [arr]

        def rebind_attribute():
            holder.launch = with_stream
            return [arr]

        _rebound_later(add_one, 8, inputs=rebind_global())
        fn(add_one, 8, inputs=rebind_shared())
        holder.launch(add_one, 8, inputs=rebind_attribute())

    with stream_explicit(strict=False) as guard:
        calls()
    missed = 0 if sys.version_info < (3, 13) else 3
    assert len(guard.violations) == 3 - missed, guard.violations


def test_a_site_whose_callable_stops_being_readable_keeps_its_verdict(arr):
    # The dict the callable is read from grows past what is read back: the verdict of
    # its calls must not depend on whether the site was found clean while it was small.
    ops = {"launch": wp.launch}

    def call():
        ops["launch"](add_one, 8, inputs=[arr], stream=None)

    def grow():
        ops.update((f"filler_{i}", i) for i in range(300))

    with stream_explicit(strict=False) as looped:
        call()
        call()
        grow()
        call()
    ops = {"launch": wp.launch}
    fresh = []
    for step in (call, call, grow, call):
        with stream_explicit(strict=False) as guard:
            step()
        fresh += guard.violations
    assert looped.violations == fresh
    # 3.11/3.12 tell a Python-to-Python call by its offset: its spelled-out stream= counts.
    assert len(fresh) == (0 if sys.version_info < (3, 13) else 1)


def test_launch_tiled_shapes(arr):
    kw = {"block_dim": 1, "stream": None}
    args = (add_one,)

    def calls():
        wp.launch_tiled(add_one, dim=[8], inputs=[arr], block_dim=1, device="cpu", stream=None)
        wp.launch_tiled(add_one, dim=[8], inputs=[arr], block_dim=1, device="cpu")
        wp.launch_tiled(*args, dim=[8], inputs=[arr], **kw)
        wp.launch_tiled(*args, dim=[8], inputs=[arr], block_dim=1)
        functools.partial(wp.launch_tiled, stream=None)(add_one, dim=[8], inputs=[arr], block_dim=1)

    exact(
        calls,
        [
            Call("wp.launch_tiled", names(LAUNCH, 1, "dim", "inputs", "block_dim", "device",
                                          "stream")),
            Call("wp.launch_tiled", names(LAUNCH, 1, "dim", "inputs", "block_dim", "device")),
            Call("wp.launch_tiled", names(LAUNCH, 1, "dim", "inputs", "block_dim", "stream")),
            Call("wp.launch_tiled", names(LAUNCH, 1, "dim", "inputs", "block_dim")),
            Call("wp.launch_tiled", names(LAUNCH, 1, "dim", "inputs", "block_dim", "stream")),
        ]
    )  # fmt: skip


# --- sanction sites are code objects; sites follow the frame's globals ---------------------

# Two module-level lambdas: one module, one qualified name ("<lambda>"), two places.
_POLLS = (
    lambda a: a.numpy(),
    lambda a: a.numpy(),
)
sanction.site("exactness-poll")(_POLLS[0])


def test_sanctioning_one_lambda_does_not_sanction_another(arr):
    with no_host_sync(strict=False) as guard, sanction.scope("exactness-poll"):
        _POLLS[0](arr)
        _POLLS[1](arr)
    assert guard.sanctioned == [("wp.array.numpy", __name__, "<lambda>")]
    assert [(v.api, v.site.lineno) for v in guard.violations] == [
        ("wp.array.numpy()", _POLLS[1].__code__.co_firstlineno)
    ]


def _launch_without_stream(a):
    wp.launch(add_one, 8, inputs=[a], device="cpu")


def _read_back(a):
    return a.numpy()


def _twin(fn, module):
    """`fn`'s very code object, run under the globals of another module."""
    namespace = {"__name__": module, "__builtins__": builtins, "wp": wp, "add_one": add_one}
    return types.FunctionType(fn.__code__, namespace, fn.__name__)


@pytest.mark.parametrize("twin_first", [False, True], ids=["original first", "twin first"])
def test_the_same_code_under_other_globals_is_attributed_to_their_module(arr, twin_first):
    twin = _twin(_launch_without_stream, "elsewhere.hot")
    order = (twin, _launch_without_stream) if twin_first else (_launch_without_stream, twin)
    for prefix, module in (("elsewhere", "elsewhere.hot"), (__name__, __name__)):
        with stream_explicit(modules=(prefix,), strict=False) as guard:
            for _ in range(2):  # the second round hits every per-code cache
                for fn in order:
                    fn(arr)
        assert [v.site.module for v in guard.violations] == [module, module], prefix
        assert {v.key for v in guard.violations} == {
            ("wp.launch", module, "_launch_without_stream")
        }


def test_allow_keys_follow_the_globals_the_code_runs_under(arr):
    twin = _twin(_read_back, "elsewhere.hot")
    allow = [("wp.array.numpy", "elsewhere.hot", "_read_back")]
    with no_host_sync(allow=allow, strict=False) as guard:
        for _ in range(2):
            twin(arr)
            _read_back(arr)
    assert guard.allowed == [("wp.array.numpy", "elsewhere.hot", "_read_back")] * 2
    assert [v.key for v in guard.violations] == [("wp.array.numpy", __name__, "_read_back")] * 2


# --- a guard whose hook is taken away never ends clean ------------------------------------


def _enable_cprofile():
    profiler = cProfile.Profile()
    profiler.enable()
    return profiler.disable


def _remove_profile_function():
    sys.setprofile(None)
    return lambda: None


def _another_profile_function():
    def someone_elses_profiler(frame, event, arg):
        return None

    sys.setprofile(someone_elses_profiler)
    return lambda: sys.setprofile(None)


REPLACERS = {
    "cProfile": (_enable_cprofile, "Profile"),
    "setprofile(None)": (_remove_profile_function, "setprofile(None)"),
    "another profile function": (_another_profile_function, "someone_elses_profiler"),
}


@pytest.mark.parametrize(("replace", "named"), REPLACERS.values(), ids=REPLACERS.keys())
@pytest.mark.parametrize("strict", [False, True], ids=["recording", "strict"])
def test_a_hook_replaced_inside_a_guard_never_ends_clean(arr, replace, named, strict):
    before = sys.getprofile()
    undo = None
    guard = hot_path_guard(strict=strict)
    try:
        with pytest.raises(HotPathViolation) if strict else _nothing():
            with guard:
                undo = replace()
                arr.numpy()  # a breach: seen on 3.12+, unseen (blind) on 3.11
    finally:
        if undo is not None:
            undo()
        sys.setprofile(before)
    assert not guard.ok
    if SYSMON:  # the profiler is not in sys.monitoring's way: the breach was seen
        assert [v.api for v in guard.violations] == ["wp.array.numpy()"]
    else:
        assert guard.blind is not None and named in guard.blind, guard.blind
    # The guard still works afterwards, with its hook in place.
    with hot_path_guard(strict=False) as again:
        arr.numpy()
    assert again.blind is None
    assert [v.api for v in again.violations] == ["wp.array.numpy()"]


@contextmanager
def _nothing():
    yield


@pytest.mark.skipif(
    not SYSMON,
    reason="a documented limit on 3.11: a profile function swapped out and put back inside "
    "a guard goes unnoticed (an audit hook would see it, but 3.11 audits every frame.f_code "
    "read, and an audit hook cannot be removed: every profiled call would pay for good)",
)
def test_a_hook_taken_away_and_put_back_inside_a_guard_never_ends_clean(arr):
    # 3.12+: the sys.monitoring tool is not in the profiler's way: the breach is seen.
    before = sys.getprofile()
    try:
        with hot_path_guard(strict=False) as guard:
            saved = sys.getprofile()
            sys.setprofile(None)
            arr.numpy()
            sys.setprofile(saved)
    finally:
        sys.setprofile(before)
    assert not guard.ok
    assert [v.api for v in guard.violations] == ["wp.array.numpy()"] or guard.blind


class _Opaque:
    """A profile function or monitoring callback whose repr and attributes fail."""

    def __init__(self):
        self.runs = []

    def __call__(self, *args):
        return None

    def __getattr__(self, name):
        self.runs.append(name)
        raise LookupError(name)

    def __repr__(self):
        self.runs.append("__repr__")
        raise LookupError("__repr__")


def test_what_replaced_the_hook_is_named_without_running_its_code(arr):
    # The guard names what took its hook away; a repr or an attribute of the user's object
    # would run its code, and its exception would cut the guard's exit in half.
    replacement = _Opaque()
    before = sys.getprofile()
    try:
        with hot_path_guard(strict=False) as guard:
            arr.numpy()
            if SYSMON:
                monitoring = sys.monitoring
                tool = next(i for i in range(6) if monitoring.get_tool(i) == "trackgen_contract")
                monitoring.register_callback(tool, monitoring.events.PY_START, replacement)
            else:
                sys.setprofile(replacement)
    finally:
        sys.setprofile(before)
    assert replacement.runs == []
    assert guard.blind is not None and guard.blind.endswith(
        "replaced by a test_exactness._Opaque object"
    )
    assert_nothing_left()
    with hot_path_guard(strict=False) as again:
        arr.numpy()
    assert again.blind is None and len(again.violations) == 1
    assert_nothing_left()


# --- scoping: only the guard's own thread -------------------------------------------------


def _in_a_copied_context_thread(work):
    thread = threading.Thread(target=contextvars.copy_context().run, args=(work,))
    thread.start()
    thread.join()


def _in_asyncio_to_thread(work):
    async def main():
        await asyncio.to_thread(work)

    asyncio.run(main())


@pytest.mark.parametrize(
    "run_elsewhere",
    [_in_a_copied_context_thread, _in_asyncio_to_thread],
    ids=["Thread(target=copy_context().run)", "asyncio.to_thread"],
)
def test_a_thread_running_a_copy_of_the_guarded_context_is_not_guarded(arr, run_elsewhere):
    outcomes = []

    def work():
        try:
            arr.numpy()
            wp.launch(add_one, 8, inputs=[arr], device="cpu")
            wp.zeros(4, device="cpu")
            outcomes.append("ran")
        except BaseException as error:  # a guard reaching into the worker
            outcomes.append(error)

    seen = []
    with hot_path_guard() as guard, Tracer(lambda call: seen.append(call.api)):
        run_elsewhere(work)
    assert outcomes == ["ran"]
    assert guard.ok and seen == []
    # The same work in the guard's own thread is seen: the guard was not blind.
    with hot_path_guard(strict=False) as guard:
        work()
    assert [v.category for v in guard.violations] == ["host_sync", "stream", "allocation"]


# --- counting: one user construct, one violation; only real allocations -------------------


def _cpu_capture_works() -> bool:
    """Whether this Warp records graphs on the CPU (1.19 does; older ones fail in Warp)."""
    try:
        wp.capture_begin(device="cpu")
        wp.capture_end(device="cpu")
    except Exception:
        return False
    return True


def test_scoped_capture_is_one_capture_violation(arr):
    if not _cpu_capture_works():
        pytest.skip(f"warp-lang {wp.config.version} cannot record a graph on the CPU")
    with hot_path_guard(strict=False, stream=False) as guard:
        with wp.ScopedCapture(device="cpu"):
            wp.launch(add_one, 8, inputs=[arr], device="cpu", stream=None)
    assert [v.api for v in guard.violations] == ["wp.ScopedCapture"]
    with hot_path_guard(strict=False, stream=False) as guard:
        wp.capture_begin(device="cpu")
        wp.capture_end(device="cpu")
    assert [v.api for v in guard.violations] == ["wp.capture_begin()", "wp.capture_end()"]


ALLOCATIONS = {
    "empty(0)": lambda a: wp.empty(0, dtype=float, device="cpu"),
    "zeros((0, 3))": lambda a: wp.zeros((0, 3), dtype=float, device="cpu"),
    "zeros(0) of vec3": lambda a: wp.zeros(0, dtype=wp.vec3, device="cpu"),
    "ones((4, 0))": lambda a: wp.ones((4, 0), dtype=float, device="cpu"),
    "full(0)": lambda a: wp.full(0, 2.0, dtype=float, device="cpu"),
    "zeros((np.int64(0), 3))": lambda a: wp.zeros((np.int64(0), 3), dtype=float, device="cpu"),
    "zeros(0, requires_grad)": lambda a: wp.zeros(0, dtype=float, device="cpu", requires_grad=True),
    "empty(shape=(0,))": lambda a: wp.empty(shape=(0,), dtype=float, device="cpu"),
    "empty_like(empty)": lambda a: wp.empty_like(wp.empty(0, dtype=float, device="cpu")),
    "clone(empty)": lambda a: wp.clone(wp.empty(0, dtype=float, device="cpu")),
    "array(np.zeros(0))": lambda a: wp.array(np.zeros(0, np.float32), device="cpu"),
    "array([])": lambda a: wp.array([], dtype=float, device="cpu"),
    "empty(1)": lambda a: wp.empty(1, dtype=float, device="cpu"),
    "zeros((1, 3))": lambda a: wp.zeros((1, 3), dtype=float, device="cpu"),
    "zeros((np.int64(2),))": lambda a: wp.zeros((np.int64(2),), dtype=float, device="cpu"),
    "empty_like(arr)": lambda a: wp.empty_like(a),
    "clone(arr)": lambda a: wp.clone(a),
}


@pytest.mark.parametrize("make", ALLOCATIONS.values(), ids=ALLOCATIONS.keys())
def test_only_real_allocations_are_reported(arr, make):
    with no_allocation(strict=False) as guard:
        made = make(arr)
    # The truth, from Warp itself: an array that got memory has a pointer.
    assert len(guard.violations) == (made.ptr is not None), guard.report()


# --- reading back never runs the user's code ------------------------------------------------

counts: collections.Counter = collections.Counter()


class _CountingDescriptor:
    """A non-data descriptor: each read runs code."""

    def __init__(self, value):
        self.value = value

    def __get__(self, obj, cls=None):
        counts["__get__"] += 1
        return self.value


class _Descriptors:
    launch = _CountingDescriptor(wp.launch)
    kw = _CountingDescriptor({"stream": None})

    @property
    def prop_launch(self):
        counts["property"] += 1
        return wp.launch

    @property
    def prop_kw(self):
        counts["property"] += 1
        return {"stream": None}

    @functools.cached_property
    def cached_kw(self):
        counts["cached_property"] += 1
        return {"stream": None}

    if sys.version_info < (3, 13):  # a classmethod binds what it wraps through its __get__

        @classmethod
        @property
        def class_launch(cls):
            counts["classmethod of a property"] += 1
            return wp.launch


class _Lazy:
    def __getattr__(self, name):
        counts["__getattr__"] += 1
        return {"launch": wp.launch, "kw": {"stream": None}}[name]


class _Inspected:
    def __init__(self):
        self.launch = wp.launch
        self.kw = {"stream": None}

    def __getattribute__(self, name):
        counts["__getattribute__"] += 1
        return object.__getattribute__(self, name)


class _Meta(type):
    def __getattribute__(cls, name):
        counts["metaclass __getattribute__"] += 1
        return type.__getattribute__(cls, name)


class _WithMeta(metaclass=_Meta):
    launch = staticmethod(wp.launch)


class _UserMapping(Mapping):
    def __init__(self, data):
        self.data = data

    def __getitem__(self, key):
        counts["mapping __getitem__"] += 1
        return self.data[key]

    def __iter__(self):
        counts["mapping __iter__"] += 1
        return iter(self.data)

    def __len__(self):
        counts["mapping __len__"] += 1
        return len(self.data)

    def keys(self):
        counts["mapping keys"] += 1
        return self.data.keys()


class _UserDict(dict):
    def __getitem__(self, key):
        counts["dict subclass __getitem__"] += 1
        return dict.__getitem__(self, key)

    def keys(self):
        counts["dict subclass keys"] += 1
        return dict.keys(self)


class _Key:
    """A dict key whose hash and equality run code."""

    def __init__(self, name, hash_as=None):
        self.name, self.hash_as = name, hash_as

    def __hash__(self):
        counts["__hash__"] += 1
        return hash(self.hash_as if self.hash_as is not None else self.name)

    def __eq__(self, other):
        counts["__eq__"] += 1
        return isinstance(other, _Key) and other.name == self.name


class _Name(str):
    """A keyword name whose hash and equality run code (CPython's own keyword matching
    compares it too, with or without a guard)."""

    def __hash__(self):
        counts["str subclass __hash__"] += 1
        return str.__hash__(self)

    def __eq__(self, other):
        counts["str subclass __eq__"] += 1
        return str.__eq__(self, other)


class _UserSequence(Sequence):
    def __init__(self, items):
        self.items = items

    def __getitem__(self, index):
        counts["sequence __getitem__"] += 1
        return self.items[index]

    def __len__(self):
        counts["sequence __len__"] += 1
        return len(self.items)

    def __iter__(self):
        counts["sequence __iter__"] += 1
        return iter(self.items)


class _ListSubclass(list):
    def __len__(self):
        counts["list subclass __len__"] += 1
        return list.__len__(self)

    def __iter__(self):
        counts["list subclass __iter__"] += 1
        return list.__iter__(self)


class _Disguised:
    """Claims another class: isinstance() would run its __class__ property."""

    def __init__(self):
        self.launch = wp.launch
        self.kw = {"stream": None}

    @property
    def __class__(self):
        counts["__class__"] += 1
        return dict


def _lazy_module():
    module = types.ModuleType("lazy_launchers")

    def __getattr__(name):
        counts["module __getattr__"] += 1
        return wp.launch

    module.__getattr__ = __getattr__
    return module


class _InspectedModule(types.ModuleType):
    def __getattribute__(self, name):
        counts["module __getattribute__"] += 1
        return types.ModuleType.__getattribute__(self, name)


def _inspected_module():
    module = _InspectedModule("inspected_launchers")
    module.launch = wp.launch
    return module


def _classmethod_of_a_property(k, arr, passed):
    if sys.version_info >= (3, 13):
        return {}
    return {
        "classmethod of a property callable": (
            _Descriptors,
            lambda o: o.class_launch(k, 8, inputs=[arr], stream=None),
            Call("wp.launch", passed, knowable=False),
        )
    }


def _reads(arr):
    """name -> (make the user's objects, make the call with them, the truth)."""
    k, full = add_one, (add_one, 8, [arr], [], [], [], "cpu", None)
    passed = names(LAUNCH, 2, "inputs", "stream")
    return {
        "descriptor callable": (
            _Descriptors,
            lambda o: o.launch(k, 8, inputs=[arr], stream=None),
            Call("wp.launch", passed, knowable=False),
        ),
        "descriptor **kw": (
            _Descriptors,
            lambda o: wp.launch(k, 8, inputs=[arr], **o.kw),
            Call("wp.launch", passed, knowable=False),
        ),
        "property callable": (
            _Descriptors,
            lambda o: o.prop_launch(k, 8, inputs=[arr], stream=None),
            Call("wp.launch", passed, knowable=False),
        ),
        "property **kw": (
            _Descriptors,
            lambda o: wp.launch(k, 8, inputs=[arr], **o.prop_kw),
            Call("wp.launch", passed, knowable=False),
        ),
        "cached_property **kw": (
            _Descriptors,
            lambda o: wp.launch(k, 8, inputs=[arr], **o.cached_kw),
            Call("wp.launch", passed, knowable=False),
        ),
        **_classmethod_of_a_property(k, arr, passed),
        "__getattr__ callable": (
            _Lazy,
            lambda o: o.launch(k, 8, inputs=[arr], stream=None),
            Call("wp.launch", passed, knowable=False),
        ),
        "__getattr__ **kw": (
            _Lazy,
            lambda o: wp.launch(k, 8, inputs=[arr], **o.kw),
            Call("wp.launch", passed, knowable=False),
        ),
        "__getattribute__ callable": (
            _Inspected,
            lambda o: o.launch(k, 8, inputs=[arr], stream=None),
            Call("wp.launch", passed, knowable=False),
        ),
        "__getattribute__ **kw": (
            _Inspected,
            lambda o: wp.launch(k, 8, inputs=[arr], **o.kw),
            Call("wp.launch", passed, knowable=False),
        ),
        "metaclass __getattribute__": (
            lambda: _WithMeta,
            lambda o: o.launch(k, 8, inputs=[arr], stream=None),
            Call("wp.launch", passed, knowable=False),
        ),
        "module __getattr__": (
            _lazy_module,
            lambda o: o.launch(k, 8, inputs=[arr], stream=None),
            Call("wp.launch", passed, knowable=False),
        ),
        "module __getattribute__": (
            _inspected_module,
            lambda o: o.launch(k, 8, inputs=[arr], stream=None),
            Call("wp.launch", passed, knowable=False),
        ),
        "user mapping item": (
            lambda: _UserMapping({"launch": functools.partial(wp.launch, stream=None)}),
            lambda o: o["launch"](k, 8, inputs=[arr]),
            Call("wp.launch", passed, knowable=False),
        ),
        "user mapping **": (
            lambda: _UserMapping({"stream": None}),
            lambda o: wp.launch(k, 8, inputs=[arr], **o),
            Call("wp.launch", passed, knowable=False),
        ),
        "dict subclass item": (
            lambda: _UserDict(launch=functools.partial(wp.launch, stream=None)),
            lambda o: o["launch"](k, 8, inputs=[arr]),
            Call("wp.launch", passed, knowable=False),
        ),
        "dict subclass **": (
            lambda: _UserDict(stream=None),
            lambda o: wp.launch(k, 8, inputs=[arr], **o),
            Call("wp.launch", passed, knowable=False),
        ),
        "user key": (
            lambda: ({_Key("fast"): {"stream": None}, _Key("slow"): {}}, _Key("fast")),
            lambda o: wp.launch(k, 8, inputs=[arr], **o[0][o[1]]),
            Call("wp.launch", passed, knowable=False),
        ),
        "str key beside a user key of equal hash": (
            lambda: {_Key("x", hash_as="fast"): {}, "fast": {"stream": None}},
            lambda o: wp.launch(k, 8, inputs=[arr], **o["fast"]),
            Call("wp.launch", passed),
        ),
        # A tuple key of plain values, in a dict that also has a tuple key holding a user
        # object: comparing the two tuples would run that object's __eq__.
        "tuple key beside a tuple holding a user object": (
            lambda: {(_Key("x"), 1): {}, ("fast", 1): {"stream": None}},
            lambda o: wp.launch(k, 8, inputs=[arr], **o["fast", 1]),
            Call("wp.launch", passed),
        ),
        "partial keyword named by a str subclass": (
            lambda: functools.partial(wp.launch, **{_Name("stream"): None}),
            lambda o: o(k, 8, inputs=[arr]),
            Call("wp.launch", passed, knowable=False),
        ),
        "**kw keyword named by a str subclass": (
            lambda: {_Name("stream"): None},
            lambda o: wp.launch(k, 8, inputs=[arr], **o),
            Call("wp.launch", passed, knowable=False),
        ),
        "user sequence *args": (
            lambda: _UserSequence(full),
            lambda o: wp.launch(*o),
            Call("wp.launch", names(LAUNCH, 8), knowable=False),
        ),
        "list subclass *args": (
            lambda: _ListSubclass(full),
            lambda o: wp.launch(*o),
            Call("wp.launch", names(LAUNCH, 8), knowable=False),
        ),
        "__class__ property callable": (
            _Disguised,
            lambda o: o.launch(k, 8, inputs=[arr], stream=None),
            Call("wp.launch", passed),
        ),
        "__class__ property **kw": (
            _Disguised,
            lambda o: wp.launch(k, 8, inputs=[arr], **o.kw),
            Call("wp.launch", passed),
        ),
        "__class__ property argument": (
            _Disguised,
            lambda o: wp.launch(k, 8, inputs=[arr], outputs=[], stream=None, record_tape=o),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "outputs", "stream", "record_tape")),
        ),
    }


READS = list(_reads(None))


@pytest.mark.parametrize("case", READS)
def test_reading_a_call_back_runs_none_of_the_users_code(arr, case):
    make, call, truth = _reads(arr)[case]
    counts.clear()
    call(make())
    bare = dict(counts)
    counts.clear()
    with watching() as seen:
        call(make())
    assert dict(counts) == bare  # nothing ran on the guard's behalf
    seen.check([truth])
    counts.clear()
    with stream_explicit(strict=False):  # a guard alone, a clean site remembered
        for _ in range(3):
            call(make())
    assert dict(counts) == {name: 3 * n for name, n in bare.items()}


def _launch_beside_a_locals_snapshot(arr):
    snapshot = locals()  # on 3.11/3.12, the frame's own dict, refreshed only on request
    kw = {"stream": None}
    wp.launch(add_one, 8, inputs=[arr], **kw)
    return sorted(snapshot)


@pytest.mark.skipif(
    sys.version_info < (3, 13),
    reason="a documented limit on 3.11/3.12: reading frame.f_locals there copies the "
    "frame's locals into the dict locals() returned (PyFrame_FastToLocals); 3.13+ read a "
    "proxy (PEP 667)",
)
def test_reading_a_call_back_leaves_the_callers_locals_as_they_were(arr):
    bare = _launch_beside_a_locals_snapshot(arr)
    with stream_explicit(strict=False):
        guarded = _launch_beside_a_locals_snapshot(arr)
    assert guarded == bare == ["arr"]


class _Namespace(dict):
    """A namespace that is a dict, but not exactly one: Python reads it as its own
    (class bodies, exec's locals, an instance's ``__dict__``), not through the subclass."""

    def __contains__(self, key):
        counts["namespace __contains__"] += 1
        return dict.__contains__(self, key)

    def get(self, key, default=None):
        counts["namespace get"] += 1
        return dict.get(self, key, default)


class _Prepared(type):
    @classmethod
    def __prepare__(mcs, name, bases):
        return _Namespace()


_EXEC_CODE = compile("launch(add_one, 8, inputs=[arr])", "<exec with its own locals>", "exec")


def test_names_in_namespaces_that_are_not_plain_dicts(arr):
    # Core bug (open): a name in a class body whose namespace comes from __prepare__, or in
    # exec()'s own locals mapping, is looked up past that namespace: the read-back skips a
    # namespace it cannot read and goes on to the globals, so it finds the module's
    # `launch` (a partial passing stream=None) where Python called the class body's
    # (wp.launch without a stream). 3.13+ report the breach as clean; 3.11/3.12 fall back,
    # since a direct call cannot be a partial. A namespace that cannot be read must make
    # the name unknown, not skipped.
    module = {"launch": functools.partial(wp.launch, stream=None), "add_one": add_one}

    def calls():
        class Body(metaclass=_Prepared):
            launch = wp.launch
            launch(add_one, 8, inputs=[arr])

        exec(_EXEC_CODE, {**module, "arr": arr}, _Namespace(launch=wp.launch))

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 2, "inputs"), knowable=False),
            Call("wp.launch", names(LAUNCH, 2, "inputs"), knowable=False),
        ],
    )


def test_an_instance_dict_that_is_a_dict_subclass_shadows_the_method(arr):
    # Core bug (open): `obj.__dict__` may be a dict subclass. Python's attribute lookup
    # reads it as a plain dict, so an entry there shadows the class's method; the read-back
    # ignores it (not an exact dict) and binds the class's Launch.launch instead, so
    # `c.launch(c)` through the instance's partial(wp.Launch.launch), which passes no
    # stream, is read as a bound method passing `stream` by position: a missed breach.
    shadowed = wp.launch(add_one, dim=8, inputs=[arr], device="cpu", record_cmd=True)
    shadowed.__dict__ = _Namespace(shadowed.__dict__, launch=functools.partial(wp.Launch.launch))

    def calls(c=shadowed):
        c.launch(c)

    exact(calls, [Call("wp.Launch.launch", CMD[:1], knowable=False)])


def test_the_clean_site_check_runs_none_of_the_users_code(arr):
    # Core bug (open): a guard alone answers a remembered clean `obj.launch(...)` site after
    # testing `"launch" in obj.__dict__`; for a dict subclass that runs the subclass's own
    # __contains__ (the user's code) on the guard's behalf, at every later call there.
    plain = wp.launch(add_one, dim=8, inputs=[arr], device="cpu", record_cmd=True)
    plain.__dict__ = _Namespace(plain.__dict__)

    def calls(d=plain):
        for _ in range(3):
            d.launch(None)

    counts.clear()
    calls()
    bare = dict(counts)
    counts.clear()
    with stream_explicit(strict=False) as guard:
        calls()
    assert dict(counts) == bare
    assert guard.violations == []


# --- never an internal error in the user's call ---------------------------------------------


def _raise(*args, **kwargs):
    raise RuntimeError("broken on purpose")


BREAKAGES = {
    "analysis": ("trackgen_contract.callsite", "analyse", True),
    "stack model": ("trackgen_contract.callsite.model", "step", True),
    "read-back": ("trackgen_contract.callsite.readback", "resolve", True),
    "decision": ("trackgen_contract.callsite.decision", "passed", True),
    "binding": ("trackgen_contract.callsite.decision", "binding", True),
    "site walk": ("trackgen_contract.tracer.call.WarpCall", "_walk_stack", False),
}


def _broken_calls(arr, cmd):
    # Two call sites per API, each made three times: one warning per site.
    for _ in range(3):
        wp.launch(add_one, 8, inputs=[arr], device="cpu", stream=None)
        wp.launch(add_one, 8, inputs=[arr], device="cpu")
        wp.copy(arr, arr, count=8, stream=None)
        wp.copy(arr, arr, count=8)
        cmd.launch(None)
        cmd.launch()


def _fresh(fn):
    """`fn` with a code object of its own: nothing any cache learned of `fn` applies."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__)


def _target(path):
    import importlib

    module, _, attr = path.rpartition(".")
    try:
        return importlib.import_module(path)
    except ImportError:
        return getattr(importlib.import_module(module), attr)


@pytest.mark.parametrize(("where", "name", "decoder"), BREAKAGES.values(), ids=BREAKAGES.keys())
def test_a_broken_decoder_never_reaches_the_users_call(arr, cmd, monkeypatch, where, name, decoder):
    monkeypatch.setattr(diagnostics_module, "_warned", {})  # sites warned by earlier tests
    monkeypatch.setattr(_target(where), name, _raise)
    before = arr.numpy().copy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with watching() as seen:
            _fresh(_broken_calls)(arr, cmd)
    # Every launch ran: 3 rounds of 4 launches of add_one.
    np.testing.assert_array_equal(arr.numpy(), before + 12)
    ours = [w for w in caught if issubclass(w.category, TrackgenContractWarning)]
    # The decoder is asked at every call; the site walk only where a breach needs a site.
    lines = _lines_of(_broken_calls, with_stream=decoder)
    assert sorted((w.filename, w.lineno) for w in ours) == [(__file__, n) for n in lines]
    assert all("broken on purpose" in str(w.message) for w in ours)
    truth = [
        Call("wp.launch", names(LAUNCH, 2, "inputs", "device", "stream")),
        Call("wp.launch", names(LAUNCH, 2, "inputs", "device")),
        Call("wp.copy", names(COPY, 2, "count", "stream")),
        Call("wp.copy", names(COPY, 2, "count")),
        Call("wp.Launch.launch", {"self", "stream"}),
        Call("wp.Launch.launch", {"self"}),
    ]
    if decoder:  # the shape is lost: every call is judged on its bound values
        assert [explicit for _, explicit, _ in seen.calls] == [None] * 18
        assert seen.reported == [f"{c.api} without stream=" for c in truth] * 3
    else:  # the shape is known, the site falls back on the direct caller
        seen.check(truth * 3)
        assert {v.site.function for v in seen.guard.violations} == {"_broken_calls"}


def _lines_of(fn, with_stream):
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return [
        start + i
        for i, line in enumerate(lines)
        if (".launch(" in line or ".copy(" in line)
        and (with_stream or not ("stream=None" in line or "(None)" in line))
    ]


@pytest.mark.parametrize(("where", "name", "decoder"), BREAKAGES.values(), ids=BREAKAGES.keys())
def test_a_broken_decoder_under_a_strict_guard_raises_only_the_breach(
    arr, monkeypatch, where, name, decoder
):
    monkeypatch.setattr(diagnostics_module, "_warned", {})
    monkeypatch.setattr(_target(where), name, _raise)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrackgenContractWarning)
        with pytest.raises(HotPathViolation, match="wp.launch without stream="):
            with stream_explicit():
                _fresh(_launch_without_stream)(arr)


def test_a_broken_rule_never_reaches_the_users_call(arr, cmd, monkeypatch):
    monkeypatch.setattr(diagnostics_module, "_warned", {})
    monkeypatch.setattr(_target("trackgen_contract.rules"), "_records_only", _raise)
    before = arr.numpy().copy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for strict in (False, True):
            with stream_explicit(strict=strict):
                _fresh(_broken_calls)(arr, cmd)
    np.testing.assert_array_equal(arr.numpy(), before + 24)
    ours = [w for w in caught if issubclass(w.category, TrackgenContractWarning)]
    # Asked of the calls that pass no stream only: one warning per such site.
    lines = _lines_of(_broken_calls, with_stream=False)
    assert sorted((w.filename, w.lineno) for w in ours) == [(__file__, n) for n in lines]


# --- the verdict of a call site does not change when it runs again -------------------------


class _Holder:
    """A plain object holding a recorded launch: ``self.cmd.launch(...)`` in a method."""

    def __init__(self, cmd: object, **more: object) -> None:
        self.cmd = cmd
        self.__dict__.update(more)

    def go(self, x: object) -> None:
        self.inner.cmd.launch(x)  # two attributes from a local, the stream by position


class _Defaulted:
    """A holder whose class gives `cmd` a default (an inert value) that its own hides."""

    cmd = None

    def __init__(self, cmd: object) -> None:
        self.cmd = cmd


def _holding_a_launch(cmd: object, bound_to: object) -> object:
    """A copy of the recorded launch `cmd` whose own attribute ``launch`` is the method
    bound to `bound_to`, or to the copy itself where that is None (the same call as the
    class's method would make there)."""
    if cmd is None:
        return None  # the cases' names only
    copied = copy.copy(cmd)
    copied.launch = (copied if bound_to is None else bound_to).launch
    return copied


_RECORDED = None  # a global receiver, set by the shape cases: ``_RECORDED.launch(...)``


def _shape_cases(arr, cmd, cmd2):
    """name -> (make one call, its truth)."""
    global _RECORDED
    _RECORDED = cmd
    holder = _Holder(cmd2, inner=_Holder(cmd), cmds=[cmd2, cmd], opts={"stream": None})
    pairs, i = ((cmd, _Holder(cmd2)),), 1
    fast, slow = {"stream": None}, {"device": "cpu"}
    spelled, by_position = (add_one, 8, [arr]), [add_one, 8, [arr], [], [], [], "cpu", None]
    c = True
    cfg = {"fast": {"stream": None}, "slow": {}}
    partials = [functools.partial(wp.launch, stream=None)]
    graphs, name, by_id = {"fwd": cmd, "bwd": cmd2}, "fwd", {0: cmd2, 1: cmd}
    own, other, defaulted = (
        _holding_a_launch(cmd, None),
        _holding_a_launch(cmd, cmd2),
        _Defaulted(cmd),
    )
    return {
        "keyword": (
            lambda: wp.launch(add_one, 8, inputs=[arr], stream=None),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream")),
        ),
        "branch and **": (
            lambda: wp.launch(add_one, 8, inputs=[arr] if c else [], **cfg["fast"]),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream")),
        ),
        "** without": (
            lambda: wp.launch(add_one, 8, inputs=[arr] if c else [], **cfg["slow"]),
            Call("wp.launch", names(LAUNCH, 2, "inputs")),
        ),
        "inline partial": (
            lambda: functools.partial(wp.launch, stream=None)(add_one, 8, [arr]),
            Call("wp.launch", names(LAUNCH, 3, "stream")),
        ),
        "partial by index": (
            lambda: partials[0](add_one, 8, [arr]),
            Call("wp.launch", names(LAUNCH, 3, "stream")),
        ),
        "unbound": (
            lambda: wp.Launch.launch(cmd if c else cmd2),
            Call("wp.Launch.launch", CMD[:1]),
        ),
        "bound": (lambda: cmd.launch(None), Call("wp.Launch.launch", CMD)),
        "bound, by keyword": (lambda: cmd.launch(stream=None), Call("wp.Launch.launch", CMD)),
        "bound through an attribute": (
            lambda: holder.cmd.launch(stream=None),
            Call("wp.Launch.launch", CMD),
        ),
        "bound through two attributes": (
            lambda: holder.inner.cmd.launch(None),
            Call("wp.Launch.launch", CMD),
        ),
        "bound through an attribute, no stream": (
            lambda: holder.inner.cmd.launch(),
            Call("wp.Launch.launch", CMD[:1]),
        ),
        "bound on a global": (lambda: _RECORDED.launch(None), Call("wp.Launch.launch", CMD)),
        "bound, held by the instance itself": (
            lambda: own.launch(None),
            Call("wp.Launch.launch", CMD),
        ),
        "another's bound method, held by the instance, no stream": (
            lambda: other.launch(),
            Call("wp.Launch.launch", CMD[:1]),
        ),
        "bound through an attribute its class defaults": (
            lambda: defaulted.cmd.launch(stream=None),
            Call("wp.Launch.launch", CMD),
        ),
        "bound through an item": (
            lambda: holder.cmds[0].launch(stream=None),
            Call("wp.Launch.launch", CMD),
        ),
        "bound through an item at a variable": (
            lambda: holder.cmds[i].launch(None),
            Call("wp.Launch.launch", CMD),
        ),
        "bound through items and an attribute": (
            lambda: pairs[0][1].cmd.launch(None),
            Call("wp.Launch.launch", CMD),
        ),
        "bound through an item, no stream": (
            lambda: holder.cmds[i].launch(),
            Call("wp.Launch.launch", CMD[:1]),
        ),
        "bound through a dict's item": (
            lambda: graphs["fwd"].launch(stream=None),
            Call("wp.Launch.launch", CMD),
        ),
        "bound through a dict's item at a variable": (
            lambda: graphs[name].launch(None),
            Call("wp.Launch.launch", CMD),
        ),
        "bound through a dict's int item": (
            lambda: by_id[1].launch(None),
            Call("wp.Launch.launch", CMD),
        ),
        "bound through a dict's item, no stream": (
            lambda: graphs[name].launch(),
            Call("wp.Launch.launch", CMD[:1]),
        ),
        "** of a local": (
            lambda: wp.launch(add_one, 8, inputs=[arr], **fast),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "stream")),
        ),
        "** of a local, no stream": (
            lambda: wp.launch(add_one, 8, inputs=[arr], **slow),
            Call("wp.launch", names(LAUNCH, 2, "inputs", "device")),
        ),
        "* and ** of locals": (
            lambda: wp.launch(*spelled, **fast),
            Call("wp.launch", names(LAUNCH, 3, "stream")),
        ),
        "* holding the stream": (lambda: wp.launch(*by_position), Call("wp.launch", LAUNCH)),
        "* without the stream": (
            lambda: wp.launch(*spelled, device="cpu"),
            Call("wp.launch", names(LAUNCH, 3, "device")),
        ),
        "bound, ** of an attribute": (
            lambda: holder.inner.cmd.launch(**holder.opts),
            Call("wp.Launch.launch", CMD),
        ),
        "launch_tiled (Warp's own launch(*args, **kwargs) inside)": (
            lambda: wp.launch_tiled(add_one, dim=[8], inputs=[arr], block_dim=1, stream=None),
            Call("wp.launch_tiled", names(LAUNCH, 1, "dim", "inputs", "block_dim", "stream")),
        ),
        "through C": (
            lambda: contextvars.copy_context().run(wp.launch, add_one, 8, [arr], [], [], [], None),
            Call("wp.launch", names(LAUNCH, 7), knowable=False),
        ),
        "type(cmd)": (lambda: type(cmd).launch(cmd), Call("wp.Launch.launch", CMD[:1], False)),
    }


SHAPE_CASES = list(_shape_cases(None, None, None))


def _learnt_sites() -> list:
    """Every clean site the fast path remembers (`fastpath.table`, slots shared included)."""
    return [s for there in fastpath.table.values() for s in (there, *there.others.values())]


def test_a_guard_alone_serves_a_clean_site_from_its_table(arr):
    """What the differential checks below rely on: a guard without a plain tracer beside it
    remembers a clean site and answers the calls there without judging them again."""

    def loop():
        for _ in range(3):
            wp.launch(add_one, 8, inputs=[arr], stream=None)

    with stream_explicit(strict=False):
        loop()
        assert any(site.caller is loop.__code__ for site in _learnt_sites())
    with watching() as seen:
        loop()
    assert len(seen.calls) == 3  # a plain tracer beside it still sees every call


def _call_offsets(function):
    import dis

    return [i.offset for i in dis.get_instructions(function) if i.opname.startswith("CALL")]


def test_call_sites_of_several_functions_at_one_offset_are_told_apart(arr):
    """The clean-site table is keyed by the caller's offset first: functions whose calls
    sit at the same offset share a slot, and a breach there is never answered as clean."""

    def first():
        wp.launch(add_one, 8, inputs=[arr], stream=None)

    def second():
        wp.launch(add_one, 8, inputs=[arr], stream=None)

    def no_stream():
        wp.launch(add_one, 8, inputs=[arr], device=None)

    assert _call_offsets(first) == _call_offsets(second) == _call_offsets(no_stream)
    with stream_explicit(strict=False) as guard:
        for _ in range(6):
            first()
            no_stream()
            second()
        shared = [t for t in fastpath.table.values() if type(t).__name__ == "_Several"]
        callers = {site.caller for several in shared for site in several.others.values()}
        assert callers == {first.__code__, second.__code__}
    assert guard.calls == 18
    lines = {v.site.lineno for v in guard.violations}
    assert lines == {no_stream.__code__.co_firstlineno + 1}
    assert len(guard.violations) == 6


@pytest.mark.parametrize("case", SHAPE_CASES)
def test_a_looped_call_site_keeps_its_verdict(arr, cmd, cmd2, case):
    make, truth = _shape_cases(arr, cmd, cmd2)[case]
    once = observe(make)
    once.check([truth])

    def loop():
        for _ in range(25):
            make()

    looped = observe(loop)  # every call read in full, the per-code caches warm
    assert looped.calls == once.calls * 25
    assert looped.reported == once.reported * 25
    with stream_explicit(strict=False) as guard:  # a clean site answered from the frame
        loop()
    assert [v.api for v in guard.violations] == once.reported * 25


def test_one_site_alternating_between_shapes_in_a_long_loop(arr, cmd):
    kws = [{"stream": None}, {}, {"device": "cpu", "stream": None}, {"device": "cpu"}]
    fns = [
        wp.launch,
        functools.partial(wp.launch, stream=None),
        functools.partial(wp.launch, device="cpu"),
    ]
    launchers = [functools.partial(wp.Launch.launch, cmd), cmd.launch]
    extra = [(), (None,)]

    def calls():
        for i in range(60):
            fn, kw = fns[i % 3], kws[(i // 3) % 4]
            fn(add_one, 8, inputs=[arr], **kw)
        for i in range(40):
            which, more = i % 2, i % 3 // 2  # locals: an index computed in place is gone
            launchers[which](*extra[more])

    expected = [
        Call("wp.launch", names(LAUNCH, 2, "inputs", *bound[i % 3], *kws[(i // 3) % 4]))
        for i in range(60)
        for bound in [((), ("stream",), ("device",))]
    ] + [Call("wp.Launch.launch", CMD[: 1 + i % 3 // 2]) for i in range(40)]
    exact(calls, expected)


def test_a_site_found_clean_then_reached_another_way(arr, cmd):
    """A guard remembers a site it found clean and answers the next call there from the
    caller's frame: the same instruction reached through C code, with another callable
    or under other globals must be judged again."""
    routes = [  # one call instruction, (callable, its 8 arguments)
        (wp.launch, (add_one, 8, [arr], [], [], [], "cpu", None)),  # stream by position
        (operator.call, (wp.launch, add_one, 8, [arr], [], [], [], "cpu")),  # 7 reach it
    ]
    relay = types.SimpleNamespace(launch=functools.partial(operator.call, wp.Launch.launch))
    receivers = [cmd, relay]
    arguments = [None, cmd]  # cmd.launch(None), then operator.call(wp.Launch.launch, cmd)

    def calls():
        for _ in range(3):
            for fn, (a, b, c, d, e, f, g, h) in routes:
                fn(a, b, c, d, e, f, g, h)
            for obj, x in zip(receivers, arguments, strict=True):
                obj.launch(x)

    exact(
        calls,
        [
            Call("wp.launch", names(LAUNCH, 8)),
            Call("wp.launch", names(LAUNCH, 7), knowable=False),
            Call("wp.Launch.launch", CMD),
            Call("wp.Launch.launch", CMD[:1], knowable=False),
        ]
        * 3,
    )


def _launch_by_global(arr):
    launch(add_one, 8, [arr])  # noqa: F821 (a global swapped by the test)


def _launch_by_module_attribute(arr):
    relay.launch(add_one, 8, [arr])  # noqa: F821 (a global module the test changes)


def test_a_site_that_breached_reached_again_another_way(arr, cmd, monkeypatch):
    """A guard judges a repeat launch breach at a site as it judged the first one, but only
    while the site still calls Warp's function directly: swapped for one that passes the
    stream, in a global, a module attribute or the receiver, it is judged again."""
    passing = functools.partial(wp.launch, stream=None)
    module = types.ModuleType("relay")

    receivers = [cmd, types.SimpleNamespace(launch=functools.partial(cmd.launch, None))]
    monkeypatch.setitem(_launch_by_global.__globals__, "relay", module)

    def calls():
        for i in range(4):
            _launch_by_global.__globals__["launch"] = wp.launch if i % 2 == 0 else passing
            _launch_by_global(arr)
            module.launch = wp.launch if i % 2 == 0 else passing
            _launch_by_module_attribute(arr)
            receiver = receivers[i % 2]
            receiver.launch()

    try:
        exact(
            calls,
            [
                Call("wp.launch", names(LAUNCH, 3)),
                Call("wp.launch", names(LAUNCH, 3)),
                Call("wp.Launch.launch", CMD[:1]),
                Call("wp.launch", names(LAUNCH, 3, "stream")),
                Call("wp.launch", names(LAUNCH, 3, "stream")),
                Call("wp.Launch.launch", CMD),
            ]
            * 2,
        )
    finally:
        _launch_by_global.__globals__.pop("launch", None)


def test_a_launch_recorded_at_some_calls_of_a_site_only(arr):
    flags = [False, True, False, True]

    def calls():
        for flag in flags:
            wp.launch(add_one, 8, [arr], device="cpu", record_cmd=flag)

    with stream_explicit(strict=False) as guard:
        for _ in range(3):
            calls()
    assert [v.api for v in guard.violations] == ["wp.launch without stream="] * 6


def test_a_repeat_launch_breach_is_judged_from_its_site(arr, monkeypatch):
    from trackgen_contract import rules

    judged = []
    real = rules.judge

    def counting(call, policy):
        judged.append(call.api)
        return real(call, policy)

    def loop():
        for _ in range(20):
            wp.launch(add_one, 8, [arr], device="cpu")

    monkeypatch.setattr(rules, "judge", counting)
    with stream_explicit(strict=False) as guard:
        loop()
    assert len(guard.violations) == 20
    assert judged == ["wp.launch"]  # the rest from the site, without reading the call again


class _CpuStream:
    """What a CPU launch reads of a stream (CPU has none): its device."""

    device = wp.get_device("cpu")


def _verdicts(*calls):
    """The stream breaches one guard reports over `calls`, and those a fresh guard per call
    reports: a guard that reuses a verdict from a call site must agree with judging anew."""
    with stream_explicit(strict=False) as one:
        for call in calls:
            call()
    fresh = []
    for call in calls:
        with stream_explicit(strict=False) as alone:
            call()
        fresh += alone.violations
    return [v.api for v in one.violations], [v.api for v in fresh]


def _method_site(receiver, *args):
    if args:
        receiver.launch(args[0])  # the argument spelled out: a site read from its shape
    else:
        receiver.launch()


def test_a_site_reused_only_for_receivers_reached_the_way_it_learnt(arr, cmd, cmd2):
    # Learnt from a recorded launch whose own attribute shadows the method: neither a
    # breach nor a clean verdict there may vouch for a plain one at the same instruction.
    def shadowed(**bound):
        launch = wp.launch(add_one, 8, inputs=[arr], device="cpu", record_cmd=True)
        launch.launch = functools.partial(wp.Launch.launch, **bound)
        return launch

    breach_first = shadowed()  # .launch(x) runs Launch.launch(x): no stream
    clean_first = shadowed(self=cmd2, stream=_CpuStream())
    for first, second in (
        (lambda: _method_site(breach_first, cmd2), lambda: _method_site(cmd, None)),
        (lambda: _method_site(clean_first), lambda: _method_site(cmd)),
    ):
        one, fresh = _verdicts(first, second)
        assert len(one) == len(fresh) == 1, (one, fresh)


@pytest.mark.parametrize("given_to", ["class", "base"])
def test_a_site_reused_only_while_its_class_has_no_getattribute_of_its_own(arr, cmd, given_to):
    class Base(wp.Launch):
        pass

    class Mine(Base):
        launch = wp.Launch.launch

    owner = Mine if given_to == "class" else Base

    def hook(self, name):
        if name == "launch":
            return functools.partial(wp.Launch.launch, self, stream=_CpuStream())
        return object.__getattribute__(self, name)

    cmd.__class__ = Mine
    with stream_explicit(strict=False) as guard:
        _method_site(cmd)  # a breach
        owner.__getattribute__ = hook
        try:
            _method_site(cmd)  # the stream passed through the partial
        finally:
            del owner.__getattribute__
    assert len(guard.violations) == 1


_RECEIVER_CHANGES = [
    "a subclass",
    "an instance attribute",
    "__getattribute__ given to the class",
    "__getattribute__ given to a base",
    "bases changed",
    "the class's method rebound",
]


@pytest.mark.parametrize("churned", [False, True], ids=["", "churned"])
@pytest.mark.parametrize("change", _RECEIVER_CHANGES)
def test_a_recorded_launch_site_found_clean_is_judged_again_when_its_receiver_changes(
    arr, cmd, cmd2, change, churned
):
    """A site ``obj.launch(x)`` found clean for a recorded launch (the stream passed by
    position) then reaches a receiver whose ``launch`` is a callable that drops the
    stream: ``Launch.launch(x)``, through C code, at the same instruction. (Churned: the
    class was changed so often before that CPython gives it no version tag any more, from
    3.13: the compiled test makes its class-level tests at every call.)"""
    drop = functools.partial(operator.call, wp.Launch.launch)

    def hook(self, name):
        return drop if name == "launch" else object.__getattribute__(self, name)

    class Base(wp.Launch):
        pass

    class Mine(Base):
        launch = wp.Launch.launch  # its own: a site can be learnt for its instances

    class Hooked(wp.Launch):
        __getattribute__ = hook

    class Sub(Mine):
        launch = staticmethod(drop)

    for i in range(1200 if churned else 0):
        Mine.churn = Base.churn = i  # each a new version of the class, once looked up
        assert Mine.churn == Base.churn == i
    cmd.__class__ = cmd2.__class__ = Mine
    receiver, owner = cmd, None
    with stream_explicit(strict=False) as guard:
        for _ in range(3):
            _method_site(cmd, None)  # clean: learnt, then answered from the frame
        if change == "a subclass":
            cmd2.__class__, receiver = Sub, cmd2
        elif change == "an instance attribute":
            cmd2.launch, receiver = drop, cmd2
        elif change == "bases changed":
            Mine.__bases__ = (Hooked,)
        elif change == "the class's method rebound":
            Mine.launch = staticmethod(drop)
        else:
            owner = Mine if "class" in change else Base
            owner.__getattribute__ = hook
        try:
            _method_site(receiver, cmd2)  # Launch.launch(cmd2): no stream
        finally:
            if owner is not None:
                del owner.__getattribute__
    assert [v.api for v in guard.violations] == ["wp.Launch.launch without stream="]
    assert guard.calls == 4


class _Elsewhere:
    """Put into a class's MRO by its metaclass, though not one of its bases."""


class _ForeignMro(type):
    """A metaclass whose ``mro()`` puts `_Elsewhere` into a class's MRO: after the class
    itself (`behind`), or before it."""

    def mro(cls):
        mro = super().mro()
        if cls.__dict__.get("behind") is True:
            return [mro[0], _Elsewhere, *mro[1:]]
        if cls.__dict__.get("behind") is False:
            return [_Elsewhere, *mro]
        return mro


class _PlainMeta(type):
    """A metaclass that gives a class the MRO of its bases (`type.mro`)."""


def _forget_elsewhere():
    for name in ("launch", "cmd", "__getattribute__"):
        if name in _Elsewhere.__dict__:
            delattr(_Elsewhere, name)


@contextmanager
def _launches_received():
    """The receiver of each ``Launch.launch`` call as the call received it, seen by a
    ``sys.monitoring`` tool of the test's own (whatever the guard decided)."""
    monitoring, tool, received = sys.monitoring, 5, []
    code = wp.Launch.launch.__code__
    monitoring.use_tool_id(tool, "test probe")
    try:
        monitoring.register_callback(
            tool,
            monitoring.events.PY_START,
            lambda at, offset: received.append(sys._getframe(1).f_locals["self"]),
        )
        monitoring.set_local_events(tool, code, monitoring.events.PY_START)
        yield received
    finally:
        monitoring.set_local_events(tool, code, 0)
        monitoring.register_callback(tool, monitoring.events.PY_START, None)
        monitoring.free_tool_id(tool)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="the probe is a sys.monitoring tool")
@pytest.mark.parametrize("where", ["before the receiver's class", "on the holder's path"])
def test_a_class_a_metaclass_puts_into_the_mro_is_watched_for_changes(arr, cmd, cmd2, where):
    """A class that a metaclass's ``mro()`` puts into the MRO of a receiver's class (or of
    a holder on the path to it) without being a base: a change to it gives the class no
    new version tag on 3.12 and 3.13 (whose own attribute cache then goes stale until it
    is cleared), and the checks looked at the receiver's class's own namespace first. The
    guard reports the last call exactly when it really reached ``Launch.launch`` through
    the relay, with no stream."""
    drop = functools.partial(operator.call, wp.Launch.launch)  # Launch.launch(x): no stream

    class Relay:
        launch = staticmethod(drop)

    if where == "before the receiver's class":

        class Owner(wp.Launch, metaclass=_ForeignMro):
            behind = False
            launch = wp.Launch.launch

        cmd.__class__ = Owner

        def site(x):
            cmd.launch(x)  # the stream passed by position

        def change():
            _Elsewhere.launch = staticmethod(drop)

    else:

        class Owner(metaclass=_ForeignMro):
            behind = True

        holder = Owner()
        holder.cmd = cmd

        def site(x):
            holder.cmd.launch(x)

        def change():
            _Elsewhere.cmd = property(lambda self: Relay())

    try:
        with stream_explicit(strict=False) as guard, _launches_received() as received:
            for _ in range(3):
                site(None)  # clean: learnt, then answered from the frame
            Owner.other = 1  # a new version of the class: its checks are made again
            site(None)
            change()
            sys._clear_type_cache()  # 3.12 and 3.13 look the attribute up afresh
            site(cmd2)  # through the relay: Launch.launch(cmd2), no stream
    finally:
        _forget_elsewhere()
    relayed = received[-1] is cmd2
    assert [v.api for v in guard.violations] == ["wp.Launch.launch without stream="] * relayed
    assert guard.calls == 5


def _foreign_mro_left_behind(how):
    """A class whose MRO holds `_Elsewhere` after it, put there by its metaclass's
    ``mro()``, which is no longer in place (`how`): the MRO stays as it was made."""

    class Meta(type):
        def mro(cls):
            mro = type.mro(cls)
            return [mro[0], _Elsewhere, *mro[1:]] if "behind" in cls.__dict__ else mro

    def left_behind(cls):
        if how == "mro() deleted":
            del Meta.mro
        else:
            cls.__class__ = _PlainMeta
        assert cls.__mro__[1] is _Elsewhere
        return cls

    return Meta, left_behind


@pytest.mark.parametrize("how", ["mro() deleted", "metaclass swapped for a plain one"])
@pytest.mark.parametrize("where", ["the receiver's class", "a holder's class"])
def test_an_mro_a_metaclass_made_is_watched_after_its_mro_is_gone(arr, cmd, where, how):
    """The class that a metaclass's ``mro()`` put into a class's MRO is not a base: a
    change to it gives the class no new version tag, even once the ``mro()`` that put it
    there is gone. A looped site keeps the verdict a guard beside a tracer gives (every
    call judged in full) when that class changes midway."""
    Meta, left_behind = _foreign_mro_left_behind(how)
    if where == "the receiver's class":

        @left_behind
        class Owner(wp.Launch, metaclass=Meta):
            behind = True
            launch = wp.Launch.launch

        receiver = Owner.__new__(Owner)
        receiver.__dict__.update(cmd.__dict__)

        def site():
            receiver.launch(None)

        def change():
            _Elsewhere.__getattribute__ = lambda self, name: object.__getattribute__(self, name)

    else:

        @left_behind
        class Owner(metaclass=Meta):
            behind = True

        holder = Owner()
        holder.cmd = cmd

        def site():
            holder.cmd.launch(None)

        def change():
            _Elsewhere.cmd = property(lambda self: cmd)

    def loop():
        for i in range(6):
            if i == 3:
                change()
            site()

    def verdicts(beside):
        beside_it = Tracer(lambda call: None) if beside else contextlib.nullcontext()
        try:
            with stream_explicit(strict=False) as guard, beside_it:
                loop()
        finally:
            _forget_elsewhere()
        return [(v.api, v.site.lineno) for v in guard.violations], guard.calls

    judged_in_full = verdicts(beside=True)
    assert verdicts(beside=False) == judged_in_full
    assert judged_in_full[1] == 6


def _path_site(holder, x):
    holder.cmd.launch(x)  # the receiver read off the holder: the stream passed by position


def _global_site(x):
    _RECORDED.launch(x)


_PATH_CHANGES = [
    "the attribute rebound",
    "a property given to the holder's class",
    "a class default made a property",
    "__getattribute__ given to the holder's class",
    "__getattribute__ given to its base",
    "the holder's bases changed",
    "the holder made another class",
    "the attribute deleted, a class default left",
    "an inner holder's attribute rebound",
    "the global rebound",
]


def _receiver_checks_learnt() -> list:
    return [s.check for s in _learnt_sites() if type(s.check) is fastpath.Receiver]


@pytest.mark.parametrize("change", _PATH_CHANGES)
def test_a_site_reaching_its_receiver_through_attributes_is_judged_again_when_they_change(
    arr, cmd, cmd2, change
):
    """``holder.cmd.launch(x)`` (or ``GLOBAL.launch(x)``) found clean for a recorded
    launch, the stream passed by position, then loads another callable at the same
    instruction, one that reaches ``Launch.launch(x)`` through C code, without a stream."""
    drop = functools.partial(operator.call, wp.Launch.launch)
    relay = _Holder(None, launch=drop)  # relay.launch(cmd2): Launch.launch(cmd2)

    class Base:
        pass

    class Holder(Base):
        cmd = None  # a default the instance's own attribute hides

        def __init__(self, cmd):
            self.cmd = cmd

    def hook(self, name):
        return relay if name == "cmd" else object.__getattribute__(self, name)

    outer = _Holder(None, inner=Holder(cmd))
    inner = change.startswith("an inner")
    holder = outer.inner if inner else Holder(cmd)
    site = (lambda x: _Holder.go(outer, x)) if inner else (lambda x: _path_site(holder, x))
    if change == "the global rebound":
        site = _global_site
    owner = None
    with stream_explicit(strict=False) as guard:
        globals()["_RECORDED"] = cmd
        for _ in range(3):
            site(None)  # clean: learnt, then answered from the frame
        assert _receiver_checks_learnt(), "the site was not learnt: this test would prove nothing"
        if change in ("the attribute rebound", "an inner holder's attribute rebound"):
            holder.cmd = relay
        elif change == "a property given to the holder's class":
            del Holder.cmd
            Holder.cmd = property(lambda self: relay)
        elif change == "a class default made a property":
            Holder.cmd = property(lambda self: relay)
        elif change == "the holder's bases changed":
            Holder.__bases__ = (type("Hooked", (), {"__getattribute__": hook}),)
        elif change == "the holder made another class":
            holder.__class__ = type("Other", (), {"cmd": property(lambda self: relay)})
        elif change == "the attribute deleted, a class default left":
            del holder.cmd
            Holder.cmd = relay  # a class attribute now: no longer the inert default
        elif change == "the global rebound":
            globals()["_RECORDED"] = relay
        else:
            owner = Holder if "holder's class" in change else Base
            owner.__getattribute__ = hook
        try:
            site(cmd2)  # Launch.launch(cmd2): no stream
        finally:
            if owner is not None:
                del owner.__getattribute__
            globals()["_RECORDED"] = None
    assert [v.api for v in guard.violations] == ["wp.Launch.launch without stream="]
    assert guard.calls == 4


def _item_site(holders, i, x):
    holders[i].cmds[0].launch(x)  # items and an attribute: the stream passed by position


_INDEX = 0


def _global_item_site(x):
    _RECORDED[_INDEX].launch(x)


_ITEM_CHANGES = [
    "the item replaced",
    "the index moved",
    "the index made a bool",
    "the index made negative",
    "the list made a tuple",
    "the list made a dict",
    "the list made a list subclass",
    "the global index moved",
]


@pytest.mark.parametrize("change", _ITEM_CHANGES)
def test_a_site_reaching_its_receiver_through_items_is_judged_again_when_they_change(
    arr, cmd, cmd2, change
):
    """``holders[i].cmds[0].launch(x)`` (or ``GLOBAL[INDEX].launch(x)``) found clean for
    a recorded launch, the stream passed by position, then loads another callable at the
    same instruction, one that reaches ``Launch.launch(x)`` through C code, without a
    stream: an item of a list or a tuple is re-read at each call, at the index the site
    reads; any other container, or index, is judged in full."""
    relay = _Holder(None, launch=functools.partial(operator.call, wp.Launch.launch))

    class Relaying(list):
        def __getitem__(self, index):
            return relay

    holder = _Holder(None, cmds=[cmd, relay])
    holders = [_Holder(None), holder]
    index = 1
    global_ = change.startswith("the global")
    site = _global_item_site if global_ else (lambda x: _item_site(holders, index, x))
    with stream_explicit(strict=False) as guard:
        globals()["_RECORDED"] = [cmd, relay]
        for _ in range(3):
            site(None)  # clean: learnt, then answered from the frame
        learnt = _receiver_checks_learnt()
        assert learnt, "the site was not learnt: this test would prove nothing"
        assert any(type(s) is fastpath.Item for check in learnt for s in check.path)
        if change == "the item replaced":
            holder.cmds[0] = relay
        elif change == "the index moved":
            holders[0], index = _Holder(None, cmds=[relay]), 0
        elif change == "the index made a bool":
            holders.append(_Holder(None, cmds=[relay]))  # holders[True] is holders[1]
            holder.cmds[0], index = relay, True
        elif change == "the index made negative":
            holders.append(_Holder(None, cmds=[relay]))
            index = -1
        elif change == "the list made a tuple":
            holder.cmds = (relay,)
        elif change == "the list made a dict":
            holder.cmds = {0: relay}
        elif change == "the list made a list subclass":
            holder.cmds = Relaying([cmd])
        else:
            globals()["_INDEX"] = 1
        try:
            site(cmd2)  # Launch.launch(cmd2): no stream
        finally:
            globals()["_RECORDED"], globals()["_INDEX"] = None, 0
    assert [v.api for v in guard.violations] == ["wp.Launch.launch without stream="]
    assert guard.calls == 4


def _dict_item_site(graphs, name, x):
    graphs[name].launch(x)  # a dict's item at a variable's key: the stream by position


_GRAPHS: dict = {}


def _global_dict_item_site(x):
    _GRAPHS["fwd"].launch(x)


_DICT_CHANGES = [
    "the item replaced",
    "the key moved",
    "the key made an int",
    "the key made a str subclass",
    "the key made a bool",
    "the stored key made a str subclass",
    "the dict made a dict subclass",
    "the dict grown past the scan limit",
    "the global dict's item replaced",
]


@pytest.mark.parametrize("change", _DICT_CHANGES)
def test_a_site_reaching_its_receiver_through_a_dicts_item_is_judged_again_when_it_changes(
    arr, cmd, cmd2, change
):
    """``graphs[name].launch(x)`` (or ``GLOBAL["fwd"].launch(x)``) found clean for a
    recorded launch, then called with the item, the key or the dict changed: each later
    call is judged as a guard beside a tracer judges it. Where the item became a relay
    (it reaches ``Launch.launch(x)`` through C code) the launch has no stream; where the
    full path cannot read the item back (a key or a stored key of the user's type, a bool
    key, a dict past the scan limit), its verdict is the documented fallback."""
    relay = _Holder(None, launch=functools.partial(operator.call, wp.Launch.launch))

    class Relaying(dict):
        def __getitem__(self, key):
            return relay

    graphs, name, x = {"fwd": cmd, 1: cmd}, "fwd", None
    on_global = "global" in change
    site = _global_dict_item_site if on_global else (lambda x: _dict_item_site(graphs, name, x))
    globals()["_GRAPHS"] = {"fwd": cmd}
    try:
        with stream_explicit(strict=False) as guard:
            for _ in range(3):
                site(None)  # clean: learnt, then answered from the frame
            learnt = _receiver_checks_learnt()
            assert any(type(s) is fastpath.Item for check in learnt for s in check.path)
            if change == "the item replaced":
                graphs["fwd"], x = relay, cmd2
            elif change == "the key moved":
                graphs["bwd"], name, x = relay, "bwd", cmd2
            elif change == "the key made an int":
                graphs[2], name, x = relay, 2, cmd2
            elif change == "the key made a str subclass":
                name = _Keyword("fwd")
            elif change == "the key made a bool":
                name = True  # graphs[True] is graphs[1]
            elif change == "the stored key made a str subclass":
                graphs[_Keyword("fwd")] = graphs.pop("fwd")  # graphs["fwd"] still finds it
            elif change == "the dict made a dict subclass":
                graphs, x = Relaying(graphs), cmd2
            elif change == "the dict grown past the scan limit":
                graphs.update({f"k{n}": cmd2 for n in range(300)})
            else:
                _GRAPHS["fwd"], x = relay, cmd2
            site(x)
        truth = observe(lambda: site(x))  # judged in full, beside a tracer
    finally:
        globals()["_GRAPHS"] = {}
    assert [v.api for v in guard.violations] == truth.reported
    if x is cmd2:
        assert truth.reported == ["wp.Launch.launch without stream="]
    assert guard.calls == 4


class _Meddling(str):
    """A class-dict key equal to its own text, hashed as `target` (a name the check looks
    up in class dicts): its ``__eq__`` runs `then` once, when armed."""

    armed: list = []

    def __new__(cls, text, target, then):
        key = super().__new__(cls, text)
        key.target, key.then = target, then
        return key

    def __hash__(self):
        return hash(self.target)

    def __eq__(self, other):
        if self.then in _Meddling.armed:
            _Meddling.armed.remove(self.then)
            self.then()
        return str.__eq__(self, other)


def _meddled_classes(moves):
    """Holder classes whose dicts hold `_Meddling` keys: the first run when the check
    looks for ``__getattribute__``, the second when it looks for ``cmd`` on the class the
    instance has then. A long chain of bases: an MRO that is let go is not kept for reuse."""
    base = object
    for n in range(24):
        base = type(f"Link{n}", (base,), {})
    first = type("First", (base,), {_Meddling("k1", "__getattribute__", moves[0]): 1})
    second = type("Second", (first,), {_Meddling("k2", "cmd", moves[1]): 1})
    return first, second, type("Elsewhere", (base,), {})


_MEDDLING = ["the class changed", "the bases changed", "the class, then its bases changed"]


@pytest.mark.parametrize("change", _MEDDLING)
def test_a_check_whose_lookup_runs_the_users_eq_is_judged_as_the_full_path_judges(arr, cmd, change):
    """``holder.cmd.launch(None)`` found clean, then a key of the user's type in a class
    dict, compared by the check's own lookups, changes the holder's class or that class's
    bases half-way through the check (letting go of the MRO the check walks): the call is
    judged as a guard beside a tracer judges it, and nothing reads what was let go."""
    holder = None

    def to_second():
        holder.__class__ = second

    def rebase():
        second.__bases__ = (elsewhere,)
        junk = [tuple(range(len(second.__mro__) + 1)) for _ in range(50)]  # reuse the memory
        del junk

    moves = {
        "the class changed": (to_second, None),
        "the bases changed": (None, rebase),
        "the class, then its bases changed": (to_second, rebase),
    }[change]
    first, second, elsewhere = _meddled_classes(moves)
    holder = first.__new__(second if moves[0] is None else first)
    holder.cmd = cmd

    def site():
        holder.cmd.launch(None)

    with stream_explicit(strict=False) as guard:
        for _ in range(3):
            site()
        assert _receiver_checks_learnt() or sys.version_info < (3, 13)
        # A new version of the classes (as any change makes): the compiled check makes
        # its class-level tests, and so its lookups, again.
        first.touched = True
        _Meddling.armed[:] = [m for m in moves if m is not None]
        site()
    assert _Meddling.armed == [] or sys.version_info < (3, 13)  # they ran in the check
    _Meddling.armed[:] = []
    truth = observe(site)  # judged in full, beside a tracer
    assert [v.api for v in guard.violations] == truth.reported == []
    assert guard.calls == 4


def test_those_checks_read_nothing_let_go_under_the_debug_allocator():
    """The test above again, in a child under ``-X dev``: its allocator fills memory that
    is let go at once, so a check still reading an MRO it does not hold crashes there."""
    child = ["-X", "dev", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0"]
    done = subprocess.run(
        [sys.executable, *child, "-W", "ignore::DeprecationWarning", __file__, "-k", "lookup_runs"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "3 passed" in done.stdout


_SPREAD_CASES = [
    "** of a local",
    "* and ** of locals",
    "* holding the stream",
    "bound, ** of an attribute",
    "launch_tiled (Warp's own launch(*args, **kwargs) inside)",
]


@pytest.mark.parametrize("case", _SPREAD_CASES)
def test_a_clean_call_with_star_parts_is_answered_from_the_frame(arr, cmd, cmd2, case):
    make, _ = _shape_cases(arr, cmd, cmd2)[case]
    with stream_explicit(strict=False) as guard:
        for _ in range(5):
            make()
        spread = [s for s in _learnt_sites() if type(s.check) is fastpath.Spread]
    assert spread, "its site was not learnt: each call was judged in full"
    assert guard.violations == []
    assert guard.calls == 5 * (2 if case.startswith("launch_tiled") else 1)


def _spread_site(holder, positional):
    wp.launch(*positional, **holder.opts)


_OPTS: dict = {}


def _global_spread_site(positional):
    wp.launch(*positional, **_OPTS)


class _Keyword(str):
    pass


_SPREAD_CHANGES = {
    "the stream key removed": lambda h, p: h.opts.pop("stream"),
    "the stream key made a str subclass": lambda h, p: h.opts.update(
        {_Keyword("stream"): h.opts.pop("stream")}
    ),
    "the dict made a dict subclass": lambda h, p: setattr(
        h, "opts", type("Options", (dict,), {})(h.opts)
    ),
    "the dict rebound": lambda h, p: setattr(h, "opts", {"device": "cpu"}),
    "the holder's attribute made a property": lambda h, p: setattr(
        type(h), "opts", property(lambda self: {})
    ),
    "the sequence grown to hold the stream": lambda h, p: (
        h.opts.pop("stream"),
        p.extend([[], [], [], "cpu", None]),
    ),
    "the sequence made a tuple": lambda h, p: None,
    "the global dict rebound": lambda h, p: globals().update(_OPTS={}),
}


@pytest.mark.parametrize("change", _SPREAD_CHANGES)
def test_a_site_with_star_parts_is_judged_again_when_they_change(arr, change):
    """``wp.launch(*positional, **holder.opts)`` (or ``**GLOBAL``) found clean, then called
    with parts that pass the stream otherwise, or not at all, or that the full path cannot
    read back: each later call is judged as a guard beside a tracer judges it."""

    class Holder:
        def __init__(self):
            self.opts = {"stream": None}

    holder, positional = Holder(), [add_one, 8, [arr]]
    on_global = "global" in change
    site = _global_spread_site if on_global else (lambda p: _spread_site(holder, p))
    globals()["_OPTS"] = {"stream": None}
    try:
        with stream_explicit(strict=False) as guard:
            for _ in range(3):
                site(positional)
            assert [s for s in _learnt_sites() if type(s.check) is fastpath.Spread]
            _SPREAD_CHANGES[change](holder, positional)
            if change == "the sequence made a tuple":
                positional = tuple(positional)
            site(positional)
        truth = observe(lambda: site(positional))  # judged in full, beside a tracer
    finally:
        globals()["_OPTS"] = {}
    assert [v.api for v in guard.violations] == truth.reported
    assert guard.calls == 4


def _near_the_limit(site, frames_left: int) -> RecursionError | None:
    """The RecursionError ``site()`` raises, if any, called `frames_left` frames below the
    recursion limit (measured by entering frames until there is no room)."""

    def room():
        try:
            return room() + 1
        except RecursionError:
            return 0

    def descend(frames):
        if frames > 0:
            return descend(frames - 1)
        try:
            site()
        except RecursionError as error:
            return error
        return None

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(stack_depth() + 120)
    try:
        return descend(room() - frames_left)
    finally:
        sys.setrecursionlimit(limit)


_GLOBAL_OPTS = {"stream": None}
_DEEP_SITES = {
    "** of an attribute": lambda arr, h: wp.launch(add_one, 8, inputs=[arr], **h.opts),
    "** of a global": lambda arr, h: wp.launch(add_one, 8, inputs=[arr], **_GLOBAL_OPTS),
    "a receiver's attribute": lambda arr, h: h.cmd.launch(None),
}


@pytest.mark.parametrize("shape", _DEEP_SITES)
def test_a_clean_sites_check_near_the_recursion_limit_never_raises_into_the_call(arr, cmd, shape):
    """A site's check re-reads the frame with Python code where the filter is not compiled:
    near the recursion limit it has no room, and the call then goes to the full path
    (which is given room), never with a RecursionError of the check's into the call, where
    the full path has the room to judge it."""
    holder = _Holder(cmd, opts={"stream": None})

    def site():
        _DEEP_SITES[shape](arr, holder)

    for frames_left in range(2, 16):
        with stream_explicit(strict=False):
            site()
            site()  # learnt: the next call is answered from the frame
            assert _learnt_sites(), "the site was not learnt: this test would prove nothing"
            error = _near_the_limit(site, frames_left)
        with stream_explicit(strict=False), Tracer(lambda call: None):  # the full path
            full = _near_the_limit(site, frames_left)
        if full is None and error is not None:  # (no room for the full path: the call fails)
            frames = traceback.extract_tb(error.__traceback__)
            assert not [f for f in frames if f.filename == fastpath.__file__], frames_left


_MODULE_BODIES = {
    # a module's body: LOAD_NAME, which reads the frame's locals first, then its globals
    "wp.launch": "wp.launch(A0, A1, A2, A3, A4, A5, A6, A7)\n",
    "a recorded launch": "CMD.launch(A7)\n",
}


@pytest.mark.parametrize("shape", _MODULE_BODIES)
def test_a_clean_site_in_a_modules_body_is_judged_again_under_locals_of_its_own(
    arr, cmd, cmd2, shape
):
    """A module's body reads its names from its locals first, which are its globals: a
    site learnt there is answered from the frame, but the same code run by ``exec`` with
    locals of its own loads another callable at the same instruction: one that reaches
    the watched function through C code, without a stream."""
    code = compile(_MODULE_BODIES[shape], "<a module body>", "exec")
    stream_by_position = [add_one, 8, [arr], [], [], [], "cpu", None]
    module = {"__name__": "a_module_body", "wp": wp, "CMD": cmd}
    module.update((f"A{i}", value) for i, value in enumerate(stream_by_position))
    relay = types.ModuleType("relay")
    relay.launch = operator.call  # relay.launch(wp.launch, *7 arguments): no stream
    drop = _Holder(None, launch=functools.partial(operator.call, wp.Launch.launch))
    own = {"wp": relay, "CMD": drop}
    own.update((f"A{i}", value) for i, value in enumerate([wp.launch, *stream_by_position[:7]]))
    if shape != "wp.launch":
        own["A7"] = cmd2  # drop(cmd2): no stream
    with stream_explicit(strict=False) as guard:
        for _ in range(3):
            exec(code, module)  # clean: learnt, then answered from the frame
        learnt = [site for site in _learnt_sites() if site.caller is code]
        assert learnt, "the site was not learnt: this test would prove nothing"
        exec(code, module, own)
    api = "wp.launch" if shape == "wp.launch" else "wp.Launch.launch"
    assert [v.api for v in guard.violations] == [f"{api} without stream="]
    assert guard.calls == 4


def _module_site(a):
    _RELAY.go(a[0], a[1], a[2], a[3], a[4], a[5], a[6])  # noqa: F821 (set by the test)


def test_a_site_reused_only_while_its_module_is_a_plain_module(arr, monkeypatch):
    relay = types.ModuleType("relay")
    relay.go = wp.launch
    monkeypatch.setitem(_module_site.__globals__, "_RELAY", relay)

    class Hooked(types.ModuleType):
        def __getattribute__(self, name):
            if name == "go":
                return types.MethodType(wp.launch, add_one)
            return super().__getattribute__(name)

    without = (add_one, 8, [arr], [], [], [], "cpu")
    with_stream = (8, [arr], [], [], [], "cpu", _CpuStream())  # kernel bound, stream 8th
    with stream_explicit(strict=False) as guard:
        _module_site(without)
        relay.__class__ = Hooked
        _module_site(with_stream)
    assert len(guard.violations) == 1


def test_a_module_attribute_that_is_a_property_of_its_class_is_not_read_around_it(arr):
    relay = types.ModuleType("relay")
    relay.go = wp.launch

    class Property(types.ModuleType):
        go = property(lambda self: functools.partial(wp.launch, stream=_CpuStream()))

    relay.__class__ = Property
    with stream_explicit(strict=False) as guard:
        relay.go(add_one, 8, inputs=[arr], device="cpu")  # the property's partial: passed
    assert guard.violations == []


class _RaisingName(str):
    def __eq__(self, other):
        raise RuntimeError("a __name__ whose comparison raises")

    __hash__ = str.__hash__


def _launch_the_global_array():
    wp.launch(add_one, 8, inputs=[ARRAY], device="cpu")  # noqa: F821 (set by the test)


def test_a_module_name_that_is_not_a_plain_string_is_never_compared(arr, monkeypatch):
    run = _launch_the_global_array
    monkeypatch.setitem(run.__globals__, "ARRAY", arr)
    namespace = {"wp": wp, "add_one": add_one, "ARRAY": arr, "__name__": _RaisingName("other")}
    other = types.FunctionType(run.__code__, namespace)
    with stream_explicit(strict=False) as guard:
        for _ in range(3):
            run()
            other()
    assert len(guard.violations) == 6


def _launch_by_global_names():
    launch(A0, A1, A2, A3, A4, A5, A6, A7)  # noqa: F821 (names of the globals it runs under)


def test_a_clean_site_under_other_globals_is_judged_again(arr):
    code = _launch_by_global_names.__code__
    # Eight arguments by position: stream passed.
    direct = {"launch": wp.launch, "A0": add_one, "A1": 8, "A2": [arr], "A6": "cpu", "A7": None}
    # The same instruction calling operator.call(wp.launch, ...): seven reach wp.launch.
    through_c = {"launch": operator.call, "A0": wp.launch, "A1": add_one,
                 "A2": 8, "A3": [arr], "A6": [], "A7": "cpu"}  # fmt: skip
    twins = [
        types.FunctionType(code, {"__name__": f"twin{i}", "A3": [], "A4": [], "A5": [], **g})
        for i, g in enumerate((direct, through_c))
    ]

    def calls():
        for _ in range(3):
            for twin in twins:
                twin()

    exact(
        calls,
        [Call("wp.launch", names(LAUNCH, 8)), Call("wp.launch", names(LAUNCH, 7), knowable=False)]
        * 3,
    )


def _launch_by_relay_names():
    relay.launch(A0, A1, A2, A3, A4, A5, A6, A7)  # noqa: F821 (names of the globals it runs under)


def _launch_seven_by_global_names():
    launch(A0, A1, A2, A3, A4, A5, A6)  # noqa: F821 (names of the globals it runs under)


def _launch_seven_by_relay_names():
    relay.launch(A0, A1, A2, A3, A4, A5, A6)  # noqa: F821 (names of the globals it runs under)


def _rebind(namespace, change, loaded):
    """Make the call site of `namespace` load `loaded` in place of ``wp.launch``, under
    the same module name, by `change`; returns the globals to run the site under then."""
    if change == "global":
        namespace["launch"] = loaded
    elif change == "dict subclass":  # the very __name__ object, and wp.launch still held

        class Loading(dict):
            def __getitem__(self, key):
                return loaded if key == "launch" else dict.__getitem__(self, key)

        return Loading(namespace)
    elif change == "module attribute":
        namespace["relay"].launch = loaded
    elif change == "module":
        namespace["relay"] = types.ModuleType("other")
        namespace["relay"].launch = loaded
    elif change == "module class":  # its __dict__ still binds wp.launch

        class Relaying(types.ModuleType):
            # Not a property: 3.14's specialised load of a module attribute skips it.
            def __getattribute__(self, name):
                return loaded if name == "launch" else super().__getattribute__(name)

        namespace["relay"].__class__ = Relaying
    return namespace


def _site_under(code, change, arr, **arguments):
    relay = types.ModuleType("relay")
    relay.launch = wp.launch
    namespace = {"__name__": "relayed", "launch": wp.launch, "relay": relay, "A0": add_one}
    namespace.update(A1=8, A2=[arr], A3=[], A4=[], A5=[], A6="cpu", **arguments)
    return namespace, types.FunctionType(code, namespace)


_REBINDINGS = ["global", "dict subclass", "module attribute", "module", "module class"]


@pytest.mark.parametrize("change", _REBINDINGS)
def test_a_clean_site_whose_callable_is_rebound_is_judged_again(arr, change):
    """A site found clean, then loading another callable under the same globals (the same
    module name): the callable is read again at each call, and a call through C code that
    passes no stream is reported."""
    by_global = change in ("global", "dict subclass")
    code = (_launch_by_global_names if by_global else _launch_by_relay_names).__code__

    def calls():
        namespace, site = _site_under(code, change, arr, A7=None)  # stream by position
        site()  # found clean
        site()  # answered from the caller's frame
        # operator.call(wp.launch, add_one, 8, [arr], [], [], [], "cpu"): 7 reach it
        namespace.update(A0=wp.launch, A1=add_one, A2=8, A3=[arr], A6=[], A7="cpu")
        types.FunctionType(code, _rebind(namespace, change, operator.call))()

    exact(
        calls,
        [Call("wp.launch", names(LAUNCH, 8))] * 2
        + [Call("wp.launch", names(LAUNCH, 7), knowable=False)],
    )


@pytest.mark.parametrize("change", _REBINDINGS)
def test_a_breaching_site_whose_callable_is_rebound_is_judged_again(arr, change):
    """The same for a site whose breach is answered from the caller's frame: once it loads
    a partial that passes the stream, its call is not a breach (where the partial can be
    read without running the user's code)."""
    readable = change not in ("dict subclass", "module class")
    by_global = change in ("global", "dict subclass")
    code = _launch_seven_by_global_names if by_global else _launch_seven_by_relay_names
    code = code.__code__

    def calls():
        namespace, site = _site_under(code, change, arr)
        site()  # a breach: no stream
        site()  # judged as the first one was
        site()  # answered from the caller's frame
        passing = functools.partial(wp.launch, stream=None)
        types.FunctionType(code, _rebind(namespace, change, passing))()

    exact(
        calls,
        [Call("wp.launch", names(LAUNCH, 7))] * 3
        + [Call("wp.launch", names(LAUNCH, 7, "stream"), knowable=readable)],
    )


@pytest.mark.parametrize("change", _REBINDINGS)
def test_a_breaching_site_then_loading_a_callable_that_passes_a_stream(arr, change):
    """As above, with a stream that is not None (a stand-in that Warp takes on the CPU):
    also a call whose shape cannot be read back, judged on its bound stream, passes."""
    by_global = change in ("global", "dict subclass")
    code = _launch_seven_by_global_names if by_global else _launch_seven_by_relay_names
    stream = types.SimpleNamespace(device=wp.get_device("cpu"))
    passing = functools.partial(wp.launch, stream=stream)
    namespace, site = _site_under(code.__code__, change, arr)
    with stream_explicit(strict=False) as guard:
        for _ in range(3):
            site()  # a breach, judged, then answered from the caller's frame
        types.FunctionType(code.__code__, _rebind(namespace, change, passing))()
    assert [v.site.lineno for v in guard.violations] == [code.__code__.co_firstlineno + 1] * 3


# --- a call answered at a clean site counts only for the guards that watch it --------------


def _clean_launch(arr):
    wp.launch(add_one, dim=8, inputs=[arr], device="cpu", stream=None)


def test_a_clean_call_counts_only_for_the_guards_that_watch_it(arr):
    # BUG: a call at a remembered clean site was counted for every guard of the thread,
    # so a host-sync guard counted launches that it does not check, once another guard
    # had found the site clean (and only then).
    def counts():
        with no_host_sync(strict=False) as outer, stream_explicit(strict=False) as inner:
            for _ in range(6):
                _clean_launch(arr)
        return outer.calls, inner.calls

    assert counts() == (0, 6)
    with keep_armed():
        with hot_path_guard(strict=False):
            _clean_launch(arr)  # finds the site clean
        assert counts() == (0, 6)
        with no_host_sync(strict=False) as host_sync_only:
            for _ in range(3):
                _clean_launch(arr)
        assert host_sync_only.calls == 0


def test_a_clean_call_beside_another_threads_guard_counts_only_where_watched(arr):
    learnt, done = threading.Event(), threading.Event()

    def other():
        with hot_path_guard(strict=False):
            _clean_launch(arr)  # finds the site clean, and keeps launches armed
            learnt.set()
            done.wait(60)

    thread = threading.Thread(target=other)
    thread.start()
    try:
        assert learnt.wait(60)
        with no_host_sync(strict=False) as host_sync_only:
            for _ in range(5):
                _clean_launch(arr)
    finally:
        done.set()
        thread.join()
    assert host_sync_only.calls == 0


def _stream_only_counts(modules, arr, learnt_before):
    """guard.calls of a stream-only guard narrowed to `modules` over 4 clean launches from
    this module and 2 arrays made (whose memsets are Warp's own), with the sites found
    clean by another guard before it, or first seen by it."""
    with keep_armed():
        if learnt_before:
            with hot_path_guard(strict=False):
                for _ in range(2):
                    _clean_launch(arr)
                    wp.empty(4, dtype=float, device="cpu").zero_()
                    wp.zeros(4, dtype=float, device="cpu")
        with stream_explicit(modules, strict=False) as guard:
            for _ in range(4):
                _clean_launch(arr)
            for _ in range(2):
                wp.zeros(4, dtype=float, device="cpu")
        assert guard.ok, guard.report()
        return guard.calls


@pytest.mark.parametrize("learnt_before", [False, True])
def test_a_guard_counts_only_the_calls_its_modules_cover(arr, learnt_before):
    # BUG: guard.calls counted every watched call its tracer saw, so a stream-only guard
    # (or pytest marker) narrowed to a mistyped module "checked" the launches made outside
    # it, and the memsets Warp makes filling a new array.
    assert _stream_only_counts("no_such_module", arr, learnt_before) == 0
    assert _stream_only_counts(__name__, arr, learnt_before) == 4
    assert _stream_only_counts(None, arr, learnt_before) == 4


@pytest.mark.parametrize("learnt_before", [False, True])
def test_a_memset_warp_makes_is_no_checked_call(arr, learnt_before):
    with keep_armed():
        if learnt_before:
            with hot_path_guard(strict=False):
                for _ in range(2):
                    wp.zeros(4, dtype=float, device="cpu")
        with stream_explicit(strict=False) as guard:
            for _ in range(3):
                wp.zeros(4, dtype=float, device="cpu")
    assert guard.ok and guard.calls == 0


def test_guards_narrowed_to_other_modules_count_apart(arr):
    with keep_armed():
        with (
            stream_explicit("no_such_module", strict=False) as elsewhere,
            stream_explicit(__name__, strict=False) as here,
            hot_path_guard(strict=False) as everything,
        ):
            for _ in range(5):
                _clean_launch(arr)
    assert (elsewhere.calls, here.calls, everything.calls) == (0, 5, 5)


def test_a_tracers_counts_is_asked_once_beside_another_threads_tracer(arr):
    # BUG: the answers of counts were kept with the last tracers' answer, which two
    # threads running tracers replace in turn: counts was asked at almost every call.
    asked, results = [], {}
    start = threading.Barrier(2)

    def counts(op, module):
        asked.append((threading.get_ident(), op, module))
        return True

    def run(name):
        start.wait()
        with Tracer(lambda call: None, every_call=False, counts=counts) as tracer:
            for _ in range(100):
                _clean_launch(arr)
                time.sleep(0)  # let the other thread in
        results[name] = tracer.clean_calls

    with keep_armed():
        with hot_path_guard(strict=False):
            _clean_launch(arr)  # finds the site clean
        threads = [threading.Thread(target=run, args=(name,)) for name in "ab"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert results == {"a": 100, "b": 100}
    assert len(asked) == 2  # once by each tracer


def test_a_clean_site_keeps_no_namespace_alive(arr):
    # BUG: a clean site kept its caller's globals, so a namespace made at run time (and
    # the arrays in it) lived as long as the core stayed armed: the pytest session.
    source = (
        "import warp as wp\n"
        "big = wp.zeros(1 << 16, dtype=float, device='cpu')\n"
        "def launch(a):\n"
        "    wp.launch(add_one, dim=8, inputs=[a], device='cpu', stream=None)\n"
    )
    namespace = {"__name__": "made_at_run_time", "add_one": add_one}
    exec(compile(source, "<made at run time>", "exec"), namespace)
    kept = weakref.ref(namespace["big"])
    with keep_armed():
        with hot_path_guard(strict=False) as guard:
            namespace["launch"](arr)
            namespace["launch"](arr)  # at a clean site
        assert guard.calls == 2
        del namespace
        gc.collect()
        assert kept() is None


def test_a_module_renamed_in_place_counts_its_clean_calls_under_the_new_name(arr):
    namespace = {**vars(gen), "__name__": "first"}
    launch = types.FunctionType(gen.launch_with_stream.__code__, namespace, "launch", (None,))
    with keep_armed():
        with hot_path_guard(strict=False):
            launch(arr)
            launch(arr)  # found clean under "first"
        namespace["__name__"] = "second"
        with stream_explicit("second", strict=False) as second:
            for _ in range(3):
                launch(arr)
        with stream_explicit("first", strict=False) as first:
            for _ in range(3):
                launch(arr)
    assert (first.calls, second.calls) == (0, 3)


def test_a_restarted_tracer_asks_its_counts_again(arr):
    answers = [True]
    tracer = Tracer(lambda call: None, every_call=False, counts=lambda op, module: answers[-1])
    with keep_armed():
        with hot_path_guard(strict=False):
            _clean_launch(arr)  # finds the site clean
        with tracer:
            _clean_launch(arr)
        assert tracer.clean_calls == 1
        answers.append(False)
        tracer.clean_calls = 0
        with tracer:
            _clean_launch(arr)
        assert tracer.clean_calls == 0


@pytest.mark.parametrize("first", ["own", "clone"])
def test_one_code_under_two_modules_globals_counts_for_each_module(arr, first):
    # BUG: a clean site was counted for the module it was first found clean under, so the
    # same code run under another module's globals (FunctionType(code, globals), or one
    # compiled module exec'd in two namespaces) counted for the wrong one.
    namespace = {**vars(gen), "__name__": "other"}
    clone = types.FunctionType(gen.launch_with_stream.__code__, namespace, "clone", (None,))
    own = gen.launch_with_stream
    with keep_armed():
        with hot_path_guard(strict=False):
            (clone if first == "clone" else own)(arr)
            (clone if first == "clone" else own)(arr)  # found clean under the first
        counts = {}
        for modules in ("other", "acme", "nowhere"):
            with stream_explicit(modules, strict=False) as guard:
                for _ in range(3):
                    own(arr)
                    clone(arr)
                    clone(arr)
            counts[modules] = guard.calls
    assert counts == {"other": 6, "acme": 3, "nowhere": 0}


@pytest.mark.parametrize(
    ("answer", "counted", "given"), [(True, 3, 0), (False, 0, 0), (None, 0, 3), ("raise", 0, 3)]
)
def test_a_tracers_counts_says_which_skipped_calls_count(arr, answer, counted, given):
    # True or False: the calls at a clean site are skipped, counted or not; None (cannot
    # tell) or a failure: they go to on_call, judged in full.
    asked, seen = [], []

    def counts(op, module):
        asked.append((op, module))
        if answer == "raise":
            raise KeyError(op)
        return answer

    with keep_armed():
        with hot_path_guard(strict=False):
            _clean_launch(arr)  # finds the site clean
        with Tracer(seen.append, every_call=False, counts=counts) as tracer:
            for _ in range(3):
                _clean_launch(arr)
    assert (tracer.clean_calls, len(seen)) == (counted, given)
    assert asked == [("launch", __name__)]  # once, not per call


def _tape_backward(functions, arrays):
    tape = wp.Tape()
    for function in functions:
        tape.record_func(backward=function, arrays=arrays)
    tape.backward()  # runs them in reverse order, each at one line of Warp's


def _capture_if(functions, arrays):
    condition = wp.ones(1, dtype=wp.int32, device="cpu")
    for function in functions:
        wp.capture_if(condition, on_true=function)  # calls it at one line of Warp's


@pytest.mark.parametrize(
    "run",
    [
        _tape_backward,
        pytest.param(
            _capture_if,
            marks=pytest.mark.skipif(
                not hasattr(wp, "capture_if"), reason="wp.capture_if is newer than this Warp"
            ),
        ),
    ],
    ids=["Tape.backward", "capture_if"],
)
@pytest.mark.parametrize("reuse", ["one guard", "keep_armed"])
def test_a_line_of_warps_calling_the_users_launches_is_judged_per_call(arr, cmd, run, reuse):
    # Warp runs the user's callables at one line of its own: one that passed stream= there
    # says nothing of the next, which may not.
    clean = [
        functools.partial(wp.launch, add_one, 8, inputs=[arr], stream=None),
        functools.partial(cmd.launch, stream=None),
    ]
    breaches = [functools.partial(wp.launch, add_one, 8, inputs=[arr]), cmd.launch]
    order = [clean[0], breaches[0], clean[1], breaches[1]]  # each breach right after its twin
    if run is _tape_backward:
        order.reverse()
    with keep_armed() if reuse == "keep_armed" else _nothing():
        if reuse == "keep_armed":
            with stream_explicit(strict=False):
                run(clean, [])  # its sites found clean in an earlier guard
        with stream_explicit(strict=False) as guard:
            run(order, [])
    assert [v.api for v in guard.violations] == [
        "wp.launch without stream=",
        "wp.Launch.launch without stream=",
    ]
    assert guard.calls == 4


def test_warps_own_clean_site_run_under_main_is_judged_as_the_users(arr):
    # BUG: a call site in Warp's code found clean (the memset wp.zeros makes, the
    # ScopedStream and __array_interface__ read of array.numpy) was answered clean for the
    # same code run under other globals named __main__, which is the user's program.
    def as_main(fn):  # the function's code under a copy of its module's globals
        namespace = {**sys.modules[fn.__module__].__dict__, "__name__": "__main__"}
        twin = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__)
        twin.__kwdefaults__ = fn.__kwdefaults__
        return twin

    zeros_main = as_main(wp.zeros)
    numpy_main = as_main(wp.array.numpy)

    def record(guard, calls):
        with guard as g:
            for call in calls:
                call()
        return sorted((v.category, v.api, v.site.module, v.site.function) for v in g.violations)

    def zeros():
        wp.zeros(4, dtype=float, device="cpu")

    def zeros_as_main():
        zeros_main(4, dtype=float, device="cpu")

    def numpy():
        arr.numpy()

    def numpy_as_main():
        numpy_main(arr)

    for make, calls in [
        (lambda: stream_explicit(strict=False), [zeros, zeros_as_main]),
        (lambda: hot_path_guard(strict=False), [numpy, numpy_as_main]),
        (lambda: no_host_sync(strict=False), [numpy, numpy_as_main]),
    ]:
        fresh = [v for call in calls for v in record(make(), [call])]
        assert record(make(), calls) == sorted(fresh)
        assert any(module == "__main__" for _, _, module, _ in fresh)  # Warp's code, as __main__


_SHADOWED_CELL_PROGRAM = """
import json, sys
import warp as wp
wp.config.quiet = True
from acme.kernels import add_one
from trackgen_contract import stream_explicit

a = wp.zeros(4, dtype=float, device="cpu")
cmd = wp.launch(add_one, dim=4, inputs=[a], device="cpu", record_cmd=True)

def receiver_rebound():
    c = 1
    shared = lambda: c
    return [c.launch(stream=None) for c in [cmd]]

def options_rebound():
    kw = 1
    shared = lambda: kw
    return [wp.launch(add_one, dim=4, inputs=[a], device="cpu", **kw) for kw in [{"stream": None}]]

def comprehension_cell():  # the comprehension's own variable is shared: a cell of its own
    return [(c.launch(stream=None), lambda: c) for c in [cmd]]

found = {}
for shape in (receiver_rebound, options_rebound, comprehension_cell):
    with stream_explicit(strict=False) as guard:
        for _ in range(3):
            shape()
    found[shape.__name__] = [len(guard.violations), guard.calls]
print(json.dumps(found))
"""


def test_a_cell_that_a_comprehension_rebinds_never_crashes_the_program():
    """BUG: on CPython 3.13.0-3.13.2, reading through ``frame.f_locals`` a variable that an
    inlined comprehension rebinds while a nested function shares it crashed the process
    (python/cpython#128396): the guard read the receiver, or the ``**`` dict, there. It is
    not read there on those versions (the documented fallback: an explicit
    ``stream=None`` then reads as missing); everywhere else it is read exactly."""
    done = subprocess.run(
        [sys.executable, "-c", _SHADOWED_CELL_PROGRAM],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).parent,  # where `acme` is
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    fallback = 3 if (3, 13) <= sys.version_info < (3, 13, 3) else 0
    assert found == {
        "receiver_rebound": [fallback, 3],
        "options_rebound": [fallback, 3],
        "comprehension_cell": [0, 3],
    }


@pytest.mark.skipif(sys.version_info < (3, 12), reason="comprehensions are inlined from 3.12")
def test_which_names_a_comprehension_rebinds_over_a_cell():
    def rebinds_a_cell():
        c = 1
        shared = lambda: c  # noqa: E731
        return [c for c in range(2)], shared

    def rebinds_a_plain_local():
        c = 1
        return [c for c in range(2)], c

    def celled_by_the_comprehension():
        return [lambda: c for c in range(2)]  # noqa: B023

    assert readback._cells_rebound(rebinds_a_cell.__code__) == {"c"}
    assert readback._cells_rebound(rebinds_a_plain_local.__code__) == set()
    assert readback._cells_rebound(celled_by_the_comprehension.__code__) == set()


class _Namespace(dict):
    pass


_CLASS_BODY_RECEIVERS: list = []


class _Preparing(type):
    @classmethod
    def __prepare__(mcs, name, bases):
        return _Namespace()


class _Comparing(type):
    compared: list = []

    def __eq__(cls, other):
        _Comparing.compared.append(other)
        return False

    __hash__ = type.__hash__


class _UserKey(metaclass=_Comparing):
    pass


def test_items_at_keys_python_finds_them_at_are_read_exactly():
    """BUG (3.13+): a recorded launch reached through an item at
    a key of another type than the stored one (`cmds[True]`, `graphs[True]` for a stored
    1, `graphs[2]` for a stored 2.0) or through an `OrderedDict` or a `defaultdict` fell
    back, and an explicit ``stream=None`` read as missing. And telling a key's type ran
    the ``__eq__`` of a metaclass of the user's. A name read from a dict-subclass
    namespace still falls back (README, Known limits)."""
    array = wp.zeros(4, dtype=float, device="cpu")  # kept: older Warp's Launch holds no reference
    cmd = wp.launch(add_one, dim=4, inputs=[array], device="cpu", record_cmd=True)
    cmds, graphs, floats = [cmd, cmd], {1: cmd}, {2.0: cmd}
    by_name = collections.defaultdict(lambda: cmd, forward=cmd)
    ordered = collections.OrderedDict(forward=cmd)
    user_keyed = {_UserKey(): None, "forward": cmd}
    key, two, name = True, 2, "forward"

    def bool_index():
        cmds[key].launch(stream=None)

    def bool_key():
        graphs[key].launch(stream=None)

    def int_for_a_float():
        floats[two].launch(stream=None)

    def defaultdict_item():
        by_name[name].launch(stream=None)

    def ordered_item():
        ordered[name].launch(stream=None)

    def past_a_key_of_the_users():
        user_keyed[name].launch(stream=None)

    def class_body():  # the receiver a global, looked for in the namespace first
        class Body(metaclass=_Preparing):
            _CLASS_BODY_RECEIVERS[0].launch(stream=None)

    _CLASS_BODY_RECEIVERS[:] = [cmd]
    shapes = (bool_index, bool_key, int_for_a_float, defaultdict_item, ordered_item,
              past_a_key_of_the_users, class_body)  # fmt: skip
    for shape in shapes:
        with stream_explicit(strict=False) as guard:
            for _ in range(3):
                shape()
        assert guard.calls == 3
        falls_back = shape is class_body and sys.version_info >= (3, 13)
        assert len(guard.violations) == (3 if falls_back else 0), shape.__name__
    assert _Comparing.compared == []


class _ComparedAttributeReader:
    """A class's ``__getattribute__`` that is an object of the user's: comparing it with
    Python's own (``in`` a tuple of them) would run its ``__eq__``, which exits here."""

    def __init__(self, cmd):
        self.cmd = cmd

    def __call__(self, name):  # no __get__: Python calls it with the name alone
        return self.cmd.launch

    def __eq__(self, other):
        counts["__getattribute__ __eq__"] += 1
        raise SystemExit(7)

    __hash__ = object.__hash__


def test_a_receivers_own_attribute_reader_is_never_compared():
    """BUG: telling whether a receiver's class reads its attributes the generic way
    compared its ``__getattribute__`` with Python's by ``==``: the ``__eq__`` of one of
    the user's ran at every call judged, and its SystemExit ended the guarded call."""
    array = wp.zeros(4, dtype=float, device="cpu")  # kept: older Warp's Launch holds no reference
    cmd = wp.launch(add_one, dim=4, inputs=[array], device="cpu", record_cmd=True)

    class Reader:
        pass

    Reader.__getattribute__ = _ComparedAttributeReader(cmd)
    receiver = Reader()
    counts.clear()
    with stream_explicit(strict=False) as guard:
        for _ in range(3):
            receiver.launch(stream=None)
    assert counts["__getattribute__ __eq__"] == 0
    assert guard.calls == 3
    assert_nothing_left()


class _LoudText(_Name):
    """A name of the user's class: each of its own methods counts its runs (its hash and
    equality as `_Name`'s)."""

    def __ne__(self, other):
        counts["str subclass __ne__"] += 1
        return str.__ne__(self, other)

    def startswith(self, *args):
        counts["str subclass startswith"] += 1
        return str.startswith(self, *args)

    def split(self, *args):
        counts["str subclass split"] += 1
        return str.split(self, *args)


def test_names_of_a_str_subclass_of_the_users_are_read_as_plain_text(tmp_path):
    """BUG: code compiled with a file name of a str subclass (which CPython keeps as its
    co_filename, and ``code.replace`` its qualified name), and a Warp function run under
    globals whose ``__name__`` is one, had that class's methods run by the guard at every
    breach (telling Warp's code from the user's, reading the line, naming the function)."""
    source = tmp_path / "loud.py"
    source.write_text("def breach(a):\n    a.numpy()\n    wp.launch(add_one, dim=4, inputs=[a])\n")
    code = compile(source.read_text(), _LoudText(str(source)), "exec")
    namespace = {"wp": wp, "add_one": add_one, "__name__": _LoudText("loud")}
    exec(code, namespace)
    breach = namespace["breach"]
    breach.__code__ = breach.__code__.replace(co_qualname=_LoudText("breach"))
    warp_globals = dict(vars(sys.modules[wp.zeros.__module__]))
    warp_globals["__name__"] = _LoudText(wp.zeros.__module__)
    zeros = types.FunctionType(
        wp.zeros.__code__, warp_globals, "zeros", wp.zeros.__defaults__, wp.zeros.__closure__
    )
    zeros.__kwdefaults__ = wp.zeros.__kwdefaults__
    array = wp.zeros(4, dtype=float, device="cpu")

    def calls():
        for _ in range(2):
            breach(array)
            zeros(4, dtype=float, device="cpu")

    calls()  # a coverage tool measuring the tests looks each new file name up once
    counts.clear()
    calls()  # what runs unguarded
    unguarded = counts.copy()
    counts.clear()
    with hot_path_guard(strict=False) as guard:
        calls()
    if BACKEND == "sys.setprofile" and not COMPILED:
        # The profile function's own first test, in Python, hashes the name of each
        # function called (README, Known limits): once a call of `breach`.
        counts["str subclass __hash__"] -= 2
    assert +counts == +unguarded, counts
    found = {
        (v.category, v.api, v.site.module, v.site.function, v.site.filename)
        for v in guard.violations
    }
    assert found == {
        ("host_sync", "wp.array.numpy()", "loud", "breach", str(source)),
        ("stream", "wp.launch without stream=", "loud", "breach", str(source)),
        (
            "allocation",
            "wp.zeros()",
            __name__,
            "test_names_of_a_str_subclass_of_the_users_are_read_as_plain_text.<locals>.calls",
            __file__,
        ),
    }
    assert all(type(v.site.module) is str for v in guard.violations)
    assert_nothing_left()
