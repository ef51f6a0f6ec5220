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
import contextlib
import dis
import importlib.machinery
import importlib.util
import inspect
import os
import runpy
import sys
import traceback
import types
import zipfile
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import CodeType

from . import startpath
from .project import relative_path
from .sites import plain_text
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
    imported_from_path0: bool = False  # a directory or zip: first on sys.path even with -P
    package_named: bool = False  # ``-m package``, which runs its __main__
    importing_package: bool = False  # while `run` imports the package of a -m program
    namespace: dict[str, object] | None = None  # the __main__ it runs in, once it runs

    @classmethod
    def script(cls, path: str, args: list[str]) -> Program:
        """``python path args...``: a file, or a directory or zip file with a ``__main__``."""
        if not os.path.exists(path):
            raise ProgramNotFound(f"can't open file {path!r}: no such file or directory")
        if os.path.isdir(path) or _is_zip(path):
            # Python puts the directory or zip first on sys.path and imports __main__ there.
            path0 = _absolute(path)
            spec = importlib.machinery.PathFinder.find_spec("__main__", [path0])
            if spec is None or spec.loader is None:
                raise ProgramNotFound(f"can't find '__main__' module in {path!r}")
            code = _code_of(spec, path)
            globals_ = _runpy_globals(spec)
            return cls([path, *args], path0, code, globals_, "__main__", True, True)
        filename = _absolute(path)  # as Python makes it: joined to the cwd, not normalised
        with open(path, "rb") as source:
            text = source.read()
        if text[2:4] == b"\r\n" and b"\0" in text[4:16]:  # a .pyc's magic number and flags
            raise ProgramNotFound(
                f"{path!r} is compiled bytecode: run the source it was compiled from (its "
                "lines are what the report shows, and where pragmas are read)"
            )
        code = _compiled(text, filename)
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
        if not sys.flags.safe_path:
            sys.path.insert(0, path0)  # as `python -m` would, so the module can be found
        try:
            spec = _find_unimported(name)
            package_named = spec is not None and spec.submodule_search_locations is not None
            if package_named:
                spec = _find_unimported(f"{name}.__main__")  # a package: its __main__
                if spec is None:
                    raise ProgramNotFound(
                        f"no module named '{name}.__main__'; {name!r} is a package and "
                        "cannot be directly executed"
                    )
        except ProgramNotFound:
            raise
        except Exception as exc:  # a package imported to look the module up failed
            raise ProgramNotFound(f"no module named {name!r} ({exc!r})") from None
        finally:
            if not sys.flags.safe_path:
                sys.path.remove(path0)
        if spec is None or spec.loader is None:
            raise ProgramNotFound(f"no module named {name!r}")
        code = _code_of(spec, name)
        argv, globals_ = [spec.origin or name, *args], _runpy_globals(spec)
        return cls(argv, path0, code, globals_, spec.name, True, package_named=package_named)

    def functions(self) -> dict[str, CodeType]:
        """Every function and method defined in the program's code, by qualified name."""
        return _functions(self.code)

    def prepare(self) -> None:
        """Set sys.argv and sys.path[0] as the program expects, before imports for it."""
        sys.argv[:] = self.argv
        if startpath.SET_ASIDE is not None:
            sys.path.insert(0, self.path0)  # where `-m trackgen_contract.trace` put the cwd
        elif not sys.flags.safe_path:
            sys.path[0] = self.path0  # in place of the one `-m trackgen_contract.trace` put
        elif self.imported_from_path0:
            sys.path.insert(0, self.path0)  # -P (PYTHONSAFEPATH) puts only this one first

    def shadowed(self) -> list[tuple[str, str]]:
        """The modules in the program's own directory (``sys.path[0]``) that it cannot import
        here, as (file name, path of the module imported in its place): modules of those
        names came in with the command line, Warp and NumPy before it ran (``random.py``
        beside a script: Warp imported the standard library's). Under ``python`` they would
        be the program's. Built-in and frozen modules are left out: nothing shadows them."""
        if sys.flags.safe_path and not self.imported_from_path0:
            return []  # its directory is not on sys.path
        try:
            entries = sorted(os.listdir(self.path0))
        except OSError:  # a zip file, or gone
            return []
        own = Path(os.path.realpath(self.path0))
        found = []
        for entry in entries:
            if entry.partition(".")[0] not in sys.modules:
                continue  # most entries: no stat for them (a module's name has no dot)
            origin = _loaded_elsewhere(_module_name(entry, self.path0), own)
            if origin is not None:
                found.append((entry, origin))
        return found

    def run(self) -> None:
        """Execute the program as ``__main__`` (call `prepare` first), which it stays. Its
        exceptions, ``SystemExit`` included, propagate."""
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins  # type: ignore[attr-defined]  # the module, as in Python's
        if sys.version_info < (3, 14):
            main.__annotations__ = {}  # Python's own __main__ started with it until 3.14
        # The program's __main__ stays after it ran: its threads and atexit handlers run
        # next, as in Python, and pickle its classes by it.
        sys.modules["__main__"] = main
        self.namespace = main.__dict__
        spec = self.attributes.get("__spec__")
        if isinstance(spec, ModuleSpec) and spec.parent and spec.parent != "__main__":
            self.importing_package = True
            _import_package(spec.parent)
            self.importing_package = False
        main.__dict__.update(self.attributes)
        exec(self.code, main.__dict__)

    def _runpy_frames(self) -> list[traceback.FrameSummary]:
        """The frames of runpy's that Python shows above a failure of this program."""
        details = runpy._get_module_details
        if not self.importing_package:
            steps = [(runpy._run_module_as_main, "_run_code"), (runpy._run_code, "exec")]
        else:  # runpy's search for the module, importing its package
            steps = [
                (runpy._run_module_as_main, "_get_module_details"),
                *([(details, "_get_module_details")] if self.package_named else []),
                (details, "__import__"),
            ]
        return _frames_at(steps)

    def done(self) -> None:
        """What Python does once a script file ran, failed or not: it takes ``__file__``
        and ``__cached__`` out of the ``__main__`` it ran in (an atexit handler finds
        none there), whatever module the program put in its place."""
        if not self.through_runpy and self.namespace is not None:
            for name in ("__file__", "__cached__"):
                self.namespace.pop(name, None)

    def print_failure(self, exc: BaseException) -> SystemExit | None:
        """Report the exception that ended the program as Python would: ``sys.last_exc``
        and the like set, then the program's own ``sys.excepthook`` called, or the
        traceback printed from the program's own first frame on (ours hidden), under the
        two frames of runpy's that Python shows above a program it runs through runpy.
        A ``SystemExit`` the program's hook raised is returned: it decides the status."""
        tb = _programs_traceback(exc, self.code)
        exc.__traceback__ = tb  # what Python's printer and hooks read
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
        if sys.version_info >= (3, 12):
            sys.last_exc = exc
        hook = getattr(sys, "excepthook", _MISSING)  # a program may delete it
        if hook is _MISSING:
            print("sys.excepthook is missing", file=sys.stderr)
            self._print(exc, tb)
        elif hook is not sys.__excepthook__:
            return _call_excepthook(hook, exc, tb)
        else:
            self._print(exc, tb)
        return None

    def _print(self, exc: BaseException, tb: types.TracebackType | None) -> None:
        if self.through_runpy:
            failure = traceback.TracebackException(type(exc), exc, tb, compact=True)
            failure.stack[:0] = self._runpy_frames()
            failure.print(file=sys.stderr)
        else:
            sys.__excepthook__(type(exc), exc, tb)  # Python's own printer, to the letter


