"""The guard API (SPEC section 3): results, options, sanctions, nesting, threads, tasks."""

import asyncio
import collections
import contextvars
import gc
import os
import sys
import threading
import weakref

import pytest
import warp as wp
from acme import gen
from acme.kernels import add_one
from helpers import assert_nothing_left

from trackgen_contract import (
    CATEGORIES,
    HotPathGuard,
    HotPathViolation,
    hot_path_guard,
    no_allocation,
    no_host_sync,
    sanction,
    stream_explicit,
)
from trackgen_contract.tracer import COMPILED


def test_categories_in_report_order():
    assert CATEGORIES == ("host_sync", "allocation", "stream", "capture")


@pytest.mark.parametrize(
    ("make", "checks"),
    [
        (hot_path_guard, set(CATEGORIES)),
        (no_host_sync, {"host_sync"}),
        (no_allocation, {"allocation"}),
        (stream_explicit, {"stream"}),
        (lambda: hot_path_guard(capture=False, stream=False), {"host_sync", "allocation"}),
    ],
)
def test_guard_functions_choose_their_checks(make, checks):
    assert make().checks == checks


def test_each_guard_sees_only_its_categories(arr):
    def breach_all():
        gen.read_back(arr)
        gen.allocate(2)
        gen.launch_without_stream(arr)

    for make, category in [
        (no_host_sync, "host_sync"),
        (no_allocation, "allocation"),
        (stream_explicit, "stream"),
    ]:
        with make(strict=False) as guard:
            breach_all()
        assert {v.category for v in guard.violations} == {category}


def test_stream_explicit_takes_modules_positionally(arr):
    with stream_explicit(("elsewhere",), strict=False) as guard:
        gen.launch_without_stream(arr)
    assert guard.ok
    assert guard.modules == ("elsewhere",)


def test_results_of_a_breaching_block(arr):
    with hot_path_guard(strict=False) as guard:
        gen.launch_without_stream(arr)
        gen.read_back(arr)
        gen.allocate(2)
        gen.read_back(arr)
    assert not guard.ok
    assert [v.category for v in guard.of("host_sync")] == ["host_sync", "host_sync"]
    assert [v.api for v in guard.of("allocation")] == ["wp.zeros()"]
    assert guard.of("capture") == []
    assert len(guard.allocated()) == 1
    lines = guard.report().splitlines()
    assert lines[0].startswith("host sync (2). ")
    assert lines[1].startswith("  wp.array.numpy() from read_back (")
    assert lines[3].startswith("allocation (1). ")
    assert lines[5].startswith("stream (1). ")
    assert len(lines) == 7
    with pytest.raises(HotPathViolation) as info:
        guard.raise_for_violations()
    assert str(info.value) == guard.report()


def test_clean_block():
    with hot_path_guard() as guard:
        pass
    assert guard.ok
    assert guard.report() == "no hot-path contract breach"
    guard.raise_for_violations()  # nothing to raise


def test_of_rejects_an_unknown_category():
    with pytest.raises(ValueError, match="unknown category 'hostsync'"):
        hot_path_guard().of("hostsync")


def test_repr_shows_state():
    guard = hot_path_guard(strict=False, modules="acme")
    assert "idle" in repr(guard)
    with guard:
        assert "active" in repr(guard)
        assert "modules=('acme',)" in repr(guard)


def test_reentry_resets_the_record(arr):
    guard = hot_path_guard(strict=False)
    with guard:
        gen.read_back(arr)
    assert len(guard.violations) == 1
    with guard:
        pass
    assert guard.ok


def test_entering_an_active_guard_is_an_error():
    guard = hot_path_guard()
    with guard, pytest.raises(RuntimeError, match="already active"):
        guard.__enter__()
    assert_nothing_left()


def test_the_context_manager_yields_the_guard():
    guard = HotPathGuard()
    with guard as inside:
        assert inside is guard
        assert guard.active
    assert not guard.active


# --- allow ---------------------------------------------------------------------------------


def test_allow_lets_a_known_readback_through(arr):
    key = ("wp.array.numpy", "acme.gen", "read_back")
    with no_host_sync(allow=[key]) as guard:
        gen.read_back(arr)
    assert guard.ok
    assert guard.allowed == [key]


def test_allow_is_exact(arr):
    with no_host_sync(allow=[("wp.array.numpy", "acme.gen", "other")], strict=False) as guard:
        gen.read_back(arr)
    assert [v.key for v in guard.violations] == [("wp.array.numpy", "acme.gen", "read_back")]
    assert guard.allowed == []


