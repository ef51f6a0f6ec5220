"""``python -m trackgen_contract.trace``: run a program and report its hot-path breaches.

    python -m trackgen_contract.trace [options] script.py [args...]
    python -m trackgen_contract.trace [options] -m module [args...]

The program runs as ``__main__`` with every Warp call recorded. Checks apply inside hot
paths (functions marked ``@trackgen_contract.hot_path``, or named with ``--hot``), or to
the whole run when none is named. The report goes to stderr when the program ends.

Exit status: 0 clean; 100 breaches found in a program that otherwise succeeded; 101
nothing was checked; the program's own status when it failed; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import json
import os
import re
import signal
import sys
import threading
import traceback
from types import CodeType
from typing import TextIO

from . import __version__, hotpaths, pragmas
from . import baseline as baselines
from . import sarif as sarifs
from .project import (
    OutputError,
    check_writable,
    claim,
    path_option,
    portable_path,
    project_files,
    project_root,
    write_atomic,
)
from .recording import Recording, Row, Scoped
from .registry import COPY, READBACK, SYNC, TABLE
from .report import Findings, Outcome, render, to_json
from .rules import CATEGORIES, Key, Policy, Violation, is_module_name, make_policy
from .runner import Program, ProgramNotFound, functions_of_unimported, without_own_tail
from .tracer import check_setting, keep_armed

PROG = "python -m trackgen_contract.trace"

CLEAN = 0
USAGE_ERROR = 2
BREACHES = 100
NOTHING_CHECKED = 101

_HOST_SYNC_APIS = tuple(sorted({w.api for w in TABLE if w.op in (SYNC, READBACK, COPY)}))

_EPILOG = f"""\
exit status:
  0     clean: what was checked has no breach (after --baseline)
  {BREACHES}   breaches found, in a program that otherwise succeeded (or that --strict stopped)
  {NOTHING_CHECKED}   nothing was checked, and no breach found: a hot path made no watched Warp
        call (it never ran), or the program made none at all, or it took the
        tracer's hook away (with breaches found too: {BREACHES})
  2     usage error (one line, before the program runs), or an unreadable
        '# trackgen_contract:' pragma in the program's source
  other the program's own status when it failed (1 for an uncaught exception,
        N for sys.exit(N), 130 for Ctrl-C); the report is printed either way

examples:
  {PROG} examples/track_demo.py --dirty
  {PROG} --hot acme.gen:Generator.generate --json report.json -m acme.bench --steps 10
  {PROG} --checks host_sync,allocation --allow wp.array.numpy:acme.debug:dump run.py
  {PROG} --write-baseline hot-path-baseline.json run.py   # accept what exists today
  {PROG} --baseline hot-path-baseline.json --sarif breaches.sarif run.py
"""


class UsageError(Exception):
    """A mistake on the command line (exit status 2, one line of message)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _parser() -> _Parser:
    parser = _Parser(
        prog=PROG,
        usage=f"{PROG} [options] script.py [args...]\n       {PROG} [options] -m module [args...]",
        description="Run a program with every Warp call recorded, and report the calls that "
        "would break a CUDA graph capture of its hot paths.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # `_split` finds where the program starts by the full names
    )
    add = parser.add_argument
    add(
        "--hot",
        action="append",
        default=[],
        metavar="MODULE:QUALNAME",
        help="check inside this function (repeatable); with none named and "
        "no @hot_path marked, the whole run is checked",
    )
    add(
        "--checks",
        default=",".join(CATEGORIES),
        metavar="LIST",
        help=f"comma-separated categories to check (default: {','.join(CATEGORIES)})",
    )
    add(
        "--modules",
        metavar="LIST",
        help="comma-separated module prefixes the stream rules cover, the script's own "
        "name included (default: every caller outside Warp)",
    )
    add(
        "--allow",
        action="append",
        default=[],
        metavar="API:MODULE:FUNCTION",
        help="a host sync or readback to let through (repeatable), e.g. "
        "wp.array.numpy:acme.gen:Gen.generate; the report prints the text for each",
    )
    add("--strict", action="store_true", help="stop the program at the first breach")
    add(
        "--json",
        metavar="PATH",
        type=path_option,
        help="also write the report as JSON (report.schema.json)",
    )
    add("--sarif", metavar="PATH", type=path_option, help="also write the breaches as SARIF 2.1.0")
    add(
        "--baseline",
        metavar="PATH",
        type=path_option,
        help="accept the breaches this file lists; fail only on new ones",
    )
    add(
        "--write-baseline",
        metavar="PATH",
        type=path_option,
        help="write every breach of the run to this file, and accept them",
    )
    return parser


