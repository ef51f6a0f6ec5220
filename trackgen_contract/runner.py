"""Run a script or a module as ``__main__``, the way ``python script.py`` would.

The command line needs the program's own code object before it runs (to find ``--hot``
functions in it), so the program is compiled here and executed in a fresh ``__main__``
module rather than through ``runpy``. What that module holds, ``sys.path[0]`` and a failure's
traceback are made as Python makes them for each way of naming a program: a script file,
a directory or zip file with a ``__main__.py`` (which Python runs through runpy), and
``-m module``.
"""

from __future__ import annotations

import builtins
import dis
import importlib.machinery
import importlib.util
import os
import runpy
import sys
import traceback
import types
import zipfile
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from types import CodeType

from .tracer import critical


class ProgramNotFound(Exception):
    """The script or module to run does not exist."""


@dataclass
class Program:
    """A program ready to run: its code, and the ``__main__`` it runs in."""

    argv: list[str]
    path0: str  # what sys.path[0] is for `python script.py` / `python -m module`
    code: CodeType
    attributes: dict[str, object]  # __file__, __spec__, __package__, ...
    module_name: str  # the name it has outside __main__: "demo" for demo.py, "pkg.tool"
    through_runpy: bool = False  # Python runs it through runpy (-m, a directory, a zip)

    @classmethod
    def script(cls, path: str, args: list[str]) -> Program:
        """``python path args...``: a file, or a directory or zip file with a ``__main__``."""
        if not os.path.exists(path):
            raise ProgramNotFound(f"can't open file {path!r}: no such file or directory")
        if os.path.isdir(path) or _is_zip(path):
            # Python puts the directory or zip first on sys.path and imports __main__ there.
            spec = importlib.machinery.PathFinder.find_spec("__main__", [_absolute(path)])
            if spec is None or spec.loader is None:
                raise ProgramNotFound(f"can't find '__main__' module in {path!r}")
            code = _code_of(spec, path)
            return cls([path, *args], _absolute(path), code, _runpy_globals(spec), "__main__", True)
        filename = _absolute(path)  # as Python makes it: joined to the cwd, not normalised
        with open(path, "rb") as source:
            code = compile(source.read(), filename, "exec", dont_inherit=True)
        attributes: dict[str, object] = {
            "__file__": filename,
            "__loader__": importlib.machinery.SourceFileLoader("__main__", filename),
            "__spec__": None,
            "__package__": None,
        }
        if sys.version_info < (3, 15):
            attributes["__cached__"] = None  # set for a script until 3.15
        name = os.path.splitext(os.path.basename(path))[0]
        # sys.path[0]: the script's own directory, symbolic links resolved.
        path0 = os.path.dirname(os.path.realpath(path))
        return cls([path, *args], path0, code, attributes, name)

    @classmethod
    def module(cls, name: str, args: list[str]) -> Program:
        """``python -m name args...``"""
        path0 = os.getcwd()
        sys.path.insert(0, path0)  # as `python -m` would, so the module can be found
        try:
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.submodule_search_locations is not None:
                spec = importlib.util.find_spec(f"{name}.__main__")  # a package: its __main__
        except (ImportError, ValueError) as exc:
            raise ProgramNotFound(f"no module named {name!r} ({exc})") from None
        finally:
            sys.path.remove(path0)
        if spec is None or spec.loader is None:
            raise ProgramNotFound(f"no module named {name!r}")
        code = _code_of(spec, name)
        return cls([spec.origin or name, *args], path0, code, _runpy_globals(spec), spec.name, True)

    def functions(self) -> dict[str, CodeType]:
        """Every function and method defined in the program's code, by qualified name."""
        found: dict[str, CodeType] = {}
        stack = [self.code]
        while stack:
            code = stack.pop()
            if code is not self.code:
                found.setdefault(code.co_qualname, code)
            stack.extend(c for c in code.co_consts if isinstance(c, CodeType))
        return found

    def prepare(self) -> None:
        """Set sys.argv and sys.path[0] as the program expects, before imports for it."""
        sys.argv[:] = self.argv
        sys.path[0] = self.path0

    def run(self) -> None:
        """Execute the program as ``__main__`` (call `prepare` first), which it stays. Its
        exceptions, ``SystemExit`` included, propagate."""
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins  # type: ignore[attr-defined]  # the module, as in Python's
        if sys.version_info < (3, 14):
            main.__annotations__ = {}  # Python's own __main__ started with it until 3.14
        main.__dict__.update(self.attributes)
        # The program's __main__ stays after it ran: its threads and atexit handlers run
        # next, as in Python, and pickle its classes by it.
        sys.modules["__main__"] = main
        exec(self.code, main.__dict__)

    def done(self) -> None:
        """What Python does once a script file ran, failed or not: it takes ``__file__``
        and ``__cached__`` out of ``__main__`` (an atexit handler finds none)."""
        main = sys.modules.get("__main__")
        if not self.through_runpy and main is not None:
            for name in ("__file__", "__cached__"):
                main.__dict__.pop(name, None)

    def print_failure(self, exc: BaseException) -> None:
        """Report the exception that ended the program as Python would: ``sys.last_exc``
        and the like set, then the program's own ``sys.excepthook`` called, or the
        traceback printed from the program's own first frame on (ours hidden), under the
        two frames of runpy's that Python shows above a program it runs through runpy."""
        tb = _programs_traceback(exc, self.code)
        exc.__traceback__ = tb  # what Python's printer and hooks read
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
        if sys.version_info >= (3, 12):
            sys.last_exc = exc
        if sys.excepthook is not sys.__excepthook__:
            _call_excepthook(exc, tb)
        elif self.through_runpy:
            failure = traceback.TracebackException(type(exc), exc, tb, compact=True)
            failure.stack[:0] = _runpy_frames()
            failure.print(file=sys.stderr)
        else:
            sys.__excepthook__(type(exc), exc, tb)  # Python's own printer, to the letter


