"""Where a call came from: the `Site` value type, and which frames are Warp's or ours.

A frame is *internal* when its code is Warp's library code (warp.fem, warp.sparse and the
other subpackages included) or this package's. The programs Warp ships beside its library
(``warp/examples``, ``warp/tests``) are not library code, and neither is whatever runs as
``__main__``: those are the user's program. Attribution walks past internal frames to the
first frame of the user's own code, the way Warp itself tags allocations with their call
site.
"""

from __future__ import annotations

import ast
import dis
import importlib.util
import io
import linecache
import os
import stat
import sys
import tokenize
import zipimport
import zlib
from dataclasses import dataclass
from types import CodeType, FrameType

from .codecache import CodeCache
from .handlers import raised_by_handler


def _package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"package {name!r} is not installed")
    return os.path.join(os.path.realpath(spec.submodule_search_locations[0]), "")


# Directories inside the warp package that hold programs, not library code.
_WARP_PROGRAM_DIRS = ("examples", "tests")


_OWN_DIR = os.path.join(os.path.dirname(os.path.realpath(__file__)), "")
_warp_dir: str | None = None
# Per code object: (inside Warp's library, inside it or this package), filled on first sight.
_origin: CodeCache[tuple[bool, bool]] = CodeCache()
# Per code object: f_lasti -> Site. A loop breaching at one line makes its Site once
# (reading a frame's line number decodes the line table).
_sites: CodeCache[dict[int, Site]] = CodeCache()


def _classify(code: CodeType) -> tuple[bool, bool]:
    global _warp_dir
    if _warp_dir is None:
        _warp_dir = _package_dir("warp")
    path = plain_text(code.co_filename)
    if not os.path.isabs(path) or path.startswith("<"):
        return False, False
    real = _real_path(path)
    programs = tuple(os.path.join(d, "") for d in _WARP_PROGRAM_DIRS)
    in_warp = real.startswith(_warp_dir) and not real[len(_warp_dir) :].startswith(programs)
    return in_warp, in_warp or real.startswith(_OWN_DIR)


# os.path's own realpath and isfile take any OSError on their way for a missing file: a
# TimeoutError a signal handler of the program's raised there too, which would be lost.


def _real_path(path: str) -> str:
    """`path` with its symbolic links resolved, as far as it exists: the deepest part that
    does is resolved strictly, and the missing rest (no link there) joined to it."""
    missing: list[str] = []
    while True:
        try:
            return os.path.normpath(os.path.join(os.path.realpath(path, strict=True), *missing))
        except OSError as error:
            if raised_by_handler(error):
                raise
            head, tail = os.path.split(path)
            if head == path:  # the root itself cannot be read
                return os.path.normpath(os.path.join(path, *missing))
            missing.insert(0, tail)
            path = head


def _is_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError) as error:  # ValueError: a NUL in the name
        if raised_by_handler(error):
            raise
        return False


def in_warp(frame: FrameType) -> bool:
    """True when `frame` runs Warp's library code (never ``__main__``)."""
    origin = _origin.get_or_make(frame.f_code, _classify)
    return origin[0] and not _runs_as_main(frame)


def _runs_as_main(frame: FrameType) -> bool:
    """Whether `frame`'s globals are named ``__main__``: by the name's value, the
    ``__eq__`` of a str subclass of the user's never run."""
    name = dict.get(frame.f_globals, "__name__")
    return issubclass(type(name), str) and str.__eq__(name, "__main__")


def is_launcher(frame: FrameType) -> bool:
    """True when `frame` runs this package's code as ``__main__``: the command line
    (``python -m trackgen_contract.trace``), below every frame of the program it runs. A
    Warp function it calls for the program (registered with ``atexit`` itself) has no
    caller of the program's, as under plain Python."""
    in_warp, internal = _origin.get_or_make(frame.f_code, _classify)
    return internal and not in_warp and _runs_as_main(frame)


def is_internal(frame: FrameType) -> bool:
    """True when `frame` runs Warp's library code or this package's (never the user's
    program, whatever its path)."""
    origin = _origin.get_or_make(frame.f_code, _classify)
    return origin[1] and not _runs_as_main(frame)


