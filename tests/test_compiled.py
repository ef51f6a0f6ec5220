"""The compiled first filters against the Python ones they stand in front of.

On 3.12+ the ``sys.monitoring`` core registers a `CleanFilter` (``tracer/_fastclean.c``)
where the extension was built: it answers a call at a remembered clean site and hands
every other call to the Python callback. On 3.11 the profile core installs its hook
behind a C function (``tracer/_fastprofile.c``) that passes on the events the hook would
act on alone. These tests run the same calls under each and compare everything a user
can see, check that the compiled one did the filtering itself, that it holds no
reference it takes, and that it refuses, as the Python callback does, a tracer started
from the Python code it runs. The rest of the suite runs under whichever the machine has
(CI runs it under both: ``TRACKGEN_CONTRACT_PURE_PYTHON=1``).
"""

from __future__ import annotations

import contextvars
import functools
import gc
import operator
import os
import subprocess
import sys
import types
from contextlib import contextmanager

import pytest
import warp as wp
from acme.kernels import add_one

from trackgen_contract import HotPathViolation, Tracer, hot_path_guard, stream_explicit
from trackgen_contract.registry import installed
from trackgen_contract.tracer import _core, fastpath, pyprofile

SYSMON = sys.version_info >= (3, 12)
_fastclean = _fastprofile = None
try:
    if SYSMON:
        from trackgen_contract.tracer import _fastclean
    else:
        from trackgen_contract.tracer import _fastprofile
except ImportError:  # not built on this machine: the Python callback alone
    pass

needs_compiled = pytest.mark.skipif(
    (_fastclean if SYSMON else _fastprofile) is None, reason="the extension is not built"
)
needs_clean_filter = pytest.mark.skipif(
    not SYSMON or _fastclean is None, reason="the sys.monitoring core, with _fastclean built"
)
needs_profile_filter = pytest.mark.skipif(
    SYSMON or _fastprofile is None, reason="the sys.setprofile core, with _fastprofile built"
)
PURE = os.environ.get("TRACKGEN_CONTRACT_PURE_PYTHON") == "1"


@contextmanager
def callback(compiled: bool):
    """Run the block with the core's first filter compiled or in Python alone (the
    sys.monitoring callback made anew; a profile hook is installed at each start)."""
    assert _core.idle(), "a tracer or keep_armed block is still running"
    saved = _core.compiled, getattr(_core, "_callback", None), getattr(_core, "_on_start", None)
    _core.compiled = compiled
    if SYSMON:
        _core._callback = None
    try:
        yield
    finally:
        assert _core.idle()
        _core.compiled = saved[0]
        if SYSMON:
            _core._callback, _core._on_start = saved[1:]


launch = wp.launch  # a global bound to the watched function: ``launch(...)``


def _by_name(arr):
    launch(add_one, 8, inputs=[arr], stream=None)


def _by_module(arr):
    wp.launch(add_one, 8, inputs=[arr], stream=None)


def _by_position(arr):
    wp.launch(add_one, 8, [arr], [], [], [], "cpu", None)


def _twin_of_by_module(arr):  # the same offsets as _by_module: one slot, two callers
    wp.launch(add_one, 8, inputs=[arr], stream=None)


def _without_stream(arr):
    wp.launch(add_one, 8, inputs=[arr])


def _recorded(cmd):
    cmd.launch(stream=None)


def _recorded_by_path(holder, cmd):
    holder.cmd.launch(cmd)  # the stream by position: the receiver re-read at each call


def _copy(arr, arr2):
    wp.copy(arr2, arr, stream=None)


class _Plain:
    """An object whose attributes are its own."""


def _relay(kernel, dim, inputs, stream):  # loses the stream
    wp.launch(kernel, dim, inputs=inputs)


def _through_c(arr):
    contextvars.copy_context().run(wp.launch, add_one, 8, [arr], [], [], [], "cpu", None)


def _rounds(arr, arr2, cmd, swaps):
    """Every shape, 12 times, with the global and module callables and a holder's
    receiver swapped mid-way."""
    global launch
    holder = _Plain()
    holder.cmd = cmd
    for i in range(12):
        if i == 6:
            launch = _relay  # no stream from here
            # holder.cmd.launch(None) becomes Launch.launch(None)... through C, no stream
            holder.cmd = _Plain()
            holder.cmd.launch = functools.partial(operator.call, wp.Launch.launch, cmd)
            swaps.append(i)
        _recorded_by_path(holder, None)
        _by_name(arr)
        _by_module(arr)
        _by_position(arr)
        _twin_of_by_module(arr)
        _without_stream(arr)
        _recorded(cmd)
        _copy(arr, arr2)
        _through_c(arr)
    launch = wp.launch