def _compiled(source: bytes, filename: str) -> CodeType:
    """A script's code; a null byte in it is the error `python` gives for the file, at its
    line (compile() reads the bytes as a string, and says so with no place)."""
    if b"\0" in source:
        null = source.index(b"\0")
        line, start = source.count(b"\n", 0, null) + 1, source.rfind(b"\n", 0, null) + 1
        text = source[start:null].decode(errors="replace")  # as far as Python read it
        raise SyntaxError("source code cannot contain null bytes", (filename, line, None, text))
    return compile(source, filename, "exec", dont_inherit=True)


def _module_name(entry: str, directory: str) -> str | None:
    """The module a directory entry makes importable, or None."""
    if os.path.isfile(os.path.join(directory, entry, "__init__.py")):
        return entry
    for suffix in importlib.machinery.all_suffixes():
        if entry.endswith(suffix) and entry != suffix:
            return entry[: -len(suffix)]
    return None


def _loaded_elsewhere(name: str | None, directory: Path) -> str | None:
    """Where the module `name` already imported comes from, if that is a file outside
    `directory`."""
    module = sys.modules.get(name) if name and name != "__main__" else None
    spec = vars(module).get("__spec__") if isinstance(module, types.ModuleType) else None
    origin = getattr(spec, "origin", None) if isinstance(spec, ModuleSpec) else None
    if not isinstance(origin, str) or not os.path.isabs(origin):
        return None  # built in, frozen, a namespace package
    return origin if relative_path(origin, directory) is None else None


def _import_package(name: str) -> None:
    """Import the package of a ``-m`` program as Python does before it runs the program:
    then, not when the program is found, so its ``__init__`` is watched and sees
    ``sys.argv[0]`` as ``"-m"``. (``__import__``, as runpy: a failure's traceback then
    has no frames of importlib's.)"""
    argv0, sys.argv[0] = sys.argv[0], "-m"
    try:
        __import__(name)
    finally:
        sys.argv[0] = argv0


