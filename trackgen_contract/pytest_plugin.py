"""pytest plugin: the ``hot_path`` marker, the ``hot_path_guard`` fixture, and session-wide
SARIF output and baselines.

    @pytest.mark.hot_path(modules=("acme",))
    def test_generate_is_capturable(generator):   # fixtures set up unguarded
        generator.generate()                       # the call phase runs under a guard

A breach fails the test with the guard's report and each breach's source line, the
traceback cut down to the test's own frames. The marker takes the options of
`trackgen_contract.hot_path_guard`; with ``strict=False`` every breach of the test is
collected before it fails, instead of stopping at the first. A marked test whose call
phase makes no watched Warp call fails too: nothing was checked. A marker with bad
options is an error in the test's setup, before its fixtures run.

Options: ``--hot-path-sarif PATH`` writes every marked test's breaches as SARIF 2.1.0;
``--hot-path-write-baseline PATH`` records them as a baseline, and
``--hot-path-baseline PATH`` accepts what a baseline lists (per test), failing a test only
on its new breaches. With either baseline option a marked test runs to its end. A guard
a test makes itself (the ``hot_path_guard`` fixture) is its own, in none of these.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import shlex
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from types import FrameType

import pytest

from . import __version__, pragmas
from . import baseline as baselines
from . import sarif as sarifs
from .guard import HotPathGuard, HotPathViolation, format_report, hot_path_guard
from .project import (
    OutputError,
    check_writable,
    claim,
    path_option,
    portable_path,
    project_files,
)
from .recording import Row, rows
from .rules import Key, Violation
from .sites import Site, is_internal
from .tracer import check_setting, keep_armed

_MARKER_HELP = (
    "hot_path(**options): run the test's call phase (not its fixtures) under a "
    "trackgen_contract guard and fail the test on a hot-path contract breach. Options as "
    "trackgen_contract.hot_path_guard: host_sync, allocation, stream, capture (bools), "
    "modules, allow, strict."
)
_SWITCHES = ("host_sync", "allocation", "stream", "capture")
# The marker's options: hot_path_guard's keywords.
_OPTIONS = tuple(inspect.signature(HotPathGuard).parameters)
_FILES_KEY = "trackgen_contract_files"
_PATH_OPTIONS = ("--hot-path-sarif", "--hot-path-baseline", "--hot-path-write-baseline")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("trackgen_contract", "hot-path contract (trackgen_contract)")
    group.addoption(
        "--hot-path-sarif",
        metavar="PATH",
        type=path_option,
        help="write every marked test's breaches as SARIF 2.1.0 to PATH",
    )
    group.addoption(
        "--hot-path-baseline",
        metavar="PATH",
        type=path_option,
        help="accept the breaches this baseline lists; fail a test only on new ones",
    )
    group.addoption(
        "--hot-path-write-baseline",
        metavar="PATH",
        type=path_option,
        help="write every marked test's breaches to PATH as a baseline, and accept them",
    )


@dataclass
class _Session:
    """What the session gathers from its guarded tests (on the xdist controller too)."""

    baseline: baselines.Baseline | None = None
    collecting: bool = False  # a baseline is read or written: guards run to the end
    found: list[tuple[Row, str]] = field(default_factory=list)  # breaches, with their test
    allowed: list[tuple[Row, str]] = field(default_factory=list)  # pragmas, allow keys
    # The markers' allow= keys, with the tests that ran to their end with them, and the keys
    # that let something through (in any test).
    allow_keys: dict[Key, list[str]] = field(default_factory=dict)
    allow_used: set[Key] = field(default_factory=set)
    tests: set[str] = field(default_factory=set)  # guarded tests that ran
    completed: set[str] = field(default_factory=set)  # those whose call phase ran to its end
    checks: set[str] = field(default_factory=set)
    files: set[str] = field(default_factory=set)  # where pragmas may be
    notes: list[str] = field(default_factory=list)  # the terminal summary's lines
    # Held from the first guarded test to the end of the session: guards enter and exit
    # without touching instrumentation (a session that guards nothing holds nothing).
    armed: keep_armed | None = None

    def keep_armed(self) -> None:
        if self.armed is None:
            self.armed = keep_armed().__enter__()

    def disarm(self) -> None:
        armed, self.armed = self.armed, None
        if armed is not None:
            armed.__exit__(None, None, None)


_STATE = pytest.StashKey[_Session]()
_GUARD = pytest.StashKey["HotPathGuard | None"]()  # made at the test's setup
_RESULT = pytest.StashKey[dict]()
_ITERATORS = pytest.StashKey[dict]()  # id(iterator) -> (iterator, what it gave)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER_HELP)
    state = _Session()
    config.stash[_STATE] = state
    _refuse_a_moved_rootdir(config)
    read = config.getoption("hot_path_baseline", None)
    write = config.getoption("hot_path_write_baseline", None)
    if read and write:
        raise pytest.UsageError(
            "--hot-path-baseline and --hot-path-write-baseline go one at a time: compare "
            "with the baseline, or rewrite it"
        )
    try:
        taken = {os.path.realpath(read): "--hot-path-baseline"} if read else {}
        for option, path in (("--hot-path-sarif", config.getoption("hot_path_sarif", None)),
                             ("--hot-path-write-baseline", write)):  # fmt: skip
            if path:
                check_writable(path, option)
                claim(taken, path, option)
        if read:
            state.baseline = baselines.load(read, "--hot-path-write-baseline")
    except (OutputError, baselines.BaselineError) as exc:
        prefix = "" if isinstance(exc, OutputError) else "--hot-path-baseline "
        raise pytest.UsageError(f"{prefix}{exc}") from None
    state.collecting = bool(read or write)
    config.pluginmanager.register(_SessionHooks(state), "trackgen_contract-session")


def _refuse_a_moved_rootdir(config: pytest.Config) -> None:
    """Refuse a session whose rootdir one of this plugin's paths moved.

    pytest chooses its rootdir (and configuration file) before it loads plugins, when
    their options are not known yet: the path after ``--hot-path-baseline``, written as a
    separate argument, is then taken for a test path, and where it lies outside the
    project the rootdir moves up, and with it every test id, which baselines and SARIF
    files name (pytest's issue #8846). ``--option=PATH`` is read as one option. pytest's
    own functions are asked for the rootdir from the command line's test paths with these
    paths among them, as it chose it, and without: refused where the first is the
    session's and the second is not (where they cannot be asked, nothing is)."""
    if hasattr(config, "workerinput"):  # an xdist worker: its controller checked
        return
    given = [*shlex.split(os.environ.get("PYTEST_ADDOPTS", "")), *config.invocation_params.args]
    here = config.invocation_params.dir
    taken = [
        (option, value)
        for option, value in pairwise(given)
        if option in _PATH_OPTIONS and (here / value).exists()
    ]
    if not taken:
        return
    try:
        paths = list(config._parser.parse_known_args(given).file_or_dir)  # our options known
        seen_first = [
            arg for before, arg in pairwise(["", *given])
            if arg in paths or before in _PATH_OPTIONS
        ]  # fmt: skip
        as_chosen, without = _rootdir_from(config, seen_first), _rootdir_from(config, paths)
    except Exception:  # another pytest's: the session runs as pytest set it up
        return
    if as_chosen == config.rootpath and without != as_chosen:
        option, value = taken[0]
        raise pytest.UsageError(
            f"{option} {value}: written as two arguments, the path moved pytest's rootdir "
            f"to {config.rootpath} (from {without}): pytest took it for a test path before "
            "this plugin's options were known, and test ids, which baselines and SARIF "
            f"files name, are relative to the rootdir. Write {option}={value}"
        )


def _rootdir_from(config: pytest.Config, paths: list[str]) -> Path:
    """The rootdir pytest's own function chooses from these test paths (and the
    command line's ``-c`` and ``--rootdir``)."""
    from _pytest.config.findpaths import determine_setup

    known = {
        "inifile": config.option.inifilename,
        "override_ini": config.option.override_ini,
        "args": paths,
        "rootdir_cmd_arg": config.option.rootdir or None,
        "invocation_dir": config.invocation_params.dir,
    }
    wanted = inspect.signature(determine_setup).parameters
    return determine_setup(**{k: v for k, v in known.items() if k in wanted})[0]


# --- the guard --------------------------------------------------------------------------------


def _guard_for(item: pytest.Item, *, run_through: bool = False) -> HotPathGuard | None:
    """The guard a marked test runs under (None for an unmarked test); `run_through` makes
    it non-strict, to collect every breach for a baseline. None too for a test that a
    ``unittest.skip`` decorator skips: pytest skips it in its setup or its call phase."""
    marker = item.get_closest_marker("hot_path")
    if marker is None or _unittest_skips(item):
        return None
    where = f"{item.nodeid}: @pytest.mark.hot_path"
    if marker.args:
        raise pytest.UsageError(
            f"{where} takes keyword options only (as hot_path_guard), "
            f"got positional {marker.args!r}"
        )
    options = {}
    for name, value in marker.kwargs.items():
        try:
            options[name] = _read_once(item.config, value)
        except _Unreadable as error:
            raise pytest.UsageError(f"{where}: {name}= {error}") from None
    unknown = [name for name in options if name not in _OPTIONS]
    if unknown:
        raise pytest.UsageError(
            f"{where}: unknown option {unknown[0]!r}; the options are {', '.join(_OPTIONS)}"
        )
    if all(options.get(name) is False for name in _SWITCHES):
        off = ", ".join(f"{name}=False" for name in _SWITCHES)
        raise pytest.UsageError(
            f"{where}({off}) checks nothing: leave at least one of {', '.join(_SWITCHES)} on"
        )
    if run_through:
        options["strict"] = False
    try:
        return HotPathGuard(**options)
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"{where}: {exc}") from None