def test_allow_accepts_the_api_with_parentheses(arr):
    with no_host_sync(allow=[("wp.array.numpy()", "acme.gen", "read_back")]) as guard:
        gen.read_back(arr)
    assert guard.allowed == [("wp.array.numpy", "acme.gen", "read_back")]


@pytest.mark.parametrize(
    ("allow", "error", "match"),
    [
        (("wp.array.numpy", "acme.gen", "read_back"), TypeError, "single key"),
        ([("wp.array.numpy", "acme.gen")], TypeError, "malformed key"),
        (["wp.array.numpy"], TypeError, "malformed key"),
        ([("wp.zeros", "acme.gen", "f")], ValueError, "not a host sync or readback API"),
        ([("wp.array.nump", "acme.gen", "f")], ValueError, "'wp.array.nump'"),
        (42, TypeError, "allow takes"),
        (
            "wp.array.numpy:acme.gen:f",
            TypeError,
            r"got the string .* here \[\('wp.array.numpy', 'acme.gen', 'f'\)\]",
        ),
        ("abc", TypeError, "got the string 'abc'$"),
    ],
)
def test_malformed_allow_is_a_clear_error(allow, error, match):
    with pytest.raises(error, match=match):
        hot_path_guard(allow=allow)


class _Noisy(str):
    """A str subclass whose own methods record that they ran (and would raise)."""

    ran: list = []

    def __eq__(self, other):
        _Noisy.ran.append("__eq__")
        return str.__eq__(self, other)

    def __add__(self, other):
        _Noisy.ran.append("__add__")
        return str.__add__(self, other)

    __hash__ = str.__hash__


def test_str_subclasses_given_as_names_run_none_of_their_code_while_calls_are_judged(arr):
    """BUG: `allow=` keys and `modules=` names of a str subclass were kept as given, and
    their __eq__ and __add__ ran at every call judged; a ``**`` key of one, as Warp's
    launch_tiled passes it on to launch, had its __eq__ run reading the bound stream.
    (Python and Warp run that key's __eq__ themselves, as many times unguarded.)"""
    allow = [(_Noisy("wp.array.numpy"), _Noisy("acme.gen"), _Noisy("read_back"))]
    options = {_Noisy("stream"): None}

    def calls():
        gen.read_back(arr)
        gen.launch_without_stream(arr)
        wp.launch_tiled(gen.add_one, dim=[4], inputs=[arr], device="cpu", block_dim=1, **options)

    calls()
    _Noisy.ran = []
    calls()
    unguarded, _Noisy.ran = _Noisy.ran, []
    with hot_path_guard(strict=False, allow=allow, modules=(_Noisy("acme"), "test_guard")) as guard:
        calls()
    assert _Noisy.ran == unguarded
    assert guard.allowed == [("wp.array.numpy", "acme.gen", "read_back")]
    assert [v.api for v in guard.violations] == [
        "wp.launch without stream=",
        "wp.launch_tiled without stream=",
    ]


# --- other arguments -----------------------------------------------------------------------


@pytest.mark.parametrize("modules", [42, [1], ("",), ("acme gen",), ["acme", None]])
def test_bad_modules_is_a_clear_error(modules):
    with pytest.raises(TypeError, match="modules must be None"):
        hot_path_guard(modules=modules)


def test_a_readback_warp_makes_for_the_users_line_spells_its_allow_key(arr):
    # Its key names Warp's own caller (print reads the array in array.__str__), which the
    # site, the user's line, does not show: the report and a strict refusal spell it.
    def show():
        print(arr)

    with hot_path_guard(strict=False) as guard:
        show()
        arr.numpy()  # the user's own call: its key is the site's, nothing to spell
    made_inside, own = guard.violations
    assert made_inside.key[1].startswith("warp") and own.key[1] == "test_guard"
    hint = f"to let it through: allow=[{tuple(made_inside.key)!r}] (the call is made inside Warp"
    assert guard.report().count("to let it through") == 1 and hint in guard.report()
    with pytest.raises(HotPathViolation) as refused:
        with hot_path_guard():
            show()
    assert f"To let it through: allow=[{tuple(made_inside.key)!r}]" in str(refused.value)
    with hot_path_guard(allow=[made_inside.key]) as guard:
        show()
    assert guard.ok and guard.allowed == [made_inside.key]