def _observe(compiled: bool, arr, arr2, cmd):
    calls = []
    copies = [entry for entry in installed() if entry.op == "copy"]
    copies_only = Tracer(calls.append, entries=copies, every_call=False)
    with callback(compiled):
        with stream_explicit(strict=False) as guard, copies_only:
            _rounds(arr, arr2, cmd, [])
    seen = [(v.api, v.site.function, v.site.lineno) for v in guard.violations]
    return seen, guard.calls, copies_only.clean_calls, len(calls)


@needs_compiled
def test_the_same_calls_get_the_same_answers_compiled_and_in_python(arr, arr2):
    cmd = wp.launch(add_one, dim=8, inputs=[arr], device="cpu", record_cmd=True)
    compiled = _observe(True, arr, arr2, cmd)
    python = _observe(False, arr, arr2, cmd)
    assert compiled == python
    seen, calls, clean_copies, _ = compiled
    assert calls == 12 * 9
    assert clean_copies > 0  # the Tracer let clean copies pass, and counted them
    # Calls through C are judged on their bound values: stream=None is not seen passed.
    breaching = {"_without_stream", "_through_c", "_relay", "_recorded_by_path"}
    assert {function for _, function, _ in seen} == breaching
    for function in ("_relay", "_recorded_by_path"):  # after the swap
        assert sum(seen_in == function for _, seen_in, _ in seen) == 6


sync = wp.synchronize  # a global bound to the watched function: ``sync()``


def _no_sync():
    """Stands in for a host sync once swapped in: no watched call."""


def _repeat_rounds(arr, other, fake):
    """Breaches whose findings follow from their site (answered as repeats after two),
    12 times, with what the sites load swapped mid-way: a global and a module's attribute
    bound to another function, a receiver replaced by another array, and a second guard
    watching the same calls for the last rounds (no longer the only tracer)."""
    global sync
    holder = _Plain()
    holder.arr = arr
    inner = None
    for i in range(12):
        if i == 6:
            sync, fake.synchronize = _no_sync, _no_sync
            holder.arr = other
        if i == 9:
            inner = stream_explicit(strict=False).__enter__()
        wp.synchronize()
        sync()
        fake.synchronize()
        arr.numpy()
        holder.arr.numpy()
        wp.launch(add_one, 8, inputs=[arr])
    inner.__exit__(None, None, None)
    sync = wp.synchronize
    return inner


def _observe_repeats(compiled: bool, arr, arr2):
    fake = types.ModuleType("fake")
    fake.synchronize = wp.synchronize
    with callback(compiled):
        with hot_path_guard(strict=False) as guard:
            inner = _repeat_rounds(arr, arr2, fake)
    records = []
    for g in (guard, inner):
        records.append(([(v.api, v.site.lineno) for v in g.violations], g.calls))
    return records


@needs_compiled
def test_repeat_breaches_are_recorded_the_same_compiled_and_in_python(arr, arr2):
    compiled = _observe_repeats(True, arr, arr2)
    assert compiled == _observe_repeats(False, arr, arr2)
    (outer, outer_calls), (inner, inner_calls) = compiled
    by_api = {api: sum(a == api for a, _ in outer) for api, _ in outer}
    # wp.synchronize 12 times, sync() and fake.synchronize() 6 each before their swap
    assert by_api["wp.synchronize()"] == 12 + 6 + 6
    assert by_api["wp.array.numpy()"] == 24  # the receiver swapped for another array
    assert by_api["wp.launch without stream="] == 12
    assert outer_calls > 24 + 24 + 12  # and what Warp's readbacks call inside
    assert len(inner) == 3 and inner_calls == 3  # the launches of the last three rounds


