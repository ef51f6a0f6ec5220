"""Line pragmas (``# trackgen_contract: allow CATEGORY``): in a guard, on the command line
(through a subprocess) and under the pytest marker (through pytester)."""

import contextlib
import gc
import importlib
import importlib.abc
import importlib.util
import json
import linecache
import py_compile
import sys
import textwrap
import traceback
import weakref
import zipfile

import pytest
import warp as wp
from test_cli import BREACHES, PRELUDE, program, trace

from trackgen_contract import HotPathViolation, hot_path_guard
from trackgen_contract.guard import format_report
from trackgen_contract.pragmas import Pragma, PragmaAllowed, PragmaError, _comments, parse, scan

pytest_plugins = ["pytester"]


def module(tmp_path, source, name="pragma_mod"):
    """Import `source` from a real file: a pragma is read from the file."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SOURCE = """\
import warp as wp

def accepted(a):
    return a.numpy()  # trackgen_contract: allow host_sync

def two(a):
    return a.numpy(), wp.zeros(2, device="cpu")  # trackgen_contract: allow allocation, host_sync

def wrong(a):
    return a.numpy()  # trackgen_contract: allow allocation

def unknown(a):
    return a.numpy()  # trackgen_contract: allow hostsync
"""


def test_parse():
    assert parse("# trackgen_contract: allow stream, host_sync", "f.py", 3) == Pragma(
        "f.py", 3, ("host_sync", "stream")
    )
    assert parse("# noqa: E501  # trackgen_contract: allow capture  # why", "f.py", 1)
    assert parse("# an ordinary comment", "f.py", 1) is None
    with pytest.raises(PragmaError, match="f.py:2: unknown category 'gpu'"):
        parse("# trackgen_contract: allow gpu", "f.py", 2)
    with pytest.raises(PragmaError, match="cannot read the pragma"):
        parse("# trackgen_contract: let host_sync", "f.py", 2)
    # Any whitespace parts the words, as in a comment anyone writes.
    for spelled in ("allow\tallocation", "allow  host_sync ,\tstream ", "\tallow capture"):
        assert parse(f"# trackgen_contract:{spelled}", "f.py", 1)
    for unreadable in ("", "   ", "allow", "allow stream,", "allow ,stream"):
        with pytest.raises(PragmaError, match=r"f.py:4: cannot read the pragma"):
            parse(f"# trackgen_contract:{unreadable}", "f.py", 4)
    assert _comments(['x = "# trackgen_contract: allow stream"\n']) == {}  # inside a string
    assert _comments(["x = f('#', y)  # here\n"]) == {1: "# here"}


# A comment after strings that a line alone does not show the ends of: a string spread
# over lines (closed on the pragma's line, or opened there), one with an escaped quote,
# an f-string holding a quote of the other kind.
SPREAD = '''\
import warp as wp

def closing(a):
    label = """tracks:
""" + str(a.numpy())  # trackgen_contract: allow host_sync
    return label

def opening(a):
    return a.numpy(), """  # trackgen_contract: allow host_sync