def test_modules_spelled_as_on_the_command_line_gets_the_sequence_it_means():
    message = r"got 'acme, acme_tracks'; for several, give a sequence: \('acme', 'acme_tracks'\)"
    with pytest.raises(TypeError, match=message):
        hot_path_guard(modules="acme, acme_tracks")
    with pytest.raises(TypeError, match=r"got 'acme, '$"):  # no sequence of one to suggest
        hot_path_guard(modules="acme, ")


def test_a_sanction_site_written_without_its_kind_says_the_kind_comes_first():
    with pytest.raises(TypeError, match=r'the kind comes first: @sanction.site\("host-poll"\)'):

        @sanction.site
        def poll():
            pass

    with pytest.raises(TypeError, match=r"a sanction kind must be a non-empty string, got ''$"):
        sanction.site("")


def test_empty_modules_is_a_clear_error():
    with pytest.raises(ValueError, match="modules is empty"):
        stream_explicit(())


@pytest.mark.parametrize("option", ["host_sync", "allocation", "stream", "capture", "strict"])
def test_switches_must_be_bools(option):
    with pytest.raises(TypeError, match=rf"HotPathGuard\({option}=...\) must be True or False"):
        hot_path_guard(**{option: "yes"})


def test_unknown_keyword_is_an_error():
    with pytest.raises(TypeError):
        hot_path_guard(module="acme")


# --- sanctioned host operations ------------------------------------------------------------


@pytest.fixture
def flag():
    return wp.array([1], dtype=int, device="cpu")


def test_sanctioned_poll_inside_its_scope(flag):
    with hot_path_guard() as guard, sanction.scope("host-poll"):
        assert gen.poll(flag) == 1
    assert guard.ok
    assert guard.sanctioned == [("wp.array.numpy", "acme.gen", "poll")]


def test_sanctioned_site_outside_its_scope_is_a_violation(flag):
    with hot_path_guard(strict=False) as guard:
        gen.poll(flag)
    assert [v.key for v in guard.violations] == [("wp.array.numpy", "acme.gen", "poll")]
    assert guard.sanctioned == []


def test_scope_sanctions_only_marked_sites(flag):
    with hot_path_guard(strict=False) as guard, sanction.scope("host-poll"):
        gen.unsanctioned_poll(flag)
    assert len(guard.violations) == 1


def test_scope_of_another_kind_sanctions_nothing(flag):
    with hot_path_guard(strict=False) as guard, sanction.scope("host-stage"):
        gen.poll(flag)
    assert len(guard.violations) == 1


def test_scope_ends_with_its_block(flag):
    with hot_path_guard(strict=False) as guard:
        with sanction.scope("host-poll"):
            gen.poll(flag)
        gen.poll(flag)
    assert len(guard.sanctioned) == 1
    assert len(guard.violations) == 1


def test_sanction_returns_the_function_unchanged():
    def poll():
        return 7

    assert sanction.site("x")(poll) is poll


def test_sanction_site_needs_a_function():
    with pytest.raises(TypeError, match=r"sanction.site\('x'\) expects a function"):
        sanction.site("x")(42)


@pytest.mark.parametrize("kind", ["", None, 3])
def test_sanction_kind_must_be_a_string(kind):
    with pytest.raises(TypeError, match="non-empty string"):
        sanction.site(kind)
    with pytest.raises(TypeError, match="non-empty string"), sanction.scope(kind):
        pass


# --- one call of the program, one violation -------------------------------------------------


def _grad_arrays(n):
    for _ in range(n):
        wp.zeros(8, dtype=float, device="cpu", requires_grad=True)  # the array, its gradient


def test_one_call_that_warp_serves_with_two_allocations_is_one_violation():
    with no_allocation(strict=False) as guard:
        _grad_arrays(3)  # each call a new one: three violations, not one and not six
        grads = wp.zeros(8, dtype=float, device="cpu", requires_grad=True)
        wp.clone(grads)  # its copy and its gradient's
        # Calls one after the other: only the last one's frame is held, none piles up.
        assert [len(frames) for frames in guard._once._held.values()] == [1]
    lines = [(v.api, v.site.lineno) for v in guard.violations]
    line = _grad_arrays.__code__.co_firstlineno + 2
    assert lines == [("wp.zeros()", line)] * 3 + [
        ("wp.zeros()", lines[3][1]),
        ("wp.clone()", lines[3][1] + 1),
    ]
    assert guard._once._held == {}  # the frames it told the calls apart by: let go