def _read_once(config: pytest.Config, value: object) -> object:
    """`value`, or, for an iterator, what it gave (a tuple), read once for every test: one
    marker serves all the tests it marks (a module's or a class's, each parameter's), and
    the first would use an iterator up."""
    if not isinstance(value, Iterator):
        return value
    read = config.stash.setdefault(_ITERATORS, {})
    known = read.get(id(value))
    if known is None or known[0] is not value:
        try:
            items: object = tuple(value)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as error:  # the same error for every test: it is used up now
            items = _Unreadable(f"is an iterator that raised {error!r} as it was read")
        except BaseException as outcome:  # pytest.skip() or fail() in it: every test's
            items = outcome
        known = read[id(value)] = (value, items)  # the iterator kept: its id too
    if isinstance(known[1], BaseException):
        raise known[1]
    return known[1]


class _Unreadable(Exception):
    """A marker option's iterator that raised as it was read."""


def pytest_runtest_setup(item: pytest.Item) -> None:
    """The test's guard, made from its marker before its fixtures are set up (an iterator
    among its options read once, for all its tests). A marker
    with bad options is the test's setup error, reported before its body runs: it is not
    the code under test that failed. After the skip and xfail marks (theirs run first): a
    test that does not run is not checked."""
    try:
        item.stash[_GUARD] = _guard_for(item, run_through=item.config.stash[_STATE].collecting)
    except pytest.UsageError as error:
        message = str(error)
    else:
        return
    pytest.fail(message, pytrace=False)  # outside the except: no "during handling" echo