_TAKES_VALUE = {
    "--hot", "--checks", "--modules", "--allow", "--json", "--sarif", "--baseline",
    "--write-baseline",
}  # fmt: skip


_FROM_A_FILE = (
    "{what} cannot be run: its lines could not be shown or read for pragmas; "
    "save it to a file and run that"
)


def _split(argv: list[str]) -> tuple[list[str], tuple[str, str, list[str]] | None]:
    """Our options, and the program to run: ("script" or "module", name, its arguments)."""
    options: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "-m":
            if i + 1 == len(argv):
                raise UsageError("-m needs a module name")
            return options, ("module", argv[i + 1], argv[i + 2 :])
        if token.startswith("-m") and not token.startswith("--"):  # -mMODULE, as Python takes
            return options, ("module", token[2:], argv[i + 1 :])
        if token.startswith("-c"):  # -c CODE, or -cCODE
            raise UsageError(_FROM_A_FILE.format(what="a program given with -c"))
        if token == "--" or not token.startswith("-") or token == "-":
            start = i + (token == "--")
            if start == len(argv):
                break
            if argv[start] == "-":
                raise UsageError(_FROM_A_FILE.format(what="a program read from stdin (-)"))
            return options, ("script", argv[start], argv[start + 1 :])
        options.append(token)
        if token in _TAKES_VALUE and i + 1 < len(argv):
            options.append(argv[i + 1])
            i += 1
        i += 1
    return options, None


# --- options, checked in the command line's own terms --------------------------------------


# The options that name a file the report writes, as argparse stores them.
_WRITES = ("json", "sarif", "write_baseline")


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def _taken(options: argparse.Namespace) -> str:
    """Where an option that writes a file took a script's name as its path (its own path
    left out: `--json prog.py`), the words that say so; else nothing."""
    for option in _WRITES:
        value = getattr(options, option)
        if value is not None and value.endswith(".py"):
            return f" ({_flag(option)} took {value!r} as the file it writes: name that file first)"
    return ""


def _items(text: str, option: str) -> list[str]:
    """The comma-separated names in an option's value; [] where it names none at all.
    An empty name between commas is a typo that would otherwise drop a name unseen."""
    items = [item.strip() for item in text.split(",")]
    if any(items) and not all(items):
        raise UsageError(f"{option} {text!r} has an empty name in its list: remove the extra comma")
    return [item for item in items if item]


def _checks(text: str) -> list[str]:
    names = _items(text, "--checks")
    if not names:
        raise UsageError(
            "--checks is empty, so nothing would be checked: name at least one of "
            f"{','.join(CATEGORIES)}, or leave --checks out to check all four"
        )
    for name in names:
        if name not in CATEGORIES:
            raise UsageError(
                f"--checks: unknown category {name!r}; choose from {','.join(CATEGORIES)}"
            )
    return names


def _own_module(name: str, program: Program) -> bool:
    # The script runs as __main__; its own name ("demo" for demo.py) means it too.
    own = program.module_name
    return own == name or own.startswith(name + ".")


def _modules(text: str | None, program: Program) -> list[str] | None:
    if text is None:
        return None
    names = _items(text, "--modules")
    if not names:
        raise UsageError(
            "--modules is empty, so the stream rules would check no caller: name module "
            "prefixes (--modules acme,acme_tracks), or leave --modules out to check every "
            "caller outside Warp"
        )
    for name in names:
        if not is_module_name(name):
            raise UsageError(
                f"--modules: {name!r} is not a module name; give dotted names, "
                "comma-separated (--modules acme,acme_tracks)"
            )
    if any(_own_module(name, program) for name in names):
        names.append("__main__")
    return names


