"""``python -m trackgen_contract.trace`` as a user runs it: in a subprocess."""

import itertools
import json
import os
import py_compile
import random
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import jsonschema
import pytest

from trackgen_contract import report
from trackgen_contract.recording import Recording, Scoped
from trackgen_contract.rules import make_policy
from trackgen_contract.trace import BREACHES, NOTHING_CHECKED, PROG
from trackgen_contract.tracer import BACKEND, COMPILED

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
DEMO = ROOT / "examples" / "track_demo.py"


def trace(*args, cwd=None, env=None):
    """Run the command line; return (exit status, stdout, stderr)."""
    environ = {**os.environ, "PYTHONPATH": str(TESTS), **(env or {})}
    environ.pop("NO_COLOR", None)
    done = subprocess.run(
        [sys.executable, "-m", "trackgen_contract.trace", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=environ,
        timeout=300,
    )
    return done.returncode, done.stdout, done.stderr


def program(tmp_path, source, name="prog.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


PRELUDE = """\
import sys
import warp as wp
from acme import gen
import trackgen_contract
if hasattr(wp.config, "log_level"):
    wp.config.log_level = wp.LOG_WARNING
else:
    wp.config.quiet = True
a = wp.zeros(4, dtype=float, device="cpu")
"""


def hot_program(tmp_path, body):
    """A program whose checked part is `body`, in a @hot_path function (setup is not)."""
    source = PRELUDE + "\n@trackgen_contract.hot_path\ndef run():\n"
    source += textwrap.indent(textwrap.dedent(body), "    ") + "\nrun()\n"
    return program(tmp_path, source)


def load(path):
    document = json.loads(Path(path).read_text())
    jsonschema.validate(document, report.schema())
    return document


# --- the demo ------------------------------------------------------------------------------


def test_strict_stops_before_the_first_marked_hot_path_too(tmp_path):
    # Until a @hot_path runs its decorator, --strict cannot know the run will name one.
    status, _, err = trace("--strict", hot_program(tmp_path, "pass"))
    assert status == BREACHES
    assert "allocation on a hot path: wp.zeros() from <module>" in err


def test_demo_clean(tmp_path):
    status, out, err = trace("--json", tmp_path / "r.json", DEMO, "--steps", "2")
    assert status == 0, err
    assert "generated 512 tracks" in out
    assert "no hot-path contract breach in" in err
    assert "checked inside hot paths: TrackGenerator.generate" in err
    document = load(tmp_path / "r.json")
    assert document["breaches"] == [] and document["exit_status"] == 0
    launches = next(c for c in document["calls"] if c["api"] == "wp.launch")
    assert launches == {
        "api": "wp.launch",
        "inside": None,
        "calls": 10,
        "in_hot_paths": 10,
        "breaches": 0,
    }


def test_demo_dirty_gives_exactly_the_three_planted_breaches(tmp_path):
    status, _, err = trace("--json", tmp_path / "r.json", DEMO, "--dirty", "--steps", "3")
    assert status == BREACHES, err
    document = load(tmp_path / "r.json")
    found = [
        (b["category"], b["api"], b["count"], b["site"]["function"]) for b in document["breaches"]
    ]
    assert found == [
        ("host_sync", "wp.array.numpy()", 3, "TrackGenerator._debug_stats"),
        ("allocation", "wp.zeros()", 3, "TrackGenerator._debug_stats"),
        ("stream", "wp.launch without stream=", 3, "TrackGenerator._debug_stats"),
    ]
    assert document["breach_count"] == 9
    assert (document["exit_status"], document["program_status"]) == (BREACHES, 0)
    assert "9 breaching calls at 3 sites" in err
    assert "scratch = wp.zeros(self.num_envs, dtype=float, device=self.device)" in err


# --- running the program as Python would ---------------------------------------------------


def test_the_frames_the_program_runs_under_are_as_many_as_the_readme_says(tmp_path):
    # The README states how many frames deeper a script runs under the command line, and
    # how much sooner it reaches the recursion limit: a frame added to the command line's
    # call chain must change both, or the README is wrong.
    path = program(
        tmp_path,
        """\
        import sys
        depth, frame = 0, sys._getframe()
        while frame is not None:
            depth, frame = depth + 1, frame.f_back

        def deepest(level=0):
            try:
                return deepest(level + 1)
            except RecursionError:
                return level

        print(depth, deepest())
    """,
    )
    plain = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, check=True, timeout=60
    )
    status, out, err = trace(path, cwd=tmp_path)
    assert status == NOTHING_CHECKED, err
    (plain_depth, plain_deepest), (depth, deepest) = (
        map(int, text.split()) for text in (plain.stdout, out)
    )
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"({depth - plain_depth} for a script)" in readme
    sooner = plain_deepest - deepest
    if sys.version_info >= (3, 12):
        assert f"within {sooner} frames of the recursion limit" in readme
    elif COMPILED:
        assert f"({sooner} on 3.11, whose limit counts C calls too;" in readme
    else:  # the profile function is a Python function: one frame more at each call
        assert f"; {sooner} there with the Python filter alone)" in readme


def test_script_sees_argv_path_and_file(tmp_path):
    path = program(
        tmp_path,
        """\
        import os, sys
        print(sys.argv)
        print(sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
        print(__name__)
    """,
    )
    status, out, err = trace(path, "--flag", "x", cwd=tmp_path)
    assert status == NOTHING_CHECKED, err  # no Warp call: nothing was checked
    assert out.splitlines() == [str([str(path), "--flag", "x"]), "True", "__main__"]
    assert "checked the whole run (its main thread): no hot path was named" in err
    assert "no watched Warp call was made" in err


def test_module_form(tmp_path):
    package = tmp_path / "tool"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(PRELUDE + "print(sys.argv[1:], __name__)\na.numpy()\n")
    for form in (["-m", "tool"], ["-mtool"]):  # both as Python takes them
        status, out, err = trace(*form, "one", "two", cwd=tmp_path)
        assert status == BREACHES, err
        assert out.strip().splitlines()[-1] == "['one', 'two'] __main__"  # after Warp's notices
        assert "wp.array.numpy()  <module>" in err


def test_program_status_wins(tmp_path):
    path = program(tmp_path, PRELUDE + "a.numpy()\nsys.exit(3)\n")
    assert trace(path)[0] == 3


def test_the_programs_buffered_output_comes_before_the_report_on_one_pipe(tmp_path):
    # BUG: with stdout and stderr on one pipe (`2>&1 | tee log`), the program's last
    # lines, still in its stdout's buffer, came after the report.
    path = program(tmp_path, PRELUDE + "print('before')\na.numpy()\nprint('last line')\n")
    environ = {**os.environ, "PYTHONPATH": str(TESTS)}
    environ.pop("PYTHONUNBUFFERED", None)
    done = subprocess.run(
        [sys.executable, "-m", "trackgen_contract.trace", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environ,
        timeout=300,
    )
    assert done.returncode == BREACHES, done.stdout
    assert done.stdout.index("last line") < done.stdout.index("trackgen_contract:")


def test_a_module_beside_the_program_named_as_one_imported_before_it_is_named(tmp_path):
    # A program's own random.py is imported under `python`; here Warp imported the
    # standard library's first, and the program silently got that one.
    (tmp_path / "random.py").write_text("OWN = True\n")
    (tmp_path / "helper.py").write_text("")  # its own name: nothing to say
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text("")
    path = program(tmp_path, "import random\nprint(hasattr(random, 'OWN'))\n")
    plain = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=60)
    status, out, err = trace(path, cwd=ROOT)  # not from tmp_path: `-m` imports from there
    assert plain.stdout == "True\n" and (status, out) == (NOTHING_CHECKED, "False\n")
    (line,) = [line for line in err.splitlines() if "warning:" in line]
    assert line.startswith("trackgen_contract: warning: random.py beside the program")
    assert random.__file__ in line
    status, _, err = trace(program(tmp_path, "print('plain')\n", "sub/prog.py"), cwd=ROOT)
    assert status == NOTHING_CHECKED and "warning:" not in err


@pytest.mark.parametrize(
    "spelling", [["-m", "trackgen_contract.trace"], ["-Bm", "trackgen_contract.trace"]]
)
def test_run_from_the_programs_own_directory_its_modules_stay_its_own(tmp_path, spelling):
    # `python -m` puts the working directory first on sys.path while the command line
    # imports itself, Warp and NumPy: none of them may import the program's json.py
    # (running its code before the program, and the report writer then broken).
    (tmp_path / "json.py").write_text("open('json-ran', 'w').close()\n")
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    own = os.path.realpath(tmp_path)
    path = program(tmp_path, f"import helper, sys\nprint(helper.VALUE, sys.path[0] == {own!r})\n")
    done = subprocess.run(
        [sys.executable, *spelling, "--json", "out.json", path.name],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(TESTS)},
        timeout=300,
    )
    assert (done.returncode, done.stdout) == (NOTHING_CHECKED, "7 True\n"), done.stderr
    assert not (tmp_path / "json-ran").exists()
    (line,) = [line for line in done.stderr.splitlines() if "warning:" in line]
    assert line.startswith("trackgen_contract: warning: json.py beside the program")
    assert load(tmp_path / "out.json")["program"] == [path.name]