"""

def escaped(a):
    return a.numpy(), "\\" # "  # trackgen_contract: allow host_sync

def nested(a):
    return a.numpy(), f"{'#'}"  # trackgen_contract: allow host_sync
'''


def test_a_pragma_is_found_as_python_reads_the_comments(tmp_path, arr):
    mod = module(tmp_path, SPREAD, name="spread_mod")
    with hot_path_guard() as guard:  # strict: a breach not accepted raises
        mod.closing(arr)
        mod.escaped(arr)
        mod.nested(arr)
    assert [key.pragma.lineno for key in guard.allowed] == [5, 13, 16]
    with pytest.raises(HotPathViolation, match="host sync on a hot path"):
        with hot_path_guard():
            mod.opening(arr)  # the '#' there is inside a string: no pragma
    found, errors = scan([str(tmp_path / "spread_mod.py")])
    assert [p.lineno for p in found] == [5, 13, 16] and errors == []


def test_the_pragma_scan_reads_a_file_in_its_declared_encoding(tmp_path):
    path = tmp_path / "latin.py"
    path.write_bytes(
        b"# -*- coding: latin-1 -*-\nname = 'caf\xe9'\nx = 1  # trackgen_contract: allow hostsync\n"
    )
    found, [error] = scan([str(path)])
    assert found == [] and "latin.py:3: unknown category 'hostsync'" in str(error)


def test_guard_lists_a_pragma_accepted_breach_as_allowed(tmp_path, arr):
    mod = module(tmp_path, SOURCE)
    with hot_path_guard() as guard:  # strict: it would raise at the readback
        mod.accepted(arr)
        mod.two(arr)
    assert guard.ok
    assert guard.allowed[0] == ("wp.array.numpy", "pragma_mod", "accepted")
    first = guard.allowed[0]
    assert isinstance(first, PragmaAllowed)
    assert (first.pragma.lineno, first.pragma.categories) == (4, ("host_sync",))
    assert first.violation.category == "host_sync"
    assert [key.violation.category for key in guard.allowed[1:]] == ["host_sync", "allocation"]
    text = format_report(guard.violations, allowed=guard.allowed)
    assert text.startswith("no hot-path contract breach\nallowed by a line pragma (3):")
    assert "allowed by the pragma at " in text and "pragma_mod.py:4" in text


def test_a_pragma_of_another_category_does_not_accept(tmp_path, arr):
    mod = module(tmp_path, SOURCE)
    with pytest.raises(HotPathViolation, match="host sync on a hot path"):
        with hot_path_guard():
            mod.wrong(arr)


class _SourceStore(importlib.abc.Loader):
    """A loader that serves source from elsewhere than a file (an import hook, a
    database); reading it is the user's code."""

    def __init__(self, source):
        self.source, self.reads = source, 0

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(compile(self.source, module.__file__, "exec"), module.__dict__)

    def get_source(self, name):
        self.reads += 1
        raise LookupError("the source store is down")


def test_a_breach_line_is_never_read_through_the_users_loader(arr):
    # A stack summary made without reading lines (asyncio's debug mode makes them) leaves
    # linecache a lazy entry, which would call the loader: the breach must not run it.
    source = textwrap.dedent(
        """\
        import traceback

        def note():
            traceback.StackSummary.extract(traceback.walk_stack(None), lookup_lines=False)

        def breach(a):
            return a.numpy()
        """
    )
    loader = _SourceStore(source)
    spec = importlib.util.spec_from_loader("stored_mod", loader, origin="/nowhere/stored_mod.py")
    mod = importlib.util.module_from_spec(spec)
    mod.__file__ = "/nowhere/stored_mod.py"
    loader.exec_module(mod)
    mod.note()
    with hot_path_guard(strict=False) as guard:
        mod.breach(arr)
    assert loader.reads == 0
    assert [(v.api, v.site.lineno) for v in guard.violations] == [("wp.array.numpy()", 7)]
    assert guard.violations[0].site.source_line() == ""  # the file is not there to read


class _PathFinder:
    """A path entry finder of the user's, as a sys.path_hooks hook makes one."""

    def __init__(self):
        self.reads = 0

    def find_spec(self, name, target=None):
        return None

    def get_data(self, path):
        self.reads += 1
        raise RuntimeError("the user's get_data ran")


def test_a_breach_line_is_never_asked_of_the_users_path_finders(tmp_path, arr):
    # BUG (3.14+): for a file not on disk linecache asks the finder of each directory
    # above it in sys.path_importer_cache, the user's too; its exception reached the call.
    finder = _PathFinder()
    where = str(tmp_path / "nowhere")
    sys.path_importer_cache[where] = finder
    try:
        namespace = {"wp": wp, "__name__": "gen"}
        exec(compile("def step(a):\n    a.numpy()\n", f"{where}/gen.py", "exec"), namespace)
        with hot_path_guard(strict=False) as guard:
            namespace["step"](arr)
    finally:
        del sys.path_importer_cache[where]
    assert finder.reads == 0 and len(guard.violations) == 1