def test_a_utility_making_several_breaches_of_one_kind_is_one_per_call():
    import warp.sparse as sparse

    rows, columns = wp.array([0, 1], dtype=int), wp.array([1, 0], dtype=int)
    matrix = sparse.bsr_zeros(2, 2, block_type=float)
    sparse.bsr_set_from_triplets(matrix, rows, columns, wp.array([1.0, 2.0], dtype=float))
    with hot_path_guard(strict=False) as guard:
        for _ in range(2):
            sparse.bsr_transposed(matrix)  # several allocations (and launches), each time
    rows = collections.Counter((v.category, v.api) for v in guard.violations)
    assert rows[("allocation", "wp.sparse.bsr_transposed()")] == 2
    assert set(rows.values()) == {2}  # each row once per call, whatever this Warp makes


@wp.kernel
def _double(a: wp.array(dtype=float), b: wp.array(dtype=float)):
    i = wp.tid()
    b[i] = 2.0 * a[i]


def test_a_program_call_nested_in_another_leaves_the_outer_one_the_same_call():
    """`Tape.backward` runs the program's own backward function between its adjoint
    launches, and that function calls a Warp utility: the utility's call is one, counted
    apart, and the adjoint launches after it are still the one backward call's."""
    import warp.sparse as sparse

    rows, columns = wp.array([0, 1], dtype=int), wp.array([1, 0], dtype=int)
    matrix = sparse.bsr_zeros(2, 2, block_type=float)
    sparse.bsr_set_from_triplets(matrix, rows, columns, wp.array([1.0, 2.0], dtype=float))
    a, b, c = (wp.ones(8, dtype=float, requires_grad=True) for _ in range(3))
    seed = wp.ones(8, dtype=float)
    tape = wp.Tape()
    with tape:
        wp.launch(_double, 8, inputs=[a], outputs=[b], stream=None)
        tape.record_func(backward=lambda: sparse.bsr_transposed(matrix), arrays=[b])
        wp.launch(_double, 8, inputs=[b], outputs=[c], stream=None)
    with hot_path_guard(strict=False) as guard:
        for _ in range(2):
            tape.backward(grads={c: seed})  # two adjoint launches without stream=, each time
            tape.zero()
    found = collections.Counter((v.category, v.api, v.site.source_line()) for v in guard.violations)
    backward = {row: n for row, n in found.items() if row[2].startswith("tape.backward(")}
    assert backward == {("stream", "wp.launch without stream=", next(iter(backward))[2]): 2}
    utility = {row: n for row, n in found.items() if "bsr_transposed" in row[2]}
    assert utility and set(utility.values()) == {2}  # each row once per utility call
    assert guard._once._held == {}


# --- the debug sync switch -----------------------------------------------------------------


def test_debug_sync_env_is_off_inside_a_host_sync_guard(monkeypatch):
    monkeypatch.setenv("TRACKGEN_DEBUG_SYNC", "1")
    with no_host_sync():
        assert "TRACKGEN_DEBUG_SYNC" not in os.environ
        with no_host_sync():
            assert "TRACKGEN_DEBUG_SYNC" not in os.environ
        assert "TRACKGEN_DEBUG_SYNC" not in os.environ
    assert os.environ["TRACKGEN_DEBUG_SYNC"] == "1"


def test_debug_sync_env_is_restored_after_an_error(monkeypatch):
    monkeypatch.setenv("TRACKGEN_DEBUG_SYNC", "on")
    with pytest.raises(ZeroDivisionError), no_host_sync():
        1 / 0  # noqa: B018
    assert os.environ["TRACKGEN_DEBUG_SYNC"] == "on"


def test_debug_sync_env_untouched_without_the_host_sync_check(monkeypatch):
    monkeypatch.setenv("TRACKGEN_DEBUG_SYNC", "1")
    with no_allocation():
        assert os.environ["TRACKGEN_DEBUG_SYNC"] == "1"


def test_debug_sync_env_stays_unset_when_it_was(monkeypatch):
    monkeypatch.delenv("TRACKGEN_DEBUG_SYNC", raising=False)
    with no_host_sync():
        pass
    assert "TRACKGEN_DEBUG_SYNC" not in os.environ


