"""The files a run writes and the project they describe: where its root is, paths relative
to it, and writing a report file safely.

A report names files relative to the project root, so that it reads the same on every
machine and SARIF viewers can place it on the repository: the root is the nearest
directory at or above the working directory that holds ``.git``, else the working
directory itself.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import os
import sys
import tempfile
import types
from collections.abc import Iterable
from pathlib import Path


class OutputError(Exception):
    """A report file that cannot be written (the message names it)."""


def project_root(start: str | os.PathLike[str] | None = None) -> Path:
    """The nearest directory at or above `start` (the working directory) holding ``.git``;
    `start` itself when there is none."""
    here = Path(start or os.getcwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / ".git").exists():
            return directory
    return here


def relative_path(filename: str, root: Path) -> str | None:
    """`filename` relative to `root`, with ``/`` separators; None when it is outside it."""
    if not os.path.isabs(filename):
        return None
    try:
        return Path(os.path.realpath(filename)).relative_to(root).as_posix()
    except ValueError:
        return None


def portable_path(filename: str, root: Path) -> str:
    """A path for `filename` that is the same on every machine: an installed package's file
    relative to its site-packages (``warp/examples/core/x.py``, even from a virtual
    environment inside the project), else relative to the project root, else to the
    ``sys.path`` entry that holds it, else as given."""
    real = os.path.realpath(filename)
    installed = _longest_base(real, _installed_entries())
    if installed:
        return Path(real[len(installed) :]).as_posix()
    inside = relative_path(filename, root)
    if inside is not None:
        return inside
    base = _longest_base(real, (entry or os.getcwd() for entry in sys.path))
    return Path(real[len(base) :]).as_posix() if base else filename


def _installed_entries() -> list[str]:
    """The ``sys.path`` entries that hold installed distributions, not the project's code."""
    installed = {"site-packages", "dist-packages"}
    return [entry for entry in sys.path if entry and os.path.basename(entry) in installed]


def _longest_base(real: str, entries: Iterable[str]) -> str | None:
    """The longest of `entries` (as directory prefixes) that `real` lies below."""
    best = None
    for entry in entries:
        base = os.path.join(os.path.realpath(entry), "")
        if real.startswith(base) and (best is None or len(base) > len(best)):
            best = base
    return best


def path_option(value: str) -> str:
    """The value of an option that names a report's or a baseline's file (an argparse
    ``type``): an empty one, an unset variable in a CI script, say, would otherwise turn
    the option off without a word, and ``-`` would be a file of that name."""
    if not value:
        raise argparse.ArgumentTypeError("an empty path")
    if value == "-":  # not standard output: the program's own output goes there
        raise argparse.ArgumentTypeError("'-' names no file here; give a file's path")
    return value


def check_writable(path: str, option: str) -> None:
    """Fail now, before the program runs, when `path` cannot be written later, or is a
    Python source file (a module the program imports, a test module: never a report's,
    which would replace it).

    Probes the directory with a temporary file: the only test that holds for every user,
    root included, and every file system, read-only mounts included.
    """
    target = os.path.abspath(path)
    directory = os.path.dirname(target)
    if os.path.isdir(target) and not os.path.islink(target):
        raise OutputError(f"{option} {path}: is a directory")
    if os.path.isfile(target) and os.path.splitext(target)[1] in _SOURCES:
        raise OutputError(
            f"{option} {path}: is a Python source file, which the report would replace"
        )
    if os.path.exists(target) and not os.path.isfile(target):
        # A device, a pipe, or a link to one (/dev/null, /dev/stdout): the report replaces
        # the file it writes, which would put a plain file there (as root, the system's).
        raise OutputError(f"{option} {path}: not a regular file (a report replaces its file)")
    if not os.path.isdir(directory):
        raise OutputError(f"{option} {path}: no such directory {directory!r}")
    try:
        handle, probe = tempfile.mkstemp(dir=directory, prefix=".trackgen-probe-")
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot write there ({exc.strerror})") from None
    os.close(handle)
    os.unlink(probe)


_SOURCES = (*importlib.machinery.SOURCE_SUFFIXES, ".pyw", ".pyi")


def claim(taken: dict[str, str], path: str, option: str) -> None:
    """Take `path` for `option`'s file among those `taken` (real path -> whose: another
    report's, a baseline read, the program), or fail naming whose it is."""
    other = taken.setdefault(os.path.realpath(path), option)
    if other != option:
        raise OutputError(f"{option} {path}: that file is {other}'s; give each its own file")


def write_atomic(path: str, text: str) -> None:
    """Write `text` to `path` all at once: a temporary file in the same directory, renamed
    over the target. A symlink at the target is replaced, never followed."""
    target = os.path.abspath(path)
    handle, temporary = tempfile.mkstemp(
        dir=os.path.dirname(target), prefix=f".{os.path.basename(target)}.", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, 0o666 & ~_umask())  # as open() would have made it
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def project_files(root: str | os.PathLike[str], extra: tuple[str | None, ...] = ()) -> list[str]:
    """The project's own source files that this process imported (and `extra`): those under
    `root`, less installed packages and this package. Where its pragmas are."""
    base = os.path.join(os.path.realpath(root), "")
    own = os.path.join(os.path.dirname(os.path.realpath(__file__)), "")
    files = [*extra, *(_module_file(m) for m in list(sys.modules.values()))]
    real_dirs: dict[str, str] = {}  # a thousand modules live in a few dozen directories
    chosen = set()
    for filename in files:
        if not isinstance(filename, str) or not filename.endswith(".py"):
            continue
        directory, name = os.path.split(os.path.abspath(filename))
        if directory not in real_dirs:
            real_dirs[directory] = os.path.realpath(directory)
        real = os.path.join(real_dirs[directory], name)
        if os.path.islink(real):
            real = os.path.realpath(real)
        parts = real.split(os.sep)
        if (
            real.startswith(base)
            and not real.startswith(own)
            and "site-packages" not in parts
            and "dist-packages" not in parts
        ):
            chosen.add(real)
    return sorted(chosen)


_module_dict = types.ModuleType.__dict__["__dict__"].__get__


def _module_file(module: object) -> object:
    # Read from the module's namespace: a module-level __getattr__ is the user's code.
    if not issubclass(type(module), types.ModuleType):
        return None
    return dict.get(_module_dict(module), "__file__")