def _allow_key(text: str, program: Program) -> Key:
    parts = text.split(":")
    if len(parts) != 3 or not all(parts):
        raise UsageError(
            f"--allow takes API:MODULE:FUNCTION (e.g. wp.array.numpy:acme.gen:Gen.generate), "
            f"got {text!r}"
        )
    api, module, function = parts
    if api.removesuffix("()") not in _HOST_SYNC_APIS:
        raise UsageError(
            f"--allow {text}: {api!r} is not a host sync or readback API; --allow takes one "
            f"of {', '.join(_HOST_SYNC_APIS)}"
        )
    if module == program.module_name:
        module = "__main__"
    return api.removesuffix("()"), module, function


def _hot_paths(
    targets: list[str], program: Program
) -> tuple[tuple[str, str, CodeType | None], ...]:
    """Each ``--hot`` target resolved (see `_hot_path`), in the order given. A usage error
    comes before any module is imported for another target: every target's form is read
    first, then those in the program itself, and those that may import a module last."""
    own = ("__main__", program.module_name)
    modules = [_module_and_qualname(t, program)[0] for t in targets]  # every form first
    order = sorted(range(len(targets)), key=lambda i: modules[i] not in own)  # stable
    found = {i: _hot_path(targets[i], program) for i in order}
    return tuple(found[i] for i in range(len(targets)))


def _module_and_qualname(target: str, program: Program) -> tuple[str, str]:
    module, _, qualname = target.partition(":")
    if not module or not qualname:
        raise UsageError(f"--hot takes MODULE:QUALNAME, got {target!r}")
    own = module in ("__main__", program.module_name)  # a script's name may be any file's
    if not own and not is_module_name(module):
        # A path (`gen.py`, `acme/gen`) would be looked up as a package and its module,
        # which imports the "package" (runs gen.py) ahead of the program.
        raise UsageError(
            f"--hot {target}: {module!r} is not a module name; give its dotted name "
            "(acme.gen:Gen.generate), or __main__ for the program's own functions"
        )
    if not own and module.endswith(".py"):  # as `python -m gen.py` says (a submodule py)
        raise UsageError(
            f"--hot {target}: {module!r} is a file name; give the module's name "
            f"({module[:-3]}:{qualname})"
        )
    if not all(_NAME_PART.fullmatch(part) for part in qualname.split(".")):
        raise UsageError(
            f"--hot {target}: {qualname!r} is not a qualified name (Gen.generate, "
            "outer.<locals>.inner)"
        )
    return module, qualname


# A part of a qualified name: a name, or one Python makes (<locals>, <lambda>, <genexpr>).
_NAME_PART = re.compile(r"(?!\d)\w+|<(?!\d)\w+>")


def _hot_path(target: str, program: Program) -> tuple[str, str, CodeType | None]:
    """The module and qualified name of a ``--hot`` function, with its code; or, for a
    function defined in a module the program has not imported yet, without (it is known
    by its module and name when it runs: importing the module here would run its code
    ahead of the program's, before the program set up its path, say)."""
    module, qualname = _module_and_qualname(target, program)
    if module in ("__main__", program.module_name):
        code = program.functions().get(qualname)
        if code is None:
            raise UsageError(f"--hot {target}: the program defines no function {qualname!r}")
        return "__main__", qualname, code
    if module not in sys.modules:
        defined = functions_of_unimported(module)
        if defined is None or qualname in defined:
            return module, qualname, None
        # Not a def of its own (a name it imports, an alias, an inherited method): only
        # importing it tells what the name is bound to.
    try:
        obj = __import__(module, fromlist=["_"])
    except ImportError as exc:
        raise UsageError(f"--hot {target}: cannot import {module!r} ({exc})") from None
    for name in qualname.split("."):
        try:
            obj = getattr(obj, name)
        except AttributeError:
            raise UsageError(f"--hot {target}: {module!r} has no {qualname!r}") from None
    try:
        return module, qualname, hotpaths.function_code(obj)
    except TypeError:
        raise UsageError(f"--hot {target}: {qualname!r} is not a function") from None


