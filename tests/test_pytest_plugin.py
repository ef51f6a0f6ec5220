"""The pytest plugin, through pytester: the marker, the fixture, and what a failure shows."""

import pytest

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
    result.assert_outcomes(passed=2)


def test_swallowed_breach_still_fails(run):
    result = run("""
@pytest.mark.hot_path
def test_swallow(buffers):
    assert gen.swallow(gen.read_back, buffers) == "swallowed"
""")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*HotPathViolation: host sync (1)*"])


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
        ("hot_path(checks=['x'])", "unexpected keyword argument 'checks'"),
    ],
)
def test_bad_marker_options_are_usage_errors(run, marker, message):
    result = run(f"""
@pytest.mark.{marker}
def test_bad(buffers):
    pass
""")
    assert result.ret != 0
    assert message in result.stdout.str() + result.stderr.str()


def test_guard_factory_fixture(run):
    result = run("""
def test_factory(hot_path_guard, buffers):
    with hot_path_guard(strict=False) as guard:
        gen.read_back(buffers)
    assert [v.api for v in guard.violations] == ["wp.array.numpy()"]
""")
    result.assert_outcomes(passed=1)
