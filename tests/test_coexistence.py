"""The tools users already run keep working beside a guard: coverage.py, cProfile, pdb and
pytest-xdist."""

import bdb
import cProfile
import json
import os
import pstats
import subprocess
import sys
import textwrap

import pytest
from acme import gen
from helpers import assert_nothing_left

from trackgen_contract import hot_path_guard

SYSMON = sys.version_info >= (3, 12)

SCRIPT = """\
import warp as wp
from trackgen_contract import hot_path_guard
from acme import gen

a = wp.zeros(4, dtype=float, device="cpu")

def guarded():
    total = 0
    for i in range(3):
        total += i
    gen.read_back(a)
    return total

with hot_path_guard(strict=False) as guard:
    guarded()
import sys
monitoring = getattr(sys, "monitoring", None)
print(monitoring and monitoring.get_tool(monitoring.COVERAGE_ID))
print(len(guard.violations))
"""


@pytest.mark.parametrize(
    "core",
    [pytest.param("sysmon", marks=pytest.mark.skipif(not SYSMON, reason="Python 3.12+")), "ctrace"],
)
def test_coverage_counts_the_guarded_lines(tmp_path, core):
    script = tmp_path / "covered.py"
    script.write_text(SCRIPT)
    tests = os.path.dirname(__file__)
    env = {**os.environ, "COVERAGE_CORE": core, "PYTHONPATH": tests}
    run = [sys.executable, "-m", "coverage"]
    done = subprocess.run([*run, "run", "--data-file", tmp_path / "data", str(script)],
                          capture_output=True, text=True, env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    *_, coverage_tool, violations = done.stdout.strip().splitlines()
    assert violations == "1"  # the guard saw the readback
    assert (coverage_tool == "coverage.py") is (core == "sysmon")  # and beside coverage's tool
    subprocess.run([*run, "json", "--data-file", tmp_path / "data", "-o", tmp_path / "c.json"],
                   check=True, capture_output=True, env=env, cwd=tmp_path)  # fmt: skip
    covered = json.loads((tmp_path / "c.json").read_text())["files"]["covered.py"]
    body = [SCRIPT.splitlines().index(line) + 1 for line in
            ("    for i in range(3):", "        total += i", "    gen.read_back(a)")]  # fmt: skip
    assert set(body) <= set(covered["executed_lines"])


def _profiled_functions(profile):
    stats = pstats.Stats(profile)
    return {name for _, _, name in stats.stats}  # type: ignore[attr-defined]


def test_cprofile_around_a_guard(arr):
    profile = cProfile.Profile()
    with profile:
        with hot_path_guard(strict=False) as guard:
            gen.read_back(arr)
        gen.sync()  # after the guard: the profiler still sees calls
    assert len(guard.violations) == 1
    # On 3.11 the guard's profile function stands in for cProfile's during the block.
    assert ({"read_back", "sync"} if SYSMON else {"sync"}) <= _profiled_functions(profile)
    assert_nothing_left()


def test_guard_inside_a_cprofile_run(arr):
    profile = cProfile.Profile()

    def work():
        with hot_path_guard(strict=False) as guard:
            gen.read_back(arr)
        return guard

    guard = profile.runcall(work)
    assert len(guard.violations) == 1
    assert "work" in _profiled_functions(profile)
    assert_nothing_left()


class StepRecorder(bdb.Bdb):
    """A debugger that steps through everything and records the lines it stops at."""

    def __init__(self, filename):
        super().__init__()
        self.filename, self.lines = filename, []

    def user_line(self, frame):
        if frame.f_code.co_filename == self.filename:
            self.lines.append(frame.f_lineno)
        self.set_step()


def test_a_debugger_steps_through_a_guarded_block(arr):
    def stepped():
        with hot_path_guard(strict=False) as guard:
            gen.read_back(arr)
            value = 1
        return guard, value

    debugger = StepRecorder(__file__)
    guard, value = debugger.runcall(stepped)
    first = stepped.__code__.co_firstlineno
    assert {first + 2, first + 3, first + 4} <= set(debugger.lines)
    assert (len(guard.violations), value) == (1, 1)
    assert sys.gettrace() is None
    assert_nothing_left()


def test_plugin_and_guards_in_xdist_workers(pytester, request, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(request.config.rootpath / "tests"))
    pytester.makepyfile(textwrap.dedent("""
        import pytest
        import warp as wp
        from acme import gen
        from trackgen_contract import hot_path_guard

        @pytest.fixture
        def a():
            return wp.zeros(4, dtype=float, device="cpu")

        @pytest.mark.parametrize("i", range(4))
        @pytest.mark.hot_path
        def test_clean(a, i):
            gen.launch_with_stream(a)

        @pytest.mark.parametrize("i", range(4))
        @pytest.mark.hot_path
        def test_dirty(a, i):
            gen.read_back(a)

        def test_guard_in_a_worker(a):
            with hot_path_guard(strict=False) as guard:
                gen.allocate(2)
            assert len(guard.violations) == 1
    """))  # fmt: skip
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5, failed=4)
    result.stdout.fnmatch_lines(["*HotPathViolation: host sync on a hot path*"])


@pytest.mark.skipif(not SYSMON, reason="sys.monitoring: Python 3.12+")
def test_the_next_tool_on_our_id_gets_no_event_of_ours(arr):
    """After the last guard, the tool id it held is free and a tool that takes it finds no
    event set on Warp's functions (from 3.14 freeing the id clears them; before, the guard
    clears each one)."""
    from trackgen_contract.tracer import _core

    with hot_path_guard(strict=False):
        gen.launch_with_stream(arr)
        ours = _core.tool_id
    monitoring = sys.monitoring
    assert monitoring.get_tool(ours) is None
    seen = []
    monitoring.use_tool_id(ours, "another tool")
    try:
        monitoring.register_callback(ours, monitoring.events.PY_START, lambda c, o: seen.append(c))
        gen.launch_with_stream(arr)
        gen.read_back(arr)
    finally:
        monitoring.register_callback(ours, monitoring.events.PY_START, None)
        monitoring.free_tool_id(ours)
    assert seen == []
    assert_nothing_left()