def test_a_working_directory_gone_before_the_start_is_a_usage_error(tmp_path):
    path = program(tmp_path, "print('plain')\n")
    done = subprocess.run(
        ["sh", "-c", 'mkdir gone && cd gone && rmdir ../gone && exec "$0" "$@"', sys.executable,
         "-m", "trackgen_contract.trace", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 2  # sh's own complaint about the directory comes first
    assert f"{PROG}: error: the working directory cannot be read" in done.stderr


def test_exit_message(tmp_path):
    status, _, err = trace(program(tmp_path, "import sys\nsys.exit('bye')\n"))
    assert status == 1
    assert err.startswith("bye\n")
    assert "exit status 1: the program failed" in err


@pytest.mark.parametrize(
    "setup",
    ["class Code:\n    def __str__(self):\n        raise ValueError('no text')\ncode = Code()\n",
     "code = 'to the process stderr'\nsys.stderr = None\n"],
)  # fmt: skip
def test_an_exit_message_python_cannot_print_as_it_is_given(tmp_path, setup):
    # BUG: a code whose str() raised crashed the command line (its own traceback, no
    # report); with sys.stderr None the message went to stdout. Python prints what it
    # can and a newline, to the process's stderr (3.12 and 3.13 also print the str()'s
    # error, an artifact of theirs, which the comparison leaves out).
    plain, traced = both_ways(tmp_path, f"import sys\n{setup}sys.exit(code)\n")
    assert plain[0] == traced[0] == 1
    assert traced[1] == plain[1] == ""
    assert traced[2] == plain[2].split("Traceback")[0].split("Exception ignored")[0]


def test_program_that_raises(tmp_path):
    path = program(tmp_path, PRELUDE + "a.numpy()\nraise KeyError('broken')\n")
    status, _, err = trace(path)
    assert status == 1
    assert "Traceback (most recent call last):" in err and "KeyError: 'broken'" in err
    assert "trackgen_contract/trace.py" not in err and "runner.py" not in err  # ours hidden
    assert "2 breaching calls at 2 sites" in err  # the report still comes (zeros, numpy)


def test_the_heading_counts_lines_not_rows(tmp_path):
    # One line that breaches two categories (it allocates, and copies with no stream)
    # shows in two rows; the heading counted rows as sites.
    path = hot_program(tmp_path, "wp.array([1.0, 2.0], dtype=float, device='cpu')\n")
    status, _, err = trace(path)
    assert status == BREACHES
    assert "2 breaching calls at 1 site in" in err
    assert err.count("prog.py:13") == 2  # one row under each category


@pytest.mark.parametrize("form", ["script", "module"])
def test_a_failing_programs_traceback_is_pythons(tmp_path, form):
    # BUG: under -m the two frames of runpy's that `python -m` shows were left out.
    program(tmp_path, "def fail():\n    raise ValueError('boom')\n\nfail()\n", "failing.py")
    target = ["-m", "failing"] if form == "module" else ["failing.py"]
    plain = subprocess.run(
        [sys.executable, *target], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    status, _, err = trace(*target, cwd=tmp_path)
    assert status == plain.returncode == 1
    assert err.startswith(plain.stderr)
    assert ("<frozen runpy>" in err) == (form == "module")


def both_ways(tmp_path, source, *options):
    """Run a program plainly and under the command line: (plain, traced) as
    (status, stdout, stderr before the report)."""
    path = program(tmp_path, source, "both.py")
    return run_both(tmp_path, [path.name], options)


def run_both(tmp_path, target, options=(), env=None):
    """`python *target` and the command line with `options` on it, from `tmp_path`."""
    environ = {**os.environ, "PYTHONPATH": str(TESTS), **(env or {})}
    plain = subprocess.run(
        [sys.executable, *target],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environ,
        timeout=120,
    )
    status, out, err = trace(*options, *target, cwd=tmp_path, env=env)
    before_report = err.split("trackgen_contract: ", 1)[0]
    return (plain.returncode, plain.stdout, plain.stderr), (status, out, before_report)


def package(tmp_path, init, main="print('main', sys.argv)\n"):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("import sys\n" + init)
    (tmp_path / "pkg" / "__main__.py").write_text("import sys\n" + main)


MAIN_FACTS = """
import re, sys
facts = {k: v for k, v in globals().items() if k.startswith("__") and k != "__builtins__"}
for key in sorted(facts):
    print(key, re.sub(" at 0x[0-9a-f]+", "", repr(facts[key])))
print("builtins", type(__builtins__).__name__, "path0", sys.path[0], "argv", sys.argv)
"""


FORMS = ["script", "dotted", "symlink", "module", "package", "directory", "dot", "zip"]


@pytest.mark.parametrize("form", FORMS)
def test_the_programs_main_module_is_pythons(tmp_path, form):
    # BUG: __file__ and the code's file name were the path as typed (Python makes them
    # absolute), __loader__/__cached__/__annotations__ differed, __builtins__ was a dict,
    # a symlinked script's directory was not resolved for sys.path[0], a directory had no
    # __spec__, and a zip file did not run at all.
    import zipfile

    (tmp_path / "sub").mkdir()
    program(tmp_path / "sub", MAIN_FACTS, "facts.py")
    package(tmp_path, "", MAIN_FACTS)
    (tmp_path / "app").mkdir()
    program(tmp_path / "app", MAIN_FACTS, "__main__.py")
    with zipfile.ZipFile(tmp_path / "app.zip", "w") as archive:
        archive.writestr("__main__.py", MAIN_FACTS)
    (tmp_path / "link").symlink_to(tmp_path / "sub")
    program(tmp_path, MAIN_FACTS, "__main__.py")  # for ".", run from here
    target = {
        "script": ["sub/facts.py"],
        "dotted": ["./sub/../sub/facts.py"],
        "symlink": ["link/facts.py"],
        "dot": ["."],
        "module": ["-m", "sub.facts"],
        "package": ["-m", "pkg"],
        "directory": ["app"],
        "zip": ["app.zip"],
    }[form]
    plain, traced = run_both(tmp_path, [*target, "arg"])
    assert plain[0] == 0, plain[2]
    assert traced[1] == plain[1]


def test_a_program_that_takes_the_hook_away_is_not_reported_clean(tmp_path):
    # BUG: on 3.11 a program calling sys.setprofile() blinded the command line, whose
    # report then said the program made no Warp call (or, with an earlier breach, only
    # that one).
    find_tool = (
        "m = sys.monitoring\n"
        "tool = next(i for i in range(6) if m.get_tool(i) == 'trackgen_contract')\n"
    )
    # What each way leaves seen: 3.12 and 3.13 keep a freed id's events and callback.
    ways = (
        [("sys.setprofile(None)\n", False)]
        if sys.version_info < (3, 12)
        else [
            (find_tool + "m.register_callback(tool, m.events.PY_START, None)\n", False),
            # BUG: freeing the id made the command line crash as it stopped (no report).
            (find_tool + "m.free_tool_id(tool)\n", sys.version_info < (3, 14)),
        ]
    )
    quiet = "import sys\nimport warp as wp\nwp.config.quiet = True\n"
    for (take_hook_away, still_seen), (start, end) in itertools.product(
        ways, [(quiet, "wp.synchronize()\n"), (PRELUDE, "a.numpy()\n")]
    ):
        status, _, err = trace(program(tmp_path, start + take_hook_away + end))
        breaches = start == PRELUDE or still_seen  # the zeros before, or the call after
        assert status == (BREACHES if breaches else NOTHING_CHECKED), err
        assert "nothing checked: from the point where" in err, err
        assert "Warp calls may have gone unseen" in err


def test_a_packages_init_runs_as_python_runs_it_watched(tmp_path):
    # BUG: `-m pkg` imported the package when the program was looked for: before its
    # sys.argv was set, unwatched (its Warp calls missing from the report), and a failure
    # there was a usage error ("no module named") instead of the program's own.
    package(tmp_path, "print('init', sys.argv)\n" + PRELUDE)
    plain, traced = run_both(tmp_path, ["-m", "pkg", "x"])
    assert traced[1:] == plain[1:]
    assert plain[1].splitlines()[0] == "init ['-m', 'x']"
    status, _, err = trace("-m", "pkg", cwd=tmp_path)
    assert status == BREACHES and "wp.zeros()  <module>  pkg/__init__.py:" in err


@pytest.mark.parametrize("failure", ["raise ValueError('init')", "import no_such_module_here"])
def test_a_packages_failing_init_fails_the_program_as_in_python(tmp_path, failure):
    package(tmp_path, failure + "\n")
    for target in (["-m", "pkg"], ["-m", "pkg.__main__"]):
        plain, traced = run_both(tmp_path, target)
        assert traced == plain and plain[0] == 1
        assert "<frozen runpy>" in plain[2]


def test_a_module_in_namespace_packages_runs(tmp_path):
    # As Warp's examples are laid out (warp.examples.core has no __init__.py).
    (tmp_path / "space" / "inner").mkdir(parents=True)
    program(tmp_path / "space" / "inner", "print('ran', __name__, __spec__.name)\n", "tool.py")
    program(tmp_path / "space" / "inner", "print('main', __spec__.name)\n", "__main__.py")
    for target in (["-m", "space.inner.tool"], ["-m", "space.inner"]):
        plain, traced = run_both(tmp_path, target)
        assert plain[0] == 0 and traced[1] == plain[1]


def test_a_module_of_a_package_whose_init_extends_its_path_runs(tmp_path):
    # BUG (of looking modules up before their package is imported): not found.
    (tmp_path / "extra").mkdir()
    program(tmp_path / "extra", "print('ran', __spec__.name)\n", "tool.py")
    package(tmp_path, "__path__.append(__path__[0] + '/../extra')\n")
    plain, traced = run_both(tmp_path, ["-m", "pkg.tool"])
    assert plain[0] == 0 and traced[1] == plain[1] == "ran pkg.tool\n"


def test_a_package_without_main_is_named_so(tmp_path):
    (tmp_path / "nomain").mkdir()
    (tmp_path / "nomain" / "__init__.py").write_text("")
    status, _, err = trace("-m", "nomain", cwd=tmp_path)
    assert status == 2
    assert "'nomain' is a package and cannot be directly executed" in err


@pytest.mark.parametrize("form", ["script", "module", "directory"])
def test_safe_path_puts_no_program_directory_first_as_in_python(tmp_path, form):
    # BUG: under PYTHONSAFEPATH (-P) sys.path[0] was overwritten with the program's
    # directory, replacing the entry Python had put there.
    source = "import sys\nprint(sys.path[:2])\n"
    program(tmp_path, source, "show.py")
    (tmp_path / "app").mkdir()
    program(tmp_path / "app", source, "__main__.py")
    target = {"script": ["show.py"], "module": ["-m", "show"], "directory": ["app"]}[form]
    for safe in ("", "1"):
        plain, traced = run_both(tmp_path, target, env={"PYTHONSAFEPATH": safe})
        assert traced[1] == plain[1]  # (the status: 101 here, no Warp call was made)


def test_the_programs_excepthook_gets_its_failure_and_last_exc_is_set(tmp_path):
    # BUG: a traceback was printed in place of the program's own hook, and sys.last_value
    # stayed unset for its atexit handlers.
    plain, traced = both_ways(
        tmp_path,
        """
import atexit, sys
atexit.register(lambda: print("last:", repr(getattr(sys, "last_value", None))))
sys.excepthook = lambda t, v, tb: print("hook:", t.__name__, v, tb.tb_frame.f_code.co_name)
raise ValueError("boom")
""",
    )
    assert traced == plain
    assert plain[1] == "hook: ValueError boom <module>\nlast: ValueError('boom')\n"


def test_threads_and_atexit_handlers_run_watched_before_the_report(tmp_path):
    # BUG: the report came before the program's threads ended and its atexit handlers ran,
    # their Warp calls unseen, and with the command line's own module back as __main__.
    source = (
        PRELUDE
        + """
import atexit, pickle, threading, time

class Saved:
    pass

def at_exit():
    import __main__
    print("atexit:", len(pickle.dumps(Saved())) > 0, getattr(__main__, "__file__", None))
    wp.synchronize()

def late():
    time.sleep(0.2)
    print("thread:", len(pickle.dumps(Saved())) > 0)

atexit.register(at_exit)
threading.Thread(target=late).start()
"""
    )
    plain, traced = both_ways(tmp_path, source)
    assert traced[1:] == plain[1:] and plain[0] == 0
    assert plain[1].splitlines()[-2:] == ["thread: True", "atexit: True None"]
    status, _, err = trace(program(tmp_path, source, "again.py"), cwd=tmp_path)
    assert status == BREACHES
    assert "wp.synchronize()  at_exit  again.py:" in err


@pytest.mark.parametrize("how", ["script", "module"])
def test_a_warp_function_the_program_registers_at_exit_has_no_site_of_the_command_line(
    tmp_path, how
):
    # BUG: registered with atexit itself, wp.synchronize was reported at the command
    # line's own frame (its trace.py runs as __main__), as if that were the program's line.
    source = PRELUDE + (
        "import atexit\n"
        "def read():\n"
        "    a.numpy()\n"
        "atexit.register(wp.synchronize)\n"
        "atexit.register(read)\n"
    )
    path = program(tmp_path, source, name="exiting.py")
    target = ["-m", "exiting"] if how == "module" else [path]
    status, _, err = trace("--json", tmp_path / "r.json", *target, cwd=tmp_path)
    assert status == BREACHES, err
    sites = {b["api"]: b["site"] for b in load(tmp_path / "r.json")["breaches"]}
    assert sites["wp.synchronize()"]["function"] == "<unknown>"
    assert sites["wp.array.numpy()"]["function"] == "read"  # its own function: its line
    assert "trace.py" not in err and "_wind_down" not in err


def test_the_programs_threads_end_as_at_pythons_exit(tmp_path):
    # BUG (of the first cut of waiting for threads): an executor left open hung (its
    # shutdown callback was not run), a worker waiting for the main thread to end hung,
    # and a Thread subclass's own join() was called, which Python never does.
    source = (
        PRELUDE
        + """
import atexit, threading, time
from concurrent.futures import ThreadPoolExecutor

pool = ThreadPoolExecutor(2)
print(pool.submit(lambda: 21 * 2).result())

ended = threading.Event()

def watcher():
    while threading.main_thread().is_alive():
        time.sleep(0.02)
    print("main thread ended")
    ended.set()

class Own(threading.Thread):
    def run(self):  # after the watcher: the two lines' order is not left to timing
        ended.wait(60)
        print("own ran")

    def join(self, timeout=None):
        raise RuntimeError("Python does not call this")

threading.Thread(target=watcher).start()
Own().start()
atexit.register(lambda: print("at exit, main alive:", threading.main_thread().is_alive()))
"""
    )
    plain, traced = both_ways(tmp_path, source)
    assert traced[1:] == plain[1:] and plain[0] == 0
    assert plain[1].splitlines()[-1] == "at exit, main alive: False"


@pytest.mark.parametrize(
    ("hook", "status"),
    [
        ("del sys.excepthook", 1),
        ("sys.excepthook = None", 1),
        ("sys.excepthook = lambda *a: 1 / 0", 1),
        ("sys.excepthook = lambda *a: sys.exit(7)", 7),
    ],
)
def test_a_missing_or_failing_excepthook_is_reported_as_python_reports_it(tmp_path, hook, status):
    # BUG: a deleted hook crashed the command line (no report), and a failing one was
    # printed with our frames and a chained "During handling" section.
    plain, traced = both_ways(tmp_path, f"import sys\n{hook}\nraise ValueError('boom')\n")
    assert traced == plain and plain[0] == status


def test_an_exit_status_is_what_the_parent_sees(tmp_path):
    # BUG: sys.exit(256) exits 0, but the breaches were not reported in the status; and
    # a code past a C long long (which exits 255) was read as a success.
    plain, traced = both_ways(tmp_path, PRELUDE + "a.numpy()\nsys.exit(256)\n")
    assert plain[0] == 0
    assert traced[0] == BREACHES
    plain, traced = both_ways(tmp_path, PRELUDE + "a.numpy()\nsys.exit(2**70)\n")
    assert traced[0] == plain[0] == 255


def test_the_report_reaches_the_processs_stderr_whatever_the_program_did_with_its_own(
    tmp_path,
):
    # BUG: a program that closed sys.stderr crashed the command line, and one that
    # replaced it got the report in its own stream.
    for change in ("sys.stderr.close()", "import io\nsys.stderr = io.StringIO()"):
        source = PRELUDE + "a.numpy()\n" + change + "\n"
        status, _, err = trace("--json", tmp_path / "r.json", program(tmp_path, source))
        assert status == BREACHES
        assert "exit status 100" in err and load(tmp_path / "r.json")["breach_count"] == 2


def test_strict_stopping_an_atexit_handler_says_so(tmp_path):
    source = (
        PRELUDE.replace("a = wp.zeros", "# a = wp.zeros")
        + """
import atexit
atexit.register(wp.synchronize)
"""
    )
    status, _, err = trace("--strict", "--json", tmp_path / "r.json", program(tmp_path, source))
    assert status == BREACHES
    assert "--strict stopped the program at a breach" in err


def test_after_a_strict_stop_the_atexit_handlers_are_still_watched(tmp_path):
    # On 3.11 the stop, raised from the profile function, removed it: the command line
    # puts it back while it handles the stop, so nothing is missed and no one is blind.
    source = """
import atexit
import warp as wp
from acme import gen
wp.config.quiet = True
a = wp.zeros(4, dtype=float, device="cpu")  # trackgen_contract: allow allocation
atexit.register(lambda: gen.launch_with_stream(a))
wp.synchronize()
"""
    path = program(tmp_path, source)
    status, _, err = trace("--strict", "--json", tmp_path / "r.json", path)
    assert status == BREACHES, err
    document = load(tmp_path / "r.json")
    assert document["unchecked"] == [], err
    assert {c["api"]: c["calls"] for c in document["calls"]}["wp.launch"] == 1


def test_a_programs_own_strict_guard_is_its_failure_under_strict(tmp_path):
    # BUG: under --strict, the program's own guard raising was taken for the command
    # line's stop at a breach (status 100, "--strict stopped the program").
    source = """
import warp as wp
import trackgen_contract

@trackgen_contract.hot_path  # checks run inside it only, from here on
def step():
    pass

wp.config.quiet = True
a = wp.zeros(4, dtype=float, device="cpu")
step()
with trackgen_contract.hot_path_guard():
    a.numpy()
"""
    plain, traced = both_ways(tmp_path, source, "--strict")
    assert traced == plain and plain[0] == 1
    assert "HotPathViolation: host sync on a hot path" in plain[2]


@pytest.mark.skipif(os.name != "posix", reason="dying by a signal is POSIX's")
def test_ctrl_c_ends_the_program_as_it_ends_python(tmp_path, ctrl_c):
    # BUG: the traceback showed the frame of our signal handler wrapper, and the process
    # exited with 130 where Python dies by SIGINT (a shell shows 130 for both). `ctrl_c`:
    # an ignored SIGINT would stay ignored in the children.
    source = "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(5)\n"
    plain, traced = both_ways(tmp_path, source)
    assert traced == plain
    assert plain[0] == -signal.SIGINT and "critical.py" not in traced[2]
    # BUG: a program that closed sys.stderr made the flush before dying raise (status 1).
    closed = "import sys\nsys.stderr.close()\n" + source
    plain, traced = both_ways(tmp_path, closed)
    assert traced[0] == plain[0] == -signal.SIGINT


@pytest.mark.skipif(os.name != "posix", reason="a Ctrl-C sent by the process itself")
@pytest.mark.skipif(
    sys.version_info >= (3, 13),
    reason="from 3.13, one that lands in Python's C join of a thread is reported by that "
    "code, with the wrapper's frame (README, Known limits): where it lands is timing",
)
def test_ctrl_c_while_python_waits_for_threads_at_exit_is_ignored_as_python_shows_it(
    tmp_path, ctrl_c
):
    # BUG: the "Exception ignored" traceback ended in the frame of the guards' wrapper of
    # the signal handlers, which ran Python's handler.
    source = """\
import os, signal, threading, time
def interrupt():
    time.sleep(0.5)  # the main thread is done and waits for this one
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=interrupt).start()
"""
    plain, traced = both_ways(tmp_path, source)
    assert plain[0] == 0 and traced[0] == NOTHING_CHECKED  # Python ignores it at exit
    assert traced[1:] == plain[1:] and "Exception ignored" in plain[2]
    assert "KeyboardInterrupt" in plain[2] and "critical.py" not in traced[2]


@pytest.mark.skipif(os.name != "posix", reason="dying by a signal is POSIX's")
def test_ctrl_c_before_the_program_runs_shows_none_of_this_commands_frames(tmp_path, ctrl_c):
    # BUG: a Ctrl-C while this command got ready (importing Warp to find what it watches)
    # printed a traceback of this command's own frames. The Ctrl-C comes from a stand-in
    # for warp on the path, which sends it as it is imported: a real one lands at random.
    (tmp_path / "warp").mkdir()
    interrupt = "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\n"
    program(tmp_path / "warp", interrupt, "__init__.py")
    path = program(tmp_path, "print('ran')\n")
    status, out, err = trace(path, env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{TESTS}"})
    assert status == -signal.SIGINT and out == ""
    assert err == "python -m trackgen_contract.trace: interrupted\n"


@pytest.mark.skipif(os.name != "posix", reason="dying by a signal is POSIX's")
def test_ctrl_c_while_the_report_is_written_is_told_on_the_processs_stderr(tmp_path, ctrl_c):
    # BUG (found in review): "interrupted" went to sys.stderr, which the program had
    # closed (a ValueError, status 1) or set to None (to stdout). The Ctrl-C comes as the
    # JSON report reads Warp's version, from a module the program put in Warp's place.
    source = """\
import os, signal, sys, types
import warp as wp
wp.config.quiet = True
class Interrupting(types.ModuleType):
    @property
    def __version__(self):
        os.kill(os.getpid(), signal.SIGINT)
        return wp.__version__
stand_in = Interrupting("warp")
stand_in.__dict__.update(wp.__dict__)
sys.modules["warp"] = stand_in
sys.stderr.close()
"""
    status, out, err = trace("--json", tmp_path / "r.json", program(tmp_path, source))
    assert status == -signal.SIGINT and out == ""
    assert err.endswith("python -m trackgen_contract.trace: interrupted\n"), err


def test_a_programs_names_of_a_str_subclass_run_none_of_its_methods(tmp_path):
    # BUG (found in review): a hot path whose code's file name and qualified name are of
    # a str subclass of the program's had that class's __hash__ and __eq__ run when the
    # command line looked hot paths up, at each watched call, and in the report.
    (tmp_path / "breaching.py").write_text("def breach(a):\n    a.numpy()\n")
    source = """\
import atexit, collections, os, sys
import warp as wp
import trackgen_contract
wp.config.quiet = True
ran = collections.Counter()
class Loud(str):
    def __hash__(self):
        ran["__hash__"] += 1
        return str.__hash__(self)
    def __eq__(self, other):
        ran["__eq__"] += 1
        return str.__eq__(self, other)
    def startswith(self, *args):
        ran["startswith"] += 1
        return str.startswith(self, *args)
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "breaching.py")
namespace = {"__name__": "breaching"}
exec(compile(open(path).read(), Loud(path), "exec"), namespace)
breach = namespace["breach"]
breach.__code__ = breach.__code__.replace(co_qualname=Loud("breach"), co_name=Loud("breach"))
breach = trackgen_contract.hot_path(breach)
a = wp.zeros(4, dtype=float, device="cpu")
ran.clear()
for _ in range(2):
    breach(a)
atexit.register(lambda: print("ran", dict(ran), file=sys.stderr, flush=True))
"""
    status, _, err = trace("--json", tmp_path / "r.json", program(tmp_path, source))
    assert status == BREACHES, err
    pure_profile = BACKEND == "sys.setprofile" and not COMPILED  # README, Known limits
    assert ("ran {'__hash__': 2}" if pure_profile else "ran {}") in err
    rows = load(tmp_path / "r.json")["breaches"]
    assert [(row["api"], row["site"]["function"], row["count"]) for row in rows] == [
        ("wp.array.numpy()", "breach", 2)
    ]


def test_a_hot_path_named_in_a_module_whose_name_is_a_str_subclass_is_found(tmp_path):
    # BUG: --hot MODULE:NAME compared the frame's __name__ only where it was an exact str:
    # code run under a name of a str subclass of the program's was never its hot path.
    (tmp_path / "breaching.py").write_text("def breach(a):\n    a.numpy()\n")
    source = """\
import os
import warp as wp
wp.config.quiet = True
class Loud(str):
    def __eq__(self, other):
        raise AssertionError("ran the program's __eq__")
    __hash__ = str.__hash__
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "breaching.py")
namespace = {"__name__": Loud("breaching")}
exec(compile(open(path).read(), path, "exec"), namespace)
namespace["breach"](wp.zeros(4, dtype=float, device="cpu"))
"""
    path = program(tmp_path, source)
    status, _, err = trace("--hot", "breaching:breach", "--json", tmp_path / "r.json", path)
    assert status == BREACHES, err
    rows = load(tmp_path / "r.json")["breaches"]
    assert [(r["api"], r["site"]["module"], r["site"]["function"]) for r in rows] == [
        ("wp.array.numpy()", "breaching", "breach")
    ]


def test_programs_own_strict_guard(tmp_path):
    path = program(tmp_path, PRELUDE + "with trackgen_contract.hot_path_guard():\n    a.numpy()\n")
    status, _, err = trace(path)
    assert status == 1
    assert "HotPathViolation: host sync on a hot path" in err and "trace.py" not in err


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_forked_child_ending_by_sys_exit_ends_as_under_python(tmp_path):
    # BUG: the child returned through the command line and printed a report of its own
    # (the parent's breaches again), wrote the report files, and exited 100.
    source = PRELUDE + textwrap.dedent(
        """\
        import atexit, os
        pid = os.fork()
        if pid == 0:
            atexit.register(print, "child atexit", flush=True)
            sys.exit(3)
        print("child exit status", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        """
    )
    plain, traced = both_ways(tmp_path, source, "--json", tmp_path / "r.json")
    assert plain[1] == traced[1]  # (an older Warp prints a warning of its own first)
    assert traced[1].endswith("child atexit\nchild exit status 3\n")
    status, _, err = trace("--json", tmp_path / "r.json", tmp_path / "both.py")
    assert status == BREACHES and err.count("trackgen_contract: exit status") == 1
    assert load(tmp_path / "r.json")["breach_count"] == 1


def test_a_program_that_changes_directory(tmp_path):
    # BUG: report files were written, and sites named, relative to the directory the
    # program left the process in.
    (tmp_path / "elsewhere").mkdir()
    source = PRELUDE + "import os\nos.chdir('elsewhere')\n"
    path = program(tmp_path, source)
    status, _, err = trace("--json", "r.json", "--sarif", "r.sarif", path.name, cwd=tmp_path)
    assert status == BREACHES
    assert "  <module>  prog.py:9" in err
    assert load(tmp_path / "r.json")["breach_count"] == 1
    assert (tmp_path / "r.sarif").exists() and not list((tmp_path / "elsewhere").iterdir())


def test_the_report_imports_nothing_from_the_programs_directory(tmp_path):
    # BUG: from 3.13 the SARIF writer imported urllib.request on first use, after the
    # program ran, with the program's directory first on sys.path: a module there named as
    # one that pulls in (ipaddress) was imported and ended the command line.
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "ipaddress.py").write_text("raise ImportError('not the stdlib one')\n")
    path = program(tmp_path / "app", PRELUDE)
    status, _, err = trace("--sarif", tmp_path / "r.sarif", path)
    assert status == BREACHES, err
    assert "not the stdlib one" not in err
    assert json.loads((tmp_path / "r.sarif").read_text())["runs"][0]["results"]


def test_file_removed_from_the_main_the_script_ran_in(tmp_path):
    # Python takes __file__ out of the __main__ the script ran in, not out of a module the
    # program put in its place.
    source = """\
        import atexit, sys, types
        original = sys.modules["__main__"]
        stand_in = types.ModuleType("__main__")
        stand_in.__file__ = "/somewhere/else.py"
        sys.modules["__main__"] = stand_in
        atexit.register(lambda: print(stand_in.__file__, "__file__" in vars(original)))
        """
    plain, traced = both_ways(tmp_path, source)
    assert traced[1] == plain[1] == "/somewhere/else.py False\n"


@pytest.mark.parametrize("change", ["sys.path = tuple(sys.path)", "del sys.path"])
def test_a_program_that_replaces_sys_path(tmp_path, change):
    # BUG: the report was made on the tool's sys.path by assigning into the program's.
    source = f"import sys\nimport warp\n{change}\nimport atexit\natexit.register(print, 'done')\n"
    plain, traced = both_ways(tmp_path, source)
    assert plain == (0, "done\n", "") and traced[:2] == (NOTHING_CHECKED, "done\n")


@pytest.mark.parametrize(
    "source",
    ["def (:\n", "x = (1,\n", "print('a')\n\0\n", "x = 1\n  print('b')\0 + 1\n"],
    ids=["syntax", "unclosed", "null byte", "null byte in a line"],
)
def test_a_syntax_error_is_printed_as_python_prints_it(tmp_path, source):
    # BUG: a null byte was compile()'s "source code string cannot contain null bytes",
    # with no file or line.
    plain, traced = both_ways(tmp_path, source)
    assert plain[0] == traced[0] == 1
    assert traced == plain and "SyntaxError" in plain[2]


# --- hot paths -----------------------------------------------------------------------------


HOT = (
    PRELUDE
    + """\
b = wp.zeros(4, dtype=float, device="cpu")   # setup: outside the hot path

def step():
    gen.read_back(a)
    gen.launch_with_stream(a)

def other():
    gen.sync()

for _ in range(2):
    step()
    other()
"""
)


def test_no_hot_path_checks_the_whole_run(tmp_path):
    status, _, err = trace("--json", tmp_path / "r.json", program(tmp_path, HOT))
    assert status == BREACHES, err
    document = load(tmp_path / "r.json")
    assert document["scope"] == {"hot_paths": [], "whole_run": True}
    assert {b["api"] for b in document["breaches"]} == {
        "wp.array.numpy()",
        "wp.synchronize()",
        "wp.zeros()",
    }
    # The whole run is checked: the table has no hot-path column (it read 0 everywhere).
    header = _table_header(err)
    assert header.split() == ["Warp", "call", "calls", "breaches"]


def test_one_call_warp_serves_with_several_allocations_counts_once(tmp_path):
    body = "for _ in range(3):\n    wp.zeros(8, dtype=float, device='cpu', requires_grad=True)\n"
    status, _, err = trace("--json", tmp_path / "r.json", program(tmp_path, PRELUDE + body))
    assert status == BREACHES, err
    document = load(tmp_path / "r.json")
    counted = {(b["api"], b["site"]["lineno"]): b["count"] for b in document["breaches"]}
    assert counted == {("wp.zeros()", 11): 3, ("wp.zeros()", 9): 1}  # the prelude's a = ...
    zeros = next(c for c in document["calls"] if c["api"] == "wp.zeros")
    assert (zeros["calls"], zeros["breaches"]) == (4, 4)  # not 7: a gradient is no call
    inside = [c["calls"] for c in document["calls"] if c["inside"] == "wp.zeros"]
    assert max(inside) == 7  # Warp's allocator, named by version: what was done for them


def test_a_call_is_named_as_the_public_api_of_a_subpackage_imported_late(tmp_path):
    # warp.optim and warp.fem are imported after the first breach named by its Warp call;
    # Trimesh2D and Trimesh3D share their constructor's code.
    body = """\
    import numpy as np
    import warp.fem as fem
    import warp.optim
    warp.optim.Adam([a], lr=0.1)
    triangles = wp.array(np.array([[0, 1, 2], [1, 3, 2]], dtype=np.int32))
    corners = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], dtype=np.float32)
    in_3d = wp.array(corners, dtype=wp.vec3)
    in_2d = wp.array(corners[:, :2].copy(), dtype=wp.vec2)
    fem.Trimesh3D(tri_vertex_indices=triangles, positions=in_3d)
    fem.Trimesh2D(tri_vertex_indices=triangles, positions=in_2d)
    """
    source = PRELUDE.replace('device="cpu")', 'device="cpu")\nwp.set_device("cpu")')
    path = program(tmp_path, source + textwrap.dedent(body))
    status, _, err = trace("--checks", "allocation", "--json", tmp_path / "r.json", path)
    assert status == BREACHES, err
    named = {b["site"]["lineno"]: b["api"] for b in load(tmp_path / "r.json")["breaches"]}
    first = len(source.splitlines()) + 1
    assert [named[first + k] for k in (3, 8, 9)] == [
        "wp.optim.Adam()",
        "wp.fem.Trimesh3D()",
        "wp.fem.Trimesh2D()",
    ]


def _table_header(err):
    return err.split("Warp calls seen\n")[1].splitlines()[0]


@pytest.mark.parametrize("target", ["__main__:step", "prog:step"])
def test_hot_option_scopes_the_checks(tmp_path, target):
    path = program(tmp_path, HOT)
    status, _, err = trace("--hot", target, "--json", tmp_path / "r.json", path)
    assert status == BREACHES, err
    document = load(tmp_path / "r.json")
    assert document["scope"] == {"hot_paths": ["step"], "whole_run": False}
    assert [(b["api"], b["count"]) for b in document["breaches"]] == [("wp.array.numpy()", 2)]
    numpy = next(c for c in document["calls"] if c["api"] == "wp.array.numpy")
    assert numpy == {
        "api": "wp.array.numpy",
        "inside": None,
        "calls": 2,
        "in_hot_paths": 2,
        "breaches": 2,
    }
    sync = next(c for c in document["calls"] if c["api"] == "wp.synchronize")
    assert sync["in_hot_paths"] == 0 and sync["breaches"] == 0
    assert _table_header(err).split() == ["Warp", "call", "calls", "in", "hot", "paths", "breaches"]


def test_hot_option_in_an_imported_module(tmp_path):
    path = program(tmp_path, PRELUDE + "gen.read_back(a)\ngen.sync()\n")
    status, _, err = trace("--hot", "acme.gen:read_back", path)
    assert status == BREACHES
    assert "checked inside hot paths: acme.gen:read_back" in err  # known by name: see --hot
    assert "wp.synchronize" not in err.split("Warp calls seen")[0]


def test_hot_path_marker_in_the_program(tmp_path):
    path = program(
        tmp_path,
        PRELUDE
        + textwrap.dedent("""\
        scratch = wp.zeros(8, dtype=float, device="cpu")   # setup allocation: not a breach

        class Gen:
            @trackgen_contract.hot_path
            def generate(self):
                gen.launch_with_stream(a)

        Gen().generate()
        a.numpy()   # reading results afterwards: fine
    """),
    )
    status, _, err = trace(path)
    assert status == 0, err
    assert "checked inside hot paths: Gen.generate" in err


LAZY_HELPER = """\
import warp as wp
STREAM = None

def numpy_of(arr):
    return arr.numpy()
"""

LAZY_PROGRAM = """\
LAZY import warp as wp
LAZY from warp import copy, synchronize, zeros
LAZY from helper import STREAM, numpy_of
LAZY import helper
LAZY from trackgen_contract import hot_path_guard

def hot(a, b):
    copy(b, a, stream=STREAM)
    copy(b, a)
    synchronize()
    helper.numpy_of(a)
    return numpy_of(a)

wp.config.quiet = True
a = zeros(4, dtype=float, device="cpu")
b = zeros(4, dtype=float, device="cpu")
for _ in range(3):
    hot(a, b)
with hot_path_guard(strict=False) as guard:
    hot(a, b)
print(sorted(str(v.site) for v in guard.violations))
"""


@pytest.mark.skipif(sys.version_info < (3, 15), reason="lazy imports (PEP 810) are new in 3.15")
def test_lazily_imported_names_are_judged_as_the_names_they_become(tmp_path):
    # A lazy import binds a proxy that the first use of the name replaces: by the time a
    # watched call is made its names are the real objects, and the report is the eager one.
    found = {}
    for prefix in ("", "lazy "):
        folder = tmp_path / (prefix.strip() or "eager")
        folder.mkdir()
        (folder / "helper.py").write_text(LAZY_HELPER)
        path = program(folder, LAZY_PROGRAM.replace("LAZY ", prefix))
        status, out, err = trace("--hot", "prog:hot", "--json", folder / "r.json", path)
        document = load(folder / "r.json")
        shown = json.dumps([document["breaches"], document["calls"]]).replace(str(folder), "")
        out, err = (text.replace(str(folder), "") for text in (out, err))
        found[prefix] = (status, out.splitlines()[-1:], shown, err)
    assert found[""][0] == BREACHES and found[""] == found["lazy "]
    assert "16 breaching calls at 3 sites" in found["lazy "][3]  # 4 in each of 4 runs of hot


# --- options -------------------------------------------------------------------------------


def test_strict_stops_at_the_first_breach(tmp_path):
    path = hot_program(tmp_path, "gen.read_back(a)\nprint('after')\n")
    status, out, err = trace("--strict", "--hot", "__main__:run", path)
    assert status == BREACHES
    assert "after" not in out
    assert "trackgen_contract: host sync on a hot path: wp.array.numpy() from read_back" in err


def test_allow_option(tmp_path):
    path = hot_program(tmp_path, "gen.read_back(a)\n")
    assert trace("--allow", "wp.array.numpy:acme.gen:read_back", path)[0] == 0


def test_the_reports_allow_values_pass_back_as_they_are(tmp_path):
    # BUG: the JSON's "allow" values were quoted for a shell ("'wp.array.numpy:__main__:
    # <module>'"), which, passed back as one argument, is no key.
    path = program(tmp_path, PRELUDE + "a.numpy()\n")
    assert trace("--checks", "host_sync", "--json", tmp_path / "r.json", path)[0] == BREACHES
    (breach,) = load(tmp_path / "r.json")["breaches"]
    assert breach["allow"] == ["wp.array.numpy:__main__:<module>"]
    status, _, err = trace("--checks", "host_sync", "--allow", breach["allow"][0], path)
    assert status == 0, err


def test_an_allow_option_that_let_nothing_through_is_named(tmp_path):
    """A misspelt key is said (text and JSON), as given and once; a used one is not, and
    neither changes the exit status."""
    path = hot_program(tmp_path, "gen.read_back(a)\n")
    used, misspelt = "wp.array.numpy:acme.gen:read_back", "wp.array.numpy:acme.gen:readback"
    args = [
        "--allow",
        misspelt,
        "--allow",
        used,
        "--allow",
        misspelt,
        "--allow",
        "wp.synchronize:x:y",
    ]
    status, _, err = trace(*args, "--json", tmp_path / "r.json", path)
    assert status == 0, err
    assert f"unused --allow {misspelt}: it let no host sync through" in err
    assert err.count(f"unused --allow {misspelt}") == 1
    assert "unused --allow wp.synchronize:x:y" in err
    assert f"unused --allow {used}" not in err
    assert load(tmp_path / "r.json")["unused_allows"] == [misspelt, "wp.synchronize:x:y"]
    status, _, err = trace("--allow", used, path)
    assert status == 0 and "unused --allow" not in err


def test_checks_and_modules_options(tmp_path):
    path = hot_program(tmp_path, "gen.read_back(a)\ngen.launch_without_stream(a)\n")
    assert trace("--checks", "host_sync", "--json", tmp_path / "h.json", path)[0] == BREACHES
    assert [b["category"] for b in load(tmp_path / "h.json")["breaches"]] == ["host_sync"]
    assert trace("--checks", "stream", "--modules", "elsewhere", path)[0] == NOTHING_CHECKED
    assert trace("--checks", "stream", "--modules", "acme", path)[0] == BREACHES


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.py"], "can't open file 'missing.py'"),
        (["--colour", "x.py"], "unrecognized arguments: --colour"),
        (["--js", "out.json", "x.py"], "unrecognized arguments: --js"),  # no abbreviations
        ([], "no program to run"),
        (["--json", "x.py"], "(--json took 'x.py' as the file it writes: name that file first)"),
        (["--write-baseline", "x.py"], "--write-baseline took 'x.py' as the file it writes"),
        (["-m"], "-m needs a module name"),
        (["-m", "no_such_module_here"], "no module named 'no_such_module_here'"),
        (["--hot", "nocolon", "PROG"], "--hot takes MODULE:QUALNAME"),
        (["--hot", "prog:absent", "PROG"], "the program defines no function 'absent'"),
        (["--hot", "acme.gen:nothing", "PROG"], "'acme.gen' has no 'nothing'"),
        (["--hot", "acme.gen:np", "PROG"], "'np' is not a function"),  # an imported module
        (["--hot", "acme.gen:Holder", "PROG"], "'Holder' is not a function"),  # a class
        (["--hot", "os:nothing", "PROG"], "'os' has no 'nothing'"),  # imported already
        (["--checks", "host_sync,gpu", "PROG"], "--checks: unknown category 'gpu'"),
        (["--checks=", "PROG"], "--checks is empty, so nothing would be checked"),
        (["--checks", " , ", "PROG"], "--checks is empty"),
        # an empty name between commas: a typo that would have dropped a category unseen
        (["--checks", "stream,,capture", "PROG"], "--checks 'stream,,capture' has an empty"),
        (["--checks", "stream,", "PROG"], "--checks 'stream,' has an empty name in its list"),
        (["--allow", "wp.array.numpy:acme", "PROG"], "--allow takes API:MODULE:FUNCTION"),
        (["--allow", "wp.zeros:a:b", "PROG"], "'wp.zeros' is not a host sync or readback API"),
        (["--allow", "numpy:mysim:f", "PROG"], "--allow numpy:mysim:f: 'numpy' is not a host"),
        (["--modules", "a b", "PROG"], "--modules: 'a b' is not a module name"),
        (["--modules", "", "PROG"], "--modules is empty"),
        (["--modules", ",acme", "PROG"], "--modules ',acme' has an empty name in its list"),
        (["--json", "/no/such/dir/r.json", "PROG"], "--json /no/such/dir/r.json: no such dir"),
        (["--sarif", "/no/such/dir/r.sarif", "PROG"], "--sarif /no/such/dir/r.sarif: no such"),
        (["--json", "PROGDIR", "PROG"], "is a directory"),
        (["--baseline", "missing.json", "PROG"], "--baseline missing.json: no such file"),
        (["--baseline", "PROG", "PROG"], "not a baseline file"),
        (["--baseline", "b", "--write-baseline", "c", "PROG"], "go one at a time"),
        # --strict stops at the first breach: a baseline of it would list that one alone
        (["--strict", "--write-baseline", "b.json", "PROG"], "--strict and --write-baseline"),
        # one file for two reports, the baseline read or the program: one would be lost
        (["--json", "r", "--sarif", "r", "PROG"], "--sarif r: that file is --json's"),
        (["--sarif", "r", "--write-baseline", "./r", "PROG"], "./r: that file is --sarif's"),
        (["--json", "SCRIPT", "SCRIPT"], "that file is the program's"),
        (["--write-baseline", "SCRIPT", "SCRIPT"], "that file is the program's"),
        # nor any Python source: the program's, or a module it imports
        (["--json", "PROG", "PROG"], "is a Python source file, which the report would replace"),
        (["--sarif", "HELPER", "PROG"], "helper.py: is a Python source file"),
        (["--baseline", "BASE", "--json", "BASE", "PROG"], "that file is --baseline's"),
        # a file's name is not its module's: looked up as a package, it would run first
        (["--hot", "acme/gen:f", "PROG"], "'acme/gen' is not a module name"),
        (["--hot", "gen.py:f", "PROG"], "'gen.py' is a file name; give the module's name (gen:f)"),
        (["--hot", "prog:f-g", "PROG"], "'f-g' is not a qualified name"),
        (["-c", "print(1)"], "a program given with -c cannot be run"),
        (["--json", "r", "-c", "print(1)"], "a program given with -c cannot be run"),
        (["-"], "a program read from stdin (-) cannot be run"),
        (["--", "-"], "a program read from stdin (-) cannot be run"),
        (["PYC"], "is compiled bytecode: run the source it was compiled from"),
        # a report replaces its file: never a device or a pipe (as root, the system's)
        # an empty path (an unset variable in a CI script) turned the option off silently
        (["--json", "", "PROG"], "argument --json: an empty path"),
        (["--sarif=", "PROG"], "argument --sarif: an empty path"),
        (["--baseline", "", "PROG"], "argument --baseline: an empty path"),
        (["--write-baseline", "", "PROG"], "argument --write-baseline: an empty path"),
        (["--json", "-", "PROG"], "argument --json: '-' names no file here"),
        (["--json", "/dev/null", "PROG"], "--json /dev/null: not a regular file"),
        (["--sarif", "FIFO", "PROG"], "not a regular file (a report replaces its file)"),
        (["--json", "ZIP", "ZIP"], "that file is the program's"),
    ],
)
def test_usage_errors(tmp_path, args, message):
    path = program(tmp_path, PRELUDE)
    compiled = py_compile.compile(str(path), cfile=str(tmp_path / "prog.pyc"), doraise=True)
    base = tmp_path / "base.json"
    if "BASE" in args:  # a real baseline: the collision is found before it is read
        status, _, err = trace("--write-baseline", base, program(tmp_path, "", "empty.py"))
        assert status == 101 and base.exists(), err
    names = {"PROG": str(path), "PROGDIR": str(tmp_path), "PYC": compiled, "BASE": str(base)}
    if "FIFO" in args:
        os.mkfifo(tmp_path / "fifo")
        names["FIFO"] = str(tmp_path / "fifo")
    if "SCRIPT" in args:  # a program with no .py suffix
        names["SCRIPT"] = str(program(tmp_path, PRELUDE, "script"))
    if "HELPER" in args:
        (tmp_path / "HELPER").mkdir()
        names["HELPER"] = str(program(tmp_path / "HELPER", "", "helper.py"))
    if "ZIP" in args:
        with zipfile.ZipFile(tmp_path / "prog.zip", "w") as archive:
            archive.writestr("__main__.py", "print('main')\n")
        names["ZIP"] = str(tmp_path / "prog.zip")
    status, _, err = trace(*[names.get(a, a) for a in args], cwd=tmp_path)
    assert status == 2
    assert err.count("\n") == 1, err  # one line
    assert err.startswith("python -m trackgen_contract.trace: error: ")
    assert message in err
    assert "allow:" not in err and "pass None" not in err  # the API's words, not the CLI's


@pytest.mark.parametrize("bad", ["nocolon", "PROG_NAME:absent"])
def test_a_bad_hot_target_is_reported_before_another_imports_a_module(tmp_path, bad):
    # `join` is not a def of noisy's own: only importing noisy tells what it is bound to.
    (tmp_path / "noisy.py").write_text("print('noisy imported')\nfrom os.path import join\n")
    path = program(tmp_path, PRELUDE)
    bad = bad.replace("PROG_NAME", path.stem)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(TESTS)])}
    status, out, err = trace("--hot", "noisy:join", "--hot", bad, path, cwd=tmp_path, env=env)
    assert status == 2 and err.startswith("python -m trackgen_contract.trace: error: --hot")
    assert "noisy imported" not in out
    assert "noisy imported" in trace("--hot", "noisy:join", path, cwd=tmp_path, env=env)[1]