def functions_of_unimported(name: str) -> frozenset[str] | None:
    """The qualified names of the functions and methods the module `name` defines, read
    from its source without importing it or the packages it is in; None where it cannot be
    found so (not on ``sys.path`` yet, say) or has no Python source."""
    try:
        spec = _find_unimported(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
        return None
    path = spec.loader.get_filename(name)
    try:
        with open(path, "rb") as file:
            source = importlib.util.decode_source(file.read())
        code = compile(source, path, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):
        return None
    return frozenset(_functions(code))


def _functions(module_code: CodeType) -> dict[str, CodeType]:
    found: dict[str, CodeType] = {}
    stack = [module_code]
    while stack:
        code = stack.pop()
        if code.co_flags & inspect.CO_NEWLOCALS:  # a function's, not a class body's
            found.setdefault(code.co_qualname, code)
        stack.extend(c for c in code.co_consts if isinstance(c, CodeType))
    return found


def _find_unimported(name: str) -> ModuleSpec | None:
    """The spec of the module `name`, found without importing the packages it is in that
    are not imported yet (`_import_package` does that when the program starts)."""
    parent = name.rpartition(".")[0]
    if not parent or parent in sys.modules:
        return importlib.util.find_spec(name)
    package = _find_unimported(parent)
    if package is not None and package.submodule_search_locations is None:
        return None  # a plain module has no submodules: nothing to import it for
    found = None
    if package is not None:
        # A namespace package raises: importlib finds one only under imported parents.
        with contextlib.suppress(KeyError, ImportError):
            found = importlib.machinery.PathFinder.find_spec(
                name, package.submodule_search_locations
            )
    # Not found unimported: a namespace package, or a package whose __init__ extends its
    # __path__. As Python finds it then, its parents imported (here, unwatched).
    return found or importlib.util.find_spec(name)


_OWN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")
_MISSING = object()


def _programs_traceback(exc: BaseException, code: CodeType) -> types.TracebackType | None:
    """`exc`'s traceback from the frame running `code` on (or, for a failure before it
    ran, importing its package, from the first frame not ours), without a last frame of
    the signal handlers' wrapper."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    if tb is None:
        tb = exc.__traceback__
        while tb is not None and _is_own(tb.tb_frame.f_code):
            tb = tb.tb_next
    return without_wrapper(tb)


def _is_own(code: CodeType) -> bool:
    """Whether `code` is this package's (its file name read as plain text)."""
    return plain_text(code.co_filename).startswith(_OWN_DIR)


def without_own_tail(tb: types.TracebackType | None) -> types.TracebackType | None:
    """`tb` without the frames of this package at its end: a signal's handler, run by the
    handlers' wrapper or inside the profile function (3.11, whose Python filter runs at
    every call), raised there, and the code that was running is the last to show."""
    last_theirs = None
    entry = tb
    while entry is not None:
        if not _is_own(entry.tb_frame.f_code):  # the wrapper's (critical.py) too
            last_theirs = entry
        entry = entry.tb_next
    if last_theirs is None:
        return tb
    last_theirs.tb_next = None
    return tb


def without_wrapper(tb: types.TracebackType | None) -> types.TracebackType | None:
    """`tb` without a last frame of the signal handlers' wrapper (see
    `critical.is_wrapper`): where a signal's handler raised, the program's own code is
    the last it ran."""
    entry = tb
    while entry is not None and entry.tb_next is not None:
        last = entry.tb_next
        if last.tb_next is None and critical.is_wrapper(last.tb_frame.f_code):
            entry.tb_next = None
            break
        entry = last
    return tb


def _call_excepthook(
    hook: object, exc: BaseException, tb: types.TracebackType | None
) -> SystemExit | None:
    """The program's own excepthook, and what Python prints if it fails (a ``SystemExit``
    it raises is the program's exit, returned)."""
    try:
        hook(type(exc), exc, tb)  # type: ignore[operator]
    except SystemExit as exit_:
        return exit_
    except BaseException as error:  # reported as Python reports it
        print("Error in sys.excepthook:", file=sys.stderr)
        own = error.__traceback__ and error.__traceback__.tb_next  # from the hook's frame
        traceback.print_exception(type(error), error, own, chain=False, file=sys.stderr)
        print("\nOriginal exception was:", file=sys.stderr)
        sys.__excepthook__(type(exc), exc, tb)
    return None


def _frames_at(steps: list[tuple[object, str]]) -> list[traceback.FrameSummary]:
    """A frame of each of runpy's functions in `steps`, at its call of the name given, with
    the lines of the running Python (they move between versions)."""
    frames = []
    for function, callee in steps:
        code = function.__code__  # type: ignore[attr-defined]
        lines = [i.positions.lineno for i in dis.get_instructions(code) if i.argval == callee]
        if len(lines) != 1 or lines[0] is None:
            return []  # a runpy unlike the known ones: its frames are left out, not guessed
        frames.append(traceback.FrameSummary(code.co_filename, lines[0], code.co_name))
    return frames


def _absolute(path: str) -> str:
    """`path` made absolute the way Python makes a program's path: the current directory,
    a separator and the path as given (``./a/../b.py`` stays so; ``.`` is the directory)."""
    if os.path.isabs(path):
        return path
    return os.getcwd() if path == "." else os.getcwd() + os.sep + path


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