@contextlib.contextmanager
def _imported_from(archive, name):
    """Module `name`, imported from the zip `archive`; sys.path and sys.modules as they
    were afterwards."""
    sys.path.insert(0, str(archive))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(archive))
        sys.modules.pop(name, None)


@pytest.mark.parametrize("lazy", [False, True], ids=["read", "a lazy linecache entry"])
def test_a_pragma_in_a_module_imported_from_a_zip_archive(tmp_path, arr, lazy):
    archive = tmp_path / "app.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("zipped_mod.py", SOURCE)
    try:
        with _imported_from(archive, "zipped_mod") as mod:
            if lazy:  # as a stack summary made without its lines leaves it
                linecache.lazycache(mod.__file__, vars(mod))
            with hot_path_guard(strict=False) as guard:
                mod.accepted(arr)
    finally:
        linecache.checkcache()
    assert guard.violations == [] and guard.allowed == [
        ("wp.array.numpy", "zipped_mod", "accepted")
    ]


def test_lines_of_a_zipped_module_are_counted_as_python_counts_them(tmp_path, arr):
    # A form feed on a line of its own (a page break) is no line end: str.splitlines()
    # took it for one, and read the pragma off the line before.
    archive = tmp_path / "paged.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("paged_mod.py", "import warp as wp\n\f\n" + SOURCE.split("\n", 1)[1])
    with _imported_from(archive, "paged_mod") as mod, hot_path_guard(strict=False) as guard:
        mod.accepted(arr)
    assert guard.violations == [] and len(guard.allowed) == 1