@pytest.mark.parametrize(
    ("target", "found"),
    [
        ("my-script:step", "2 breaching calls at 2 sites"),
        ("__main__:<lambda>", "1 breaching call at 1 site"),
        ("my-script:step.<locals>.<lambda>", "1 breaching call at 1 site"),
    ],
)
def test_hot_takes_the_scripts_own_name_and_the_names_python_makes(tmp_path, target, found):
    # The script's name is any file's (not a module name), and <lambda> is a function's.
    source = PRELUDE + (
        "f = lambda: a.numpy()\n\n"
        "def step():\n    g = lambda: a.numpy()\n    g()\n    f()\n\nstep()\n"
    )
    path = program(tmp_path, source, "my-script.py")
    status, _, err = trace("--hot", target, path, cwd=tmp_path)
    assert status == BREACHES, err
    assert found in err


def test_a_hot_module_under_a_plain_module_is_not_looked_up_by_importing_it(tmp_path):
    # BUG: `side.sub` was looked up as Python looks a submodule up, importing `side`
    # first: its code ran ahead of the program, unwatched (a plain module has no
    # submodules: there is nothing to find).
    (tmp_path / "side.py").write_text("print('side imported')\n")
    path = program(tmp_path, "print('program starts')\nimport side\n")
    env = {"PYTHONPATH": str(tmp_path)}
    status, out, err = trace("--hot", "side.sub:work", path, cwd=tmp_path, env=env)
    assert out.splitlines() == ["program starts", "side imported"], err
    assert status == NOTHING_CHECKED and "never imported 'side.sub'" in err