def test_debug_sync_env_keeps_a_value_that_is_not_ascii(monkeypatch):
    monkeypatch.setenv("TRACKGEN_DEBUG_SYNC", "sür\udcff")  # an undecodable byte, escaped
    with no_host_sync():
        assert "TRACKGEN_DEBUG_SYNC" not in os.environ
    assert os.environ["TRACKGEN_DEBUG_SYNC"] == "sür\udcff"


def test_debug_sync_env_in_an_environ_the_program_replaced(monkeypatch):
    # Some programs swap os.environ for a plain dict: it is read and changed as a dict.
    replaced = {"TRACKGEN_DEBUG_SYNC": "1", "HOME": "/nowhere"}
    monkeypatch.setattr(os, "environ", replaced)
    with no_host_sync():
        assert replaced == {"HOME": "/nowhere"}
    assert replaced == {"TRACKGEN_DEBUG_SYNC": "1", "HOME": "/nowhere"}


# --- nesting, threads, tasks ---------------------------------------------------------------


def test_nested_guards_apply_their_own_checks(arr):
    with no_allocation(strict=False) as outer:
        with no_host_sync(strict=False) as inner:
            gen.read_back(arr)
            gen.allocate(2)
        gen.read_back(arr)
    assert [v.api for v in inner.violations] == ["wp.array.numpy()"]
    assert [v.api for v in outer.violations] == ["wp.zeros()"]
    assert_nothing_left()


def test_strict_inner_guard_inside_a_recording_outer_one(arr):
    with hot_path_guard(strict=False) as outer:
        with pytest.raises(HotPathViolation), hot_path_guard():
            gen.read_back(arr)
        gen.launch_without_stream(arr)
    assert [v.category for v in outer.violations] == ["host_sync", "stream"]
    assert_nothing_left()


def test_a_thread_started_inside_a_guard_is_not_guarded(arr):
    done = []

    def work():
        gen.read_back(arr)
        done.append(True)

    with hot_path_guard() as guard:
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    assert done == [True]
    assert guard.ok