# The Python callback reads its frames with sys._getframe, which raises an audit event;
# the compiled filter reads them without. In a child process: an audit hook cannot be
# removed, and one in this process would run inside every later test's callback.
_COUNT_GETFRAMES = """
import sys, warp as wp
from acme.kernels import add_one
from trackgen_contract import stream_explicit
arr = wp.zeros(8, dtype=float, device="cpu")
cmd = wp.launch(add_one, dim=8, inputs=[arr], device="cpu", record_cmd=True)
counted = []
sys.addaudithook(lambda event, args: event == "sys._getframe" and counted.append(event))
class Holder:
    def __init__(self, cmd):
        self.cmd, self.inner, self.cmds = cmd, self, (None, [cmd])
        self.graphs = {"fwd": cmd}
    def launches(self):  # receivers reached through attributes and items: the same path
        k, name = 0, "fwd"
        for _ in range(200):
            self.cmd.launch(stream=None)
            self.inner.cmd.launch(None)
            self.cmds[1][k].launch(None)
            self.graphs[name].launch(None)  # a dict's item
            wp.launch(add_one, 8, inputs=[arr], **CONFIG["fast"])
RECORDED, OPTS, CONFIG = cmd, {"stream": None}, {"fast": {"stream": None}}
def launches(cmd):  # a local and a global receiver: bound method sites the fast path knows
    for _ in range(200):
        wp.launch(add_one, 8, inputs=[arr], stream=None)
        cmd.launch(stream=None)
        RECORDED.launch(None)
        wp.launch(add_one, 8, inputs=[arr], **OPTS)  # and a ** part, re-read
        # Warp's own launch(*args, **kwargs) inside:
        wp.launch_tiled(add_one, dim=[8], inputs=[arr], block_dim=1, stream=None)
with stream_explicit():
    launches(cmd)
    Holder(cmd).launches()
    for _ in range(200):  # this script's own body: its names read by LOAD_NAME
        wp.launch(add_one, 8, inputs=[arr], stream=None)
        cmd.launch(stream=None)
print(len(counted))
"""


def _printed_by_each_filter(script: str) -> dict[str, list[str]]:
    """The lines `script` prints, run in a child process with the compiled filter ("0")
    and with the Python one alone ("1")."""
    tests = os.path.dirname(__file__)
    printed = {}
    for setting in ("0", "1"):
        env = {**os.environ, "TRACKGEN_CONTRACT_PURE_PYTHON": setting, "PYTHONPATH": tests}
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        printed[setting] = done.stdout.splitlines()
    return printed


def _getframes_counted(script: str) -> dict[str, list[int]]:
    """What `script` prints last (counts of sys._getframe audit events), run with the compiled
    filter ("0") and with the Python callback alone ("1")."""
    printed = _printed_by_each_filter(script)
    return {setting: [int(n) for n in lines[-1].split()] for setting, lines in printed.items()}


@needs_clean_filter
def test_the_compiled_filter_answers_clean_calls_without_the_python_callback():
    counts = _getframes_counted(_COUNT_GETFRAMES)
    assert counts["1"][-1] >= 2600  # the Python callback: at least one per call
    assert counts["0"][-1] < 100  # compiled: only while the sites are learnt


# A site learnt clean while its callable reads back plainly, then called directly by the
# same instruction with a callable that reads back only through code of the user's (a
# __getattr__, a property, a __getitem__), or whose attribute an argument replaces
# between the load and the call. On 3.13+ neither the Python callback nor the full path
# can tell such a direct call from one made by C code (the compiled filter could, from
# the interpreter's frames): both filters must re-read the callable and give the full
# path's verdict, the documented fallback for such shapes.
_CALLABLE_CHANGES = """
import functools, operator, warp as wp
from acme.kernels import add_one
from trackgen_contract import stream_explicit
arr = wp.zeros(8, dtype=float, device="cpu")
cmd = wp.launch(add_one, dim=8, inputs=[arr], device="cpu", record_cmd=True)
class LazyModule:
    def __getattr__(self, name):
        return getattr(wp, name)
class ByProperty:
    @property
    def launch(self):
        return cmd.launch
class ByItem:
    def __getitem__(self, i):
        return cmd
class Holder:
    pass
holder = Holder()
def swap(on):
    if on:
        holder.launch = functools.partial(operator.call, type(cmd).launch, cmd)
def modules(mods):
    for m in mods:
        m.launch(add_one, dim=8, inputs=[arr], device="cpu", stream=None)
def relaunch(receivers):
    for x in receivers:
        x.launch(stream=None)
def items(containers):
    for h in containers:
        h[0].launch(stream=None)
def swapped(flags):
    for on in flags:
        holder.launch = cmd.launch
        holder.launch(stream=swap(on))
with stream_explicit(strict=False) as guard:
    modules([wp] * 5 + [LazyModule()] * 5 + [wp] * 3)
    relaunch([cmd] * 5 + [ByProperty()] * 5 + [cmd] * 3)
    items([[cmd]] * 5 + [ByItem()] * 5 + [[cmd]] * 3)
    swapped([False] * 5 + [True] * 5 + [False] * 3)
print(guard.ok, guard.calls, len(guard.violations))
print(*(f"{v.api} {v.site.lineno}" for v in guard.violations), sep=";")
"""


