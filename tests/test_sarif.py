"""SARIF 2.1.0 output, validated against the official schema: from the command line (through
a subprocess) and from the pytest plugin (through pytester)."""

import copy
import json
from pathlib import Path

import jsonschema
import pytest
from test_cli import BREACHES, PRELUDE, TESTS, program, trace

from trackgen_contract import sarif

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text())

pytest_plugins = ["pytester"]


def valid(path):
    log = json.loads(Path(path).read_text())
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    return log


@pytest.mark.parametrize(
    "path", ["/tmp/a b/c%d.py", "/tmp/./x/../ü.py", "/tmp/q?#&=+,;@:$!'()*[]~.py", "/tmp/dir/"]
)
def test_file_uris_are_as_pathlib_writes_them(path):
    assert sarif._file_uri(path) == Path(path).as_uri()


def test_a_location_inside_the_project_is_a_uri_reference_resolving_to_its_file(tmp_path):
    # BUG: the relative path went in as written: a space, "#" or "%" in a file's name made
    # a reference that resolves elsewhere ("#" starts a fragment) or none.
    (tmp_path / ".git").mkdir()
    folder = tmp_path / "ünï cødé"
    folder.mkdir()
    path = program(folder, PRELUDE + "a.numpy()\n", "mod lével#1%.py")
    status, _, err = trace("--sarif", tmp_path / "r.sarif", path, cwd=tmp_path)
    assert status == BREACHES, err
    run = valid(tmp_path / "r.sarif")["runs"][0]
    base = run["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    artifact = run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact["uriBaseId"] == "%SRCROOT%"
    assert base + artifact["uri"] == path.resolve().as_uri()


def test_the_schema_catches_a_broken_log(tmp_path):
    path = program(tmp_path, PRELUDE + "a.numpy()\n")
    trace("--sarif", tmp_path / "r.sarif", path)
    log = valid(tmp_path / "r.sarif")
    broken = copy.deepcopy(log)
    broken["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(SCHEMA).validate(broken)


DIRTY = (
    PRELUDE
    + """\
for _ in range(3):
    a.numpy()
    b = wp.zeros(2, dtype=float, device="cpu")   # trackgen_contract: allow allocation
    gen.read_back(a)
"""
)


def test_command_line_sarif(tmp_path):
    (tmp_path / ".git").mkdir()  # the project root: locations are relative to it
    path = program(tmp_path, DIRTY)
    out = tmp_path / "r.sarif"
    status, _, err = trace("--sarif", out, "--allow", "wp.array.numpy:acme.gen:read_back", path,
                           cwd=tmp_path)  # fmt: skip
    assert status == BREACHES, err
    log = valid(out)
    run = log["runs"][0]
    assert log["version"] == "2.1.0"
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == ["host_sync", "allocation", "stream", "capture"]
    assert "move it out of the hot path" in rules[0]["help"]["text"]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"
    open_results = [r for r in run["results"] if "suppressions" not in r]
    # one result per site: the readback at line 11 and the prelude's allocation at line 9
    found = sorted(
        (r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"])
        for r in open_results
    )
    assert found == [("allocation", 9), ("host_sync", 11)]
    readback = next(r for r in open_results if r["ruleId"] == "host_sync")
    location = readback["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "prog.py", "uriBaseId": "%SRCROOT%"}
    assert location["region"]["snippet"]["text"] == "a.numpy()"
    assert readback["properties"]["calls"] == 3
    suppressed = {r["ruleId"]: r["suppressions"][0] for r in run["results"] if "suppressions" in r}
    assert suppressed["allocation"]["kind"] == "inSource"  # the line pragma
    assert "prog.py:12" in suppressed["allocation"]["justification"]
    assert suppressed["host_sync"]["kind"] == "external"  # the --allow key
    invocation = run["invocations"][0]
    assert invocation["exitCode"] == BREACHES
    assert invocation["executionSuccessful"] is True  # breaches found: the analysis ran
    assert invocation["exitCodeDescription"].startswith("breaches found in a program")


@pytest.mark.parametrize(
    "tail, status",
    [
        ("a.numpy()\nraise SystemExit(3)\n", 3),  # the program failed after a breach
        ("a.numpy()  # trackgen_contract: alow host_sync\n", 2),  # an unreadable pragma
    ],
)
def test_a_run_that_did_not_check_what_it_was_asked_is_no_successful_execution(
    tmp_path, tail, status
):
    # BUG: executionSuccessful was true whatever the status: a program that died partway
    # (its later calls never made) read in a code-scanning upload as a complete analysis.
    path = program(tmp_path, PRELUDE + tail)
    out = tmp_path / "r.sarif"
    assert trace("--sarif", out, path)[0] == status
    invocation = valid(out)["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert invocation["exitCode"] == status


def test_pytest_plugin_sarif(pytester):
    pytester.syspathinsert(TESTS)
    pytester.makepyfile(
        test_hot="""
import pytest
import warp as wp
from acme import gen

@pytest.fixture
def a():
    return wp.zeros(4, dtype=float, device="cpu")

@pytest.mark.hot_path(strict=False)
def test_one(a):
    gen.read_back(a)
    a.numpy()   # trackgen_contract: allow host_sync

@pytest.mark.hot_path
def test_two(a):
    gen.read_back(a)

@pytest.mark.hot_path
def test_clean(a):
    gen.launch_with_stream(a)
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--hot-path-sarif", "out/r.sarif")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # before any test runs
    result.stderr.fnmatch_lines(["*--hot-path-sarif out/r.sarif: no such directory*"])
    # A report never replaces a file it does not own: another option's, or a source.
    (pytester.path / "base.json").write_text("{}")
    for options, message in [
        (["--hot-path-baseline", "base.json"], "that file is --hot-path-baseline's"),
        (["--hot-path-write-baseline", "./base.json"], "that file is --hot-path-sarif's"),
        (["--hot-path-sarif", "test_hot.py", "test_hot.py"], "is a Python source file"),
    ]:
        if options[0] != "--hot-path-sarif":
            options = ["--hot-path-sarif", "base.json", *options]
        result = pytester.runpytest("-p", "no:cacheprovider", *options)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, options
        result.stderr.fnmatch_lines([f"*{message}*"])
        assert (pytester.path / "base.json").read_text() == "{}"
    assert "def test_two" in (pytester.path / "test_hot.py").read_text()
    result = pytester.runpytest("-p", "no:cacheprovider", "--hot-path-sarif", "r.sarif")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*wrote SARIF for 3 marked tests to r.sarif*"])
    run = valid(pytester.path / "r.sarif")["runs"][0]
    [breach] = [r for r in run["results"] if "suppressions" not in r]
    assert breach["ruleId"] == "host_sync"
    assert breach["properties"]["tests"] == ["test_hot.py::test_one", "test_hot.py::test_two"]
    assert breach["properties"]["calls"] == 2
    [accepted] = [r for r in run["results"] if "suppressions" in r]
    location = accepted["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "test_hot.py", "uriBaseId": "%SRCROOT%"}
    assert accepted["suppressions"][0]["kind"] == "inSource"
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--hot-path-sarif", "r.sarif", "-k", "two"
    )
    result.stdout.fnmatch_lines(["*wrote SARIF for 1 marked test to r.sarif*"])


def test_pytest_plugin_sarif_across_xdist_workers(pytester, monkeypatch):
    # Each worker's tests reach the controller, which alone writes the log.
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    pytester.makepyfile(
        test_x="""
import pytest
import warp as wp
from acme import gen

@pytest.mark.parametrize("i", range(4))
@pytest.mark.hot_path(strict=False)
def test_dirty(i):
    gen.allocate(2)
    n = i  # trackgen_contract: allow capture
"""
    )
    result = pytester.runpytest_subprocess(
        "-n", "2", "-p", "no:cacheprovider", "--hot-path-sarif", "r.sarif"
    )
    result.assert_outcomes(failed=4)
    run = valid(pytester.path / "r.sarif")["runs"][0]
    [breach] = run["results"]
    assert breach["properties"]["calls"] == 4
    assert len(breach["properties"]["tests"]) == 4
    # the test module was imported by the workers only: its pragmas still reach the report
    result.stdout.fnmatch_lines(["*unused pragma at test_x.py:9: allow capture*"])