def _programs_traceback(exc: BaseException, code: CodeType) -> types.TracebackType | None:
    """`exc`'s traceback from the frame running `code` on, without a last frame of the
    signal handlers' wrapper (see `critical.is_wrapper`)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    entry = tb
    while entry is not None and entry.tb_next is not None:
        last = entry.tb_next
        if last.tb_next is None and critical.is_wrapper(last.tb_frame.f_code):
            entry.tb_next = None
            break
        entry = last
    return tb


def _call_excepthook(exc: BaseException, tb: types.TracebackType | None) -> None:
    """The program's own excepthook, and what Python prints if it fails."""
    try:
        sys.excepthook(type(exc), exc, tb)
    except BaseException as error:  # reported as Python reports it
        print("Error in sys.excepthook:", file=sys.stderr)
        sys.__excepthook__(type(error), error, error.__traceback__)
        print("\nOriginal exception was:", file=sys.stderr)
        sys.__excepthook__(type(exc), exc, tb)


def _runpy_frames() -> list[traceback.FrameSummary]:
    """runpy's ``_run_module_as_main`` at its call of ``_run_code``, and ``_run_code`` at
    its ``exec``, with the lines of the running Python (they move between versions)."""
    frames = []
    for function, callee in ((runpy._run_module_as_main, "_run_code"), (runpy._run_code, "exec")):
        code = function.__code__
        lines = [i.positions.lineno for i in dis.get_instructions(code) if i.argval == callee]
        if len(lines) != 1 or lines[0] is None:
            return []  # a runpy unlike the known ones: its frames are left out, not guessed
        frames.append(traceback.FrameSummary(code.co_filename, lines[0], code.co_name))
    return frames


def _absolute(path: str) -> str:
    """`path` made absolute the way Python makes a program's path: joined to the current
    directory as given (``./a/../b.py`` stays so)."""
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def _is_zip(path: str) -> bool:
    return os.path.isfile(path) and zipfile.is_zipfile(path)


def _code_of(spec: ModuleSpec, name: str) -> CodeType:
    code = spec.loader.get_code(spec.name)  # type: ignore[union-attr]
    if code is None:
        raise ProgramNotFound(f"module {name!r} has no code to run")
    return code


def _runpy_globals(spec: ModuleSpec) -> dict[str, object]:
    """What runpy sets in ``__main__`` before it runs the module of `spec`, in the running
    Python (``__cached__`` went in 3.15, say): asked of runpy itself, with no code to run."""
    globals_: dict[str, object] = {}
    runpy._run_code(compile("", "<runpy globals>", "exec"), globals_, None, "__main__", spec)
    globals_.pop("__builtins__", None)  # exec's own, not runpy's
    return globals_