# Python 3.12 runs list, dict and set comprehensions inside the function that holds them
# (PEP 709); 3.11 runs each in a function of its own, named in every qualified name below
# it. Reports, allow keys and baselines name the function as 3.12 does, on every version.
_INLINED = (
    frozenset({"<listcomp>", "<dictcomp>", "<setcomp>"})
    if sys.version_info < (3, 12)
    else frozenset()
)


def plain_text(text: str) -> str:
    """`text` as a plain str. A code object's names may be of a str subclass of the
    user's (``compile(source, MyPath(...), "exec")``), whose own methods would run where
    they are read (split, compared, hashed); the copy runs none of them."""
    return text if type(text) is str else str.__str__(text)


def function_name(code: CodeType) -> str:
    """The qualified name of the function running `code`, with 3.11's comprehensions
    folded into the function that holds them (``run.<locals>.<listcomp>`` is ``run``)."""
    qualname = plain_text(code.co_qualname)
    if not _INLINED:
        return qualname
    parts = [part for part in qualname.split(".") if part not in _INLINED]
    if parts and parts[-1] == "<locals>":
        parts.pop()
    return ".".join(parts) or "<module>"


def inlined_comprehensions(code: CodeType) -> list[CodeType]:
    """The code objects of the comprehensions that 3.12 would run inside `code` (none
    from 3.12 on)."""
    found = []
    for const in code.co_consts:
        if isinstance(const, CodeType) and plain_text(const.co_name) in _INLINED:
            found += [const, *inlined_comprehensions(const)]
    return found


def module_name(globals_: dict) -> str:
    """The module a frame's globals name: their own ``__name__``, read as a plain dict
    would and copied as plain text (no code of the program runs), or ``"<unknown>"``
    where that is not a string."""
    module = dict.get(globals_, "__name__")
    # issubclass of the type, not isinstance: that would read a property `__class__`.
    return plain_text(module) if issubclass(type(module), str) else "<unknown>"


@dataclass(frozen=True)
class Site:
    """A place in the source: the module, qualified function name, file and line."""

    module: str
    function: str
    filename: str
    lineno: int

    @classmethod
    def of(cls, frame: FrameType | None) -> Site:
        """The site a live frame is executing (a placeholder for no frame at all)."""
        if frame is None:
            return cls("<unknown>", "<unknown>", "<unknown>", 0)
        code = frame.f_code
        module = module_name(frame.f_globals)
        known = _sites.get_or_make(code, _new_table)
        site = known.get(frame.f_lasti)
        # The same code can run under other globals (types.FunctionType(code, other)).
        if site is None or site.module != module:
            site = known[frame.f_lasti] = cls(
                module=module,
                function=function_name(code),
                filename=plain_text(code.co_filename),
                lineno=_line(frame, code),
            )
        return site

    @property
    def location(self) -> str:
        """``file:line``, the file relative to the working directory when it is below it."""
        path = self.filename
        if os.path.isabs(path):
            rel = os.path.relpath(path)
            if not rel.startswith(".."):
                path = rel
        return f"{path}:{self.lineno}"

    def source_line(self) -> str:
        """The stripped source text of the line, or ``""`` when it cannot be read."""
        return line_of(self.filename, self.lineno).strip()

    def __str__(self) -> str:
        return f"{self.function} ({self.location})"


# 3.11 and 3.12 place the call of a `with` item's __enter__ on the whole statement, whose
# first line is the `with`; 3.13 on the item. So that a breach in ``with (\n a,\n
# wp.ScopedStream(None),\n):`` is on the item's line on every version (its pragma, its
# baseline entry), the item is found in the statement's source.
_ENTERS = frozenset(
    dis.opmap[name]
    for name in ("BEFORE_WITH", "BEFORE_ASYNC_WITH")
    if name in dis.opmap and sys.version_info < (3, 13)
)


def _line(frame: FrameType, code: CodeType) -> int:
    line = frame.f_lineno or code.co_firstlineno
    if not _ENTERS:
        return line
    raw, lasti = code.co_code, frame.f_lasti  # co_code: a property, read once
    if 0 <= lasti < len(raw) and raw[lasti] in _ENTERS:
        return _with_item_line(code, raw, lasti) or line
    return line