def test_a_source_that_cannot_be_read_from_its_archive_is_no_line(tmp_path, arr):
    # The module is imported from its compiled code; its source in the archive is bzip2,
    # which zipimport cannot read (zlib.error before 3.15): the breach is recorded, and
    # nothing reaches the call.
    source = SOURCE + "\ndef plain(a):\n    return a.numpy()\n"
    compiled = tmp_path / "broken_mod.pyc"
    (tmp_path / "broken_mod.py").write_text(source)
    archive = tmp_path / "broken.zip"
    py_compile.compile(
        str(tmp_path / "broken_mod.py"),
        cfile=str(compiled),
        dfile=str(archive / "broken_mod.py"),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.write(compiled, "broken_mod.pyc")
        zipped.writestr("broken_mod.py", source, compress_type=zipfile.ZIP_BZIP2)
    with _imported_from(archive, "broken_mod") as mod, hot_path_guard(strict=False) as guard:
        mod.plain(arr)
    assert [v.api for v in guard.violations] == ["wp.array.numpy()"]


def test_an_unknown_category_is_an_error_naming_file_and_line(tmp_path, arr):
    mod = module(tmp_path, SOURCE)
    with pytest.raises(PragmaError, match=r"pragma_mod.py:13: unknown category 'hostsync'"):
        with hot_path_guard(strict=False):
            mod.unknown(arr)


def test_an_unreadable_pragma_accepts_nothing_and_is_raised_when_the_block_ends(tmp_path, arr):
    # BUG: the PragmaError was raised into the breaching call, before the breach was
    # recorded: code under test that caught it hid the breach (and a non-strict guard's
    # call did not go through).
    mod = module(tmp_path, SOURCE)
    went_through = []
    with pytest.raises(PragmaError, match="unknown category 'hostsync'"):
        with hot_path_guard(strict=False) as guard:
            try:
                mod.unknown(arr)
                went_through.append(True)
            except Exception:
                pass
    assert went_through == [True] and [v.api for v in guard.violations] == ["wp.array.numpy()"]
    with pytest.raises(HotPathViolation, match=r"from unknown .*unknown category 'hostsync'"):
        with hot_path_guard():
            mod.unknown(arr)  # a strict guard refuses the breach, naming the pragma


def test_an_unreadable_pragma_keeps_nothing_of_the_blocks_that_hit_it(tmp_path, arr):
    # BUG: the line's PragmaError was kept and raised again by every guard whose block
    # breached there: its traceback grew by each raise's frames, and kept every such
    # block's frames (and what their locals held) alive for the rest of the process.
    mod = module(tmp_path, SOURCE)

    class Held:
        pass

    def block(held):
        with hot_path_guard(strict=False):
            mod.unknown(arr)

    held, depths = [], []
    for _ in range(4):
        value = Held()
        held.append(weakref.ref(value))
        with pytest.raises(PragmaError, match="unknown category 'hostsync'") as raised:
            block(value)
        depths.append(len(traceback.extract_tb(raised.value.__traceback__)))
        del value, raised
    gc.collect()
    assert [ref() for ref in held] == [None] * 4
    assert len(set(depths)) == 1, depths  # each error raised afresh


CLI = (
    PRELUDE
    + """\
@trackgen_contract.hot_path
def step():
    a.numpy()  # trackgen_contract: allow host_sync
    b = wp.zeros(2, dtype=float, device="cpu")  # trackgen_contract: allow host_sync
    gen.launch_with_stream(a)  # trackgen_contract: allow stream

step()
"""
)


def test_command_line_pragmas(tmp_path):
    path = program(tmp_path, CLI)
    status, _, err = trace("--json", tmp_path / "r.json", path, cwd=tmp_path)
    assert status == BREACHES, err  # the allocation: its pragma names another category
    document = json.loads((tmp_path / "r.json").read_text())
    assert [(b["category"], b["site"]["lineno"]) for b in document["breaches"]] == [
        ("allocation", 13)
    ]
    [accepted] = document["let_through"]
    assert accepted["allowed_by"] == "pragma" and accepted["pragma"]["lineno"] == 12
    assert "by the pragma at prog.py:12" in err
    unused = {(u["lineno"], tuple(u["categories"])) for u in document["pragmas"]["unused"]}
    assert unused == {(13, ("host_sync",)), (14, ("stream",))}
    assert "unused pragma at prog.py:14: allow stream accepted nothing in this run" in err
    # a category that is not checked cannot accept anything: not reported as unused
    _, _, err = trace("--checks", "host_sync,allocation", path, cwd=tmp_path)
    assert "prog.py:14" not in err


def test_command_line_refuses_an_unknown_category(tmp_path):
    path = program(tmp_path, CLI.replace("allow stream", "allow streams"))
    status, _, err = trace(path, cwd=tmp_path)
    assert status == 2, err
    assert "error: prog.py:14: unknown category 'streams'" in err


def line_of(path, text):
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_marker_pragmas(pytester):
    path = pytester.makepyfile(
        test_p="""
import pytest
import warp as wp

@pytest.fixture
def a():
    return wp.zeros(4, dtype=float, device="cpu")

@pytest.mark.hot_path
def test_accepted(a):
    a.numpy()  # trackgen_contract: allow host_sync

@pytest.mark.hot_path
def test_wrong(a):
    a.numpy()  # trackgen_contract: allow stream

@pytest.mark.hot_path
def test_unused(a):
    a.zero_()  # trackgen_contract: allow stream
    n = 1  # trackgen_contract: allow capture
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["*_ test_wrong _*", "E*HotPathViolation: host sync on a hot path*"]
    )
    idle = line_of(path, "allow capture")
    result.stdout.fnmatch_lines(
        [f"*unused pragma at test_p.py:{idle}: allow capture accepted nothing in this session*"]
    )
    wrong = line_of(path, "allow stream")
    assert f"unused pragma at test_p.py:{wrong}: allow stream" in result.stdout.str()
    used = line_of(path, "a.zero_()")
    assert f"test_p.py:{used}" not in result.stdout.str()  # it accepted the stream breach


def test_marker_unknown_category(pytester):
    path = pytester.makepyfile(
        test_u="""
import pytest
import warp as wp

def allocate():
    wp.zeros(2, device="cpu")  # trackgen_contract: allow allocations

@pytest.mark.hot_path
def test_unknown():
    allocate()

@pytest.mark.hot_path(strict=False)
def test_lenient():
    allocate()

@pytest.mark.hot_path(strict=False)
@pytest.mark.xfail(raises=ValueError, strict=True)
def test_expected():
    allocate()

def test_fixture(hot_path_guard):
    with hot_path_guard(strict=False):
        allocate()
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=3, xfailed=1)
    n = line_of(path, "allocations")
    # A strict guard refuses the breach, naming the pragma; at the end of a lenient
    # marked test the error shows no frame of the plugin's or the guard's (the user's
    # comment is at fault; the message names it), and stays a PragmaError (ValueError)
    # that xfail(raises=) can expect; under the fixture the user's `with` line is the
    # last frame shown.
    result.stdout.fnmatch_lines(
        [
            "*_ test_unknown _*",
            f"E*HotPathViolation: allocation on a hot path*(test_u.py:{n}: unknown category*",
            "*_ test_lenient _*",
            f"E*PragmaError: test_u.py:{n}: unknown category 'allocations'*",
            "*_ test_fixture _*",
            "*with hot_path_guard(strict=False):",
            f"E*PragmaError: test_u.py:{n}: unknown category 'allocations'*",
            "test_u.py:*: PragmaError",
        ]
    )
    assert "pytest_plugin.py" not in result.stdout.str()
    assert "guard.py" not in result.stdout.str()
    result.stdout.fnmatch_lines([f"error: test_u.py:{n}: unknown category 'allocations'*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # a failed test keeps its status


def test_an_unreadable_pragma_is_a_usage_error_where_the_tests_passed(pytester):
    path = pytester.makepyfile(
        test_q="""
import pytest
import warp as wp

@pytest.mark.hot_path(strict=False)
def test_passes():
    wp.synchronize()  # trackgen_contract: allow host_sync

def unused():
    pass  # trackgen_contract: allow hostsync
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    n = line_of(path, "hostsync")
    result.stdout.fnmatch_lines([f"error: test_q.py:{n}: unknown category 'hostsync'*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


WITH_ITEMS = """\
import contextlib
import warp as wp

def entered(scope):
    with (
        contextlib.nullcontext(),
        wp.ScopedStream(None),  # trackgen_contract: allow stream
    ):
        pass

def entered_twice(scope):
    try:
        if scope:
            raise ValueError(scope)  # the finally body's other copy runs
    finally:  # compiled twice on 3.11 and 3.12: its statements too
        with contextlib.nullcontext(), \\
                contextlib.nullcontext() as ctx, \\
                wp.ScopedStream(
                    None
                ):
            pass
    with (
        wp.ScopedStream(None)
    ) as s, wp.ScopedStream(None):
        pass
"""


def test_a_with_item_breaches_on_its_own_line_on_every_python(tmp_path, arr):
    # 3.11 and 3.12 place an item's __enter__ call on the whole `with` statement (its
    # first line), 3.13 on the item: the item's line is read from the statement.
    mod = module(tmp_path, WITH_ITEMS)
    with hot_path_guard(strict=False) as guard:
        mod.entered(None)
        mod.entered_twice(None)
        with pytest.raises(ValueError):
            mod.entered_twice("on error")
    assert [a.violation.site.lineno for a in guard.allowed] == [7]
    assert [v.site.lineno for v in guard.violations] == [18, 23, 24, 18]