@needs_clean_filter
def test_a_callable_changed_at_a_clean_site_gets_the_same_verdict_compiled():
    verdicts = {
        setting: lines[-2:] for setting, lines in _printed_by_each_filter(_CALLABLE_CHANGES).items()
    }
    assert verdicts["0"] == verdicts["1"]
    checked = int(verdicts["0"][0].split()[1])
    assert checked == 4 * 13  # every call, whichever filter answered it


def _learnt(caller: types.CodeType) -> bool:
    return any(getattr(site, "caller", None) is caller for site in fastpath.table.values())


@needs_clean_filter
def test_a_clean_site_the_table_no_longer_holds_is_judged_again(arr):
    # The compiled filter remembers the last clean site it found in the table; any change
    # to the table (a site added or replaced, the table emptied) must make it look again.
    def loop(n):
        for _ in range(n):
            wp.launch(add_one, 8, inputs=[arr], stream=None)

    def other():
        wp.launch(add_one, 8, inputs=[arr], stream=None)

    with stream_explicit(strict=False) as guard:
        loop(3)
        assert _learnt(loop.__code__)
        fastpath.table.clear()
        loop(2)  # judged in full once more, and learnt again
        assert _learnt(loop.__code__)
        fastpath.table.pop(next(iter(fastpath.table)))
        other()  # another site added meanwhile
        loop(2)
        assert _learnt(loop.__code__) and _learnt(other.__code__)
    assert guard.ok and guard.calls == 8


@needs_clean_filter
def test_a_property_a_key_s_eq_adds_during_the_class_tests_is_not_run(arr):
    # A key of the user's in a base's namespace, met by the test that no class has a
    # __getattribute__, gives the receiver's class a property under the method's name
    # (README, Known limits). The compiled filter reads the class's version tag again
    # before it reads the attribute, and leaves the call to the full path.
    if PURE:
        pytest.skip("TRACKGEN_CONTRACT_PURE_PYTHON=1 asks for the Python callback")
    run_by, armed = [], [False]

    def launch(self):
        run_by.append(sys._getframe(1).f_code)
        return types.MethodType(wp.Launch.launch, self)

    class Key(str):
        __hash__ = str.__hash__

        def __eq__(self, other):
            if armed[0]:
                armed[0] = False
                Recorded.launch = property(launch)
            return False

    base = type("Base", (), {Key("__getattribute__"): 0})
    Recorded = type("Recorded", (base, wp.Launch), {"launch": wp.Launch.launch})
    recorded = Recorded.__new__(Recorded)
    made = wp.launch(add_one, dim=8, inputs=[arr], device="cpu", record_cmd=True)
    for name, value in vars(made).items():
        setattr(recorded, name, value)

    def loop():
        for i in range(8):
            if i == 5:
                Recorded.changed = i  # a new version tag: the class tests run again
                armed[0] = True
            recorded.launch(None)

    with stream_explicit(strict=False) as guard:
        loop()
    assert guard.calls == 8
    assert set(run_by) <= {loop.__code__}  # read by the program alone


_COUNT_GETFRAMES_OF_REPEATS = """
import functools, sys, warp as wp
from acme.kernels import add_one
from trackgen_contract import hot_path_guard
arr = wp.zeros(8, dtype=float, device="cpu")
counted = []
sys.addaudithook(lambda event, args: event == "sys._getframe" and counted.append(event))
launch = wp.launch
def breaches(n):
    for _ in range(n):
        launch(add_one, 8, inputs=[arr])  # no stream=: checked that it loads wp.launch
        wp.synchronize()  # a host sync wherever it is called from: no check
        arr.numpy()
with hot_path_guard(strict=False) as guard:
    breaches(200)
    direct = len(counted)
    # called through C at the same instruction, now with its stream
    launch = functools.partial(wp.launch, stream=None)
    breaches(100)
print(len(guard.violations), direct, len(counted) - direct)
"""


