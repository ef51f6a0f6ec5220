"""The working directory that ``python -m trackgen_contract.trace`` puts first on sys.path.

Python puts it there before it imports this package to run the command line. Run from a
program's own directory, a ``random.py`` or ``json.py`` of the program's would then stand
in for the standard library's modules that the command line, Warp and NumPy import (its
code run before the program, and the command line broken). So the entry is set aside
while they are imported, and the program's own first entry is put in its place before
the program runs (`runner.Program.prepare`): the program's modules that share a name with
one imported by then are named in a warning, as from any other directory.

Called first by the package: this module imports nothing that a directory could shadow
(not even ``__future__``, which an installed copy has not loaded by then).
"""

import os  # frozen, and sys built in: no directory shadows them
import sys

COMMAND = "trackgen_contract.trace"
_TAKES_VALUE = "cmWX"  # the interpreter's short options that take a value


def _module_run() -> str | None:
    """The module the interpreter's ``-m`` names, read from ``sys.orig_argv`` as Python's
    own option parser reads it (``-m NAME``, ``-mNAME``, ``-Bm NAME``, ``-BmNAME``, after
    any ``-X``/``-W`` value); None where it runs a script, ``-c`` or standard input."""
    args = iter(getattr(sys, "orig_argv", [])[1:])
    for arg in args:
        if arg == "--check-hash-based-pycs":
            next(args, None)
            continue
        if arg == "-" or arg == "--" or not arg.startswith("-"):
            return None
        if arg.startswith("--"):  # --help and the like
            continue
        for at, option in enumerate(arg[1:], start=2):
            if option in _TAKES_VALUE:
                value = arg[at:] or next(args, None)
                if option == "m":
                    return value
                if option == "c":
                    return None
                break  # -W, -X: the value read, the next argument is an option again
    return None


def _runs_command_line() -> bool:
    """Whether Python is importing this package to run ``-m trackgen_contract.trace``:
    ``sys.argv[0]`` is ``"-m"`` while Python looks a ``-m`` module up."""
    return sys.argv[:1] == ["-m"] and _module_run() == COMMAND


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