def _unittest_skips(item: pytest.Item) -> bool:
    """Whether `item` is a unittest test that a ``unittest.skip`` decorator skips."""
    owners = (getattr(item, "obj", None), getattr(item, "cls", None))
    return any(getattr(owner, "__unittest_skip__", False) for owner in owners)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    state = item.config.stash[_STATE]
    guard = item.stash.get(_GUARD, None)
    if guard is None:
        return (yield)
    del item.stash[_GUARD]  # not held past its test
    state.keep_armed()
    # An unreadable pragma's error, raised on exit, shows no frame of ours (nor the
    # guard's): the message names the comment's file and line. It stays a PragmaError (an
    # xfail(raises=...) may expect it).
    __tracebackhide__ = True
    try:
        with guard:  # a strict guard raises at the breach, or on exit
            result = yield
    except BaseException as exc:
        if guard.violations and not isinstance(exc, HotPathViolation):
            # The test failed on its own, after breaches a non-strict guard collected:
            # its report shows them beside its failure.
            text = format_report(guard.violations, with_source=True, allowed=guard.allowed)
            item.add_report_section("call", "hot-path breaches", text)
        raise
    finally:
        item.stash[_RESULT] = _result(item, guard)
    _fail_on(item, guard)
    return result


def _fail_on(item: pytest.Item, guard: HotPathGuard) -> None:
    __tracebackhide__ = True
    state = item.config.stash[_STATE]
    violations = guard.violations
    if state.baseline is not None:
        found = [(row, item.nodeid) for row in rows(_counted(violations))]
        new = baselines.compare(found, state.baseline).new
        violations = [v for v in violations if _is_in(v, new)]
    elif state.collecting:
        violations = []  # being written to the baseline
    if violations:  # a non-strict guard: fail with everything it collected
        text = format_report(violations, with_source=True, allowed=guard.allowed)
        if state.baseline is not None:
            text = f"new since the baseline {state.baseline.path}:\n{text}"
        raise HotPathViolation(text)
    if guard.blind is not None:  # (a strict guard raised this on its exit)
        pytest.fail(
            "the guard did not see every call of the test's call phase, so it cannot vouch "
            f"for it: {guard.blind}",
            pytrace=False,
        )
    if not guard.calls:
        pytest.fail(
            "nothing was checked: the test's call phase made no watched Warp call that the "
            "checks of its @pytest.mark.hot_path look at (for the stream rules, see its "
            "modules=; guard the part that calls Warp, or drop the marker)",
            pytrace=False,
        )