def test_guards_in_two_threads_keep_their_own_records(arr):
    barrier = threading.Barrier(2)
    results = {}

    def run(name, fn):
        with hot_path_guard(strict=False) as guard:
            barrier.wait()
            for _ in range(20):
                fn(arr)
            barrier.wait()
        results[name] = guard.violations

    threads = [
        threading.Thread(target=run, args=("reader", gen.read_back)),
        threading.Thread(target=run, args=("launcher", gen.launch_without_stream)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {v.site.function for v in results["reader"]} == {"read_back"}
    assert {v.site.function for v in results["launcher"]} == {"launch_without_stream"}
    assert len(results["reader"]) == len(results["launcher"]) == 20
    assert_nothing_left()


def test_guards_in_two_asyncio_tasks_keep_their_own_records(arr):
    async def task(fn, other_started, started):
        with hot_path_guard(strict=False) as guard:
            started.set()
            await other_started.wait()
            for _ in range(5):
                fn(arr)
                await asyncio.sleep(0)
        return guard.violations

    async def main():
        a, b = asyncio.Event(), asyncio.Event()
        return await asyncio.gather(
            task(gen.read_back, b, a), task(gen.launch_without_stream, a, b)
        )

    reads, launches = asyncio.run(main())
    assert [v.site.function for v in reads] == ["read_back"] * 5
    assert [v.site.function for v in launches] == ["launch_without_stream"] * 5
    assert_nothing_left()


def test_a_task_created_before_the_guard_is_not_seen(arr):
    async def main():
        go = asyncio.Event()

        async def unguarded():
            await go.wait()
            gen.read_back(arr)

        other = asyncio.create_task(unguarded())  # copies the context: no guard in it
        with hot_path_guard() as guard:
            go.set()
            await other
        return guard

    assert asyncio.run(main()).ok


def test_a_guard_belongs_to_its_context_a_copy_of_it_too(arr):
    # README, Known limits: code run in a fresh contextvars.Context is not the guard's.
    async def fresh_context_task():
        gen.launch_without_stream(arr)

    async def main():
        fresh = contextvars.Context()
        await asyncio.get_running_loop().create_task(fresh_context_task(), context=fresh)

    with stream_explicit(strict=False) as guard:
        contextvars.Context().run(gen.launch_without_stream, arr)
        asyncio.run(main())
        contextvars.copy_context().run(gen.launch_without_stream, arr)
    assert guard.calls == 1 and len(guard.violations) == 1
    assert_nothing_left()


def test_a_local_read_back_lives_until_the_return_only_where_the_readme_says(arr):
    # README, Known limits: on 3.11 (and 3.12 at a site's first judged call, or with the
    # Python filter alone) reading a local back fills the frame's locals dict.
    def launch_then_delete():
        options = {"stream": None}
        made = wp.zeros(4, dtype=float, device="cpu")
        wp.launch(add_one, dim=4, inputs=[made], device="cpu", **options)
        alive = weakref.ref(made)
        del made
        return alive() is not None

    assert not launch_then_delete()
    with stream_explicit(strict=False) as guard:
        kept = [launch_then_delete() for _ in range(3)]
    assert guard.calls == 3 and guard.ok
    if sys.version_info >= (3, 13):
        assert kept == [False] * 3
    elif sys.version_info < (3, 12) or not COMPILED:
        assert kept == [True] * 3
    else:
        assert kept == [True, False, False]


class _Replayer:
    def __init__(self, command, stream):
        self.command, self.stream = command, stream

    def replay(self, arr):
        self.command.launch(stream=self.stream)
        wp.launch(add_one, dim=8, inputs=[arr], device="cpu", stream=self.stream)
        gen.read_back(arr)


def _dict_made(obj):
    # CPython keeps an instance's attributes inline until its __dict__ is asked for. Once
    # it has made the dict, every attribute read and write of the object takes a slower
    # path for the rest of its life (Warp's Launch.launch, ~10% slower on 3.11 and 3.12).
    # The GC then lists the dict among the object's referents.
    return any(type(referent) is dict for referent in gc.get_referents(obj))


@pytest.mark.skipif(
    sys.version_info[:2] == (3, 13), reason="3.13's GC lists the inline values, dict made or not"
)
def test_judging_calls_leaves_the_users_objects_attributes_inline(arr):
    command = wp.launch(add_one, dim=8, inputs=[arr], device="cpu", record_cmd=True)
    replayer = _Replayer(command, None)
    objects = (command, replayer)  # (Warp's arrays make their own)
    assert not any(map(_dict_made, objects))
    with hot_path_guard(strict=False) as guard:
        for _ in range(3):  # the first call at a site judged in full, the later ones not
            replayer.replay(arr)
            command.launch(stream=replayer.stream)
    assert len(guard.violations) == 3  # the read-backs
    assert [obj for obj in objects if _dict_made(obj)] == []


# --- comprehensions: named as Python 3.12+ runs them, inside their function ----------------


def _read_in_comprehensions(arr):
    listed = [arr.numpy() for _ in range(1)]
    keyed = {k: arr.numpy() for k in range(1)}
    nested = [{arr.numpy().size for _ in range(1)} for _ in range(1)]
    called = [(lambda: arr.numpy())() for _ in range(1)]  # a function of its own
    return listed, keyed, nested, called


@sanction.site("host-poll")
def _sanctioned_comprehension(arr):
    return [arr.numpy() for _ in range(2)] + [(lambda: arr.numpy())() for _ in range(1)]


LAMBDA = "_read_in_comprehensions.<locals>.<lambda>"


def test_a_breach_in_a_comprehension_is_its_functions_on_every_python(arr):
    # 3.11 runs each comprehension in a function of its own (<listcomp>, <dictcomp>,
    # <setcomp>); reports, allow keys and baselines name the function holding it.
    with no_host_sync(strict=False) as guard:
        _read_in_comprehensions(arr)
    functions = [v.site.function for v in guard.violations]
    assert functions == ["_read_in_comprehensions"] * 3 + [LAMBDA]


def test_allowing_a_function_allows_its_comprehensions(arr):
    key = ("wp.array.numpy", __name__, "_read_in_comprehensions")
    with no_host_sync(allow=[key], strict=False) as guard:
        _read_in_comprehensions(arr)
    assert guard.allowed == [key] * 3
    assert [v.site.function for v in guard.violations] == [LAMBDA]


def test_a_sanctioned_function_sanctions_its_comprehensions_not_its_lambdas(arr):
    with no_host_sync(strict=False) as guard, sanction.scope("host-poll"):
        _sanctioned_comprehension(arr)
    assert guard.sanctioned == [("wp.array.numpy", __name__, "_sanctioned_comprehension")] * 2
    lambda_name = "_sanctioned_comprehension.<locals>.<lambda>"
    assert [v.site.function for v in guard.violations] == [lambda_name]
