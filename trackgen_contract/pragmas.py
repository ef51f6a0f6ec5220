"""Line pragmas: a comment that accepts the breach made on its own line.

    scratch = wp.zeros(n)  # trackgen_contract: allow allocation
    print(a.numpy())       # trackgen_contract: allow host_sync, stream

The comment names one or more categories, comma-separated; it accepts a breach of those
categories made by a call on that line (the line a report shows), in every front door:
the guard, the pytest marker and the command line. An accepted breach is not dropped: it is
listed as allowed, with the pragma's line. A pragma naming an unknown category is an error
that names its file and line.

A file's source is read only when a breach is found there, once: a clean run never reads it.
"""

from __future__ import annotations

import os
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass

from .handlers import raised_by_handler
from .rules import CATEGORIES, Violation
from .sites import Site, lines_of

__all__ = ["Pragma", "PragmaAllowed", "PragmaError", "accepting", "at", "scan"]

_MARK = re.compile(r"#\s*trackgen_contract\s*:([^#]*)")
_SPELLING = "# trackgen_contract: allow CATEGORY[, CATEGORY...]"


class PragmaError(ValueError):
    """A ``# trackgen_contract:`` comment that cannot be read (the message names the file
    and line)."""


@dataclass(frozen=True)
class Pragma:
    """A ``# trackgen_contract: allow ...`` comment: where it is and what it accepts."""

    filename: str
    lineno: int
    categories: tuple[str, ...]  # in `CATEGORIES` order

    @property
    def location(self) -> str:
        """``file:line``, as a `Site` shows it."""
        return _location(self.filename, self.lineno)

    def allows(self, category: str) -> bool:
        """Whether the pragma accepts a breach of `category`."""
        return category in self.categories

    def __str__(self) -> str:
        return f"# trackgen_contract: allow {', '.join(self.categories)} ({self.location})"


class PragmaAllowed(tuple):
    """The ``(api, module, function)`` key of a breach that a line pragma accepted, as a
    guard lists it in ``allowed``: equal to the plain key, and carrying the breach
    (`violation`) and the pragma (`pragma`)."""

    violation: Violation
    pragma: Pragma

    def __new__(cls, violation: Violation, pragma: Pragma) -> PragmaAllowed:
        self = super().__new__(cls, violation.key)
        object.__setattr__(self, "violation", violation)
        object.__setattr__(self, "pragma", pragma)
        return self

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a PragmaAllowed key is read-only")

    def __str__(self) -> str:
        return f"{self.violation}, allowed by the pragma at {self.pragma.location}"


def parse(comment: str, filename: str, lineno: int) -> Pragma | None:
    """The pragma in a comment (``#`` included), None when it has none.

    Raises `PragmaError` for a pragma that names no category or an unknown one.
    """
    match = _MARK.search(comment)
    if match is None:
        return None
    where = _location(filename, lineno)
    verb, rest = [*match.group(1).split(None, 1), "", ""][:2]  # any whitespace (a tab, say)
    names = [name.strip() for name in rest.split(",")]
    if verb != "allow" or not all(names):
        raise PragmaError(
            f"{where}: cannot read the pragma {comment.strip()!r}; it reads {_SPELLING!r}"
        )
    for name in names:
        if name not in CATEGORIES:
            raise PragmaError(
                f"{where}: unknown category {name!r} in the pragma {comment.strip()!r}; "
                f"the categories are {', '.join(CATEGORIES)}"
            )
    return Pragma(filename, lineno, tuple(c for c in CATEGORIES if c in names))


def _location(filename: str, lineno: int) -> str:
    return Site("", "", filename, lineno).location


def _comments(lines: list[str]) -> dict[int, str]:
    """The comments of a source (``#`` included), by line: Python's tokenizer tells a
    comment from a ``#`` in a string, one spread over lines included. A source that stops
    tokenizing (changed since it ran, say) has those found up to there."""
    found: dict[int, str] = {}
    try:
        for token in tokenize.generate_tokens(iter(lines).__next__):
            if token.type == tokenize.COMMENT:
                found[token.start[0]] = token.string
    except (StopIteration, SyntaxError, tokenize.TokenError) as error:
        if raised_by_handler(error):
            raise
    return found


# filename -> its comments by line, read at the first breach in the file.
_files: dict[str, dict[int, str]] = {}

# (filename, lineno) -> the pragma there, None, or why it cannot be read. One entry per
# breaching line, read on the first breach there. The message, not the exception: one
# raised again and again would grow its traceback at each raise, and keep alive the
# frames of every guarded block that hit the line.
_lines: dict[tuple[str, int], Pragma | str | None] = {}


def at(filename: str, lineno: int) -> Pragma | None:
    """The pragma on a line of source (read once per line); `PragmaError` if unreadable."""
    key = (filename, lineno)
    if key not in _lines:
        if filename not in _files:
            _files[filename] = _comments(lines_of(filename))
        comment = _files[filename].get(lineno)
        try:
            _lines[key] = None if comment is None else parse(comment, filename, lineno)
        except PragmaError as exc:
            _lines[key] = str(exc)
    found = _lines[key]
    if isinstance(found, str):
        raise PragmaError(found)
    return found


def accepting(violation: Violation) -> PragmaAllowed | None:
    """The allowed key for a breach that a pragma on its line accepts, else None.

    Raises `PragmaError` when the line's pragma cannot be read.
    """
    site = violation.site
    pragma = at(site.filename, site.lineno)
    if pragma is None or not pragma.allows(violation.category):
        return None
    return PragmaAllowed(violation, pragma)


def scan(filenames: Iterable[str]) -> tuple[list[Pragma], list[PragmaError]]:
    """Every pragma in these source files, and the errors of those that cannot be read.

    A file is read in the encoding its coding comment names, as Python reads it; one that
    cannot be read is passed over: it cannot hold a pragma that accepted anything either.
    """
    found: list[Pragma] = []
    errors: list[PragmaError] = []
    for filename in sorted(set(filenames)):
        try:
            with tokenize.open(filename) as source:
                lines = source.readlines()
        except (OSError, SyntaxError, UnicodeError):
            continue
        for lineno, comment in _comments(lines).items():
            try:
                pragma = parse(comment, filename, lineno)
            except PragmaError as exc:
                errors.append(exc)
                continue
            if pragma is not None:
                found.append(pragma)
    return found, errors


def unused(
    pragmas: Iterable[Pragma], used: Iterable[tuple[str, int, str]], checks: Iterable[str]
) -> list[tuple[Pragma, tuple[str, ...]]]:
    """The pragmas that accepted nothing, each with its categories that accepted nothing.

    `used` holds ``(filename, lineno, category)`` of every acceptance; a category that was
    not checked could not accept anything and is not reported.
    """
    taken = {(os.path.realpath(f), n, c) for f, n, c in used}
    checked = set(checks)
    result = []
    for pragma in pragmas:
        real = os.path.realpath(pragma.filename)
        idle = tuple(
            c for c in pragma.categories if c in checked and (real, pragma.lineno, c) not in taken
        )
        if idle:
            result.append((pragma, idle))
    return result