def _counted(violations: list[Violation]) -> list[tuple[Violation, int]]:
    return [(v, 1) for v in violations]


def _is_in(violation: Violation, new: tuple[Row, ...]) -> bool:
    return any(
        (r.category, r.api, r.site) == (violation.category, violation.api, violation.site)
        for r in new
    )


# --- what a guarded test hands to the session (through xdist too: plain data) ---------------


def _site_data(site: Site) -> list:
    return [site.module, site.function, site.filename, site.lineno]


def _row_data(row: Row) -> dict:
    return {
        "category": row.category,
        "api": row.api,
        "site": _site_data(row.site),
        "count": row.count,
        "keys": [list(k) for k in row.keys],
        "allowed_by": row.allowed_by,
        "pragma": None
        if row.pragma is None
        else [row.pragma.filename, row.pragma.lineno, list(row.pragma.categories)],
    }


def _row_from(data: dict, test: str) -> Row:
    pragma = data["pragma"]
    return Row(
        category=data["category"],
        api=data["api"],
        site=Site(*data["site"]),
        count=data["count"],
        keys=tuple(tuple(k) for k in data["keys"]),  # type: ignore[misc]
        allowed_by=data["allowed_by"],
        pragma=None if pragma is None else pragmas.Pragma(pragma[0], pragma[1], tuple(pragma[2])),
        tests=(test,),
    )


def _result(item: pytest.Item, guard: HotPathGuard) -> dict:
    accepted = [key for key in guard.allowed if isinstance(key, pragmas.PragmaAllowed)]
    let_through = rows(
        ((key.violation, 1) for key in accepted),
        allowed_by="pragma",
        pragma={key.violation: key.pragma for key in accepted}.get,
    )
    used = {key for key in guard.allowed if not isinstance(key, pragmas.PragmaAllowed)}
    return {
        "breaches": [_row_data(r) for r in rows(_counted(guard.violations))],
        "let_through": [_row_data(r) for r in let_through],
        "checks": sorted(guard.checks),
        "allow": [list(key) for key in sorted(guard.allow)],
        "allow_used": [list(key) for key in sorted(used)],
    }


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when == "call" and _RESULT in item.stash:
        result = item.stash[_RESULT]
        # Ran to its end: what a baseline lists for it and it did not do is fixed. (Not a
        # test skipped, failed or blind midway: it may not have reached a listed breach.)
        excinfo = call.excinfo
        result["completed"] = excinfo is None or excinfo.errisinstance(HotPathViolation)
        report.trackgen_contract = result  # type: ignore[attr-defined]
    excinfo = call.excinfo
    if report.failed and excinfo is not None and excinfo.errisinstance(HotPathViolation):
        _trim(item, report, excinfo)
    return report