def test_help_shows_an_example():
    status, out, _ = trace("--help")
    assert status == 0
    assert "examples:" in out and "examples/track_demo.py --dirty" in out
    assert (
        f"{BREACHES}   breaches found" in out and f"{NOTHING_CHECKED}   nothing was checked" in out
    )


# --- the report ----------------------------------------------------------------------------


def test_colour_only_when_asked(tmp_path):
    path = program(tmp_path, PRELUDE + "a.numpy()\n")
    _, _, err = trace(path)  # stderr is a pipe here
    assert "\033[" not in err
    scoped = Scoped(Recording(make_policy()), hot_paths=())
    findings = report.Findings(scoped, breaches=(), let_through=())
    outcome = report.Outcome(0, 0, "clean")
    text = report.render(findings, outcome, program="p.py", colour=True)
    assert "\033[1;32mno hot-path contract breach\033[0m" in text


def test_schema_is_valid_and_versioned():
    schema = report.schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema_version"] == {"const": report.SCHEMA_VERSION}


# --- nothing checked is not clean ----------------------------------------------------------


def test_a_named_hot_path_that_never_runs_is_not_a_pass(tmp_path):
    path = program(tmp_path, PRELUDE + "def never():\n    a.numpy()\n\ngen.launch_with_stream(a)\n")
    status, _, err = trace("--hot", "__main__:never", "--json", tmp_path / "r.json", path)
    assert status == NOTHING_CHECKED == 101, err
    assert "nothing checked: hot path never: no Warp call that the checks look at" in err
    # Nothing found, and no pass: the headline says so (it read "no hot-path contract
    # breach"), and the body why.
    assert "trackgen_contract: no breach found, but not fully checked, in " in err
    assert "no hot-path contract breach" not in err
    document = load(tmp_path / "r.json")
    assert document["exit_status"] == NOTHING_CHECKED and document["unchecked"]


