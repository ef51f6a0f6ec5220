"""``python -m trackgen_contract.trace``: run a program and report its hot-path breaches.

    python -m trackgen_contract.trace [options] script.py [args...]
    python -m trackgen_contract.trace [options] -m module [args...]

The program runs as ``__main__`` with every Warp call recorded. Checks apply inside hot
paths (functions marked ``@trackgen_contract.hot_path``, or named with ``--hot``), or to
the whole run when none is named. The report goes to stderr when the program ends.

Exit status: 0 clean, 1 breaches found, the program's own status when it failed, 2 for a
usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from types import CodeType, TracebackType

from . import hotpaths
from .guard import HotPathViolation
from .recording import Recording, Scoped
from .report import render, to_json
from .rules import CATEGORIES, make_policy
from .runner import Program, ProgramNotFound

PROG = "python -m trackgen_contract.trace"
USAGE_ERROR = 2

_EXAMPLE = f"""\
examples:
  {PROG} examples/track_demo.py --dirty
  {PROG} --hot acme.gen:Generator.generate --json report.json -m acme.bench --steps 10
  {PROG} --checks host_sync,allocation --allow wp.array.numpy:acme.debug:dump run.py
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
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--hot",
        action="append",
        default=[],
        metavar="MODULE:QUALNAME",
        help="check inside this function (repeatable); with none named and "
        "no @hot_path marked, the whole run is checked",
    )
    parser.add_argument(
        "--checks",
        default=",".join(CATEGORIES),
        metavar="LIST",
        help=f"comma-separated categories to check (default: {','.join(CATEGORIES)})",
    )
    parser.add_argument(
        "--modules",
        metavar="LIST",
        help="comma-separated module prefixes the stream rules cover "
        "(default: every caller outside Warp)",
    )
    parser.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="API:MODULE:FUNCTION",
        help="a host sync or readback to let through (repeatable), e.g. "
        "wp.array.numpy:acme.gen:Gen.generate",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="stop the program at the first breach with its message",
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write the report as JSON (see report.schema.json)"
    )
    return parser


_TAKES_VALUE = {"--hot", "--checks", "--modules", "--allow", "--json"}


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
        if token == "--" or not token.startswith("-") or token == "-":
            start = i + (token == "--")
            if start == len(argv):
                break
            return options, ("script", argv[start], argv[start + 1 :])
        options.append(token)
        if token in _TAKES_VALUE and i + 1 < len(argv):
            options.append(argv[i + 1])
            i += 1
        i += 1
    return options, None


def _items(text: str | None) -> list[str] | None:
    return None if text is None else [item.strip() for item in text.split(",") if item.strip()]


def _allow_key(text: str) -> tuple[str, str, str]:
    parts = text.split(":")
    if len(parts) != 3 or not all(parts):
        raise UsageError(f"--allow takes API:MODULE:FUNCTION, got {text!r}")
    return parts[0], parts[1], parts[2]


def _hot_code(target: str, program: Program) -> CodeType:
    module, _, qualname = target.partition(":")
    if not module or not qualname:
        raise UsageError(f"--hot takes MODULE:QUALNAME, got {target!r}")
    if module in ("__main__", program.module_name):
        code = program.functions().get(qualname)
        if code is None:
            raise UsageError(f"--hot {target}: the program defines no function {qualname!r}")
        return code
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
        return hotpaths.function_code(obj)
    except TypeError:
        raise UsageError(f"--hot {target}: {qualname!r} is not a function") from None


def _user_traceback(tb: TracebackType | None, program: Program) -> TracebackType | None:
    """The traceback from the program's own first frame on (ours hidden, as Python would)."""
    while tb is not None and tb.tb_frame.f_code is not program.code:
        tb = tb.tb_next
    return tb


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message"), as Python prints it
    return 1


def _run(program: Program, recording: Recording) -> int | None:
    """Run the program under the recording's tracer: its exit status, or None when a strict
    breach stopped it."""
    tracer = recording.tracer()
    tracer.start()
    try:
        program.run()
        return 0
    except SystemExit as exc:
        return _exit_status(exc.code)
    except BaseException as exc:
        if recording.strict and isinstance(exc, HotPathViolation):
            print(f"trackgen_contract: {exc}", file=sys.stderr)
            return None
        # The program failed (a guard of its own included): report it as Python would.
        tb = _user_traceback(exc.__traceback__, program)
        traceback.print_exception(type(exc), exc, tb, file=sys.stderr)
        return 130 if isinstance(exc, KeyboardInterrupt) else 1
    finally:
        tracer.stop()


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return its exit status."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        options_argv, target = _split(argv)
        options = _parser().parse_args(options_argv)
        if target is None:
            raise UsageError("no program to run: name a script, or a module with -m")
        kind, name, args = target
        program = Program.module(name, args) if kind == "module" else Program.script(name, args)
        policy = make_policy(
            checks=_items(options.checks),
            modules=_items(options.modules),
            allow=[_allow_key(a) for a in options.allow],
            keep_arrays=False,
        )
        if options.json and not os.path.isdir(os.path.dirname(os.path.abspath(options.json))):
            raise UsageError(f"--json {options.json}: no such directory")
        program.prepare()
        hot = [_hot_code(target, program) for target in options.hot]
    except (UsageError, ProgramNotFound, TypeError, ValueError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except SyntaxError as exc:  # the program does not compile: as Python reports it
        traceback.print_exception(type(exc), exc, None, file=sys.stderr)
        return 1
    for code in hot:
        hotpaths.mark_code(code)
    recording = Recording(policy, strict=options.strict)
    status = _run(program, recording)
    scoped = Scoped(recording, hotpaths.marked())
    exit_status = status if status else (1 if scoped.total or status is None else 0)
    _report(scoped, program, options.json, exit_status)
    return exit_status


def _report(scoped: Scoped, program: Program, json_path: str | None, status: int) -> None:
    colour = sys.stderr.isatty() and "NO_COLOR" not in os.environ
    print(render(scoped, program=" ".join(program.argv), colour=colour), file=sys.stderr)
    if json_path:
        warp = sys.modules.get("warp")
        document = to_json(
            scoped,
            argv=program.argv,
            exit_status=status,
            warp_version=getattr(warp, "__version__", None),
        )
        with open(json_path, "w", encoding="utf-8") as out:
            json.dump(document, out, indent=2)
            out.write("\n")


if __name__ == "__main__":
    sys.exit(main())