# --- a failure shows the user's frames ---------------------------------------------------


def _trim(item: pytest.Item, report: pytest.TestReport, excinfo: pytest.ExceptionInfo) -> None:
    """Show a hot-path breach from the test's own frames: not Warp's function (whose
    signature pytest would print whole), not this plugin's hook, no argument dumps."""
    config = item.config
    style = config.getoption("tbstyle", "auto")
    if config.getoption("fulltrace", False) or style not in ("auto", "long", "short"):
        return
    report.longrepr = excinfo.getrepr(
        style="short" if style == "short" else "long",
        funcargs=False,
        showlocals=config.getoption("showlocals", False),
        tbfilter=lambda info: _user_entries(info, style),
        chain=False,
    )


# The test runners' own modules: their frames call the user's (a test, its setUp, a
# fixture asked for in the test), they are not the user's.
_RUNNERS = ("_pytest", "pytest", "pluggy", "unittest")


def _user_entries(excinfo: pytest.ExceptionInfo, style: str) -> object:
    """The traceback's frames of the user's (pytest's `Traceback`): not those of Warp, this
    package or a test runner; none when the breach was raised after the test returned (the
    message names every site)."""
    kept = [
        entry
        for entry in excinfo.traceback
        if not is_internal(entry.frame.raw) and not _is_runners(entry.frame.raw)
    ]
    if style == "auto" and len(kept) > 2:
        kept = [kept[0], *(e.with_repr_style("short") for e in kept[1:-1]), kept[-1]]
    return excinfo.traceback.__class__(kept)


def _is_runners(frame: FrameType) -> bool:
    name = dict.get(frame.f_globals, "__name__")
    return type(name) is str and name.partition(".")[0] in _RUNNERS


# --- the session's end -----------------------------------------------------------------------