@needs_clean_filter
def test_the_compiled_filter_answers_repeat_breaches_without_the_python_callback():
    counts = _getframes_counted(_COUNT_GETFRAMES_OF_REPEATS)
    (breaches, direct, through_c), python = counts["0"], counts["1"]
    # the same record either way: each sync and readback, and the launches until the
    # partial passed their stream
    assert breaches == python[0] == 300 + 300 + 200
    assert python[1] >= 600  # the Python callback: at least one per call
    assert direct < 100  # compiled: only while the sites are judged and remembered
    # the launch site no longer loads wp.launch: judged in full, by the Python callback
    assert through_c >= 100 and python[2] >= 300


@needs_clean_filter
def test_the_filter_reads_the_interpreters_frames_where_it_knows_them():
    # Where this build of CPython ships its internal frame headers (3.12-3.15), the
    # filter reaches the caller without making the watched function's frame object (see
    # _callerframe.c).
    known_layout = (3, 12) <= sys.version_info < (3, 16)
    assert bool(_fastclean.READS_FRAME_CHAIN) is known_layout


@needs_clean_filter
def test_the_compiled_filter_is_the_registered_callback():
    if PURE:
        pytest.skip("TRACKGEN_CONTRACT_PURE_PYTHON=1 asks for the Python callback")
    monitoring = sys.monitoring
    with stream_explicit():
        tool = _core.tool_id
        registered = monitoring.register_callback(tool, monitoring.events.PY_START, None)
        monitoring.register_callback(tool, monitoring.events.PY_START, registered)
    assert type(registered) is _fastclean.CleanFilter


@needs_compiled
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_answering_a_clean_call_keeps_no_reference(arr, compiled):
    def loop(n):
        for _ in range(n):
            wp.launch(add_one, 8, inputs=[arr], stream=None)

    with callback(compiled):
        with stream_explicit() as guard:
            loop(3)  # judged, then learnt
            held = [loop.__code__, wp.launch.__code__, globals(), arr, guard, fastpath.last.now]
            held += [site for site in fastpath.table.values()]
            # No collection in between may free an earlier test's cycle that holds one of
            # these (a function of this module holds its globals).
            collecting = gc.isenabled()
            gc.collect()
            gc.disable()
            try:
                before = [sys.getrefcount(x) for x in held]
                loop(500)
                after = [sys.getrefcount(x) for x in held]
            finally:
                if collecting:
                    gc.enable()
    assert after == before
    assert guard.calls == 503


@needs_clean_filter
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_a_tracer_started_from_code_the_callback_runs_is_refused(arr, compiled):
    """A `counts` runs inside the core's callback, where CPython reports no event: a guard
    started there would be blind. Compiled, no callback frame lies below it to tell."""
    refused, inside = [], []

    def counts(op, module):
        inside.append(_fastclean.running())
        try:
            with stream_explicit():
                pass
        except RuntimeError as error:
            refused.append(str(error))
        return True

    def loop():
        for _ in range(4):
            wp.launch(add_one, 8, inputs=[arr], stream=None)

    with callback(compiled):  # the guard learns the site, the tracer lets it pass
        with stream_explicit(), Tracer(lambda call: None, every_call=False, counts=counts):
            loop()
    assert refused and len(refused) == len(inside)
    assert all("cannot start while a watched Warp call is being judged" in r for r in refused)
    assert any(inside) is compiled  # asked from the compiled filter itself


class _Fussy(Tracer):
    """A tracer whose count refuses to grow past 2."""

    @property
    def clean_calls(self):
        return self._clean

    @clean_calls.setter
    def clean_calls(self, value):
        if value > 2:
            raise OverflowError("no more than 2")
        self._clean = value


@needs_clean_filter
def test_a_tracers_own_error_while_counting_is_raised_the_same_way(arr):
    def run(compiled):
        done = []
        with callback(compiled):
            with stream_explicit(), _Fussy(lambda call: None, every_call=False) as tracer:
                with pytest.raises(OverflowError, match="no more than 2"):
                    for i in range(10):
                        done.append(i)
                        wp.launch(add_one, 8, inputs=[arr], stream=None)
        return done, tracer.clean_calls

    assert run(True) == run(False)