def test_a_hot_path_in_a_module_the_program_imports_later_is_found_without_importing_it(
    tmp_path,
):
    # The program puts the module's directory on sys.path itself and configures before
    # importing it: the command line must not import it first (nor fail to).
    lib = tmp_path / "src"
    lib.mkdir()
    (lib / "late_lib.py").write_text(
        "import os, sys\n"
        "import warp as wp\n"
        "print('late_lib imported, setting', os.environ.get('LATE_SETTING'))\n"
        "def generate(a):\n"
        "    wp.launch(sys.modules['acme.gen'].add_one, dim=4, inputs=[a], device='cpu')\n"
        "def other(a):\n"
        "    a.numpy()\n"
    )
    (lib / "twin.py").write_text("def generate(a):\n    a.numpy()\n")  # same name, elsewhere
    source = PRELUDE + (
        "import os\n"
        "print('main starts')\n"
        "os.environ['LATE_SETTING'] = 'made by main'\n"
        "sys.path.insert(0, os.path.join(os.path.dirname(__file__), 'src'))\n"
        "import late_lib, twin\n"
        "late_lib.generate(a)\n"
        "late_lib.other(a)\n"
        "twin.generate(a)\n"
    )
    path = program(tmp_path, source)
    plain = subprocess.run(
        [sys.executable, path],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(TESTS)},
        timeout=300,
    )
    assert plain.returncode == 0, plain.stderr
    status, out, err = trace("--hot", "late_lib:generate", "--json", tmp_path / "r.json", path)
    expected = ["main starts", "late_lib imported, setting made by main"]
    for printed in (plain.stdout, out):  # (an older Warp may print a warning of its own)
        assert [line for line in printed.splitlines() if line in expected] == expected
    assert status == BREACHES, err
    breaches = load(tmp_path / "r.json")["breaches"]
    # Only the launch in late_lib.generate: not late_lib.other, not twin.generate.
    assert [(b["api"], b["site"]["function"]) for b in breaches] == [
        ("wp.launch without stream=", "generate")
    ]
    assert breaches[0]["site"]["module"] == "late_lib"