def _outputs(options: argparse.Namespace, program: Program) -> dict[str, str]:
    """The files the report goes to, by option: writable, and none of them another's, the
    baseline read or the program's own source (which the report would overwrite)."""
    taken = {}
    if options.baseline:
        taken[os.path.realpath(options.baseline)] = "--baseline"
    for source in (program.code.co_filename, program.argv[0]):  # its source, or its zip
        if os.path.isfile(source):
            taken[os.path.realpath(source)] = "the program"
    outputs = {}
    for option in _WRITES:
        path = getattr(options, option)
        if not path:
            continue
        flag = _flag(option)
        check_writable(path, flag)
        claim(taken, path, flag)
        outputs[option] = os.path.abspath(path)  # the program may change directory
    return outputs


@dataclasses.dataclass(frozen=True)
class _Setup:
    """What the command line settled before the program runs."""

    program: Program
    policy: Policy
    options: argparse.Namespace
    baseline: baselines.Baseline | None
    hot: tuple[tuple[str, str, CodeType | None], ...]  # see _hot_path
    outputs: dict[str, str]  # option -> the absolute path of the file it writes
    root: os.PathLike[str]  # the project's, found from the working directory at the start
    cwd: str  # the working directory at the start, which the report's paths are under
    tool_path: list[str]  # sys.path before the program's own first entry was put in


def _setup(argv: list[str]) -> _Setup:
    try:  # the report's paths are made relative to it
        cwd = os.getcwd()
    except OSError as exc:
        raise UsageError(
            f"the working directory cannot be read ({exc.strerror}): run from one that exists"
        ) from None
    options_argv, target = _split(argv)
    options = _parser().parse_args(options_argv)
    check_setting()
    if target is None:
        raise UsageError("no program to run: name a script, or a module with -m" + _taken(options))
    if options.baseline and options.write_baseline:
        raise UsageError(
            "--baseline and --write-baseline go one at a time: compare with the baseline, "
            "or rewrite it"
        )
    if options.strict and options.write_baseline:
        raise UsageError(
            "--strict and --write-baseline go one at a time: --strict stops the program at "
            "its first breach, and a baseline lists every breach of a whole run"
        )
    kind, name, args = target
    program = Program.module(name, args) if kind == "module" else Program.script(name, args)
    policy = make_policy(
        checks=_checks(options.checks),
        modules=_modules(options.modules, program),
        allow=[_allow_key(a, program) for a in options.allow],
        keep_arrays=False,
    )
    outputs = _outputs(options, program)
    root, tool_path = project_root(cwd), list(sys.path)
    baseline = None
    if options.baseline:
        try:
            baseline = baselines.load(options.baseline)
        except baselines.BaselineError as exc:
            raise UsageError(f"--baseline {exc}") from None
    program.prepare()
    hot = _hot_paths(options.hot, program)
    return _Setup(program, policy, options, baseline, hot, outputs, root, cwd, tool_path)


# --- running ------------------------------------------------------------------------------


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        if os.name != "posix":
            return code
        # What the process's parent sees: the low byte (sys.exit(256) exits 0), and 255
        # for a code past a C long long, which CPython turns into -1.
        return code % 256 if -(2**63) <= code < 2**63 else 255
    _print_exit_message(code)
    return 1


def _print_exit_message(code: object) -> None:
    """`sys.exit("message")`, as Python prints it: its str() and a newline to stderr (to
    the process's stderr when ``sys.stderr`` is None), each part that fails left out."""
    try:
        text = str(code)
    except BaseException:  # Python clears whatever it raised
        text = ""
    stream = sys.stderr
    for part in (text, "\n"):
        with contextlib.suppress(BaseException):
            if stream is None:
                os.write(2, part.encode(errors="backslashreplace"))
            else:
                stream.write(part)