class _Tally:
    """A count of the user's own: ``+= 1`` runs its ``__iadd__``."""

    def __init__(self) -> None:
        self.added: list[int] = []

    def __iadd__(self, n: int) -> _Tally:
        self.added.append(n)
        return self


class _SlotsToo(Tracer):
    __slots__ = ()  # the base's `clean_calls` slot, reached through a subclass


@needs_clean_filter
def test_calls_counted_in_a_tracers_slot_are_counted_as_the_python_callback_counts(arr):
    """The compiled filter adds to a plain Tracer's `clean_calls` slot in place; a
    subclass's, and a count of the user's own type, the same way as Python's ``+=``."""

    def run(compiled):
        with callback(compiled):
            plain, sub, tallied = (
                kind(lambda call: None, every_call=False) for kind in (Tracer, _SlotsToo, Tracer)
            )
            tallied.clean_calls = _Tally()
            with stream_explicit(), plain, sub, tallied:
                for _ in range(10):
                    wp.launch(add_one, 8, inputs=[arr], stream=None)
        return plain.clean_calls, sub.clean_calls, tallied.clean_calls.added

    compiled = run(True)
    assert compiled == run(False)
    assert compiled[0] >= 8 and compiled[2] == [1] * compiled[0]


class _Once(Exception):
    """Raised once, as a signal handler's exception is: whatever runs the same code again
    does not meet it."""


class _OpsRaisingOnce(Tracer):
    """A tracer whose `ops`, read when the core works out which tracers of the thread watch
    a call (fastpath.quiet), raises once when armed."""

    armed = False

    @property
    def ops(self):
        if type(self).armed:
            type(self).armed = False
            raise _Once
        return self._ops

    @ops.setter
    def ops(self, value):
        self._ops = value


@needs_clean_filter
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_an_exception_raised_once_while_the_filter_answers_reaches_the_call(arr, compiled):
    # BUG: the compiled filter cleared any error of the Python code it ran and handed the
    # call to the Python callback, which ran it again: an exception raised once there (a
    # signal handler's, in fastpath.quiet) was lost, and the call went on.
    def clean_launch():
        wp.launch(add_one, 8, inputs=[arr], stream=None)

    def host_sync():
        wp.synchronize()

    with callback(compiled):
        with hot_path_guard(strict=False) as guard:
            for _ in range(3):  # a clean site and a repeat site, remembered
                clean_launch()
                host_sync()
            for site in (clean_launch, host_sync):
                with _OpsRaisingOnce(lambda call: None, every_call=False):
                    _OpsRaisingOnce.armed = True  # a new tracer: quiet is asked again
                    with pytest.raises(_Once):
                        site()
                    site()  # and the next call goes through
    assert not _OpsRaisingOnce.armed
    assert [v.api for v in guard.violations] == ["wp.synchronize()"] * 4


@needs_compiled
def test_a_strict_guard_raises_the_same_breach_compiled(arr):
    with callback(True):
        with pytest.raises(HotPathViolation, match="wp.launch without stream="):
            with stream_explicit():
                for _ in range(3):
                    _by_module(arr)
                _without_stream(arr)


@needs_clean_filter
def test_a_clean_filter_made_wrongly_says_what_is_wrong():
    var = contextvars.ContextVar("v", default=())
    with pytest.raises(TypeError, match="a callable, a ContextVar and the fastpath module"):
        _fastclean.CleanFilter(print, "not a ContextVar", fastpath)
    with pytest.raises(TypeError, match="takes no keyword arguments"):
        _fastclean.CleanFilter(print, var, fastpath=fastpath)
    with pytest.raises(AttributeError, match="table"):
        _fastclean.CleanFilter(print, var, types.SimpleNamespace())
    with pytest.raises(TypeError):
        _fastclean.CleanFilter(print, var)


@needs_clean_filter
def test_a_clean_filter_hands_every_call_it_does_not_answer_to_the_callback():
    got = []
    var = contextvars.ContextVar("v", default=())
    answer = _fastclean.CleanFilter(lambda *a, **k: got.append((a, k)), var, fastpath)
    code = _by_module.__code__
    assert answer(code, 0) is None and got == []  # no tracer in this context: nothing to do
    var.set(("a tracer",))
    answer(code, 0)  # a call at no remembered site
    answer(code)  # a call not as sys.monitoring makes it
    answer(code, 0, extra=1)
    assert got == [((code, 0), {}), ((code,), {}), ((code, 0), {"extra": 1})]