@pytest.mark.parametrize(
    "target", ["lib:generate", "lib.core:Gen.run", "lib:Gen.run", "lib.core:fast"]
)
def test_a_hot_name_a_module_imports_or_inherits_is_resolved_by_importing_it(tmp_path, target):
    # Not a def of the module's own (a re-export, an inherited method, an alias): only
    # importing the module tells what it is, as before the module was read instead.
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "__init__.py").write_text("from .core import Gen, generate\n")
    (lib / "core.py").write_text(
        "import warp as wp\n"
        "def generate(n):\n    return wp.zeros(n, dtype=float, device='cpu')\n"
        "class Base:\n    def run(self, n):\n        return generate(n)\n"
        "class Gen(Base):\n    pass\n"
        "fast = generate\n"
    )
    source = "import warp as wp\nwp.config.quiet = True\nimport lib\nlib.Gen().run(3)\n"
    status, _, err = trace("--hot", target, program(tmp_path, source), cwd=tmp_path)
    assert status == BREACHES, err
    assert "allocation: 1 call" in err


def _hot_path_names(tmp_path, module, source, call, target):
    """The report's hot path line for a program that imports `module` (`source`) and runs
    `call`, with ``--hot target``; the run must pass."""
    (tmp_path / f"{module}.py").write_text(source)
    path = program(tmp_path, f"import {module}\n{call}\n")
    status, _, err = trace("--hot", target, path, cwd=tmp_path)
    assert status == 0, err
    return next(line for line in err.splitlines() if line.startswith("checked inside"))


