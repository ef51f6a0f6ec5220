"""The compiled clean-site test (``tracer/_fastclean.c``) against the Python callback.

The ``sys.monitoring`` core registers a `CleanFilter` where the extension was built: it
answers a call at a remembered clean site and hands every other call to the Python
callback. These tests run the same calls under each and compare everything a user can
see, check that the compiled one did answer calls itself, that it holds no reference it
takes, and that it refuses, as the Python callback does, a tracer started from the Python
code it runs. The rest of the suite runs under whichever the machine has (CI runs it
under both: ``TRACKGEN_CONTRACT_PURE_PYTHON=1``).
"""

from __future__ import annotations

import contextvars
import os
import subprocess
import sys
import types
from contextlib import contextmanager

import pytest
import warp as wp
from acme.kernels import add_one

from trackgen_contract import HotPathViolation, Tracer, stream_explicit
from trackgen_contract.registry import installed
from trackgen_contract.tracer import _core, fastpath

try:
    from trackgen_contract.tracer import _fastclean
except ImportError:  # not built on this machine: the Python callback alone
    _fastclean = None

needs_compiled = pytest.mark.skipif(
    sys.version_info < (3, 12) or _fastclean is None,
    reason="the sys.monitoring core, with _fastclean built",
)
PURE = os.environ.get("TRACKGEN_CONTRACT_PURE_PYTHON") == "1"


@contextmanager
def callback(compiled: bool):
    """Run the block with the core's callback compiled or in Python alone (made anew)."""
    assert _core.tool_id is None, "a tracer or keep_armed block is still running"
    saved = _core._compiled, _core._callback, _core._on_start
    _core._compiled, _core._callback = compiled, None
    try:
        yield
    finally:
        assert _core.tool_id is None
        _core._compiled, _core._callback, _core._on_start = saved


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


def _copy(arr, arr2):
    wp.copy(arr2, arr, stream=None)


def _relay(kernel, dim, inputs, stream):  # loses the stream
    wp.launch(kernel, dim, inputs=inputs)


def _through_c(arr):
    contextvars.copy_context().run(wp.launch, add_one, 8, [arr], [], [], [], "cpu", None)


def _rounds(arr, arr2, cmd, swaps):
    """Every shape, 12 times, with the global and module callables swapped mid-way."""
    global launch
    for i in range(12):
        if i == 6:
            launch = _relay  # no stream from here
            swaps.append(i)
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
    assert calls == 12 * 8
    assert clean_copies > 0  # the Tracer let clean copies pass, and counted them
    # Calls through C are judged on their bound values: stream=None is not seen passed.
    assert {function for _, function, _ in seen} == {"_without_stream", "_through_c", "_relay"}
    assert sum(function == "_relay" for _, function, _ in seen) == 6  # after the swap


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
def launches(cmd):  # a local receiver: a bound method site the fast path knows
    for _ in range(200):
        wp.launch(add_one, 8, inputs=[arr], stream=None)
        cmd.launch(stream=None)
with stream_explicit():
    launches(cmd)
print(len(counted))
"""


@needs_compiled
def test_the_compiled_filter_answers_clean_calls_without_the_python_callback():
    tests = os.path.dirname(__file__)
    counts = {}
    for setting in ("0", "1"):
        env = {**os.environ, "TRACKGEN_CONTRACT_PURE_PYTHON": setting, "PYTHONPATH": tests}
        done = subprocess.run(
            [sys.executable, "-c", _COUNT_GETFRAMES],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        counts[setting] = int(done.stdout.split()[-1])
    assert counts["1"] >= 400  # the Python callback: at least one per call
    assert counts["0"] < 40  # compiled: only while the sites are learnt


@needs_compiled
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
            before = [sys.getrefcount(x) for x in held]
            loop(500)
            after = [sys.getrefcount(x) for x in held]
    assert after == before
    assert guard.calls == 503


@needs_compiled
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


@needs_compiled
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


@needs_compiled
def test_a_strict_guard_raises_the_same_breach_compiled(arr):
    with callback(True):
        with pytest.raises(HotPathViolation, match="wp.launch without stream="):
            with stream_explicit():
                for _ in range(3):
                    _by_module(arr)
                _without_stream(arr)


@needs_compiled
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


@needs_compiled
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
    if expected == "error":
        assert done.returncode == 1
        assert "TRACKGEN_CONTRACT_PURE_PYTHON must be 1, 0 or empty, not 'yes'" in done.stderr
    elif _fastclean is None or sys.version_info < (3, 12):
        assert done.stdout.strip() == "False", done.stderr
    else:
        assert done.stdout.strip() == expected, done.stderr
