"""The working directory that ``python -m trackgen_contract.trace`` puts first on sys.path.

Python puts it there before it imports this package to run the command line. Run from a
program's own directory, a ``random.py`` or ``json.py`` of the program's would then stand
in for the standard library's modules that the command line, Warp and NumPy import (its
code run before the program, and the command line broken). So the entry is set aside
while they are imported, and the program's own first entry is put in its place before
the program runs (`runner.Program.prepare`): the program's modules that share a name with
one imported by then are named in a warning, as from any other directory.

Called first by the package: this module imports nothing that a directory could shadow
(``os`` and ``sys`` are loaded before any directory is on sys.path).
"""

from __future__ import annotations

import os
import sys

COMMAND = "trackgen_contract.trace"


def _runs_command_line() -> bool:
    """Whether Python is importing this package to run ``-m trackgen_contract.trace``:
    ``sys.argv[0]`` is ``"-m"`` while Python looks a ``-m`` module up, and the module is
    the one named after the interpreter's ``-m`` (``-m NAME``, ``-mNAME``, ``-Bm NAME``)."""
    if sys.argv[:1] != ["-m"]:
        return False
    args = getattr(sys, "orig_argv", [])[1:]
    for arg, following in zip(args, [*args[1:], None], strict=False):
        if arg == f"-m{COMMAND}":
            return True
        if arg.startswith("-") and not arg.startswith("--") and arg.endswith("m"):
            return following == COMMAND
    return False


SET_ASIDE: str | None = None  # the entry taken off sys.path, if any


def set_aside() -> None:
    """Take the working directory off the front of sys.path where the command line is
    being imported and Python put it there (not under ``-P``), into `SET_ASIDE`."""
    global SET_ASIDE
    if sys.flags.safe_path or not _runs_command_line():
        return
    try:
        cwd = os.getcwd()
    except OSError:  # gone: Python put a path that no longer names it
        return
    if sys.path[:1] == [cwd]:
        SET_ASIDE = sys.path.pop(0)