def test_a_function_marked_and_named_with_hot_counts_for_both(tmp_path):
    source = (
        "import warp as wp\nimport trackgen_contract\n"
        "a = wp.zeros(4, dtype=float, device='cpu')\n"
        "class Gen:\n"
        "    @trackgen_contract.hot_path\n"
        "    def generate(self):\n"
        "        wp.copy(a, a, stream=None)\n"
    )
    names = _hot_path_names(tmp_path, "gen2", source, "gen2.Gen().generate()", "gen2:Gen.generate")
    assert names == "checked inside hot paths: gen2:Gen.generate"  # one function, one name


def test_a_function_whose_decorator_set_its_module_marked_both_ways_has_one_name(tmp_path):
    source = (
        "import warp as wp, trackgen_contract\n"
        "a = wp.zeros(4, dtype=float, device='cpu')\n"
        "def relabelled(fn):\n"
        "    fn.__module__ = 'somewhere.else'\n"
        "    return fn\n"
        "@trackgen_contract.hot_path\n"
        "@relabelled\n"
        "def step():\n"
        "    wp.copy(a, a, stream=None)\n"
    )
    names = _hot_path_names(tmp_path, "gen3", source, "gen3.step()", "gen3:step")
    assert names == "checked inside hot paths: gen3:step"