@dataclasses.dataclass
class _Ending:
    """How the program ended: its exit status (None: ``--strict`` stopped it), and
    whether by an uncaught KeyboardInterrupt (Python then dies by SIGINT)."""

    status: int | None
    interrupted: bool = False


def _run(program: Program, recording: Recording) -> _Ending:
    """Run the program under the recording's tracer, then what Python runs before it exits
    (see `_wind_down`)."""
    tracer = recording.tracer()
    armed = keep_armed().__enter__()  # the program's own guards come and go cheaply
    tracer.start()
    try:
        ending = _run_main(program, recording)
        stopped_before = recording.stopped_by
        _wind_down()
        if recording.stopped_by is not stopped_before and ending.status == 0:
            return _Ending(None)  # --strict stopped an atexit handler, which Python ignores
        return ending
    finally:
        recording.stop()
        armed.__exit__(None, None, None)


def _run_main(program: Program, recording: Recording) -> _Ending:
    try:
        program.run()
        return _Ending(0)
    except SystemExit as exc:
        recording.restart()  # (see below)
        return _Ending(_exit_status(exc.code))
    except BaseException as exc:
        # While it is handled: on 3.11 an exception raised from the profile function (a
        # --strict stop, a refusal of the program's own guard) removed it, and a restart
        # puts it back, so that the atexit handlers are seen (see tracer.pyprofile).
        recording.restart()
        if exc is recording.stopped_by:  # not a violation of the program's own guards
            print(f"trackgen_contract: {exc}", file=sys.stderr)
            return _Ending(None)
        hook_exit = program.print_failure(exc)  # it failed (a guard of its own included)
        if hook_exit is not None:  # its excepthook called sys.exit()
            return _Ending(_exit_status(hook_exit.code))
        if type(exc) is KeyboardInterrupt or (
            isinstance(exc, KeyboardInterrupt) and sys.version_info >= (3, 14)
        ):  # Python dies by SIGINT for exactly this type (any subclass from 3.14)
            return _Ending(130, interrupted=True)
        return _Ending(1)
    finally:
        program.done()


def _wind_down() -> None:
    """What Python does once the main module is done, before the process exits: its
    threading shutdown (the callbacks registered for it, which stop executor workers, the
    main thread marked done, the non-daemon threads waited for), then the atexit handlers
    (an exception one raises is printed and ignored, as at exit). Done here, still
    watched, so that their Warp calls are reported, their output comes before the report,
    and ``__main__`` is the program's. Python runs the same ``threading._shutdown`` at
    exit, which then finds it done."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException as exc:  # a Ctrl-C while waiting (3.11-3.13): ignored, and shown
        _print_ignored(exc, threading)
    atexit._run_exitfuncs()


def _print_ignored(exc: BaseException, where: object) -> None:
    """What Python prints for an exception it ignores while it waits for the program's
    threads at exit (an unraisable one; its heading changed in 3.13)."""
    if sys.version_info >= (3, 13):
        print("Exception ignored on threading shutdown:", file=sys.stderr)
    else:
        print(f"Exception ignored in: {where!r}", file=sys.stderr)
    tb = without_own_tail(exc.__traceback__ and exc.__traceback__.tb_next)  # threading's on
    if tb is not None:
        # Without the columns' carets, as Python's own printer shows an unraisable one.
        frames = [
            traceback.FrameSummary(f.filename, f.lineno, f.name, line=f.line)
            for f in traceback.extract_tb(tb)
        ]
        lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
        print("".join(lines), end="", file=sys.stderr)
    print(f"{type(exc).__qualname__}: {exc}", file=sys.stderr)


def _die_by_sigint() -> None:
    """End the process as Python ends one that a Ctrl-C stopped: by SIGINT itself, so
    that its parent sees it (a shell shows 130)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # the program may have closed or replaced it
            stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return its exit status."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # Not the program's (that one ends it as Python would, see _run_main): a Ctrl-C
        # while this command imported Warp before the program, say, or wrote the report.
        # Its traceback would show this command's frames alone. To the process's stderr:
        # the program may have closed or replaced sys.stderr.
        with contextlib.suppress(Exception):
            print(f"{PROG}: interrupted", file=_report_stream(), flush=True)
        if os.name == "posix":
            _die_by_sigint()
        return 130