def _with_item_line(code: CodeType, raw: bytes, lasti: int) -> int | None:
    """The first line of the item whose __enter__ the instruction at `lasti` calls, read
    from the source of its `with` statement; None where that cannot be read."""
    positions = list(code.co_positions())  # one per two bytes of co_code
    statement = positions[lasti // 2]
    first, last, column = statement[0], statement[1], statement[2]
    if first is None or last is None or column is None:
        return None
    # The statement's enters share its positions; its items are entered in order (a
    # `finally` body is compiled twice, and with it the statement).
    enters = [
        offset
        for offset in range(0, len(raw), 2)
        if raw[offset] in _ENTERS and positions[offset // 2] == statement
    ]
    filename = plain_text(code.co_filename)
    lines = [line_of(filename, n) for n in range(first, last + 1)]
    lines[0] = lines[0].encode("utf-8")[column:].decode("utf-8", "replace")  # bytes
    try:
        node = ast.parse("".join(lines)).body[0]
    except (SyntaxError, ValueError, IndexError, RecursionError, MemoryError) as error:
        if raised_by_handler(error):
            raise
        return None  # the file changed since, or cannot be read
    if not isinstance(node, (ast.With, ast.AsyncWith)) or node.lineno != 1:
        return None
    item = node.items[enters.index(lasti) % len(node.items)]
    return first + item.context_expr.lineno - 1


def line_of(filename: str, lineno: int) -> str:
    """Line `lineno` of source file `filename`, or ``""`` where it cannot be read: linecache's
    copy where it holds one, else the file, else the file in a zip archive on sys.path.

    Never through linecache's loading, which may run the user's code: a lazy entry (left by
    a stack summary made without its lines) calls the module loader's ``get_source``, and
    from 3.14 a file that is not on disk is asked of the path finders of its directories,
    any of which may be the user's. A zip archive is read by CPython's own importer only."""
    lines = lines_of(filename)
    return lines[lineno - 1] if 1 <= lineno <= len(lines) else ""


def lines_of(filename: str) -> list[str]:
    """The lines of source file `filename`, read as `line_of` reads one (``[]`` where it
    cannot be read)."""
    entry = linecache.cache.get(filename)
    return entry[2] if entry is not None and len(entry) != 1 else _read_lines(filename)


# What reading a source can raise (a zip archive cut short or not deflated: zlib.error,
# EOFError): no line, never an error in the call being judged. Nothing broader: an
# exception a signal handler raises meanwhile is the program's, and goes on.
_UNREADABLE = (
    OSError, SyntaxError, UnicodeError, ValueError, EOFError, zlib.error,
    zipimport.ZipImportError,
)  # fmt: skip


def _read_lines(filename: str) -> list[str]:
    try:
        path = _on_disk(filename)
        if path is not None:
            with tokenize.open(path) as file:
                return file.readlines()
        data = _archived(filename)
        if data is None:
            return []
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        with io.TextIOWrapper(io.BytesIO(data), encoding) as text:  # lines as Python's
            return text.readlines()
    except _UNREADABLE as error:
        if raised_by_handler(error):
            raise
        return []


def _on_disk(filename: str) -> str | None:
    """`filename`, or a relative one found below a directory of sys.path (as linecache
    looks for it), where it is a file on disk."""
    if _is_file(filename):
        return filename
    path = getattr(sys, "path", None)
    if os.path.isabs(filename) or type(path) is not list:
        return None
    for directory in list(path):
        if type(directory) is str:
            found = os.path.join(directory, filename)
            if _is_file(found):
                return found
    return None


def _archived(filename: str) -> bytes | None:
    """The bytes of `filename` inside a zip archive that CPython's zipimporter serves on
    sys.path (at one of its directories), or None. The importers are found by scanning
    the cache with plain ``str`` keys: a lookup would compare with its keys, which may be
    the program's ``str`` subclasses."""
    cache = getattr(sys, "path_importer_cache", None)
    if type(cache) is not dict:
        return None
    above, directory = set(), os.path.dirname(filename)
    while directory and directory not in above:
        above.add(directory)
        directory = os.path.dirname(directory)
    for key, importer in list(dict.items(cache)):
        if type(key) is str and type(importer) is zipimport.zipimporter and key in above:
            return importer.get_data(filename)
    return None


def _new_table(code: CodeType) -> dict[int, Site]:
    return {}