def test_a_hot_path_in_a_module_the_program_never_imports_is_not_a_pass(tmp_path):
    path = program(tmp_path, PRELUDE + "gen.read_back(a)\n")
    status, _, err = trace("--hot", "no_such_mod:f", path)
    assert status == NOTHING_CHECKED, err
    assert "hot path no_such_mod:f: no Warp call" in err and "never imported 'no_such_mod'" in err


def test_a_marked_hot_path_that_never_runs_is_not_a_pass(tmp_path):
    source = PRELUDE + "@trackgen_contract.hot_path\ndef step():\n    a.numpy()\n\na.numpy()\n"
    status, _, err = trace(program(tmp_path, source))
    assert status == NOTHING_CHECKED, err
    assert "hot path step: no Warp call that the checks look at" in err


def test_a_kernel_named_as_a_hot_path_is_told_to_name_its_launcher(tmp_path):
    source = PRELUDE + (
        "@wp.kernel\ndef inc(x: wp.array(dtype=float)):\n    x[wp.tid()] += 1.0\n\n"
        "wp.launch(inc, dim=4, inputs=[a], device='cpu', stream=None)\n"
    )
    status, _, err = trace("--hot", "__main__:inc", program(tmp_path, source))
    assert status == NOTHING_CHECKED, err
    assert "a @wp.kernel or @wp.func never runs as Python: name the function that launches" in err


def _twin_modules(tmp_path):
    """Two modules, each with a @hot_path ``Gen.step``: only ``ran_mod``'s runs."""
    for name in ("ran_mod", "idle_mod"):
        (tmp_path / f"{name}.py").write_text(
            "import warp as wp\nimport trackgen_contract\n"
            "class Gen:\n"
            "    @trackgen_contract.hot_path\n"
            "    def step(self, a):\n"
            "        wp.copy(a, a, stream=None)\n"
        )


@pytest.mark.parametrize("how", ["marked", "named"])
def test_hot_paths_of_one_name_in_two_modules_are_told_apart(tmp_path, how):
    # The one that ran must not make the other, of the same qualified name, look checked.
    _twin_modules(tmp_path)
    source = PRELUDE + "import ran_mod, idle_mod\nran_mod.Gen().step(a)\n"
    if how == "named":  # the second known by name, the first by its mark
        source = source.replace("import ran_mod, idle_mod", "import ran_mod")
        (tmp_path / "idle_mod.py").write_text(
            "class Gen:\n    def step(self, a):\n        a.numpy()\n"
        )
    options = ["--hot", "idle_mod:Gen.step"] if how == "named" else []
    path = program(tmp_path, source)
    status, _, err = trace(*options, "--json", tmp_path / "r.json", path, cwd=tmp_path)
    assert status == NOTHING_CHECKED, err
    assert "checked inside hot paths: ran_mod:Gen.step, idle_mod:Gen.step" in err
    assert "hot path idle_mod:Gen.step: no Warp call" in err
    assert "hot path ran_mod:Gen.step:" not in err
    assert load(tmp_path / "r.json")["scope"]["hot_paths"] == [
        "ran_mod:Gen.step",
        "idle_mod:Gen.step",
    ]


def test_hot_paths_of_one_name_in_two_modules_both_run(tmp_path):
    _twin_modules(tmp_path)
    source = PRELUDE + "import ran_mod, idle_mod\nran_mod.Gen().step(a)\nidle_mod.Gen().step(a)\n"
    status, _, err = trace(program(tmp_path, source), cwd=tmp_path)
    assert status == 0, err
    assert "checked inside hot paths: ran_mod:Gen.step, idle_mod:Gen.step" in err


def test_a_hot_path_of_a_name_no_other_shares_is_shown_by_its_name_alone(tmp_path):
    source = (
        PRELUDE
        + "@trackgen_contract.hot_path\ndef step():\n    gen.launch_with_stream(a)\n\nstep()\n"
    )
    status, _, err = trace(program(tmp_path, source))
    assert status == 0, err
    assert "checked inside hot paths: step\n" in err


def test_one_hot_path_that_ran_does_not_cover_one_that_did_not(tmp_path):
    source = (
        PRELUDE + "def ran():\n    gen.launch_with_stream(a)\n\ndef idle():\n    pass\n\nran()\n"
    )
    path = program(tmp_path, source)
    assert trace("--hot", "__main__:ran", path)[0] == 0
    status, _, err = trace("--hot", "__main__:ran", "--hot", "__main__:idle", path)
    assert status == NOTHING_CHECKED, err
    assert "hot path idle:" in err and "hot path ran:" not in err


@pytest.mark.parametrize("narrowed", [False, True])
def test_warps_own_memsets_are_not_checked_calls(tmp_path, narrowed):
    # wp.zeros fills its array (a memset) and numpy() opens a ScopedStream: Warp's own,
    # which no stream rule counts against anyone, with or without --modules.
    path = program(tmp_path, PRELUDE + "a.numpy()\n")
    status, _, err = trace("--checks", "stream", *(["--modules", "prog"] * narrowed), path)
    assert status == NOTHING_CHECKED, err


@pytest.mark.parametrize(
    ("options", "checked"),
    [
        (["--checks", "stream", "--modules", "elsewhere"], False),  # a typo in --modules
        (["--checks", "stream", "--modules", "acme"], True),
        (["--checks", "capture"], False),  # no call of a kind the check looks at
        (["--checks", "stream,host_sync", "--modules", "elsewhere"], True),  # the copy
    ],
)
def test_calls_that_no_check_looks_at_are_not_a_pass(tmp_path, options, checked):
    # A launch and a copy with their stream, from acme.gen: seen, but a stream rule
    # narrowed to other modules, or a check of other calls, looks at neither (the host
    # sync check looks at every copy: one between devices syncs).
    body = "gen.launch_with_stream(a)\ngen.copy_with_stream(a, a)\n"
    path = program(tmp_path, PRELUDE + body)
    status, _, err = trace(*options, path)
    assert status == (0 if checked else NOTHING_CHECKED), err
    assert ("none of the program's watched Warp calls is one the checks look at" in err) != checked
    hot = hot_program(tmp_path, body)
    status, _, err = trace(*options, "--json", tmp_path / "r.json", hot)
    assert status == (0 if checked else NOTHING_CHECKED), err
    assert ("hot path run: no Warp call that the checks look at" in err) != checked
    assert bool(load(tmp_path / "r.json")["unchecked"]) != checked


def test_breaches_outrank_nothing_checked_and_the_programs_failure_outranks_both(tmp_path):
    source = PRELUDE + "def idle():\n    pass\n\ndef hot():\n    a.numpy()\n\nhot()\n"
    path = program(tmp_path, source)
    assert trace("--hot", "__main__:idle", "--hot", "__main__:hot", path)[0] == BREACHES
    program(tmp_path, source + "raise SystemExit(7)\n")
    assert trace("--hot", "__main__:idle", "--hot", "__main__:hot", path)[0] == 7


# --- report files: checked before the run, written atomically ------------------------------


@pytest.mark.parametrize("option", ["--json", "--sarif", "--write-baseline"])
def test_an_unwritable_report_path_fails_before_the_program_runs(tmp_path, option):
    blocker = tmp_path / "file"
    blocker.write_text("")
    path = program(tmp_path, PRELUDE + "print('the program ran')\n")
    status, out, err = trace(option, blocker / "r.json", path)
    assert status == 2
    assert "the program ran" not in out
    assert err.startswith(f"python -m trackgen_contract.trace: error: {option} {blocker}/r.json")
    assert err.count("\n") == 1


def test_report_files_replace_a_symlink_rather_than_follow_it(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep me\n")
    link = tmp_path / "r.json"
    link.symlink_to(target)
    path = program(tmp_path, PRELUDE + "a.numpy()\n")
    assert trace("--json", link, path)[0] == BREACHES
    assert target.read_text() == "keep me\n"
    assert not link.is_symlink() and load(link)["breach_count"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.txt", "prog.py", "r.json"]


def test_modules_accepts_the_scripts_own_name(tmp_path):
    # The script runs as __main__; naming it by its file's name covers it, as --hot does.
    path = hot_program(tmp_path, "wp.launch(gen.add_one, dim=4, inputs=[a], device='cpu')\n")
    # Not the script: its launch is not one the stream rules look at, so nothing is checked.
    assert trace("--checks", "stream", "--modules", "acme", path)[0] == NOTHING_CHECKED
    status, _, err = trace("--checks", "stream", "--modules", "prog", path)
    assert status == BREACHES, err
    assert "wp.launch without stream=  run" in err
    assert trace("--checks", "stream", "--modules", "__main__", path)[0] == BREACHES