def _main(argv: list[str]) -> int:
    try:
        setup = _setup(argv)
    except (UsageError, ProgramNotFound, OutputError, TypeError, ValueError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except SyntaxError as exc:  # the program does not compile: as Python reports it
        traceback.print_exception(type(exc), exc, None, file=sys.stderr)
        return 1
    for module, qualname, code in setup.hot:
        if code is None:
            hotpaths.mark_name(module, qualname)
        else:
            hotpaths.mark_code(code, module)
    recording = Recording(setup.policy, strict=setup.options.strict)
    if setup.baseline is not None:
        known = setup.baseline
        recording.tolerated = lambda v: known.lists(baselines.identity(_row_of(v)))
    _warn_of_shadowed(setup.program)
    parent = os.getpid()
    ending = _run(setup.program, recording)
    if os.getpid() != parent:  # a child the program forked, ended as Python ends it
        status = 0 if ending.status is None else ending.status
    else:
        status = _finish(setup, recording, ending.status)
    if ending.interrupted and status == 130 and os.name == "posix":
        _die_by_sigint()
    return status


def _warn_of_shadowed(program: Program) -> None:
    for entry, origin in program.shadowed():
        print(
            f"trackgen_contract: warning: {entry} beside the program is not imported here: "
            f"this command, Warp or NumPy imported {origin} of that name before the program "
            "ran (`python` would import yours); rename yours to run it here",
            file=sys.stderr,
            flush=True,
        )


def _row_of(violation: Violation) -> Row:
    return Row(violation.category, violation.api, violation.site, 1, (violation.key,))


# --- the report -----------------------------------------------------------------------------


def _finish(setup: _Setup, recording: Recording, status: int | None) -> int:
    # Made where the tool started, whatever the program did: its paths relative to the
    # working directory it was given, and on the tool's own sys.path (a module imported on
    # first use is not one of the program's directory).
    program_path, program_cwd = getattr(sys, "path", None), _getcwd()
    sys.path = list(setup.tool_path)  # the program's own object (or none) is put back
    with contextlib.suppress(OSError):  # gone since: paths are shown in full then
        os.chdir(setup.cwd)
    try:
        return _report(setup, recording, status)
    finally:
        if program_path is None:
            del sys.path
        else:
            sys.path = program_path
        if program_cwd is not None:
            with contextlib.suppress(OSError):
                os.chdir(program_cwd)


def _getcwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the program's working directory was removed
        return None


def _report(setup: _Setup, recording: Recording, status: int | None) -> int:
    root = setup.root
    scoped = Scoped(recording, hotpaths.marked())
    findings = _findings(setup, scoped, root)
    outcome = _outcome(status, findings)
    _flush_program_output()
    stream = _report_stream()
    colour = stream.isatty() and "NO_COLOR" not in os.environ
    text = render(findings, outcome, program=" ".join(setup.program.argv), colour=colour)
    print(text, file=stream, flush=True)
    try:
        _write(setup, findings, outcome, root)
    except OSError as exc:
        print(f"{PROG}: error: cannot write a report file: {exc}", file=stream, flush=True)
        return outcome.status or USAGE_ERROR
    return outcome.status


def _flush_program_output() -> None:
    """What the program printed and its streams still buffer goes out before the report,
    as Python would have flushed it at exit: else, with both on one pipe, the program's
    last lines came after the report. A flush that fails is Python's to report at exit."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _report_stream() -> TextIO:
    """The process's own standard error, whatever the program did with ``sys.stderr``
    (replaced it, closed it)."""
    stream = sys.__stderr__
    if stream is not None and not stream.closed:
        return stream
    return open(2, "w", closefd=False, errors="backslashreplace")  # fd 2 itself, left open


def _findings(setup: _Setup, scoped: Scoped, root: os.PathLike[str]) -> Findings:
    breaches = scoped.breach_rows()
    let_through = scoped.allowed_rows() + scoped.sanctioned_rows()
    baseline, fixed = setup.baseline, ()
    if setup.options.write_baseline:
        entries = baselines.entries(((r, None) for r in breaches), _path_of(root))
        baseline = baselines.Baseline(setup.options.write_baseline, tuple(entries))
    if baseline is not None:
        compared = baselines.compare(((r, None) for r in breaches), baseline)
        breaches = list(compared.new)
        let_through += [dataclasses.replace(r, allowed_by="baseline") for r in compared.accepted]
        fixed = compared.fixed
    found, errors = pragmas.scan(project_files(root, (setup.program.attributes.get("__file__"),)))
    unused = pragmas.unused(found, scoped.pragma_uses(), setup.policy.checks)
    messages = dict.fromkeys([*scoped.recording.pragma_errors, *map(str, errors)])
    return Findings(
        scoped=scoped,
        breaches=tuple(breaches),
        let_through=tuple(let_through),
        fixed=fixed,
        baseline=None if baseline is None else baseline.path,
        unused_pragmas=tuple(unused),
        unused_allows=_unused_allows(setup, let_through),
        pragma_errors=tuple(messages),
        unchecked=tuple(scoped.unchecked()),
    )


def _unused_allows(setup: _Setup, let_through: list[Row]) -> tuple[str, ...]:
    """The ``--allow`` options, as given, whose key let nothing through."""
    used = {key for row in let_through if row.allowed_by == "allow" for key in row.keys}
    texts = dict.fromkeys(setup.options.allow)  # given twice: said once
    return tuple(t for t in texts if _allow_key(t, setup.program) not in used)


def _outcome(status: int | None, findings: Findings) -> Outcome:
    if status:
        meaning = "the program failed; this is its own exit status"
        return Outcome(status, status, meaning, whole=False)
    if findings.pragma_errors:
        meaning = "a '# trackgen_contract:' pragma cannot be read"
        return Outcome(USAGE_ERROR, status, meaning, whole=False)
    if status is None:
        return Outcome(BREACHES, None, "--strict stopped the program at a breach")
    if findings.breaches:
        return Outcome(BREACHES, status, "breaches found in a program that otherwise succeeded")
    if findings.unchecked:
        return Outcome(NOTHING_CHECKED, status, "nothing was checked")
    return Outcome(CLEAN, status, "clean: no breach in what was checked")


def _path_of(root: os.PathLike[str]):  # type: ignore[no-untyped-def]
    return lambda filename: portable_path(filename, root)  # type: ignore[arg-type]


def _write(setup: _Setup, findings: Findings, outcome: Outcome, root: os.PathLike[str]) -> None:
    options = setup.options
    if options.json:
        warp = sys.modules.get("warp")
        document = to_json(
            findings,
            outcome,
            argv=setup.program.argv,
            warp_version=getattr(warp, "__version__", None),
            path_of=_path_of(root),
        )
        write_atomic(setup.outputs["json"], json.dumps(document, indent=2) + "\n")
    if options.sarif:
        log = sarifs.document(
            findings.breaches,
            findings.let_through,
            root=root,  # type: ignore[arg-type]
            version=__version__,
            outcome=outcome,
            with_baseline=findings.baseline is not None and not options.write_baseline,
        )
        sarifs.write(setup.outputs["sarif"], log)
    if options.write_baseline:
        rows = [r for r in findings.let_through if r.allowed_by == "baseline"]
        entries = baselines.entries(((r, None) for r in rows), _path_of(root))
        baselines.write(setup.outputs["write_baseline"], entries)
        print(
            f"trackgen_contract: wrote {len(entries)} baseline entr"
            f"{'y' if len(entries) == 1 else 'ies'} to {options.write_baseline}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    sys.exit(main())
