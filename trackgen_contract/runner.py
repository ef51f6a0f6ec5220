"""Run a script or a module as ``__main__``, the way ``python script.py`` would.

The command line needs the program's own code object before it runs (to find ``--hot``
functions in it), so the program is compiled here and executed in a fresh ``__main__``
module rather than through ``runpy``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from dataclasses import dataclass
from types import CodeType


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

    @classmethod
    def script(cls, path: str, args: list[str]) -> Program:
        """``python path args...``"""
        if os.path.isdir(path):
            main = os.path.join(path, "__main__.py")
            if not os.path.isfile(main):
                raise ProgramNotFound(f"can't find '__main__.py' in directory {path!r}")
            directory, filename = path, main
        elif os.path.isfile(path):
            directory, filename = os.path.dirname(path), path
        else:
            raise ProgramNotFound(f"can't open file {path!r}: no such file")
        with open(filename, "rb") as source:
            code = compile(source.read(), filename, "exec", dont_inherit=True)
        name = os.path.splitext(os.path.basename(filename))[0]
        attributes = {"__file__": filename, "__spec__": None, "__package__": None}
        return cls([path, *args], os.path.abspath(directory), code, attributes, name)

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
        code = spec.loader.get_code(spec.name)  # type: ignore[union-attr]
        if code is None:
            raise ProgramNotFound(f"module {name!r} has no code to run")
        attributes = {
            "__file__": spec.origin,
            "__spec__": spec,
            "__package__": spec.parent,
            "__loader__": spec.loader,
            "__cached__": spec.cached,
        }
        return cls([spec.origin or name, *args], path0, code, attributes, spec.name)

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
        """Execute the program as ``__main__`` (call `prepare` first). Its exceptions,
        ``SystemExit`` included, propagate."""
        main = types.ModuleType("__main__")
        main.__dict__.update(self.attributes)
        main.__builtins__ = __builtins__  # type: ignore[attr-defined]
        previous = sys.modules.get("__main__")
        sys.modules["__main__"] = main
        try:
            exec(self.code, main.__dict__)
        finally:
            if previous is not None:
                sys.modules["__main__"] = previous
