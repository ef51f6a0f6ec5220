"""The pytest plugin, through pytester: the marker, the fixture, and what a failure shows."""

import os

import pytest
import warp as wp

from trackgen_contract import pytest_plugin

pytest_plugins = ["pytester"]

HEADER = """\
import pytest
import warp as wp
from acme import gen


@pytest.fixture
def buffers():
    return wp.zeros(8, dtype=float, device="cpu")   # setup allocates: not the hot path
"""


@pytest.fixture
def run(pytester, request):
    pytester.syspathinsert(request.config.rootpath / "tests")

    def run(source, *args):
        pytester.makepyfile(HEADER + source)
        return pytester.runpytest("-p", "no:cacheprovider", *args)

    return run


def test_marker_is_registered(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.hot_path(**options): run the test's call phase*"])
    assert pytester.parseconfig().pluginmanager.is_registered(pytest_plugin)


def test_an_unmarked_suite_runs_with_nothing_of_the_plugins_set(pytester):
    # The plugin loads into every pytest run of the environment: a suite that does not use
    # the marker must find no profile function, tool id or signal handler of its.
    pytester.makepyfile("""
import signal, sys
import warp as wp

def test_nothing_set():
    wp.zeros(4, dtype=float, device="cpu").numpy()
    assert sys.getprofile() is None
    if sys.version_info >= (3, 12):
        # (coverage.py, measuring a child, may hold one of its own)
        assert "trackgen_contract" not in [sys.monitoring.get_tool(i) for i in range(6)]
    for signum in signal.valid_signals():  # none wrapped (CI may start with SIGINT ignored)
        handler = signal.getsignal(signum)
        owner = getattr(handler, "__module__", None) or type(handler).__module__
        assert not str(owner).startswith("trackgen_contract"), (signum, handler)
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_a_suite_with_a_hot_path_marker_of_its_own_turns_the_plugin_off(pytester):
    pytester.makeini("[pytest]\nmarkers =\n    hot_path(tier): the suite's own marker\n")
    pytester.makepyfile("""
import pytest

@pytest.mark.hot_path("tier1")
def test_own_marker():
    pass
""")
    taken = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers")
    taken.assert_outcomes(errors=1)  # the plugin reads the marker as its own
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--strict-markers", "-p", "no:trackgen_contract"
    )
    result.assert_outcomes(passed=1)


def test_clean_test_passes_and_fixture_setup_is_not_checked(run):
    result = run(
        """
@pytest.mark.hot_path
def test_clean(buffers):
    gen.launch_with_stream(buffers)
""",
        "--strict-markers",
        "-W",
        "error::pytest.PytestUnknownMarkWarning",
    )
    result.assert_outcomes(passed=1)


def test_breach_fails_with_the_users_line(run):
    result = run("""
@pytest.mark.hot_path
def test_dirty(buffers):
    gen.read_back(buffers)
""")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            ">*gen.read_back(buffers)",
            "*return a.numpy()*",
            "E*HotPathViolation: host sync on a hot path: wp.array.numpy() from read_back*",
        ]
    )
    assert "trackgen_contract/guard.py" not in result.stdout.str()  # the guard's frames hidden


def test_non_strict_collects_every_breach(run):
    result = run("""
@pytest.mark.hot_path(strict=False)
def test_dirty(buffers):
    gen.read_back(buffers)
    gen.allocate(2)
    gen.launch_without_stream(buffers)
""")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*host sync (1)*",
            "*wp.array.numpy() from read_back*",
            "*return a.numpy()*",
            "*allocation (1)*",
            "*wp.zeros() from allocate*",
            "*stream (1)*",
            "*wp.launch without stream= from launch_without_stream*",
        ]
    )


def test_marker_options_reach_the_guard(run):
    result = run("""
@pytest.mark.hot_path(host_sync=False, modules=("elsewhere",))
def test_options(buffers):
    gen.read_back(buffers)
    gen.launch_without_stream(buffers)

@pytest.mark.hot_path(allow=[("wp.array.numpy", "acme.gen", "read_back")])
def test_allowed(buffers):
    gen.read_back(buffers)
""")
    # No host sync checked, no stream rule for acme's launch: nothing left to check.
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*_ test_options _*", "nothing was checked*"])
    assert "HotPathViolation" not in result.stdout.str()


ALLOW_KEYS = """
USED = ("wp.array.numpy", "acme.gen", "read_back")
MISSPELT = ("wp.array.numpy", "acme.gen", "readback")
LATER = ("wp.array.numpy", "acme.gen", "read_back_later")

@pytest.mark.parametrize("i", range(3))
@pytest.mark.hot_path(allow=[USED, MISSPELT])
def test_keys(buffers, i):
    if i == 0:
        gen.read_back(buffers)
    gen.launch_with_stream(buffers)

@pytest.mark.hot_path(allow=[MISSPELT, LATER])
def test_cut_short(buffers):
    gen.launch_with_stream(buffers)
    raise ValueError("before its host sync")
"""


@pytest.mark.parametrize("workers", [(), ("-p", "xdist", "-n", "2")])
def test_an_allow_key_that_let_nothing_through_is_named_once(pytester, monkeypatch, workers):
    """A key used by one test of several is used; a misspelt one is named once, with its
    tests; a key only a test cut short carried may have been used later: not named. Across
    xdist workers too (the controller gathers the keys)."""
    monkeypatch.setenv("PYTHONPATH", os.path.join(os.path.dirname(__file__)))
    pytester.makepyfile(HEADER + ALLOW_KEYS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *workers)
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    misspelt = "('wp.array.numpy', 'acme.gen', 'readback')"
    assert out.count(f"unused allow key {misspelt} in the hot_path marker of") == 1
    result.stdout.fnmatch_lines(
        [
            f"unused allow key {misspelt} in the hot_path marker of *test_keys* and 2 more: it let "
            "no host sync through in this session"
        ]
    )
    assert "'read_back')" not in out.split("trackgen_contract ==")[-1]
    assert "read_back_later" not in out


def test_swallowed_breach_still_fails(run):
    result = run("""
@pytest.mark.hot_path
def test_swallow(buffers):
    assert gen.swallow(gen.read_back, buffers) == "swallowed"
""")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*HotPathViolation: host sync (1)*", "*  return a.numpy()"])


BLINDING = """
import sys

def take_the_hook_away():
    if sys.version_info >= (3, 12):
        monitoring = sys.monitoring
        tool = next(i for i in range(6) if monitoring.get_tool(i) == "trackgen_contract")
        monitoring.register_callback(tool, monitoring.events.PY_START, lambda *a: None)
    else:
        sys.setprofile(None)

@pytest.mark.hot_path(strict=False)
def test_blind(buffers):
    gen.launch_with_stream(buffers)
    take_the_hook_away()
    gen.launch_without_stream(buffers)
"""


@pytest.mark.parametrize("options", [(), ("--hot-path-write-baseline", "b.json")])
def test_a_blind_guard_fails_its_test_strict_or_not(run, options):
    # BUG: a blind guard failed its test only when strict: a non-strict marker, or any
    # marker under a baseline option, passed a test whose breaches went unseen.
    result = run(BLINDING, *options)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the guard did not see every call of the test's call phase*"])


def test_unmarked_tests_are_not_guarded(run):
    result = run("""
def test_plain(buffers):
    gen.read_back(buffers)
""")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ('hot_path("acme")', "takes keyword options only"),
        ("hot_path(stream='yes')", "stream=...) must be True or False"),
        (
            "hot_path(checks=['x'])",
            "unknown option 'checks'; the options are host_sync, allocation, stream, capture, "
            "modules, allow, strict",
        ),
        (
            "hot_path(host_sync=False, allocation=False, stream=False, capture=False)",
            "capture=False) checks nothing: leave at least one of host_sync, allocation",
        ),
    ],
)
def test_bad_marker_options_are_setup_errors(run, marker, message):
    # An error of the test's setup, not a failure of the code under test (as a call-phase
    # UsageError showed before): its fixtures are not set up, its body does not run, and
    # the next test runs as usual.
    result = run(f"""
@pytest.fixture
def expensive():
    raise AssertionError("the fixture was set up")

@pytest.mark.{marker}
def test_bad(expensive):
    raise AssertionError("the body ran")

def test_next():
    pass
""")
    result.assert_outcomes(errors=1, passed=1)
    output = result.stdout.str()
    assert message in output and "ERROR at setup of test_bad" in output
    assert "During handling" not in output
    assert "the fixture was set up" not in output and "the body ran" not in output
    assert "Traceback" not in output and "trackgen_contract/" not in output


def test_a_marker_option_that_an_iterator_gives_is_read_once_for_every_test(run):
    # BUG: one marker serves all the tests it marks (a module's, each parameter's): the
    # first test used the iterator up and the next ones ran with the allowance gone
    # (their host sync failed them) or with modules= empty (a setup error).
    result = run("""
KEYS = [("wp.array.numpy", "acme.gen", "read_back")]
pytestmark = pytest.mark.hot_path(allow=(k for k in KEYS), modules=iter(["acme"]))

def test_first(buffers):
    gen.read_back(buffers)

@pytest.mark.parametrize("n", [1, 2])
def test_each(buffers, n):
    gen.read_back(buffers)
    gen.launch_with_stream(buffers)

class TestInAClass:
    pytestmark = pytest.mark.hot_path(modules=map(str, ["acme"]))

    @pytest.mark.parametrize("n", [1, 2])
    def test_each(self, buffers, n):
        gen.launch_with_stream(buffers)
""")
    result.assert_outcomes(passed=5)


@pytest.mark.parametrize(
    ("stop", "outcomes", "shown"),
    [
        (
            'raise RuntimeError("the keys ran out")',
            {"errors": 2},
            "allow= is an iterator that raised RuntimeError('the keys ran out') as it was read",
        ),
        ('pytest.skip("no keys today")', {"skipped": 2}, None),
    ],
    ids=["raises", "skips"],
)
def test_a_marker_option_whose_iterator_stops_stops_every_test_it_marks(run, stop, outcomes, shown):
    # BUG (found in review): the first test had the iterator's error (or pytest.skip(),
    # not an Exception), and the next ones ran with what it had given before.
    # "-rN", no short summary: on CI (CI=1) pytest repeats each message there in full.
    result = run(
        f"""
def keys():
    yield ("wp.array.numpy", "acme.gen", "read_back")
    {stop}

pytestmark = pytest.mark.hot_path(allow=keys())

def test_first(buffers):
    gen.read_back(buffers)

def test_second(buffers):
    gen.read_back(buffers)
""",
        "-rN",
    )
    result.assert_outcomes(**outcomes)
    if shown is not None:
        assert result.stdout.str().count(shown) == 2


def test_a_test_that_is_skipped_is_not_checked_for_its_markers_options(run):
    # The setup check of the options ran before pytest's skip and xfail marks, and
    # before unittest's skip: tests that were skipped became errors.
    result = run("""
import unittest

BAD = pytest.mark.hot_path(strict="yes")

@pytest.mark.skip(reason="not on this machine")
@BAD
def test_skipped():
    pass

@pytest.mark.skipif(True, reason="no device")
@BAD
def test_skipif():
    pass

@pytest.mark.xfail(reason="known", run=False)
@BAD
def test_xfail_not_run():
    pass

@unittest.skip("not here")
@BAD
class TestSkippedCase(unittest.TestCase):
    def test_a(self):
        pass

class TestCase(unittest.TestCase):
    @unittest.skip("not here")
    @BAD
    def test_b(self):
        pass

    @BAD
    def test_c(self):
        pass
""")
    result.assert_outcomes(skipped=4, xfailed=1, errors=1)
    assert "ERROR at setup of TestCase.test_c" in result.stdout.str()


def test_guard_factory_fixture(run):
    result = run("""
def test_factory(hot_path_guard, buffers):
    with hot_path_guard(strict=False) as guard:
        gen.read_back(buffers)
    assert [v.api for v in guard.violations] == ["wp.array.numpy()"]
""")
    result.assert_outcomes(passed=1)


def test_a_breach_shows_the_users_frames_only(run):
    result = run("""
from acme.kernels import add_one

@pytest.mark.hot_path
def test_direct(buffers):
    wp.launch(add_one, dim=8, inputs=[buffers], device="cpu")

@pytest.mark.hot_path
def test_nested(buffers):
    gen.launch_without_stream(buffers)
""")
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*def test_direct(buffers):",
            '>*wp.launch(add_one, dim=8, inputs=[[]buffers], device="cpu")',
            "E*HotPathViolation: stream on a hot path: wp.launch without stream= from test_direct*",
            "test_a_breach_shows_the_users_frames_only.py:*: HotPathViolation",
        ]
    )
    result.stdout.fnmatch_lines([">*gen.launch_without_stream(buffers)", "*acme/gen.py:*"])
    assert "def launch(" not in text  # Warp's signature is not dumped
    assert "warp/_src" not in text and "trackgen_contract/" not in text  # nor its frames, ours
    assert "raised in repr()" not in text  # no argument dumps (pytest cannot repr a wp.array)


def test_a_breach_outside_the_test_function_shows_the_users_frames(run):
    # A unittest setUp and a fixture the test asks for run in the call phase, called by
    # the runner's frames, not the test function's.
    result = run("""
import unittest

@pytest.mark.hot_path
class TestCase(unittest.TestCase):
    def setUp(self):
        self.buffer = wp.zeros(4, device="cpu")  # the setUp line

    def test_it(self):
        pass

@pytest.fixture
def late():
    return wp.zeros(4, device="cpu")  # the fixture line

@pytest.mark.hot_path
def test_asks(request):
    request.getfixturevalue("late")
""")
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    assert "All traceback entries are hidden" not in text
    result.stdout.fnmatch_lines(
        [
            '>*self.buffer = wp.zeros(4, device="cpu")  # the setUp line',
            "E*HotPathViolation: allocation on a hot path*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            '>*request.getfixturevalue("late")',
            '>*return wp.zeros(4, device="cpu")  # the fixture line',
        ]
    )
    assert "_pytest/" not in text and "pluggy/" not in text and "unittest/case.py" not in text


def test_a_test_that_fails_on_its_own_shows_the_breaches_collected_before(run):
    result = run("""
@pytest.mark.hot_path(strict=False)
def test_fails(buffers):
    gen.read_back(buffers)
    assert False, "the test's own failure"
""")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: the test's own failure*",
            "*Captured hot-path breaches call*",
            "host sync (1)*",
            "*return a.numpy()*",
        ]
    )


def test_one_shot_iterables_in_a_marker_are_read_once(run):
    result = run("""
KEYS = [("wp.array.numpy", "acme.gen", "read_back")]

@pytest.mark.hot_path(allow=map(tuple, KEYS), modules=(m for m in ["acme"]))
def test_allowed(buffers):
    gen.read_back(buffers)
""")
    result.assert_outcomes(passed=1)


def test_a_breach_found_on_exit_shows_the_report_only(run):
    result = run("""
@pytest.mark.hot_path(strict=False)
def test_collected(buffers):
    gen.read_back(buffers)
""")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E*HotPathViolation: host sync (1)*", "*return a.numpy()*"])
    assert "pytest_plugin.py" not in result.stdout.str()  # not the plugin's hook


def test_full_trace_keeps_every_frame(run):
    result = run(
        """
@pytest.mark.hot_path
def test_dirty(buffers):
    gen.read_back(buffers)
""",
        "--full-trace",
    )
    result.assert_outcomes(failed=1)
    warp_dir = os.path.dirname(os.path.realpath(wp.__file__))  # Warp's frames are shown
    assert warp_dir in result.stdout.str()


def test_a_marked_test_that_calls_no_warp_checked_nothing(run):
    result = run("""
@pytest.mark.hot_path
def test_nothing(buffers):
    assert buffers.shape == (8,)   # fixtures ran; the call phase itself made no Warp call
""")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*nothing was checked: the test's call phase made no watched Warp call*"]
    )


@pytest.mark.parametrize("learnt_before", [False, True])
def test_a_marker_narrowed_to_a_module_the_test_never_calls_from_checked_nothing(
    run, learnt_before
):
    # BUG: a stream-only marker with a mistyped modules= passed, its launches (made
    # outside the module) counted as checked.
    source = """
import trackgen_contract

A = wp.zeros(8, dtype=float, device="cpu")


def test_all_checks():
    with trackgen_contract.hot_path_guard():
        gen.launch_with_stream(A)


@pytest.mark.hot_path(modules=("acme.gne",), host_sync=False, allocation=False, capture=False)
def test_stream_narrowed():
    gen.launch_with_stream(A)
    wp.zeros(4, dtype=float, device="cpu")


@pytest.mark.hot_path(modules=("acme",), host_sync=False, allocation=False, capture=False)
def test_stream_in_acme():
    gen.launch_with_stream(A)
"""
    result = run(source, *([] if learnt_before else ["-k", "not all_checks"]))
    result.assert_outcomes(
        passed=1 + learnt_before, failed=1, **({} if learnt_before else {"deselected": 1})
    )
    result.stdout.fnmatch_lines(["*_ test_stream_narrowed _*", "nothing was checked*modules=*"])


def test_a_test_whose_calls_its_checks_skip_checked_nothing_whatever_ran_before(run):
    # BUG: once an earlier test had found a launch site clean, its later calls counted
    # for every guard, so a host-sync-only test making only those launches passed after
    # it and failed alone.
    source = """
A = wp.zeros(8, dtype=float, device="cpu")


def launch():
    gen.launch_with_stream(A)


@pytest.mark.hot_path
def test_all_checks():
    launch()


@pytest.mark.hot_path(stream=False, allocation=False, capture=False)
def test_host_sync_only():
    launch()
"""
    together = run(source)
    together.assert_outcomes(passed=1, failed=1)
    together.stdout.fnmatch_lines(["*_ test_host_sync_only _*", "nothing was checked*"])
    alone = run(source, "-k", "host_sync_only")
    alone.assert_outcomes(failed=1, deselected=1)


def test_a_bad_pure_python_setting_fails_the_guarded_tests_alone(pytester, monkeypatch):
    # BUG: the setting was refused as the package was imported: the plugin's import, in
    # every pytest run of the environment, ended in a traceback through it (exit 3).
    pytester.makepyfile(
        """
import pytest

@pytest.mark.hot_path
def test_marked():
    pass

def test_fixture(hot_path_guard):
    pass

def test_plain():
    pass
"""
    )
    monkeypatch.setenv("TRACKGEN_CONTRACT_PURE_PYTHON", "yes")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*test_marked*@pytest.mark.hot_path: TRACKGEN_CONTRACT_PURE_PYTHON must be 1, 0 or"
            " empty, not 'yes'",
            "*test_fixture*the hot_path_guard fixture: TRACKGEN_CONTRACT_PURE_PYTHON must be 1,"
            " 0 or empty, not 'yes'",
        ]
    )
    assert "pytest_plugin.py" not in result.stdout.str()  # a setup error, not the plugin's