class _SessionHooks:
    """The session's hooks: gather what guarded tests report (from xdist workers too) and
    write the SARIF log and the baseline at the end, on the controller."""

    def __init__(self, state: _Session) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "trackgen_contract", None)
        if data is None or report.when != "call":
            return
        state, test = self.state, report.nodeid
        state.tests.add(test)
        if data["completed"]:
            state.completed.add(test)
            for key in data["allow"]:  # a test cut short may not have reached its use
                state.allow_keys.setdefault(tuple(key), []).append(test)
        state.allow_used.update(tuple(key) for key in data["allow_used"])
        state.checks.update(data["checks"])
        state.found += [(_row_from(r, test), test) for r in data["breaches"]]
        state.allowed += [(_row_from(r, test), test) for r in data["let_through"]]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        """xdist: a worker is done; keep the files where its tests' pragmas may be."""
        output = getattr(node, "workeroutput", None) or {}
        self.state.files.update(output.get(_FILES_KEY, ()))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        config, state = session.config, self.state
        files = project_files(config.rootpath)
        workeroutput = getattr(config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: the controller writes the files
            workeroutput[_FILES_KEY] = files
            return
        state.files.update(files)
        status = _finish(config, state)
        if status is not None and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = status

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.state.notes:
            terminalreporter.section("trackgen_contract")
            for line in self.state.notes:
                terminalreporter.write_line(line)


def _finish(config: pytest.Config, state: _Session) -> pytest.ExitCode | None:
    root = config.rootpath
    path_of = lambda filename: portable_path(filename, root)  # noqa: E731
    let_through = [row for row, _ in state.allowed]
    compared = None
    if state.baseline is not None:
        compared = baselines.compare(state.found, state.baseline, tests_run=state.completed)
        _note_baseline(state, compared)
        let_through += [dataclasses.replace(r, allowed_by="baseline") for r in compared.accepted]
    write = config.getoption("hot_path_write_baseline", None)
    if write:
        entries = baselines.entries(state.found, path_of)
        baselines.write(write, entries)
        written = f"{len(entries)} baseline entr{'y' if len(entries) == 1 else 'ies'}"
        state.notes.append(f"wrote {written} to {write}")
    sarif = config.getoption("hot_path_sarif", None)
    if sarif:
        breaches = [row for row, _ in state.found] if compared is None else list(compared.new)
        if write:
            let_through += [dataclasses.replace(r, allowed_by="baseline") for r in breaches]
            breaches = []
        log = sarifs.document(
            _merged(breaches),
            _merged(let_through),
            root=root,
            version=__version__,
            with_baseline=compared is not None,
        )
        sarifs.write(sarif, log)
        tests = f"{len(state.tests)} marked test{'' if len(state.tests) == 1 else 's'}"
        state.notes.append(f"wrote SARIF for {tests} to {sarif}")
    _note_allow_keys(state)
    return _note_pragmas(state) if state.tests else None  # none ran: no pragma was in use


def _merged(found: list[Row]) -> list[Row]:
    """One row per (category, api, site, reason) across tests, naming every test."""
    merged: dict[tuple, Row] = {}
    for row in found:
        key = (row.category, row.api, row.site, row.allowed_by, row.pragma)
        known = merged.get(key)
        if known is None:
            merged[key] = row
        else:
            merged[key] = dataclasses.replace(
                known,
                count=known.count + row.count,
                keys=tuple(sorted({*known.keys, *row.keys})),
                tests=(*known.tests, *row.tests),
            )
    return list(merged.values())


def _note_baseline(state: _Session, compared: baselines.Comparison) -> None:
    path = state.baseline.path if state.baseline else ""
    accepted = len(compared.accepted)
    state.notes.append(
        f"baseline {path}: accepted {accepted} breach site{'s' * (accepted != 1)}; "
        f"{len(compared.new)} new"
    )
    if compared.fixed:
        state.notes.append(
            f"fixed since the baseline ({len(compared.fixed)}): rewrite it with "
            f"--hot-path-write-baseline {path} to lock the gain in"
        )
        state.notes += [f"  {entry}" for entry in compared.fixed]


def _note_allow_keys(state: _Session) -> None:
    # A key that matches nothing is most often misspelt: said, as an unused pragma is.
    for key, tests in state.allow_keys.items():
        if key not in state.allow_used:
            more = f" and {len(tests) - 1} more" if len(tests) > 1 else ""
            state.notes.append(
                f"unused allow key {key!r} in the hot_path marker of {tests[0]}{more}: it let "
                "no host sync through in this session"
            )


def _note_pragmas(state: _Session) -> pytest.ExitCode | None:
    found, errors = pragmas.scan(state.files)
    used = {
        (row.pragma.filename, row.pragma.lineno, row.category)
        for row, _ in state.allowed
        if row.pragma is not None
    }
    for pragma, idle in pragmas.unused(found, used, state.checks):
        state.notes.append(
            f"unused pragma at {pragma.location}: allow {', '.join(idle)} accepted nothing "
            "in this session"
        )
    state.notes += [f"error: {error}" for error in errors]
    return pytest.ExitCode.USAGE_ERROR if errors else None


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None:
        state.disarm()


@pytest.fixture(name="hot_path_guard")
def guard_factory(request: pytest.FixtureRequest) -> Callable[..., HotPathGuard]:
    """A guard factory: `trackgen_contract.hot_path_guard`, to guard part of a test."""
    try:
        check_setting()
    except ValueError as exc:  # the test's setup error, as a marked test's
        message = f"{request.node.nodeid}: the hot_path_guard fixture: {exc}"
    else:
        request.config.stash[_STATE].keep_armed()
        return hot_path_guard
    pytest.fail(message, pytrace=False)  # outside the except: no "during handling" echo