@pytest.mark.parametrize(
    ("setting", "expected"), [("1", "False"), ("0", "True"), ("", "True"), ("yes", "error")]
)
def test_the_pure_python_setting(setting, expected):
    code = "from trackgen_contract.tracer import COMPILED; print(COMPILED)"
    env = {**os.environ, "TRACKGEN_CONTRACT_PURE_PYTHON": setting}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    if expected == "error":  # imports (a plugin's import line would say nothing useful)
        assert done.returncode == 0, done.stderr
    elif (_fastclean if SYSMON else _fastprofile) is None:
        assert done.stdout.strip() == "False", done.stderr
    else:
        assert done.stdout.strip() == expected, done.stderr


def test_a_bad_pure_python_setting_refuses_every_start_and_names_itself(tmp_path):
    message = "TRACKGEN_CONTRACT_PURE_PYTHON must be 1, 0 or empty, not 'yes'"
    starts = [
        "from trackgen_contract import hot_path_guard as start; start()",
        "from trackgen_contract.tracer import Tracer; Tracer(print)",
        "from trackgen_contract.tracer import keep_armed; keep_armed()",
    ]
    env = {**os.environ, "TRACKGEN_CONTRACT_PURE_PYTHON": "yes"}
    for code in starts:
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 1 and f"ValueError: {message}" in done.stderr, code
    program = tmp_path / "program.py"
    program.write_text("print('ran')\n")
    done = subprocess.run(
        [sys.executable, "-m", "trackgen_contract.trace", str(program)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == f"python -m trackgen_contract.trace: error: {message}\n"


# --- 3.11: the profile hook behind a C filter ------------------------------------------


@needs_profile_filter
def test_the_hook_is_still_what_sys_getprofile_returns(arr):
    if PURE:
        pytest.skip("TRACKGEN_CONTRACT_PURE_PYTHON=1 asks for the Python hook")
    before = sys.getprofile()
    with stream_explicit(strict=False) as guard:
        hook = sys.getprofile()
        _without_stream(arr)
    assert type(hook) is types.FunctionType and hook.__name__ == "profile"
    assert sys.getprofile() is before
    assert [v.api for v in guard.violations] == ["wp.launch without stream="]


def _events_passed_on(install, watched: set, closing_after: int | None = None):
    """The events a profile function installed by `install` receives while a few calls
    run, under `watched` qualified names (and, after `closing_after` calls, closing)."""
    seen = []

    def profile(frame, event, arg):
        seen.append((frame.f_code.co_qualname, event))

    def closing(frame, event, arg):  # the same free variable: its code can replace the other's
        seen.append((frame.f_code.co_qualname, event))

    def watched_function():
        return len("x")  # a C call inside

    def other_function():
        return watched_function()

    _fastprofile.watch(watched, closing.__code__)
    try:
        install(profile)
        for i in range(3):
            if i == closing_after:
                profile.__code__ = closing.__code__
            other_function()
        sys.setprofile(None)
    finally:
        sys.setprofile(None)
        _fastprofile.watch(pyprofile._watched_names, pyprofile._CLOSING)
    return seen


@needs_profile_filter
def test_the_c_filter_passes_on_exactly_the_calls_of_watched_names():
    name = "_events_passed_on.<locals>.watched_function"
    compiled = _events_passed_on(_fastprofile.install, {name})
    assert compiled == [(name, "call")] * 3
    everything = _events_passed_on(sys.setprofile, {name})
    assert [e for e in everything if e[1] == "call" and e[0] == name] == compiled
    assert len(everything) > 4 * len(compiled)  # what the Python function alone sees
    assert _events_passed_on(_fastprofile.install, set()) == []


@needs_profile_filter
def test_a_closing_hook_is_passed_every_event():
    name = "_events_passed_on.<locals>.watched_function"
    seen = _events_passed_on(_fastprofile.install, {name}, closing_after=1)
    assert seen[0] == (name, "call")  # before: the filter's
    events = {event for _, event in seen[1:]}
    assert {"call", "return", "c_call", "c_return"} <= events


def _raising_profile(install):
    """What a profile function that raises at a watched call leaves: CPython removes it."""

    def raiser(frame, event, arg):
        if event == "call" and frame.f_code.co_qualname == name:
            raise LookupError("refused")

    def watched_function():
        return 1

    name = watched_function.__qualname__
    _fastprofile.watch({name}, pyprofile._CLOSING)
    try:
        with pytest.raises(LookupError, match="refused"):
            install(raiser)
            watched_function()
        return sys.getprofile()
    finally:
        sys.setprofile(None)
        _fastprofile.watch(pyprofile._watched_names, pyprofile._CLOSING)


@needs_profile_filter
def test_a_profile_function_that_raises_is_removed_as_python_removes_it():
    assert _raising_profile(sys.setprofile) is None
    assert _raising_profile(_fastprofile.install) is None


@needs_profile_filter
def test_the_c_filter_is_set_up_with_clear_errors():
    _fastprofile.watch(pyprofile._watched_names, pyprofile._CLOSING)
    with pytest.raises(TypeError, match="not callable"):
        _fastprofile.install(42)
    with pytest.raises(TypeError):
        _fastprofile.watch(["launch"], pyprofile._CLOSING)
    with pytest.raises(TypeError):
        _fastprofile.watch(set(), "not code")
    assert sys.getprofile() is None


# On 3.11 every read of a frame's f_code raises an audit event: the Python hook reads one
# at each event of the thread, the C filter none. In a child process, as above.
_COUNT_CODE_READS = """
import sys, warp as wp
from acme.kernels import add_one
from trackgen_contract import stream_explicit
arr = wp.zeros(8, dtype=float, device="cpu")
reads = []
sys.addaudithook(lambda event, args: event == "object.__getattr__" and args[1] == "f_code"
                 and reads.append(1))
with stream_explicit():
    for _ in range(100):
        wp.launch(add_one, 8, inputs=[arr], stream=None)
print(len(reads))
"""


@needs_profile_filter
def test_the_c_filter_spares_the_python_hook_the_calls_it_does_not_watch():
    printed = _printed_by_each_filter(_COUNT_CODE_READS)
    counts = {setting: int(lines[-1].split()[-1]) for setting, lines in printed.items()}
    assert counts["1"] >= 100 * 20  # the Python hook: every event of every launch
    assert counts["0"] < counts["1"] / 10


def _nest(depth, fn):
    return fn() if depth == 0 else _nest(depth - 1, fn)


def _deepest_working(fn):
    """The deepest nesting at which `fn()` still works unguarded."""
    low, high = 0, sys.getrecursionlimit()
    while low < high:
        middle = (low + high + 1) // 2
        try:
            _nest(middle, fn)
            low = middle
        except RecursionError:
            high = middle - 1
    return low


def _plain():  # no C call: 3.11 counts a C call against the limit only when profiled
    return "unwatched"


@needs_profile_filter
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_an_unwatched_call_at_the_deepest_nesting_needs_no_frame_of_the_hook(compiled):
    """The Python hook runs in a frame of its own at every call, which the very deepest
    call that works unguarded cannot have: CPython removes it and the guard is blind (a
    known limit). Behind the C filter an unwatched call runs no Python code of ours."""
    _deepest_working(_plain)  # warm: specialised, as below
    depth = _deepest_working(_plain) + 1  # from here, a frame above _deepest_working's
    raised = False
    with callback(compiled):
        with stream_explicit(strict=False) as guard:
            try:
                _nest(depth, _plain)
            except RecursionError:
                raised = True
    assert raised is not compiled
    assert (guard.blind is None) is compiled, guard.blind


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_a_guard_started_from_an_on_call_is_refused(arr, compiled):
    """An ``on_call`` runs inside the core's callback, as a signal handler or finaliser
    that lands there does: a guard started there would be blind, so it is refused."""
    if compiled and (_fastclean if SYSMON else _fastprofile) is None:
        pytest.skip("the extension is not built")
    refused = []

    def on_call(call):
        try:
            with stream_explicit():
                pass
        except RuntimeError as error:
            refused.append(str(error))

    with callback(compiled):
        with Tracer(on_call):
            _by_module(arr)
            _without_stream(arr)
    assert len(refused) == 2
    assert all("cannot start while a watched Warp call is being judged" in r for r in refused)
